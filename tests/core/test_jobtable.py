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
