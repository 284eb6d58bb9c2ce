"""Reports of a chain's progress on its executor (a job's end whose only dependent is the follower started in its
slot, and that follower's start) wait there up to FOLLOW_HOLD, journaled, instead of waking the scheduler each."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import make_plan
from tests.procs.test_executor_reports import executor, record
from wloadctl.core.engine import FOLLOW, SchedulerCore
from wloadctl.core.events import RunStartedEvent
from wloadctl.ipc import protocol as P
from wloadctl.procs.executor import FOLLOW_HOLD, REPORT_HOLD, _sole
from wloadctl.procs.runner import _payloads


def test_a_followers_payload_says_when_the_job_it_follows_releases_nothing_else() -> None:
    # Given a chain a -> b, and x whose end releases its follower and another job
    plan = make_plan({"a": {}, "b": {"deps": ["a"]}, "x": {}, "y": {"deps": ["x"]}, "z": {"deps": ["x"]}})
    core = SchedulerCore(plan, slots=2)
    core.follow = FOLLOW
    core.handle(RunStartedEvent(0.0))
    ctx = SimpleNamespace(payload=lambda spec, _att: P.Payload(job=spec.id, command="true"))
    payload_of = _payloads(ctx, core)  # type: ignore[arg-type]
    i = core.index
    x_follower = next(d for d in (i["y"], i["z"]) if d in core.following)
    # When their payloads are encoded for the executors
    b = P.decode_payload(payload_of(i["b"], 1) or b"")
    xf = P.decode_payload(payload_of(x_follower, 1) or b"")
    # Then b's says so (its executor may hold the reports of a's end and b's start); x's follower's does not
    assert b.extra["after"] == f"{i['a']}:1" and _sole(b)
    assert xf.extra["after"] == f"{i['x']}:1" and not _sole(xf)


def test_a_chains_progress_waits_past_report_hold_and_goes_with_the_chains_end(tmp_path: Path) -> None:
    ex, q, journal = executor(tmp_path)
    follower = P.TaskRecord(3, 1, P.TASK_FOLLOW, 0, 1, 0, 0)
    ex.follow[(2, 1)] = (follower, None, float("inf"))  # type: ignore[assignment]
    t = time.monotonic()
    # When job 1 ended and its sole follower 2 started here
    progress = [record(P.RES_EXITED, task=1), record(P.RES_STARTED, task=2)]
    for r in progress:
        ex._emit(r, quiet=True)
    ex._flush(t + REPORT_HOLD)
    # Then they are journaled at once and wait longer than other reports would
    assert q.sent == [] and journal.getvalue() == P.encode_results(progress)
    assert ex.report_due >= t + FOLLOW_HOLD and not ex.exits
    # And the chain's end, nothing left here, takes them along at once, in one message
    ex.follow.clear()
    ex._emit(record(P.RES_EXITED, task=2))
    ex._flush(t)
    assert [[(r.kind, r.task) for r in m] for m in q.sent] == [
        [(P.RES_EXITED, 1), (P.RES_STARTED, 2), (P.RES_EXITED, 2)]]
    assert not ex.outbox and ex.report_due == 0.0


def test_a_chains_progress_waits_no_longer_than_follow_hold_nor_than_another_report(tmp_path: Path) -> None:
    ex, q, _ = executor(tmp_path)
    ex.follow[(2, 1)] = (P.TaskRecord(3, 1, P.TASK_FOLLOW, 0, 1, 0, 0), None, float("inf"))  # type: ignore[assignment]
    ex._emit(record(P.RES_STARTED, task=2), quiet=True)
    ex._flush(ex.report_due)
    assert [[r.task for r in m] for m in q.sent] == [[2]], "held no longer than FOLLOW_HOLD"
    ex._emit(record(P.RES_EXITED, task=2), quiet=True)
    ex._emit(record(P.RES_ACCEPTED, task=7))  # another task's report: due after REPORT_HOLD
    assert ex.report_due <= time.monotonic() + REPORT_HOLD
    ex._flush(ex.report_due)
    assert [[r.task for r in m] for m in q.sent][-1] == [2, 7], "the quiet one goes with it"
    assert ex.report_due == 0.0


def test_the_start_of_a_chains_last_job_here_sends_the_progress_held_before_it_at_once(tmp_path: Path) -> None:
    """The scheduler takes a chain's held progress in while the chain's last job runs, not after its end."""
    ex, q, _ = executor(tmp_path)
    ex.trees = SimpleNamespace(prepare=lambda *_a: None, leaders=set())  # type: ignore[assignment]

    def follower(task: int, after: int) -> tuple[P.TaskRecord, P.Payload]:
        return (P.TaskRecord(task, 1, P.TASK_FOLLOW, 0, 1, 0, 0),
                P.Payload(job=f"j{task}", command="true", log_path=str(tmp_path / f"j{task}.1.log"),
                          extra={"after": f"{after}:1", "sole": "1"}))

    two, three = follower(2, 1), follower(3, 2)
    ex.follow[(2, 1)] = (three[0], three[1], float("inf"))
    try:
        # When follower 2 starts with follower 3 still behind it, its start waits with the progress before it
        ex._emit(record(P.RES_EXITED, task=1), quiet=True)
        ex._spawn(*two)
        ex._flush(time.monotonic())
        assert q.sent == [] and not ex.urgent
        # And when 3, the last one here, starts, everything held goes at once
        del ex.follow[(2, 1)]
        ex._emit(record(P.RES_EXITED, task=2), quiet=True)
        ex._spawn(*three)
        t = time.monotonic()
        assert ex.report_due > t
        ex._flush(t)
        assert [[(r.kind, r.task) for r in m] for m in q.sent] == [
            [(P.RES_EXITED, 1), (P.RES_STARTED, 2), (P.RES_EXITED, 2), (P.RES_STARTED, 3)]]
    finally:
        for r in ex.running.values():
            os.waitpid(r.proc.pid, 0)
            os.close(r.pidfd)
            os.close(r.log.fd)
        ex.spawner.close_logs()
