"""The pure core: readiness, ordering, failure propagation, retries, slots and resources; events in, commands out."""

from __future__ import annotations

import pytest

from tests.conftest import make_plan
from wloadctl.core.commands import Alert, Dispatch, Kill, Persist, RunFinished
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import (
    ExecutorLostEvent,
    JobAcceptedEvent,
    JobExitedEvent,
    JobsFinishedEvent,
    JobStartedEvent,
    OperatorEvent,
    RunStartedEvent,
    TasksLostEvent,
    TimerFiredEvent,
)
from wloadctl.core.plan import RetryPolicy
from wloadctl.core.replay import HELD_LOST
from wloadctl.core.states import LEGAL, TRANSITIONS, JobState
from wloadctl.errors import InvalidTransition

S = JobState


def dispatched(cmds: list) -> list[tuple[int, int]]:
    return [t for c in cmds if isinstance(c, Dispatch) for t in c.tasks]


def states(core: SchedulerCore) -> dict[str, str]:
    return {core.ids[i]: S(core.state[i]).name for i in range(core.n)}


def finish(core: SchedulerCore, job: str, code: int = 0, now: float = 1.0, **kw: object) -> list:
    i = core.index[job]
    return core.handle(JobExitedEvent(i, core.attempt[i], 0, code, now, **kw))  # type: ignore[arg-type]


@pytest.fixture
def diamond() -> SchedulerCore:
    plan = make_plan({"a": {}, "b": {"deps": ["a"]}, "c": {"deps": ["a"]}, "d": {"deps": ["b", "c"]}})
    return SchedulerCore(plan, slots=10)


def test_only_roots_are_ready_at_start(diamond: SchedulerCore) -> None:
    cmds = diamond.handle(RunStartedEvent(0.0))
    assert dispatched(cmds) == [(0, 1)]
    assert states(diamond) == {"a": "QUEUED", "b": "WAITING", "c": "WAITING", "d": "WAITING"}
    diamond.validate()


def test_persist_comes_before_dispatch(diamond: SchedulerCore) -> None:
    cmds = diamond.handle(RunStartedEvent(0.0))
    kinds = [type(c) for c in cmds]
    assert kinds.index(Persist) < kinds.index(Dispatch)
    tx = cmds[0].transitions
    assert [(t[1], t[2]) for t in tx] == [(S.WAITING, S.READY), (S.READY, S.QUEUED)]


def test_dependents_start_only_after_all_upstreams(diamond: SchedulerCore) -> None:
    diamond.handle(RunStartedEvent(0.0))
    assert sorted(dispatched(finish(diamond, "a"))) == [(1, 1), (2, 1)]
    assert dispatched(finish(diamond, "b")) == []
    assert dispatched(finish(diamond, "c")) == [(3, 1)]
    cmds = finish(diamond, "d")
    assert any(isinstance(c, RunFinished) and c.ok for c in cmds)
    diamond.validate()


def test_failure_marks_success_dependents_upstream_failed_and_runs_failure_and_done_ones() -> None:
    plan = make_plan(
        {
            "load": {},
            "post": {"deps": ["load"]},
            "report": {"deps": ["post"]},
            "alert": {"deps": {"load": "failure"}},
            "cleanup": {"deps": {"load": "done"}},
        }
    )
    core = SchedulerCore(plan, slots=10)
    core.handle(RunStartedEvent(0.0))
    cmds = finish(core, "load", code=2)
    assert states(core)["post"] == "UPSTREAM_FAILED"
    assert states(core)["report"] == "UPSTREAM_FAILED"
    assert sorted(core.ids[i] for i, _ in dispatched(cmds)) == ["alert", "cleanup"]
    assert [c.reason for c in cmds if isinstance(c, Alert)] == ["exit status 2"]


def test_failure_dependent_is_skipped_when_upstream_succeeds() -> None:
    plan = make_plan({"load": {}, "alert": {"deps": {"load": "failure"}}, "after": {"deps": ["alert"]}})
    core = SchedulerCore(plan, slots=10)
    core.handle(RunStartedEvent(0.0))
    cmds = finish(core, "load")
    assert states(core)["alert"] == "SKIPPED"
    # the failure branch was not taken: the skip follows the branch down
    assert states(core)["after"] == "SKIPPED"
    assert dispatched(cmds) == []


