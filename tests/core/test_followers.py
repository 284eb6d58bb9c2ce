"""Followers: a chain of jobs sent behind a dispatched job, each started by its executor when the one before exits 0."""

from __future__ import annotations

from tests.conftest import make_plan
from wloadctl.core.commands import Dispatch, Persist
from wloadctl.core.engine import FOLLOW, SchedulerCore
from wloadctl.core.events import (
    ExecutorLostEvent,
    JobAcceptedEvent,
    JobExitedEvent,
    JobsFinishedEvent,
    JobStartedEvent,
    OperatorEvent,
    RunStartedEvent,
)
from wloadctl.core.explain import why
from wloadctl.core.plan import RetryPolicy
from wloadctl.core.states import JobState

S = JobState


def chain(n: int, **extra: dict) -> SchedulerCore:
    spec: dict[str, dict] = {"j0": {}}
    for k in range(1, n):
        spec[f"j{k}"] = {"deps": [f"j{k - 1}"]}
    for jid, more in extra.items():
        spec[jid].update(more)
    core = SchedulerCore(make_plan(spec), slots=2)
    core.follow = FOLLOW
    return core


def sent(cmds: list) -> tuple[list[tuple[int, int]], frozenset[int]]:
    d = [c for c in cmds if isinstance(c, Dispatch)]
    assert len(d) <= 1
    return (d[0].tasks, d[0].follow) if d else ([], frozenset())


def st(core: SchedulerCore, job: str) -> str:
    return S(core.state[core.index[job]]).name


def test_a_chain_goes_out_a_chain_at_a_time_and_each_follower_takes_the_slot_of_the_one_before() -> None:
    core = chain(2 * FOLLOW + 4)
    tasks, follow = sent(core.handle(RunStartedEvent(0.0)))
    assert tasks == [(k, 1) for k in range(FOLLOW + 1)], "the root and the next FOLLOW jobs, in chain order"
    assert follow == frozenset(range(1, FOLLOW + 1))
    assert all(st(core, f"j{k}") == "QUEUED" for k in range(FOLLOW + 1))
    assert core.reasons[1] == "follows j0: starts when it succeeds"
    assert core.busy == FOLLOW + 1 and len(core.following) == FOLLOW
    core.validate()
    # The executor runs them back to back: each start report comes before the exit of the one before it.
    for k in range(FOLLOW + 1):
        core.feed(JobStartedEvent(k, 1, 0, 100 + k, 0.1))
        cmds = core.handle(JobsFinishedEvent([(k, 1, 0, 0)], 0.2))
        core.validate()
        if k < FOLLOW:
            assert sent(cmds)[0] == [], "nothing is sent while the chain runs on its executor"
    # The last follower ended: the next job is dispatched, with a new chain behind it.
    tasks, follow = sent(cmds)
    assert tasks[0] == (FOLLOW + 1, 1) and FOLLOW + 1 not in follow and len(tasks) == FOLLOW + 1
    assert core.counts[S.SUCCEEDED] == FOLLOW + 1 and not core.leader.get(FOLLOW)


def test_followers_hold_no_slot_until_the_one_before_succeeds() -> None:
    plan = make_plan({"a": {}, "b": {"deps": ["a"]}, "c": {"deps": ["a", "x"]}, "x": {}})
    core = SchedulerCore(plan, slots=2)
    core.follow = FOLLOW
    tasks, follow = sent(core.handle(RunStartedEvent(0.0)))
    # a and x fill both slots; b follows a (c waits for x too); the ready queue was empty at the time.
    assert sorted(tasks) == [(0, 1), (1, 1), (3, 1)] and follow == {1}
    assert core.busy == 3 and core.slots - core.busy + len(core.following) == 0
    core.validate()


def test_no_follower_while_other_work_is_ready() -> None:
    plan = make_plan({"a": {}, "b": {"deps": ["a"]}, "r1": {}, "r2": {}})
    core = SchedulerCore(plan, slots=1)
    core.follow = FOLLOW
    tasks, follow = sent(core.handle(RunStartedEvent(0.0)))
    assert tasks == [(0, 1)] and not follow, "r1 and r2 wait for the slot: b must not jump ahead of them"


