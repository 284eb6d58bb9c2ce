"""The DAG: order, cycles, lineage, levels, critical path, and a 200,000-job chain."""

from __future__ import annotations

from array import array

import networkx as nx  # type: ignore[import-untyped]
import pytest

from wloadctl.core.dag import Dag, csr_from_lists, reverse_kahn, to_networkx, transpose
from wloadctl.core.plan import JobSpec, Plan
from wloadctl.core.planfile import load_plan_text
from wloadctl.core.states import DepKind
from wloadctl.errors import CycleError

# open -> load_a, load_b -> post (needs both) -> report, close; alert on post's failure
BANK = """
name: small-bank
jobs:
  open: {command: "true"}
  load_a: {command: "true", depends_on: [open]}
  load_b: {command: "true", depends_on: [open]}
  post: {command: "true", depends_on: [load_a, load_b]}
  report: {command: "true", depends_on: [post]}
  alert: {command: "true", depends_on: {post: failure}}
  close: {command: "true", depends_on: [report, load_b]}
  lonely: {command: "true"}
"""


def plan_of(deps: dict[str, tuple[str, ...]]) -> Plan:
    """A plan built directly (no validation), so it may hold cycles or unknown jobs."""
    jobs = {
        job: JobSpec(id=job, command="true", depends_on=up) for job, up in deps.items()
    }
    return Plan(name="direct", jobs=jobs)


@pytest.fixture
def dag() -> Dag:
    return Dag(load_plan_text(BANK))


def test_topo_order_puts_every_job_after_its_upstream(dag: Dag) -> None:
    order = dag.topo_order()
    assert sorted(order) == sorted(dag.ids)
    place = {job: i for i, job in enumerate(order)}
    for job in dag.ids:
        for up in dag.upstream_of(job):
            assert place[up] < place[job]


def test_direct_neighbours(dag: Dag) -> None:
    assert dag.upstream_of("post") == ["load_a", "load_b"]
    assert sorted(dag.downstream_of("post")) == ["alert", "report"]
    assert dag.downstream_of("lonely") == []
    assert len(dag) == 8
    assert dag.edge_count == 8


def test_ancestors_and_descendants(dag: Dag) -> None:
    assert dag.ancestors("close") == {"open", "load_a", "load_b", "post", "report"}
    assert dag.descendants("load_b") == {"post", "report", "alert", "close"}
    assert dag.ancestors("open") == set()
    with pytest.raises(KeyError, match="unknown job 'nope'"):
        dag.ancestors("nope")


def test_below_walks_once_for_many_jobs_and_leaves_them_out(dag: Dag) -> None:
    at = dag.index.__getitem__
    # Every job below any of those given, as their descendants together, less those given
    starts = ["load_a", "load_b", "report"]
    want = set().union(*(dag.descendants(j) for j in starts)) - set(starts)
    assert sorted(dag.ids[i] for i in dag.below(map(at, starts))) == sorted(want)
    # A job below another given one is left out too; indices past the graph are passed over
    assert sorted(dag.ids[i] for i in dag.below([at("open"), at("post"), len(dag) + 3])) == [
        "alert", "close", "load_a", "load_b", "report"]
    assert dag.below([at("lonely")]) == [] and dag.below([]) == []


def test_levels_are_longest_path_depths(dag: Dag) -> None:
    assert dag.levels() == {
        "open": 0,
        "load_a": 1,
        "load_b": 1,
        "post": 2,
        "report": 3,
        "alert": 3,
        "close": 4,
        "lonely": 0,
    }


def test_critical_path_counts_jobs_by_default(dag: Dag) -> None:
    assert dag.critical_path() == ["open", "load_a", "post", "report", "close"]


def test_critical_path_follows_durations(dag: Dag) -> None:
    seconds = {"load_b": 50.0, "load_a": 5.0, "lonely": 20.0}
    assert dag.critical_path(seconds) == ["open", "load_b", "post", "report", "close"]
    assert dag.critical_path({"lonely": 1000.0}) == ["lonely"]


def test_neighborhood_gives_signed_distances(dag: Dag) -> None:
    assert dag.neighborhood("post", up=1, down=1) == {
        "load_a": -1,
        "load_b": -1,
        "post": 0,
        "report": 1,
        "alert": 1,
    }
    around = dag.neighborhood("post")
    assert around["open"] == -2
    assert around["close"] == 2


