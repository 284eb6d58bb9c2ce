"""The executor journals every report at once and holds start reports briefly for the job's exit report."""

from __future__ import annotations

import io
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from wloadctl.ipc import protocol as P
from wloadctl.procs.executor import HAND_BACK, REPORT_HOLD, Executor, Running, ahead_per_slot


class FakeQueue:
    """A response queue that records what is sent, or refuses it when full."""

    def __init__(self) -> None:
        self.sent: list[list[P.ResultRecord]] = []
        self.full = False

    def send_nowait(self, data: bytes) -> bool:
        if self.full:
            return False
        self.sent.append(P.decode_results(data))
        return True


def executor(tmp_path: Path) -> tuple[Executor, FakeQueue, io.BytesIO]:
    """An executor whose response queue and results journal are in memory."""
    ex = Executor("r", 0, 1, tmp_path)
    q, journal = FakeQueue(), io.BytesIO()
    ex.rsp, ex.journal, ex.per_msg = q, journal, 64  # type: ignore[assignment]
    return ex, q, journal


def record(kind: int, task: int = 1) -> P.ResultRecord:
    return P.ResultRecord(kind, 0, 0, task, 1, 0, 0, 1, 0, 0.0, 0.0, 0, 0)


def test_a_start_report_waits_for_the_exit_and_both_go_in_one_message(tmp_path: Path) -> None:
    ex, q, journal = executor(tmp_path)
    held = [record(P.RES_ACCEPTED), record(P.RES_STARTED)]
    for r in held:
        ex._emit(r)
    now = ex.report_due - REPORT_HOLD
    ex._flush(now)
    assert q.sent == [] and journal.getvalue() == P.encode_results(held), "journaled at once, not sent yet"
    ex._emit(record(P.RES_EXITED))
    ex._flush(now)
    # The acceptance stays in the journal; the start it came with tells the scheduler as much
    assert [[r.kind for r in m] for m in q.sent] == [[P.RES_STARTED, P.RES_EXITED]]
    assert journal.getvalue() == P.encode_results(held) + P.encode_results([record(P.RES_EXITED)])
    assert not ex.outbox and not ex.urgent and not ex.exits and ex.report_due == 0.0


def test_an_acceptance_goes_alone_when_its_task_has_not_started_by_the_report(tmp_path: Path) -> None:
    ex, q, _ = executor(tmp_path)
    ex._emit(record(P.RES_ACCEPTED, task=1))
    ex._emit(record(P.RES_ACCEPTED, task=2))
    ex._emit(record(P.RES_STARTED, task=2))
    ex._flush(ex.report_due)
    assert [[(r.kind, r.task) for r in m] for m in q.sent] == [[(P.RES_ACCEPTED, 1), (P.RES_STARTED, 2)]]


def test_a_start_report_goes_alone_once_its_hold_is_over(tmp_path: Path) -> None:
    ex, q, _ = executor(tmp_path)
    ex._emit(record(P.RES_STARTED))
    ex._flush(ex.report_due - REPORT_HOLD / 2)
    assert q.sent == []
    ex._flush(ex.report_due)
    assert [[r.kind for r in m] for m in q.sent] == [[P.RES_STARTED]]


def test_exits_and_rejections_go_at_once_and_a_full_queue_keeps_them(tmp_path: Path) -> None:
    ex, q, _ = executor(tmp_path)
    q.full = True
    ex._emit(record(P.RES_REJECTED, task=2))
    ex._flush(0.0)
    assert q.sent == [] and ex.rsp_full and len(ex.outbox) == 1
    q.full = False
    ex._flush(0.0)
    assert [[r.kind for r in m] for m in q.sent] == [[P.RES_REJECTED]] and not ex.rsp_full