def test_ready_queue_orders_by_tier_then_priority_then_plan_order() -> None:
    plan = make_plan(
        {
            "low1": {"sla": "low"},
            "std": {},
            "std_hi": {"priority": 5},
            "crit": {"sla": "critical"},
            "high": {"sla": "high"},
            "low2": {"sla": "low", "priority": 9},
        }
    )
    core = SchedulerCore(plan, slots=1)
    order = []
    cmds = core.handle(RunStartedEvent(0.0))
    while True:
        d = dispatched(cmds)
        if not d:
            break
        order.append(core.ids[d[0][0]])
        cmds = finish(core, core.ids[d[0][0]])
    assert order == ["crit", "high", "std_hi", "std", "low2", "low1"]


def test_critical_job_goes_before_a_thousand_low_jobs_on_one_slot() -> None:
    spec = {f"bulk{i:04d}": {"sla": "low"} for i in range(1000)}
    spec["gate"] = {}
    spec["urgent"] = {"sla": "critical", "deps": ["gate"]}
    core = SchedulerCore(make_plan(spec), slots=1)
    cmds = core.handle(RunStartedEvent(0.0))
    first = core.ids[dispatched(cmds)[0][0]]
    assert first == "gate"
    cmds = finish(core, "gate")
    assert core.ids[dispatched(cmds)[0][0]] == "urgent"


def test_slots_are_never_over_committed() -> None:
    core = SchedulerCore(make_plan({f"j{i}": {} for i in range(10)}), slots=3)
    cmds = core.handle(RunStartedEvent(0.0))
    assert len(dispatched(cmds)) == 3
    assert core.busy == 3
    cmds = finish(core, "j0")
    assert len(dispatched(cmds)) == 1
    core.validate()


def test_resources_limit_concurrency() -> None:
    spec = {f"q{i}": {"resources": {"db": 2}} for i in range(4)}
    core = SchedulerCore(make_plan(spec, resources={"db": 4}), slots=10)
    cmds = core.handle(RunStartedEvent(0.0))
    assert len(dispatched(cmds)) == 2
    cmds = finish(core, "q0")
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["q2"]
    core.validate()


def test_retry_waits_with_backoff_then_succeeds() -> None:
    pol = RetryPolicy(count=2, delay=10, backoff=2, jitter=0)
    core = SchedulerCore(make_plan({"flaky": {"retry": pol}}), slots=1)
    core.handle(RunStartedEvent(0.0))
    finish(core, "flaky", code=1, now=100.0)
    assert states(core)["flaky"] == "RETRY_WAIT"
    assert core.next_timer() == pytest.approx(110.0)
    assert dispatched(core.handle(TimerFiredEvent(105.0))) == []
    assert dispatched(core.handle(TimerFiredEvent(110.0))) == [(0, 2)]
    finish(core, "flaky", code=1, now=120.0)
    assert core.next_timer() == pytest.approx(140.0)
    core.handle(TimerFiredEvent(140.0))
    cmds = finish(core, "flaky", code=0, now=150.0)
    assert states(core)["flaky"] == "SUCCEEDED"
    assert core.attempt[0] == 3
    assert any(isinstance(c, RunFinished) and c.ok for c in cmds)


@pytest.mark.parametrize(("count", "backoff"), [(1000, 10.0), (5, 1.0e200)])
def test_a_retry_delay_past_what_backoff_can_grow_to_stays_at_max_delay(count: int, backoff: float) -> None:
    # backoff ** attempts leaves a float's range after ~310 attempts of backoff 10, at once for 1e200
    pol = RetryPolicy(count=count, delay=0.001, backoff=backoff, max_delay=0.005, jitter=0)
    core = SchedulerCore(make_plan({"flaky": {"retry": pol}}), slots=1)
    core.handle(RunStartedEvent(0.0))
    now, delays = 1.0, []
    for _ in range(count):
        finish(core, "flaky", code=1, now=now)
        due = core.next_timer()
        assert due is not None
        delays.append(due - now)
        now = due
        core.handle(TimerFiredEvent(now))
    finish(core, "flaky", code=1, now=now)
    assert states(core)["flaky"] == "FAILED"
    assert core.attempt[0] == count + 1
    assert delays[0] == pytest.approx(0.001)
    assert delays[-1] == pytest.approx(0.005) and max(delays) <= 0.005 + 1e-9