def test_a_failed_leader_sends_its_followers_back_and_they_end_upstream_failed() -> None:
    core = chain(4)
    sent(core.handle(RunStartedEvent(0.0)))
    core.handle(JobStartedEvent(0, 1, 0, 100, 0.1))
    core.handle(JobExitedEvent(0, 1, 0, 3, 0.2))
    assert st(core, "j0") == "FAILED" and st(core, "j1") == "QUEUED", "the executor hands j1 back itself"
    core.validate()
    # The executor hands back the whole chain, in order.
    for k in (1, 2, 3):
        core.handle(JobExitedEvent(k, 1, 0, 0, 0.3, lost=True, returned=True))
        core.validate()
    assert [st(core, f"j{k}") for k in range(4)] == ["FAILED", "UPSTREAM_FAILED", "UPSTREAM_FAILED",
                                                      "UPSTREAM_FAILED"]
    assert core.attempt[1] - core.attempt_base[1] == 0, "the attempt it never ran is not counted"
    assert not core.following and not core.leader and core.busy == 0
    assert core.is_finished()


def test_a_follower_handed_back_behind_a_long_job_waits_and_goes_out_again_when_it_succeeds() -> None:
    core = chain(3)
    sent(core.handle(RunStartedEvent(0.0)))
    core.handle(JobStartedEvent(0, 1, 0, 100, 0.1))
    core.handle(JobExitedEvent(1, 1, 0, 0, 0.3, lost=True, returned=True))  # j1 waited too long behind j0
    core.handle(JobExitedEvent(2, 1, 0, 0, 0.3, lost=True, returned=True))
    assert st(core, "j1") == "WAITING" and st(core, "j2") == "WAITING"
    assert core.reasons[1] == "handed back unstarted behind j0"
    core.validate()
    # j1 can now be held like any waiting job.
    reply = core.handle(OperatorEvent("hold", [2], 0.4))
    assert st(core, "j2") == "HELD" and reply
    tasks, follow = sent(core.handle(JobsFinishedEvent([(0, 1, 0, 0)], 0.5)))
    # j1 goes out under a new attempt number (what the executor recorded of the first can never pass for
    # it), not counted against its retries; held j2 does not follow.
    assert tasks == [(1, 2)] and not follow and core.attempt_base[1] == 1


def test_a_follower_handed_back_once_is_not_sent_as_a_follower_again() -> None:
    """Each time a follower comes back it takes a new attempt number: behind jobs that run long, sending it so again
    and again would only use up numbers (a job of a mixed plan was seen at its 7th attempt when it first ran)."""
    core = chain(3)
    tasks, follow = sent(core.handle(RunStartedEvent(0.0)))
    assert tasks == [(0, 1), (1, 1), (2, 1)] and follow == {1, 2}
    core.handle(JobStartedEvent(0, 1, 0, 100, 0.1))
    for k in (1, 2):
        core.handle(JobExitedEvent(k, 1, 0, 0, 0.3, lost=True, returned=True))
    tasks, follow = sent(core.handle(JobsFinishedEvent([(0, 1, 0, 0)], 0.5)))
    assert tasks == [(1, 2)] and not follow, "j1 goes alone; j2, handed back once, waits for it at the scheduler"
    tasks, follow = sent(core.handle(JobsFinishedEvent([(1, 2, 0, 0)], 0.6)))
    assert tasks == [(2, 2)] and not follow
    core.validate()


def test_a_retried_leader_does_not_take_the_follower_it_sent_back() -> None:
    core = chain(2, j0={"retry": RetryPolicy(count=1, delay=0, jitter=0)})
    sent(core.handle(RunStartedEvent(0.0)))
    core.handle(JobExitedEvent(0, 1, 0, 1, 0.2))
    assert st(core, "j0") == "RETRY_WAIT" and 0 not in core.leader
    core.handle(JobExitedEvent(1, 1, 0, 0, 0.3, lost=True, returned=True))
    assert st(core, "j1") == "WAITING"
    core.validate()


def test_followers_lost_with_their_executor_wait_again_and_the_leader_runs_again() -> None:
    core = chain(3)
    sent(core.handle(RunStartedEvent(0.0)))
    for k in range(3):
        core.handle(JobAcceptedEvent(k, 1, 4, 0.1))
    core.handle(JobStartedEvent(0, 1, 4, 100, 0.1))
    tasks, follow = sent(core.handle(ExecutorLostEvent(4, 1.0)))
    assert st(core, "j0") == "QUEUED" and core.attempt[0] == 2, "run again at once (idempotent)"
    # The followers, lost unstarted, went back to waiting for it (their attempts not counted), and follow it again.
    assert tasks == [(0, 2), (1, 2), (2, 2)] and follow == {1, 2}
    assert core.following == {1: 0, 2: 1}
    core.validate()