def test_exits_wait_while_prefetched_tasks_are_held_and_go_once_none_is(tmp_path: Path) -> None:
    ex, q, journal = executor(tmp_path)
    ex.backlog.append((0, 1, 0.0, P.TaskRecord(3, 1, P.TASK_NOOP, 0, 1, 0, 0), None))  # type: ignore[arg-type]
    ex._emit(record(P.RES_EXITED, task=1))
    now = ex.report_due - REPORT_HOLD
    ex._flush(now)
    assert q.sent == [] and journal.getvalue() == P.encode_results([record(P.RES_EXITED, task=1)])
    ex._emit(record(P.RES_EXITED, task=2))
    ex._flush(now)
    assert q.sent == [], "this executor has work: the exits wait for each other"
    ex.backlog.clear()
    ex._flush(now)
    assert [[r.task for r in m] for m in q.sent] == [[1, 2]], "no task left here: the exits go at once, together"
    ex.backlog.append((0, 1, 0.0, P.TaskRecord(3, 1, P.TASK_NOOP, 0, 1, 0, 0), None))  # type: ignore[arg-type]
    ex._emit(record(P.RES_EXITED, task=4))
    ex._flush(ex.report_due)
    assert [[r.task for r in m] for m in q.sent][-1] == [4], "held no longer than REPORT_HOLD"


def test_exits_wait_while_followers_are_held_here_and_go_once_none_is(tmp_path: Path) -> None:
    """A chain's next jobs wait here (followers): they start without the scheduler, so the exits of the jobs
    before them go together after REPORT_HOLD, not in a message (and a wake of the scheduler) each."""
    ex, q, _ = executor(tmp_path)
    follower = P.TaskRecord(3, 1, P.TASK_NOOP, 0, 1, 0, 0)
    ex.follow[(2, 1)] = (follower, None, float("inf"))  # type: ignore[assignment]
    ex._emit(record(P.RES_EXITED, task=1))
    now = ex.report_due - REPORT_HOLD
    ex._flush(now)
    assert q.sent == [], "a follower waits here: the exit waits for others"
    ex._flush(ex.report_due)
    assert [[r.task for r in m] for m in q.sent] == [[1]], "held no longer than REPORT_HOLD"
    ex.follow.clear()
    ex._emit(record(P.RES_EXITED, task=2))
    ex._flush(ex.report_due - REPORT_HOLD)
    assert [[r.task for r in m] for m in q.sent][-1] == [2], "nothing waits here: the exit goes at once"


def test_a_long_backlog_is_started_in_slices_so_the_loop_can_beat_between_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an executor with ten tasks to start whose every start is slow (a starved host)
    import wloadctl.procs.executor as E

    ex, _q, _ = executor(tmp_path)
    ex.slots = 10
    started: list[int] = []

    def slow_spawn(rec: P.TaskRecord, _payload: object) -> None:
        time.sleep(0.05)
        started.append(rec.task)
        ex.running[1000 + rec.task] = SimpleNamespace(cpu=0.0, memory=0)  # type: ignore[assignment]

    monkeypatch.setattr(E, "START_SLICE", 0.12)
    monkeypatch.setattr(E, "_claim", lambda _p: (0.0, 0))
    monkeypatch.setattr(ex, "_spawn", slow_spawn)
    ex.backlog = [(0, k, 0.0, record(P.RES_ACCEPTED, task=k), None) for k in range(10)]  # type: ignore[misc]
    # When it starts its backlog, it stops when its slice is over and says more is left
    ex._start_backlog()
    first = len(started)
    assert 1 <= first < 10 and ex.more_to_start
    # Then later turns start the rest, in order, and the last says nothing is left
    while ex.more_to_start:
        ex._start_backlog()
    assert started == list(range(10)) and not ex.more_to_start


def _running(began: float) -> Running:
    return Running(record(P.RES_STARTED, task=9), None, -1, 0.0, began, None)  # type: ignore[arg-type]