def test_retries_exhausted_end_failed_and_non_retryable_codes_fail_at_once() -> None:
    pol = RetryPolicy(count=3, delay=1, jitter=0, exit_codes=((75, 75),))
    core = SchedulerCore(make_plan({"a": {"retry": pol}, "b": {"retry": pol}}), slots=2)
    core.handle(RunStartedEvent(0.0))
    finish(core, "a", code=2)
    assert states(core)["a"] == "FAILED"  # 2 is not in the retried codes
    finish(core, "b", code=75)
    assert states(core)["b"] == "RETRY_WAIT"


def test_timeout_ends_timed_out() -> None:
    core = SchedulerCore(make_plan({"slow": {"timeout": 5.0}}), slots=1)
    core.handle(RunStartedEvent(0.0))
    finish(core, "slow", code=143, signal=15, timed_out=True)
    assert states(core)["slow"] == "TIMED_OUT"


def test_lost_executor_requeues_unstarted_retries_started_and_holds_non_idempotent() -> None:
    plan = make_plan({"a": {}, "b": {"retry": RetryPolicy(count=1, delay=0, jitter=0)}, "c": {"idempotent": False}})
    core = SchedulerCore(plan, slots=3)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobAcceptedEvent(0, 1, 7, 0.1))
    core.handle(JobStartedEvent(1, 1, 7, 100, 0.1))
    core.handle(JobStartedEvent(2, 1, 7, 101, 0.1))
    cmds = core.handle(ExecutorLostEvent(7, 1.0))
    st = states(core)
    assert st["a"] == "QUEUED" and core.attempt[0] == 1  # requeued, attempt not counted, sent again
    assert st["b"] == "QUEUED" and core.attempt[1] == 2  # run again at once, budget untouched
    assert core.attempt[1] - core.attempt_base[1] == 1
    assert st["c"] == "HELD" and core.reasons[2] == HELD_LOST
    assert (0, 1) in dispatched(cmds)
    core.validate()


def test_a_held_lost_job_takes_its_late_success_and_stays_held_on_a_late_failure() -> None:
    plan = make_plan({"c": {"idempotent": False}, "d": {"idempotent": False}, "after": {"deps": ["c"]}})
    core = SchedulerCore(plan, slots=3)
    core.handle(RunStartedEvent(0.0))
    for i in (0, 1):
        core.handle(JobStartedEvent(i, 1, 7, 100 + i, 0.1))
    core.handle(ExecutorLostEvent(7, 1.0))
    assert states(core)["c"] == "HELD" and states(core)["d"] == "HELD"
    # its node comes back: c's attempt had succeeded, d's had failed
    cmds = core.handle(JobExitedEvent(0, 1, 7, 0, 2.0))
    assert states(core)["c"] == "SUCCEEDED" and core.reasons[0] == "its node came back: attempt 1 had succeeded"
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["after"]
    core.handle(JobExitedEvent(1, 1, 7, 3, 2.0))
    assert states(core)["d"] == "HELD" and core.reasons[1] == HELD_LOST
    # and a report of it again changes nothing
    core.handle(JobExitedEvent(0, 1, 7, 0, 2.5))
    core.validate()


def test_tasks_a_lost_executor_took_before_accepting_them_are_sent_again() -> None:
    core = SchedulerCore(make_plan({"a": {}, "b": {}, "c": {}}), slots=3)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobAcceptedEvent(0, 1, 0, 0.1))  # a: accepted by a live executor
    lost = core.unaccepted()
    assert lost == ((1, 1), (2, 1))
    core.handle(JobAcceptedEvent(2, 1, 0, 0.2))  # c: turned up after all
    cmds = core.handle(TasksLostEvent(lost, 3.0))
    assert dispatched(cmds) == [(1, 1)], "only b, at the same attempt: it never started"
    assert core.executor[0] == 0 and core.executor[2] == 0
    assert core.unaccepted() == ((1, 1),)
    core.validate()


