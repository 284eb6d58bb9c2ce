"""The job table's arrays: made of the plan beforehand (as a new run does in a thread) or by the table itself."""

from __future__ import annotations

from pathlib import Path

from wloadctl.core.engine import SchedulerCore
from wloadctl.core.jobtable import plan_arrays
from wloadctl.core.planfile import load_plan, load_plan_text
from wloadctl.gen import write_plan

_FIELDS = ("ids", "index", "tier", "key_base", "down_start", "down", "downs", "down_kind", "unmet", "path")


def test_a_core_from_arrays_made_beforehand_is_the_core_made_alone(tmp_path: Path) -> None:
    path = tmp_path / "bank.yaml"
    write_plan(path, 3000, "bank", 5)
    plan = load_plan(path)
    alone = SchedulerCore(plan, 8, seed=1)
    made = SchedulerCore(plan, 8, seed=1, arrays=plan_arrays(plan))
    for name in _FIELDS:
        assert getattr(made, name) == getattr(alone, name), name
    made.validate()


def test_edge_kinds_and_forward_edges_keep_plan_order() -> None:
    plan = load_plan_text(
        "name: p\njobs:\n  z: {command: x, depends_on: [b, a]}\n  a: {command: x}\n"
        "  b: {command: x, depends_on: {a: failure}}\n  c: {type: noop, depends_on: {a: done, b: success}}\n"
    )
    arrays = plan_arrays(plan)
    # a (index 1) is upstream of z, b and c in that order; b (2) of z and c
    assert arrays.downs == [(), (0, 2, 3), (0, 3), ()]
    assert list(arrays.down_start) == [0, 0, 3, 5, 5]
    assert arrays.down_kind is not None and len(arrays.down_kind) == 5
    assert arrays.upstreams == [2, 0, 1, 2]


def test_arrays_of_another_plan_are_not_used() -> None:
    one = load_plan_text("name: p\njobs:\n  a: {command: x}\n  b: {command: x, depends_on: [a]}\n")
    other = load_plan_text("name: q\njobs:\n  c: {command: x}\n")
    core = SchedulerCore(one, 2, arrays=plan_arrays(other))
    assert core.ids == ["a", "b"] and core.downs == [(1,), ()]


def _arrays_fields(plan):  # type: ignore[no-untyped-def]
    a = plan_arrays(plan)
    return {f: list(v) if v is not None and not isinstance(v, (list, dict)) else v
            for f, v in ((f, getattr(a, f)) for f in ("ids", "index", "tier", "key_base", "down_start", "down",
                                                      "downs", "down_kind", "upstreams"))}


def test_edges_the_loader_resolved_give_the_arrays_a_lookup_per_edge_gives(tmp_path: Path) -> None:
    import dataclasses

    plans = _rows_plans(tmp_path)
    used = 0
    for plan in plans:
        assert plan.edges is not None
        used += plan.edges.for_jobs(plan.jobs)
        # Given the same plan without the loader's edges (a plan made otherwise)
        bare = dataclasses.replace(plan, edges=None)
        # Then both make the same arrays
        assert _arrays_fields(plan) == _arrays_fields(bare), plan.name
    assert used >= len(plans) - 1, "the loader's edges were not used"


def test_edges_of_a_jobs_mapping_that_changed_are_not_used() -> None:
    import dataclasses

    plan = load_plan_text("name: p\njobs:\n  a: {command: x}\n  b: {command: x, depends_on: [a]}\n")
    assert plan.edges is not None and plan.edges.for_jobs(plan.jobs)
    jobs = dict(plan.jobs)
    jobs["c"] = dataclasses.replace(jobs["b"], id="c", depends_on=("b",))
    other = dataclasses.replace(plan, jobs=jobs)
    assert not plan.edges.for_jobs(other.jobs)
    assert plan_arrays(other).downs == [(1,), (2,), ()]
    plan.jobs["d"] = dataclasses.replace(plan.jobs["b"], id="d")  # the same mapping, grown in place
    assert not plan.edges.for_jobs(plan.jobs)
    assert plan_arrays(plan).downs == [(1, 2), (), ()]