def test_a_follower_that_reports_its_start_first_has_seen_its_upstream_succeed() -> None:
    core = chain(3)
    sent(core.handle(RunStartedEvent(0.0)))
    # A start report is applied before the batch of plain exits it came with.
    core.handle(JobStartedEvent(1, 1, 0, 101, 0.2))
    assert core.unmet[1] == 0 and 1 not in core.following and st(core, "j1") == "RUNNING"
    core.handle(JobsFinishedEvent([(0, 1, 0, 0)], 0.2))
    assert st(core, "j0") == "SUCCEEDED" and st(core, "j2") == "QUEUED"
    core.validate()


def test_restore_finds_the_followers_again() -> None:
    core = chain(4)
    sent(core.handle(RunStartedEvent(0.0)))
    core.handle(JobStartedEvent(0, 1, 0, 100, 0.1))
    rows = [(i, core.state[i], core.attempt[i]) for i in range(core.n)]
    again = chain(4)
    again.restore(rows, 5.0)
    assert again.following == {1: 0, 2: 1, 3: 2} and again.leader == {0: 1, 1: 2, 2: 3}
    again.validate()
    again.handle(RunStartedEvent(5.0))
    again.handle(JobsFinishedEvent([(0, 1, 0, 0)], 5.1))
    assert again.unmet[1] == 0 and 1 not in again.following
    again.validate()


def test_no_follower_into_a_job_that_needs_a_resource_or_runs_nothing_nor_behind_one_that_runs_nothing() -> None:
    plan = make_plan({"a": {}, "b": {"deps": ["a"], "resources": {"db": 1}}, "c": {},
                      "d": {"deps": ["c"], "type": "noop"}, "e": {"type": "noop"}, "f": {"deps": ["e"]}},
                     resources={"db": 1})
    core = SchedulerCore(plan, slots=4)
    core.follow = FOLLOW
    tasks, follow = sent(core.handle(RunStartedEvent(0.0)))
    assert not follow and sorted(tasks) == [(0, 1), (2, 1), (4, 1)]


def test_the_journal_gets_the_followers_queued_in_the_same_turn() -> None:
    core = chain(3)
    cmds = core.handle(RunStartedEvent(0.0))
    kinds = [type(c) for c in cmds]
    assert kinds.index(Persist) < kinds.index(Dispatch)
    rows = [(t[0], S(t[1]).name, S(t[2]).name) for t in cmds[kinds.index(Persist)].transitions]
    assert (1, "WAITING", "QUEUED") in rows and (2, "WAITING", "QUEUED") in rows


def test_a_follower_handed_back_after_a_cancel_is_cancelled_not_run() -> None:
    core = chain(3)
    sent(core.handle(RunStartedEvent(0.0)))
    core.handle(OperatorEvent("cancel", (), 0.1))
    # The executor saw the cancel on the board: j0 ends, j1 and j2 come back unstarted.
    core.handle(JobsFinishedEvent([(0, 1, 0, 0)], 0.2))
    core.handle(JobExitedEvent(1, 1, 0, 0, 0.3, lost=True, returned=True))
    core.handle(JobExitedEvent(2, 1, 0, 0, 0.3, lost=True, returned=True))
    assert [st(core, f"j{k}") for k in range(3)] == ["SUCCEEDED", "CANCELLED", "CANCELLED"]
    assert core.busy == 0 and core.is_finished()
    core.validate()


def test_why_says_what_a_follower_waits_for() -> None:
    core = chain(3)
    sent(core.handle(RunStartedEvent(0.0)))
    core.handle(JobStartedEvent(0, 1, 0, 100, 0.1))
    reasons = why(core, 1, 0.2)["reasons"]
    assert any("behind j0 (RUNNING)" in r and "the moment that one succeeds" in r for r in reasons), reasons


def test_a_job_whose_one_dependent_is_its_follower_releases_only_that_follower() -> None:
    # Given a chain a -> b -> c, and a job x with two dependents y and z
    plan = make_plan({"a": {}, "b": {"deps": ["a"]}, "c": {"deps": ["b"]},
                      "x": {}, "y": {"deps": ["x"]}, "z": {"deps": ["x"]}})
    core = SchedulerCore(plan, slots=2)
    core.follow = FOLLOW
    _tasks, follow = sent(core.handle(RunStartedEvent(0.0)))
    i = core.index
    assert {i["b"], i["c"]} <= follow and core.following[i["c"]] == i["b"]
    assert len({i["y"], i["z"]} & follow) == 1, "one of x's dependents follows it, the other waits for its end"
    # Then the ends of a and b release nothing but their followers; x's end releases the other one too
    assert core.releases_only_follower(i["a"]) and core.releases_only_follower(i["b"])
    assert not core.releases_only_follower(i["x"])
