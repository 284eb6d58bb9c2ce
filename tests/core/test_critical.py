"""Critical path first: within a tier and priority, the ready job with the most work after it starts first."""

from __future__ import annotations

import pytest

from tests.conftest import make_plan
from wloadctl.core.codes import MASK, RANK_MAX
from wloadctl.core.commands import Dispatch
from wloadctl.core.critical import remaining_paths
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import JobExitedEvent, RunStartedEvent
from wloadctl.core.explain import why
from wloadctl.core.planfile import load_plan_text
from wloadctl.errors import PlanError


def order(core: SchedulerCore) -> list[str]:
    """Jobs in the order one slot runs them (each finishing at once)."""
    out: list[str] = []
    cmds = core.handle(RunStartedEvent(0.0))
    while True:
        tasks = [t for c in cmds if isinstance(c, Dispatch) for t in c.tasks]
        if not tasks:
            return out
        i, att = tasks[0]
        out.append(core.ids[i])
        cmds = core.handle(JobExitedEvent(i, att, 0, 0, 1.0))


def test_remaining_paths_weigh_each_job_on_the_longest_chain_after_it() -> None:
    # 0 -> 1 -> 3, 0 -> 2 -> 3, 4 alone; weights 1, 5, 1, 2, 3.
    downs = [(1, 2), (3,), (3,), (), ()]
    assert remaining_paths(downs, [1, 5, 1, 2, 3]) == [8, 7, 3, 2, 3]
    # The same graph numbered against plan order takes the topological way.
    downs = [(), (0,), (0,), (1, 2), ()]
    assert remaining_paths(downs, [2, 5, 1, 1, 3]) == [2, 7, 3, 8, 3]


def test_the_longer_chain_starts_first_within_a_tier_and_priority() -> None:
    plan = make_plan({"short": {}, "long1": {}, "long2": {"deps": ["long1"]}, "long3": {"deps": ["long2"]}})
    # After long1, long2 has two jobs of work left and short one; then plan order breaks the tie.
    assert order(SchedulerCore(plan, slots=1)) == ["long1", "long2", "short", "long3"]


def test_expected_durations_and_history_weigh_the_paths() -> None:
    plan = make_plan({"a": {}, "b": {"expected": 30.0}, "c": {"deps": ["a"]}})
    core = SchedulerCore(plan, slots=1)
    assert order(core)[0] == "b", "b alone is 30 s of work; a then c is 2 s"
    core = SchedulerCore(make_plan({"a": {}, "b": {}, "c": {"deps": ["a"]}}), slots=1, history={"b": 9.0})
    assert list(core.expected) == [1.0, 9.0, 1.0] and list(core.path) == [2.0, 9.0, 1.0]
    assert order(core)[0] == "b"


def test_tier_and_priority_still_come_before_the_critical_path() -> None:
    plan = make_plan({"chain1": {}, "chain2": {"deps": ["chain1"]}, "urgent": {"priority": 5},
                      "critical": {"sla": "critical"}})
    assert order(SchedulerCore(plan, slots=1))[:3] == ["critical", "urgent", "chain1"]


def test_why_tells_the_rank_and_the_expected_duration() -> None:
    core = SchedulerCore(make_plan({"a": {"expected": 120.0}, "b": {"deps": ["a"]}, "c": {}}), slots=1)
    w = why(core, core.index["a"], 0.0)
    assert w["critical_path"] == {"rank": 0, "expected": 120.0, "remaining": 121.0, "longest": 121.0}
    assert f"critical path: 2m1s of work from here to the plan's end (on the longest path), the longest being " \
           f"2m1s; expected 2m itself; rank 0 of 0-{RANK_MAX} (among ready jobs of its tier and priority, the lower " \
           "starts first)" in w["reasons"], w["reasons"]
    assert "(on the longest path)" not in str(why(core, core.index["c"], 0.0)["reasons"])
    assert why(core, core.index["c"], 0.0)["critical_path"]["rank"] == RANK_MAX - int(1.0 * RANK_MAX / 121.0)
    assert core.key_base[core.index["c"]] & MASK == 0


def test_expected_is_a_duration_key_of_a_job() -> None:
    plan = load_plan_text("name: p\njobs:\n  a: {command: 'true', expected: 1h30m}\n  b: {command: 'true'}\n")
    assert plan.jobs["a"].expected == 5400.0 and plan.jobs["b"].expected is None
    with pytest.raises(PlanError) as bad:
        load_plan_text("name: p\njobs:\n  a: {command: 'true', expected: soon}\n")
    assert any("expected: 'soon' is not a duration" in line for line in bad.value.lines())