def test_a_job_that_may_not_run_twice_lost_with_an_agent_before_its_start_was_heard_is_held() -> None:
    """An agent's executors report through it: a job it had taken, or accepted, and not said started may have
    started all the same (the agent froze with the report unsent). Run elsewhere, a payment would be paid twice."""
    plan = make_plan({"pay": {"idempotent": False}, "load": {}, "book": {"idempotent": False}, "post": {}})
    core = SchedulerCore(plan, slots=4)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobAcceptedEvent(0, 1, 1000, 0.1))  # pay and load: accepted by the agent, not said started
    core.handle(JobAcceptedEvent(1, 1, 1000, 0.1))
    cmds = core.handle(ExecutorLostEvent(1000, 1.0, unheard=True))
    st = states(core)
    assert st["pay"] == "HELD" and core.held_lost[0] == 1 and core.reasons[0] == HELD_LOST
    assert st["load"] == "QUEUED" and (1, 1) in dispatched(cmds)  # (one that may run twice is sent again)
    # and one the lost agent took off the work queue unreported: held too, the other sent again
    cmds = core.handle(TasksLostEvent(((2, 1), (3, 1)), 2.0, unheard=True))
    assert states(core)["book"] == "HELD" and dispatched(cmds) == [(3, 1)]
    # The agent comes back: pay had run, once, to its end: that success is the job's
    core.handle(JobExitedEvent(0, 1, 1000, 0, 3.0))
    assert states(core)["pay"] == "SUCCEEDED"
    core.validate()


def test_a_local_executor_lost_with_a_job_it_had_not_started_requeues_even_one_that_may_not_run_twice() -> None:
    """A local executor's start is heard through its own journal (the sweeper reads it): unstarted means unstarted."""
    core = SchedulerCore(make_plan({"pay": {"idempotent": False}}), slots=1)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobAcceptedEvent(0, 1, 0, 0.1))
    cmds = core.handle(ExecutorLostEvent(0, 1.0))
    assert states(core)["pay"] == "QUEUED" and dispatched(cmds) == [(0, 1)]
    core.validate()


def test_a_task_handed_back_unstarted_is_sent_again_at_the_same_attempt_and_says_why() -> None:
    core = SchedulerCore(make_plan({"a": {}, "b": {}}), slots=2)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobAcceptedEvent(0, 1, 1, 0.1))  # a: taken ahead by executor 1, whose slot stays busy
    for _ in range(5):  # handed back again and again: never counted as lost
        cmds = core.handle(JobExitedEvent(0, 1, 1, 0, 0.2, lost=True, returned=True))
        assert dispatched(cmds) == [(0, 1)] and states(core)["a"] == "QUEUED"
    assert core.executor[0] == -1 and "handed back unstarted by executor 1" in core.reasons[0]
    assert 0 not in core.lost_count
    core.validate()


def test_a_job_killed_by_an_operator_and_then_lost_with_its_node_is_done_not_run_again() -> None:
    plan = make_plan({"a": {}, "c": {"idempotent": False}})
    core = SchedulerCore(plan, slots=2)
    core.handle(RunStartedEvent(0.0))
    for i in (0, 1):
        core.handle(JobStartedEvent(i, 1, 7, 100 + i, 0.1))
    # an operator kills both, but the node that runs them no longer has them to kill
    core.kill(0, "killed by operator")
    core.kill(1, "killed by operator")
    cmds = core.handle(ExecutorLostEvent(7, 1.0))
    assert states(core)["a"] == "FAILED" and core.reasons[0] == "killed by operator"
    assert dispatched(cmds) == []
    # (one that may not run twice may still run there: it is held for the operator all the same)
    assert states(core)["c"] == "HELD" and core.held_lost[1] == 1
    core.validate()


