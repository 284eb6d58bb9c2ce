"""Places: jobs for a pool of agents or one agent wait for its slots; this host's jobs keep theirs."""

from __future__ import annotations

from tests.conftest import make_plan
from wloadctl.core.commands import Dispatch
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import (
    ExecutorLostEvent,
    JobAcceptedEvent,
    JobsFinishedEvent,
    PlaceCapacityEvent,
    RunStartedEvent,
    SlotsChangedEvent,
)
from wloadctl.core.explain import why
from wloadctl.core.states import JobState

S = JobState


def sent(cmds: list) -> list[str]:
    return [t for c in cmds if isinstance(c, Dispatch) for t in c.tasks]


def names(core: SchedulerCore, cmds: list) -> list[str]:
    return sorted(core.ids[i] for i, _a in sent(cmds))


def mixed() -> SchedulerCore:
    spec = {f"l{k}": {} for k in range(3)}
    spec.update({f"e{k}": {"pool": "etl"} for k in range(4)})
    spec["pinned"] = {"agent": "node-1"}
    core = SchedulerCore(make_plan(spec), slots=2)
    return core


def test_a_pool_without_agents_holds_its_jobs_ready_and_local_jobs_keep_their_slots() -> None:
    core = mixed()
    cmds = core.handle(RunStartedEvent(0.0))
    # Only this host's two slots are offered: two local jobs go, the pool's wait READY
    assert names(core, cmds) == ["l0", "l1"]
    assert all(core.state[core.index[f"e{k}"]] == S.READY for k in range(4))
    reasons = " ".join(why(core, core.index["e0"], 0.0)["reasons"])
    assert "pool etl" in reasons and "no live agent" in reasons
    reasons = " ".join(why(core, core.index["pinned"], 0.0)["reasons"])
    assert "agent node-1" in reasons
    core.validate()


def test_agents_joining_release_exactly_their_slots_and_losing_them_takes_them_back() -> None:
    core = mixed()
    core.handle(RunStartedEvent(0.0))
    # When the pool gains 3 slots, three of its four jobs go, and no local job beyond this host's slots
    cmds = core.handle(PlaceCapacityEvent("pool:etl", 3, 1.0))
    assert names(core, cmds) == ["e0", "e1", "e2"]
    assert core.slots == 5
    # When one finishes, the fourth takes its slot
    e0 = core.index["e0"]
    cmds = core.handle(JobsFinishedEvent([(e0, 1, 300, 0)], 2.0))
    assert names(core, cmds) == ["e3"]
    # The pinned job waits for its agent only
    cmds = core.handle(PlaceCapacityEvent("agent:node-1", 1, 3.0))
    assert names(core, cmds) == ["pinned"]
    core.validate()
    # When the pool's agents are lost, nothing more is sent there and slots shrink back
    cmds = core.handle(PlaceCapacityEvent("pool:etl", 0, 4.0))
    assert sent(cmds) == []
    assert core.slots == 3
    core.validate()


def test_a_lost_agent_requeues_what_it_had_accepted_and_its_place_keeps_count() -> None:
    core = SchedulerCore(make_plan({"a": {"pool": "etl"}, "b": {"pool": "etl"}}), slots=1)
    core.handle(RunStartedEvent(0.0))
    core.handle(PlaceCapacityEvent("pool:etl", 2, 1.0))
    a, b = core.index["a"], core.index["b"]
    core.handle(JobAcceptedEvent(a, 1, 300, 1.0))
    core.handle(JobAcceptedEvent(b, 1, 301, 1.0))
    # When agent 300 is lost, its job goes back to READY (it never started) and is sent again
    cmds = core.handle(ExecutorLostEvent(300, 2.0, "agent lost"))
    assert names(core, cmds) == ["a"]
    assert core.attempt[a] == 1  # not the job's fault: no attempt spent
    core.validate()


def test_this_hosts_slots_changing_moves_only_the_local_place() -> None:
    core = mixed()
    core.handle(RunStartedEvent(0.0))
    core.handle(PlaceCapacityEvent("pool:etl", 2, 1.0))
    cmds = core.handle(SlotsChangedEvent(3, 2.0))
    assert names(core, cmds) == ["l2"]
    assert core.resources.capacity_of["pool:local"] == 3 and core.slots == 5
    core.validate()


def test_a_plan_without_places_claims_nothing_extra() -> None:
    core = SchedulerCore(make_plan({"a": {}, "b": {"deps": ["a"]}}), slots=2)
    assert core.resources.claims == {}
    assert core.needs(0) == ()