def test_tasks_are_taken_ahead_only_while_the_jobs_are_short(tmp_path: Path) -> None:
    ex, _, _ = executor(tmp_path)
    ex.slots, ex.prefetch = 2, 2
    now = time.monotonic()
    assert ex._room(now) == 2, "no job has ended yet: nothing is known short"
    ex.last_run = HAND_BACK / 10
    assert ex._room(now) == 6
    ex.running[1] = _running(now - HAND_BACK / 2)
    assert ex._room(now) == 6
    ex.running[2] = _running(now - HAND_BACK * 2)
    assert ex._room(now) == 2, "a job running past HAND_BACK is a long one"
    ex.running.clear()
    ex.prefetch, ex.last_run = 8, HAND_BACK / 4
    assert ex._room(now) == 2 * (1 + 4), "no more ahead than start within HAND_BACK at the last job's pace"
    ex.prefetch = 2
    ex.last_run = HAND_BACK * 2
    assert ex._room(now) == 2, "the last job was a long one"
    ex.prefetch = 0
    ex.last_run = 0.0
    assert ex._room(now) == 2
    # An agent's executor (hand_back 0) takes ahead whatever its jobs' lengths, and hands nothing back
    ex.prefetch, ex.hand_back, ex.last_run = 2, 0.0, float("inf")
    ex.running[2] = _running(now - 60.0)
    ex.backlog = [(0, 1, now - 60.0, P.TaskRecord(3, 1, P.TASK_SHELL, 0, 1, 0, 0), None)]  # type: ignore[list-item]
    assert ex._room(now) == 6 and ex._hand_back_due() == float("inf")


def test_tasks_taken_ahead_are_as_many_as_start_within_the_hand_back_time_at_most_the_prefetch() -> None:
    assert ahead_per_slot(8, 0.05, 0.001) == 8
    assert ahead_per_slot(8, 0.05, 0.01) == 5
    assert ahead_per_slot(8, 0.05, 0.03) == 1
    assert ahead_per_slot(8, 0.05, 0.05) == 0
    assert ahead_per_slot(8, 0.05, float("inf")) == 0
    assert ahead_per_slot(8, 0.05, 0.0) == 8
    assert ahead_per_slot(0, 0.05, 0.001) == 0


def test_tasks_taken_ahead_go_back_unstarted_when_the_slots_stay_busy(tmp_path: Path) -> None:
    ex, q, journal = executor(tmp_path)
    ex.prefetch = 2
    now = time.monotonic()
    ex.running[1] = _running(now - 1.0)
    old = [P.TaskRecord(k, 1, P.TASK_SHELL, 0, 1, 0, 0) for k in (3, 4)]
    young = P.TaskRecord(5, 1, P.TASK_SHELL, 0, 1, 0, 0)
    ex.backlog = [(0, 1, now - HAND_BACK * 1.5, old[0], None), (0, 2, now - HAND_BACK * 1.2, old[1], None),
                  (0, 3, now, young, None)]  # type: ignore[list-item]
    assert ex._hand_back_due() == pytest.approx(now - HAND_BACK * 0.5)
    ex._hand_back(now)
    assert [b[3].task for b in ex.backlog] == [5] and ex.returned == 2 and ex.urgent
    ex._flush(now)
    sent = [r for m in q.sent for r in m]
    assert [(r.kind, r.task, r.flags) for r in sent] == [(P.RES_EXITED, k, P.FLAG_LOST | P.FLAG_RETURNED)
                                                          for k in (3, 4)]
    assert P.decode_results(journal.getvalue()) == sent, "journaled before it is sent"
    # A task waiting with a slot free waits for cpu or memory room: it is not handed back
    ex.running.clear()
    assert ex._hand_back_due() == float("inf")


def test_no_task_held_ahead_starts_while_the_scheduler_is_silent(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """(an agent's executors, their agent killed, started what they held ahead while the run's scheduler, which
    counted the agent lost, gave those tasks to others: they ran twice)"""
    from wloadctl.procs.executor import SILENT_START

    ex, _q, _j = executor(tmp_path)
    started: list[int] = []
    monkeypatch.setattr(ex, "_spawn", lambda rec, payload: started.append(rec.task))
    task = P.TaskRecord(7, 1, 1, 0, 1, 0, 0)
    ex.backlog = [(0, 0, time.monotonic(), task, P.Payload("j", "true"))]
    ex.heard = time.monotonic() - SILENT_START - 1
    ex._start_backlog()
    assert started == [] and len(ex.backlog) == 1  # kept, unstarted, for the scheduler that comes back
    ex.heard = time.monotonic()  # heard again: a beat, or the scheduler that took the run over
    ex._start_backlog()
    assert started == [7] and not ex.backlog