def test_a_job_lost_again_and_again_fails() -> None:
    core = SchedulerCore(make_plan({"poison": {}}), slots=1)
    core.handle(RunStartedEvent(0.0))
    for _ in range(3):
        core.handle(JobStartedEvent(0, core.attempt[0], 1, 100, 0.1))
        core.handle(ExecutorLostEvent(1, 1.0))
        assert states(core)["poison"] == "QUEUED"
    core.handle(JobStartedEvent(0, core.attempt[0], 1, 100, 0.1))
    core.handle(ExecutorLostEvent(1, 1.0))
    assert states(core)["poison"] == "FAILED"


def test_stale_and_duplicate_exits_are_ignored(diamond: SchedulerCore) -> None:
    diamond.handle(RunStartedEvent(0.0))
    finish(diamond, "a")
    before = bytes(diamond.state)
    assert diamond.handle(JobExitedEvent(0, 1, 0, 1, 2.0)) == []
    assert bytes(diamond.state) == before


def test_transition_table_is_enforced(diamond: SchedulerCore) -> None:
    with pytest.raises(InvalidTransition, match=r"job 'd'.*WAITING -> RUNNING"):
        diamond.set_state(3, S.RUNNING)
    assert all(LEGAL[a * len(S) + b] == ((S(a), S(b)) in TRANSITIONS) for a in range(len(S)) for b in range(len(S)))


def test_restore_rebuilds_counters_and_ready_set(diamond: SchedulerCore) -> None:
    plan = diamond.plan
    core = SchedulerCore(plan, slots=10)
    core.restore([(0, S.SUCCEEDED, 1), (1, S.SUCCEEDED, 1)], now=5.0)
    cmds = core.handle(RunStartedEvent(5.0))
    assert dispatched(cmds) == [(2, 1)]
    assert core.unmet[3] == 1
    core.validate()


def test_long_chain_resolves_without_recursion() -> None:
    n = 20_000
    spec = {f"j{i}": ({"deps": [f"j{i - 1}"]} if i else {}) for i in range(n)}
    core = SchedulerCore(make_plan(spec), slots=1)
    core.handle(RunStartedEvent(0.0))
    finish(core, "j0", code=1)
    assert core.counts[S.UPSTREAM_FAILED] == n - 1


def test_a_job_asking_for_much_is_not_overtaken_forever_by_small_ones() -> None:
    spec = {"small0": {"resources": {"db": 1}}, "small1": {"resources": {"db": 1}}, "big": {"resources": {"db": 4}}}
    spec.update({f"late{i}": {"resources": {"db": 1}} for i in range(6)})
    core = SchedulerCore(make_plan(spec, resources={"db": 4}), slots=10)
    cmds = core.handle(RunStartedEvent(0.0))
    # big waits for the two small ones; the later small jobs queue behind it
    assert sorted(core.ids[i] for i, _ in dispatched(cmds)) == ["small0", "small1"]
    assert dispatched(finish(core, "small0")) == []
    assert [core.ids[i] for i, _ in dispatched(finish(core, "small1"))] == ["big"]
    core.validate()


def test_a_critical_job_short_of_slots_preempts_the_lowest_tier_preemptible_job() -> None:
    from tests.core.test_conditions import with_fields

    spec = {
        "bulk_std": {"sla": "standard"},
        "bulk_low": {"sla": "low"},
        "gate": {},
        "urgent": {"sla": "critical", "deps": ["gate"]},
    }
    plan = with_fields(make_plan(spec), bulk_std={"preemptible": True}, bulk_low={"preemptible": True})
    core = SchedulerCore(plan, slots=2)
    core.handle(OperatorEvent("hold", (core.index["gate"],), 0.0))
    core.handle(RunStartedEvent(0.0))
    for j in ("bulk_std", "bulk_low"):
        i = core.index[j]
        core.handle(JobStartedEvent(i, 1, 0, 100 + i, 0.5))
    # no free slot: a critical job that becomes ready preempts bulk_low (the lowest tier), gracefully
    cmds = core.handle(OperatorEvent("set-ok", (core.index["gate"],), 1.0))
    kills = [c for c in cmds if isinstance(c, Kill)]
    assert [core.ids[k.job] for k in kills] == ["bulk_low"] and kills[0].graceful
    i = core.index["bulk_low"]
    cmds = core.handle(JobExitedEvent(i, 1, 0, 143, 2.0, signal=15))
    # requeued without counting an attempt; the freed slot goes to the critical job
    assert states(core)["bulk_low"] == "READY" and core.attempt[i] - core.attempt_base[i] == 0
    assert [core.ids[j] for j, _ in dispatched(cmds)] == ["urgent"]
    core.validate()