def test_edges_among_a_selection(dag: Dag) -> None:
    assert dag.edges_among(["open", "load_a", "post", "ghost"]) == [
        ("open", "load_a"),
        ("load_a", "post"),
    ]


def test_find_cycle_none_for_a_dag(dag: Dag) -> None:
    assert dag.find_cycle() is None


def test_find_cycle_returns_the_path_in_dependency_order() -> None:
    dag = Dag(
        plan_of(
            {"start": (), "a": ("start", "c"), "b": ("a",), "c": ("b",), "end": ("c",)}
        )
    )
    assert dag.find_cycle() == ["a", "c", "b", "a"]
    with pytest.raises(CycleError, match="dependency cycle: a -> c -> b -> a"):
        dag.topo_order()
    with pytest.raises(CycleError):
        dag.levels()


def test_unknown_and_self_dependencies_are_left_out() -> None:
    dag = Dag(plan_of({"a": ("ghost", "a"), "b": ("a",)}))
    assert dag.edge_count == 1
    assert dag.topo_order() == ["a", "b"]


def test_empty_plan() -> None:
    dag = Dag(Plan(name="empty", jobs={}))
    assert dag.topo_order() == []
    assert dag.critical_path() == []
    assert dag.levels() == {}


def test_transpose_and_kahn_on_raw_rows() -> None:
    offsets, flat = csr_from_lists([[], [0], [0, 1]])
    down_off, down = transpose(3, offsets, flat)
    assert list(down_off) == [0, 2, 3, 3]
    assert list(down) == [1, 2, 2]
    order, left = reverse_kahn(3, offsets, flat)
    assert order == [2, 1, 0]
    assert not any(left)


CHAIN = 200_000


@pytest.fixture(scope="module")
def chain() -> Dag:
    ids = [f"c{i:06d}" for i in range(CHAIN)]
    # Job i depends on job i - 1; job 0 on nothing.
    offsets = array("i", [0, *range(CHAIN)])
    up = array("i", range(CHAIN - 1))
    return Dag.from_rows(ids, {job: i for i, job in enumerate(ids)}, offsets, up)


def test_long_chain_needs_no_recursion(chain: Dag) -> None:
    assert chain.edge_count == CHAIN - 1
    order = chain.topo_order()
    assert order[0] == "c000000"
    assert order[-1] == f"c{CHAIN - 1:06d}"
    assert chain.find_cycle() is None
    assert chain.levels()[f"c{CHAIN - 1:06d}"] == CHAIN - 1
    assert len(chain.critical_path()) == CHAIN
    assert len(chain.ancestors(f"c{CHAIN - 1:06d}")) == CHAIN - 1
    assert len(chain.descendants("c000000")) == CHAIN - 1
    near = chain.neighborhood("c100000", up=2, down=2)
    assert sorted(near.values()) == [-2, -1, 0, 1, 2]


def test_long_cycle_is_found_without_recursion() -> None:
    ids = [f"c{i:06d}" for i in range(CHAIN)]
    # c0 depends on the last job, closing a 200,000-job loop.
    offsets = array("i", [0, *range(1, CHAIN + 1)])
    up = array("i", [CHAIN - 1, *range(CHAIN - 1)])
    dag = Dag.from_rows(ids, {job: i for i, job in enumerate(ids)}, offsets, up)
    loop = dag.find_cycle()
    assert loop is not None
    assert len(loop) == CHAIN + 1
    assert loop[0] == loop[-1] == "c000000"
    assert loop[1] == f"c{CHAIN - 1:06d}"


def test_to_networkx_keeps_attributes_and_direction() -> None:
    plan = load_plan_text(BANK)
    graph = to_networkx(plan)
    assert set(graph.nodes) == set(plan.jobs)
    assert graph.has_edge("open", "load_a")
    assert graph.edges["post", "alert"]["kind"] == DepKind.FAILURE.name.lower()
    assert graph.nodes["open"]["sla"] == "standard"
    assert nx.is_directed_acyclic_graph(graph)
    assert nx.dag_longest_path_length(graph) == 4