def test_the_first_table_takes_the_loaders_edges_and_a_second_table_of_the_plan_is_the_same(tmp_path: Path) -> None:
    path = tmp_path / "bank.yaml"
    write_plan(path, 2000, "bank", 9)
    plan = load_plan(path)
    assert plan.edges is not None and plan.edges.for_jobs(plan.jobs)
    first = _arrays_fields(plan)
    # The run keeps one index of the ids, not two: the edges hold nothing once taken
    assert not plan.edges.for_jobs(plan.jobs) and plan.edges.index == {}
    assert _arrays_fields(plan) == first


def _rows_plans(tmp_path: Path) -> list:  # type: ignore[type-arg]
    samples = Path(__file__).resolve().parents[2] / "samples"
    plans = [load_plan(p) for p in sorted(samples.glob("*.yaml"))]
    for shape in ("bank", "wide", "chain"):
        for style in ("flow", "block"):
            path = tmp_path / f"rows-{shape}-{style}.yaml"
            write_plan(path, 2500, shape, 7, style=style)  # type: ignore[arg-type]
            plans.append(load_plan(path))
    plans.append(load_plan_text(  # forward references, edge kinds, several upstreams not in index order
        "name: p\njobs:\n  z: {command: x, depends_on: [b, a]}\n  a: {command: x}\n"
        "  b: {command: x, depends_on: {a: failure}}\n  c: {type: noop, depends_on: {a: done, b: success}}\n"
        "  d: {command: x, depends_on: [c, z, a]}\n"))
    return plans


def test_the_facts_made_of_the_loaders_rows_are_those_made_of_the_specs(tmp_path: Path) -> None:
    from wloadctl.store.facts import run_facts

    taken = 0
    for plan in _rows_plans(tmp_path):
        # Given a run's core made of a loaded plan, which hands over the rows its loader resolved
        core = SchedulerCore(plan, 4, seed=1)
        rows = core.take_up_rows()
        taken += rows is not None
        assert core.take_up_rows() is None, "the rows are handed over once"
        args = (core.specs, core.ids, core.tier, core.expected, core.path, "d", plan.resources, False, core.index,
                plan.timezone)
        # Then the facts made of them are the facts made by looking every upstream id up
        assert run_facts(*args, up_rows=rows) == run_facts(*args), plan.name
    assert taken >= 8, "the loader's rows were not kept"


def test_the_shape_made_of_the_loaders_rows_has_the_upstreams_of_the_dependents_turned_round(tmp_path: Path) -> None:
    from wloadctl.runshape import CoreCopy, shape_of_copy

    for plan in _rows_plans(tmp_path):
        core = SchedulerCore(plan, 4, seed=1)
        rows = core.take_up_rows()
        copy = CoreCopy.of(core)
        turned = shape_of_copy(copy, None, plan.timezone)
        made = shape_of_copy(copy, None, plan.timezone, rows)
        n = len(core.ids)
        # Each job's upstreams are the same jobs, in the order of its depends_on
        assert list(made.up_off) == list(turned.up_off), plan.name
        for i in range(n):
            row = list(made.up[made.up_off[i]:made.up_off[i + 1]])
            assert sorted(row) == list(turned.up[turned.up_off[i]:turned.up_off[i + 1]]), (plan.name, i)
            if rows is not None:
                assert row == [core.index[d] for d in core.specs[i].depends_on], (plan.name, i)
        assert (made.tier, made.down_off, made.down, made.path) == (turned.tier, turned.down_off, turned.down,
                                                                   turned.path)


def test_rows_that_are_not_the_copys_jobs_are_not_used() -> None:
    from wloadctl.runshape import CoreCopy, shape_of_copy
    from wloadctl.store.facts import run_facts

    plan = load_plan_text("name: p\njobs:\n  a: {command: x}\n  b: {command: x, depends_on: [a]}\n")
    core = SchedulerCore(plan, 2, seed=1)
    rows = core.take_up_rows()
    assert rows is not None
    # Given rows of other jobs (a longer plan's)
    other = load_plan_text("name: q\njobs:\n  a: {command: x}\n  b: {command: x}\n"
                           "  c: {command: x, depends_on: [a, b]}\n")
    wrong = SchedulerCore(other, 2, seed=1).take_up_rows()
    args = (core.specs, core.ids, core.tier, core.expected, core.path, "d", {}, False, core.index, None)
    # Then the facts and the shape are made of the core's own dependencies
    assert run_facts(*args, up_rows=wrong) == run_facts(*args)
    copy = CoreCopy.of(core)
    assert list(shape_of_copy(copy, None, None, wrong).up) == [0]