def test_a_preemptible_job_that_may_not_run_twice_is_not_preempted() -> None:
    from tests.core.test_conditions import with_fields

    plan = with_fields(make_plan({"bulk": {"sla": "low"}, "gate": {}, "urgent": {"sla": "critical", "deps": ["gate"]}}),
                       bulk={"preemptible": True, "idempotent": False})
    core = SchedulerCore(plan, slots=1)
    core.handle(OperatorEvent("hold", (core.index["gate"],), 0.0))
    core.handle(RunStartedEvent(0.0))
    core.handle(JobStartedEvent(core.index["bulk"], 1, 0, 100, 0.5))
    cmds = core.handle(OperatorEvent("set-ok", (core.index["gate"],), 1.0))
    assert not [c for c in cmds if isinstance(c, Kill)]
    assert states(core)["urgent"] == "READY"


def test_fair_share_splits_slots_between_groups_by_weight() -> None:
    from tests.core.test_conditions import with_fields

    spec = {f"a{i}": {} for i in range(20)}
    spec.update({f"b{i}": {} for i in range(20)})
    base = make_plan(spec)
    plan = with_fields(base, **{j: {"group": "treasury" if j.startswith("a") else "cards"} for j in spec})
    from wloadctl.core.plan import Plan

    plan = Plan(plan.name, plan.jobs, groups={"treasury": 3, "cards": 1})
    core = SchedulerCore(plan, slots=8)
    cmds = core.handle(RunStartedEvent(0.0))
    names = [core.ids[i][0] for i, _ in dispatched(cmds)]
    assert names.count("a") == 6 and names.count("b") == 2
    core.validate()


def test_a_job_waiting_with_a_failed_upstream_fails_when_its_last_upstream_succeeds() -> None:
    core = SchedulerCore(make_plan({"f": {}, "u": {}, "d": {"deps": ["f", "u"]}}), slots=2)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobExitedEvent(0, 1, 0, 1, 1.0))  # f fails
    core.handle(JobsFinishedEvent([(1, 1, 0, 0)], 1.0))  # u succeeds
    assert states(core)["d"] == "UPSTREAM_FAILED"
    # Rerun u with its downstream: d waits for u again, still blocked by f.
    core.handle(OperatorEvent("rerun", (1,), 2.0, downstream=True))
    assert states(core)["d"] == "WAITING" and core.block[2] == 1
    core.handle(JobsFinishedEvent([(1, core.attempt[1], 0, 0)], 3.0))
    assert states(core)["d"] == "UPSTREAM_FAILED"
    core.validate()


def test_the_last_free_slots_stay_reserved_for_critical_work_when_every_ready_job_would_fit() -> None:
    jobs = {f"low{k}": {"sla": "low"} for k in range(12)}
    jobs["crit"] = {"sla": "critical", "deps": ["low0"]}
    core = SchedulerCore(make_plan(jobs), slots=10)  # 1 slot reserved for critical work
    started = dispatched(core.handle(RunStartedEvent(0.0)))
    assert len(started) == 9 and core.busy == 9
    assert core.counts[S.READY] == 3
    # two jobs end: three free slots and three low jobs ready, all of which would fit one batch;
    # two start, the third may not take the slot reserved for critical work
    cmds = core.handle(JobsFinishedEvent([(1, 1, 0, 0), (2, 1, 0, 0)], 1.0))
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["low9", "low10"]
    assert [core.ids[k & 0xFFFFFFFF] for k in core.ready] == ["low11"]
    cmds = core.handle(JobsFinishedEvent([(0, 1, 0, 0)], 2.0))  # low0 ends: crit ready, takes the reserve
    assert core.ids[dispatched(cmds)[0][0]] == "crit"
    core.validate()


