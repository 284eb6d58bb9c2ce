"""A dispatched task's payload in the arena lives until the copy that points at it is settled, and no longer."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from wloadctl.core.events import Event, ExecutorLostEvent, JobExitedEvent
from wloadctl.core.states import JobState
from wloadctl.errors import ProtocolError
from wloadctl.ipc import protocol as P
from wloadctl.ipc.arena import PayloadArena
from wloadctl.ipc.memory import MemoryQueue, MemorySegment
from wloadctl.procs.localpool import LocalPool
from wloadctl.procs.reports import ReportReader
from wloadctl.procs.resultlog import ResultLog

Q, RUN, READY = JobState.QUEUED, JobState.RUNNING, JobState.READY
EPOCH = 2
RETURNED = P.FLAG_LOST | P.FLAG_RETURNED
L1_4, L1_5 = 10, 11
"""The jobs of the seeded kill loop that saw task 10's payload overwritten by task 11's."""


@dataclass
class Book:
    """The engine's arrays as the pool reads them; the test moves the jobs' states itself."""

    n: int = 256
    state: list[int] = field(default_factory=lambda: [JobState.WAITING] * 256)
    attempt: list[int] = field(default_factory=lambda: [0] * 256)
    executor: list[int] = field(default_factory=lambda: [-1] * 256)
    tier: list[int] = field(default_factory=lambda: [0] * 256)
    slots: int = 6
    held_lost: dict[int, int] = field(default_factory=dict)
    fed: list[Event] = field(default_factory=list)

    def unaccepted(self) -> tuple[tuple[int, int], ...]:
        return tuple((i, self.attempt[i]) for i in range(self.n) if self.state[i] == Q and self.executor[i] < 0)

    def feed(self, event: Event) -> None:
        self.fed.append(event)

    def queue(self, i: int, att: int) -> None:
        """The engine dispatches job i under attempt `att`."""
        self.state[i], self.attempt[i], self.executor[i] = Q, att, -1


@dataclass
class Rig:
    """A pool of epoch 2 over an in-memory request/response queue pair and a small arena."""

    pool: LocalPool
    book: Book
    run_id: str
    dead: list[tuple[int, str]]
    """Executors the supervisor finds dead at its next check: (index, why)."""

    def send(self, i: int, att: int) -> None:
        """Dispatch (i, att) and let the pool place and send it."""
        self.book.queue(i, att)
        self.pool.submit([(i, att)])
        self.pool.pump()

    def take(self) -> list[P.TaskRecord]:
        """What an executor finds in the request queue."""
        out: list[P.TaskRecord] = []
        while (data := self.pool.objs.req.recv_nowait()) is not None:
            out.extend(P.decode_tasks(data))
        return out

    def read(self, rec: P.TaskRecord) -> bytes:
        """An executor's read of a task's payload (ProtocolError when overwritten)."""
        return self.pool.objs.arena.get_for(rec)

    def report(self, *recs: P.ResultRecord) -> None:
        """Reports arriving on the response queue, taken by the pool."""
        self.pool.objs.rsp.send_nowait(P.encode_results(list(recs)))
        self.pool.take_reports()


def res(kind: int, executor: int, task: int, attempt: int, flags: int = 0, epoch: int = EPOCH) -> P.ResultRecord:
    started = 1.0 if kind == P.RES_STARTED or (kind == P.RES_EXITED and not flags & P.FLAG_LOST) else 0.0
    return P.ResultRecord(kind, flags, executor, task, attempt, 0, 0, epoch, 4000 + task, started, 2.0, 0, 0)


def payload(i: int, att: int) -> bytes:
    return f"job {i} attempt {att} ".encode().ljust(200, b".")


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    req = MemoryQueue.create(f"/{run_id}.req", 10, 8192)
    rsp = MemoryQueue.create(f"/{run_id}.rsp", 10, 8192)
    # Room for four payloads: a freed one is written over by the very next put.
    arena = PayloadArena.create(f"/{run_id}.arena", 64 + 4 * 256, backend=MemorySegment)
    objs = SimpleNamespace(run_id=run_id, req=req, rsp=rsp, arena=arena)
    dead: list[tuple[int, str]] = []
    sup = SimpleNamespace(prefetch=0, slots=3, workers={}, alive_count=lambda: 2, log=lambda _m: None,
                          check=lambda _now: dead)
    book = Book()
    reader = ReportReader((), lambda _r: "", lambda _i, _a: None)
    pool = LocalPool(book, objs, sup, reader, payload, lambda: None, EPOCH, tmp_path)  # type: ignore[arg-type]
    try:
        yield Rig(pool, book, run_id, dead)
    finally:
        for q in (req, rsp):
            q.close()
            q.unlink()
        arena.close()
        arena.unlink()


def test_a_late_report_of_an_earlier_attempt_leaves_the_payload_of_the_attempt_sent_since(rig: Rig) -> None:
    # Given l1_4 attempt 2 was handed back by executor 0, sent again under the same number, and run by executor 1
    rig.send(L1_4, 2)
    (first,) = rig.take()
    rig.read(first)
    rig.report(res(P.RES_ACCEPTED, 0, L1_4, 2), res(P.RES_EXITED, 0, L1_4, 2, RETURNED))
    rig.send(L1_4, 2)
    (second,) = rig.take()
    rig.read(second)
    rig.report(res(P.RES_ACCEPTED, 1, L1_4, 2), res(P.RES_STARTED, 1, L1_4, 2))
    # And the engine counted attempt 2 lost and sent attempt 3, still in the request queue
    rig.send(L1_4, 3)
    (third,) = rig.take()
    # When attempt 2, which ran on all along, reports its end, and l1_5 is sent next
    rig.report(res(P.RES_EXITED, 1, L1_4, 2))
    rig.send(L1_5, 3)
    # Then attempt 3's payload is still the one its record points at
    assert rig.read(third) == payload(L1_4, 3)
    (other,) = rig.take()
    assert rig.read(other) == payload(L1_5, 3)
    # And each is freed by its own copy's first report: nothing is left in the arena
    rig.report(res(P.RES_ACCEPTED, 0, L1_4, 3), res(P.RES_ACCEPTED, 0, L1_5, 3))
    assert rig.pool.objs.arena.live == 0 and not rig.pool.payload_at


@pytest.mark.parametrize("stale", [
    res(P.RES_EXITED, 0, L1_4, 1, RETURNED),  # an earlier attempt's hand-back
    res(P.RES_STARTED, 0, L1_4, 2, epoch=EPOCH - 1),  # a predecessor's copy (the job was not sent here before)
    res(P.RES_EXITED, 0, L1_4, 4, P.FLAG_SPAWN_FAILED),  # a number not sent yet
], ids=["earlier-attempt", "predecessor-epoch", "other-attempt"])
def test_no_report_of_another_copy_frees_a_queued_payload(rig: Rig, stale: P.ResultRecord) -> None:
    rig.send(L1_4, 2)
    (rec,) = rig.take()
    rig.report(stale)
    rig.send(L1_5, 1)
    assert rig.read(rec) == payload(L1_4, 2)


def test_a_copy_lost_before_any_executor_read_it_is_freed_when_the_job_is_sent_again(rig: Rig) -> None:
    # Given attempt 1 was taken by an executor that died before reading it (no report ever comes)
    rig.send(L1_4, 1)
    rig.take()
    # When the engine requeues it under the same number and it is sent again
    rig.send(L1_4, 1)
    (again,) = rig.take()
    # Then the earlier copy's room went back to the ring, the new one reads, and its report frees it
    assert rig.pool.objs.arena.live == 1
    assert rig.read(again) == payload(L1_4, 1)
    rig.report(res(P.RES_ACCEPTED, 1, L1_4, 1))
    assert rig.pool.objs.arena.live == 0


def test_the_ring_never_stops_for_copies_lost_and_never_sent_again(rig: Rig) -> None:
    # Given job after job whose copy is lost before any executor reported it, and then held by an operator or
    # left waiting to be sent again, or handed back, or run to its end (a ring of room for four payloads)
    arena = rig.pool.objs.arena
    for k in range(200):
        i = k
        rig.send(i, 1 + k % 3)
        (rec,) = rig.take()
        assert rig.read(rec) == payload(i, 1 + k % 3), f"round {k}"
        fate = k % 4
        if fate == 0:
            rig.book.state[i] = JobState.HELD  # lost, then held by an operator
        elif fate == 1:
            rig.book.state[i] = READY  # lost, to be sent again (not yet)
        elif fate == 2:
            rig.report(res(P.RES_ACCEPTED, 0, i, 1 + k % 3), res(P.RES_EXITED, 0, i, 1 + k % 3, RETURNED))
            rig.book.state[i] = READY
        else:
            rig.report(res(P.RES_ACCEPTED, 1, i, 1 + k % 3), res(P.RES_STARTED, 1, i, 1 + k % 3),
                       res(P.RES_EXITED, 1, i, 1 + k % 3))
            rig.book.state[i] = JobState.SUCCEEDED
    # Then every dispatch found room (none waits), and what is left in the ring is at most one copy per job
    assert not rig.pool.pending()
    assert arena.live == len(rig.pool.payload_at) <= 4


def journal(rig: Rig, executor: int, pid: int, recs: list[P.ResultRecord]) -> None:
    d = rig.pool.state_dir / "executors"
    d.mkdir(parents=True, exist_ok=True)
    log = ResultLog(d / f"{rig.run_id}-{executor}-{pid}.results")
    for r in recs:
        log.write(P.encode_results([r]))
    log.close()


def test_a_dead_executors_hand_back_of_an_earlier_copy_does_not_end_the_copy_running_elsewhere(rig: Rig) -> None:
    # Given executor 0 handed l1_4 attempt 2 back, and the copy sent again runs on executor 1
    journal(rig, 0, 900, [res(P.RES_ACCEPTED, 0, L1_4, 2), res(P.RES_EXITED, 0, L1_4, 2, RETURNED)])
    rig.book.state[L1_4], rig.book.attempt[L1_4], rig.book.executor[L1_4] = RUN, 2, 1
    # When executor 0 is found dead
    rig.dead.append((0, "killed by signal 9"))
    rig.pool.check(5.0, rig.book.feed, "health-9", replace=False)
    # Then nothing ends l1_4's running copy: only the executor's loss is told
    assert [type(e) for e in rig.book.fed] == [ExecutorLostEvent]


def test_a_dead_executors_hand_back_is_still_told_for_the_copy_it_held(rig: Rig) -> None:
    # Given executor 0 accepted l1_4 attempt 2 (the engine knows) and handed it back, unreported, before dying
    journal(rig, 0, 900, [res(P.RES_ACCEPTED, 0, L1_4, 2), res(P.RES_EXITED, 0, L1_4, 2, RETURNED)])
    rig.book.state[L1_4], rig.book.attempt[L1_4], rig.book.executor[L1_4] = Q, 2, 0
    rig.dead.append((0, "killed by signal 9"))
    rig.pool.check(5.0, rig.book.feed, "health-9", replace=False)
    exits = [e for e in rig.book.fed if isinstance(e, JobExitedEvent)]
    assert [(e.job, e.attempt, e.returned) for e in exits] == [(L1_4, 2, True)]


def test_an_overwritten_payload_is_refused_not_run(rig: Rig) -> None:
    # (the guard that turned the defect into a failed start rather than another job's command)
    rig.send(L1_4, 1)
    (rec,) = rig.take()
    rig.report(res(P.RES_ACCEPTED, 0, L1_4, 1))
    rig.send(L1_5, 1)
    with pytest.raises(ProtocolError, match="overwritten"):
        rig.read(rec)


@pytest.mark.ipc
def test_a_real_run_keeps_a_job_running_when_another_executor_dies_with_a_hand_back_of_it(tmp_path: Path) -> None:
    from tests.integration.helpers import (
        evidence_plan,
        executor_pids,
        read_evidence,
        reap_orphans,
        start,
        status,
        stop_proc,
        wait_for,
    )
    from wloadctl.procs.localpool import read_results, result_journals

    out, gate, sd = tmp_path / "evidence", tmp_path / "go", tmp_path / "sd"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {"x": {"gate": gate}})
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "1")
    try:
        # Given x running on one executor
        def runner() -> tuple[int, int] | None:
            for ex, pid, path in result_journals(sd, status(sd)["run"]):
                if any(r.kind == P.RES_STARTED for r in read_results(path)):
                    return ex, pid
            return None

        ex, _pid = wait_for(runner, what="x running")
        run_id, epoch = status(sd)["run"], status(sd)["epoch"]
        ((other, other_pid, path),) = [j for j in result_journals(sd, run_id) if j[0] != ex]
        # And the other executor's journal holding a hand-back of x under the same number (an earlier copy's)
        log = ResultLog(path)
        for kind, flags in ((P.RES_ACCEPTED, 0), (P.RES_EXITED, RETURNED)):
            log.write(P.encode_results([P.ResultRecord(kind, flags, other, 0, 1, 0, 0, epoch, 0, 0.0, 1.0, 0, 0)]))
        log.close()
        # When that executor dies, and is replaced (its loss handled)
        os.kill(other_pid, signal.SIGKILL)
        wait_for(lambda: len(set(executor_pids(run_id)) - {other_pid}) >= 2, what="the executor replaced")
        gate.touch()
        assert proc.wait(timeout=60) == 0
    finally:
        gate.touch()
        stop_proc(proc)
    # Then x ran once: its copy was not counted lost and sent again beside itself
    assert [k for k, _ in read_evidence(out)["x"]] == ["start", "end"]
    reap_orphans(run_id)
