"""Recovery after a scheduler crash: reconcile the journal's in-flight jobs with what the executors did."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from wloadctl.core.events import JobAcceptedEvent, JobExitedEvent, JobStartedEvent
from wloadctl.core.states import JobState
from wloadctl.ipc import protocol as P
from wloadctl.procs.health import pid_alive

if TYPE_CHECKING:
    from wloadctl.procs.scheduler import SchedulerLoop

SETTLE = 0.3
"""Seconds to let live executors journal what they took from the request queue before it is read."""


def result_journals(state_dir: Path, run_id: str) -> list[tuple[int, Path]]:
    """(executor pid, path) of every executor results journal of a run."""
    out = []
    for p in sorted((state_dir / "executors").glob(f"{run_id}-*.results")):
        try:
            pid = int(p.stem.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            continue
        out.append((pid, p))
    return out


def read_results(path: Path) -> list[P.ResultRecord]:
    """Every result record in one executor's journal (a torn last record is ignored)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    return P.decode_result_log(data) if hasattr(P, "decode_result_log") else _decode_log(data)


def _decode_log(data: bytes) -> list[P.ResultRecord]:
    out: list[P.ResultRecord] = []
    pos = 0
    while pos + P.HEADER.size <= len(data):
        count = P.HEADER.unpack_from(data, pos)[3]
        end = pos + P.HEADER.size + count * P.RESULT.size
        if end > len(data):
            break
        out.extend(P.decode_results(data[pos:end]))
        pos = end
    return out


def _killpg(pgid: int) -> None:
    if pgid > 0:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def reconcile(loop: SchedulerLoop, adopt: bool) -> list[str]:
    """Settle every job the journal shows QUEUED or RUNNING, before dispatching anything.

    Results the executors journaled are applied; attempts still held by live (adopted)
    executors stay theirs; attempts whose executor is gone are lost: requeued when they
    never started, otherwise retried under the job's policy (or held when not idempotent).

    Args:
        loop: the scheduler loop (its core has been restored from the journal).
        adopt: the previous scheduler's executors may still be alive and were kept.

    Returns:
        One line per notable finding, for the operator.
    """
    core, objs, sup = loop.core, loop.objs, loop.sup
    notes: list[str] = []
    alive: set[int] = set()
    if adopt:
        found = sup.adopt()
        alive = {sup.workers[i].pid for i in found}
        if found:
            notes.append(f"reattached to {len(found)} executor(s) still running: {sorted(found)}")
        # Task records the dead scheduler sent but no executor took are dropped here and
        # re-sent below, under this scheduler's epoch.
        dropped = 0
        while (data := objs.req.recv_nowait()) is not None:
            dropped += len(P.decode_tasks(data))
        if dropped:
            notes.append(f"dropped {dropped} unsent task record(s) of the previous scheduler")
        time.sleep(SETTLE)
    inflight = [i for i in range(core.n) if core.state[i] in (JobState.QUEUED, JobState.RUNNING)]
    if not inflight:
        return notes
    want = {(i, core.attempt[i]) for i in inflight}
    seen: dict[tuple[int, int], dict[int, tuple[int, P.ResultRecord]]] = {}
    for pid, path in result_journals(loop.ctx.state_dir, loop.ctx.run_id):
        for r in read_results(path):
            key = (r.task, r.attempt)
            if key in want:
                seen.setdefault(key, {})[r.kind] = (pid, r)
    applied = lost = kept = 0
    for i in inflight:
        att = core.attempt[i]
        recs = seen.get((i, att), {})
        if P.RES_EXITED in recs:
            _, r = recs[P.RES_EXITED]
            core.feed(JobExitedEvent(i, att, r.executor, r.exit_code, r.ended, signal=r.signal,
                                     timed_out=bool(r.flags & P.FLAG_TIMED_OUT),
                                     spawn_failed=bool(r.flags & P.FLAG_SPAWN_FAILED), started=r.started,
                                     cause_id="recovery"))
            applied += 1
            continue
        started = recs.get(P.RES_STARTED)
        accepted = recs.get(P.RES_ACCEPTED)
        holder = started or accepted
        if started is not None:
            pid, r = started
            loop.pids[i] = r.pid
            core.feed(JobStartedEvent(i, att, r.executor, r.pid, r.started, cause_id="recovery"))
        elif accepted is not None:
            pid, r = accepted
            core.feed(JobAcceptedEvent(i, att, r.executor, r.started, cause_id="recovery"))
        if holder is not None and holder[0] in alive and pid_alive(holder[0]):
            kept += 1
            continue
        if started is not None:
            # Its executor is gone but the job's process group may live on: stop it first.
            _killpg(started[1].pid)
            loop.pids.pop(i, None)
        core.feed(JobExitedEvent(i, att, holder[1].executor if holder else -1, -1, time.time(), lost=True,
                                 cause_id="recovery"))
        lost += 1
    notes.append(f"recovered {len(inflight)} in-flight job(s): {applied} finished while the scheduler was down, "
                 f"{kept} still running on live executors, {lost} lost (requeued or retried under policy)")
    return notes