def test_a_tier_with_no_job_in_the_plan_reserves_no_slot() -> None:
    core = SchedulerCore(make_plan({f"std{k}": {} for k in range(12)}), slots=10)
    started = dispatched(core.handle(RunStartedEvent(0.0)))
    assert len(started) == 10 and core.busy == 10  # no slot stands idle for critical or high work
    cmds = core.handle(JobsFinishedEvent([(0, 1, 0, 0), (1, 1, 0, 0)], 1.0))
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["std10", "std11"]
    core.validate()


def test_a_stage_that_fits_the_free_slots_starts_in_key_order_once_each_and_leaves_the_collector_as_it_was() -> None:
    import gc

    jobs: dict[str, dict] = {"root": {}}
    jobs.update({f"s{k}": {"deps": ["root"], "sla": ("low", "critical", "standard")[k % 3]} for k in range(9)})
    core = SchedulerCore(make_plan(jobs), slots=100)
    was = gc.isenabled()
    try:
        gc.enable()
        assert dispatched(core.handle(RunStartedEvent(0.0))) == [(0, 1)]
        assert gc.isenabled()
        gc.disable()
        core.feed(JobsFinishedEvent([(0, 1, 0, 0)], 1.0))
        assert not gc.isenabled()
        gc.enable()
        # A key the heap holds twice (a job requeued by a resource, say) still starts the job once.
        core.enqueue(core.index["s4"])
        started = [core.ids[i] for i, _ in dispatched(core.flush())]
        assert gc.isenabled()
    finally:
        gc.enable() if was else gc.disable()
    assert started == ["s1", "s4", "s7", "s2", "s5", "s8", "s0", "s3", "s6"]
    assert core.counts[S.QUEUED] == 9 and core.busy == 9 and core.tiers.in_use[:4] == [3, 0, 3, 3]
    core.validate()


def test_why_of_an_ended_job_does_not_say_its_state_twice() -> None:
    from wloadctl.core.explain import why

    core = SchedulerCore(make_plan({"a": {}, "b": {"deps": ["a"]}}), slots=1)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobExitedEvent(0, 1, 0, 3, 1.0))
    assert why(core, 1, 2.0)["reasons"] == ["upstream failed: upstream a FAILED"]
    core.reasons[1] = "upstream failed"  # (as a restore from the journal words it)
    assert why(core, 1, 2.0)["reasons"] == ["upstream failed"]


def test_a_job_held_for_its_lost_executor_says_why_and_what_to_do_and_old_journals_still_read() -> None:
    from wloadctl.core.replay import journaled

    # (it said "interrupted, needs operator": not that its executor was lost, nor what the operator may do)
    assert HELD_LOST.startswith("its executor was lost while it ran and it may not run twice (idempotent: false)")
    assert "release it to run it again, or set-ok or skip it" in HELD_LOST
    for reason in (HELD_LOST, "interrupted, needs operator"):  # as this release journals it, and as earlier ones did
        out = journaled({3: [(4, 5, 2, 1.0, 0, None, ""), (5, 8, 2, 2.0, 0, None, reason)]}, {})
        assert out.held_lost == {3: 2}


def test_a_timed_out_job_that_went_on_after_sigterm_says_it_was_killed_after_its_grace() -> None:
    core = SchedulerCore(make_plan({"polite": {"timeout": 1.0}, "stubborn": {"timeout": 1.0}}), slots=2)
    core.handle(RunStartedEvent(0.0))
    for job, sig in (("polite", 15), ("stubborn", 9)):
        i = core.index[job]
        core.handle(JobStartedEvent(i, core.attempt[i], 0, 100 + i, 0.1))
        core.handle(JobExitedEvent(i, core.attempt[i], 0, 128 + sig, 1.1 if sig == 15 else 4.1, signal=sig,
                                   timed_out=True))
    assert core.reasons[core.index["polite"]] == "timed out after 1s"
    # (it said "timed out after 1s" of a job that ran 4 s: the grace before SIGKILL was nowhere)
    assert core.reasons[core.index["stubborn"]] == ("timed out after 1s: it went on after SIGTERM and was killed "
                                                    "(SIGKILL) once its grace period was over")
