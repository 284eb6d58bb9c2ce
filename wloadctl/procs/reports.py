"""The one translation from result records to engine events, used live, in recovery and for remote nodes."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from wloadctl.core.events import (
    JobAcceptedEvent,
    JobExitedEvent,
    JobsFinishedEvent,
    JobStartedEvent,
)
from wloadctl.ipc import protocol as P

Event = JobAcceptedEvent | JobStartedEvent | JobExitedEvent | JobsFinishedEvent
"""What a report becomes."""


class ReportReader:
    """Turns an executor's (or an agent's) result records into engine events.

    Every path that learns how an attempt went goes through here, so what a job left
    beside its exit status (its output tail, and its result for the jobs a condition or a
    loop reads) reaches the engine the same way whether the report came live from the
    response queue, from an executor's results journal after a crash, or from another host.
    """

    def __init__(self, want: Collection[int], tail_of: Callable[[P.ResultRecord], str],
                 result_of: Callable[[int, int], dict[str, object] | None]) -> None:
        self.want = want
        """Jobs whose result someone reads (conditions, loops): only theirs are read."""
        self.tail_of = tail_of
        """Reads the output tail a record points at ("" when none)."""
        self.result_of = result_of
        """Reads what (job, attempt) wrote to its result file."""

    def exited(self, r: P.ResultRecord, cause: str, *, node: int | None = None, tail: str | None = None,
               result: dict[str, object] | None = None) -> JobExitedEvent:
        """The event of one exit record.

        Args:
            r: the record (kind RES_EXITED).
            cause: cause id carried into the rows it produces.
            node: executor index the engine knows the job by (default: the record's).
            tail: the output tail when the caller has it already (a remote report carries it).
            result: the job's result when the caller has it already.
        """
        i = r.task
        if tail is None:
            tail = self.tail_of(r) if r.flags & P.FLAG_TAIL else ""
        if result is None and i in self.want:
            result = self.result_of(i, r.attempt)
        return JobExitedEvent(i, r.attempt, r.executor if node is None else node, r.exit_code,
                              r.ended, signal=r.signal, timed_out=bool(r.flags & P.FLAG_TIMED_OUT),
                              spawn_failed=bool(r.flags & P.FLAG_SPAWN_FAILED), lost=bool(r.flags & P.FLAG_LOST),
                              returned=bool(r.flags & P.FLAG_RETURNED),
                              output_cut=bool(r.flags & P.FLAG_OUTPUT_CUT),
                              started=r.started, tail=tail,
                              result=result if i in self.want else None, cause_id=cause)

    def event(self, r: P.ResultRecord, cause: str, *, node: int | None = None) -> Event | None:
        """The event of one accepted, started or exited record (None for other kinds)."""
        k = r.kind
        ex = r.executor if node is None else node
        if k == P.RES_EXITED:
            return self.exited(r, cause, node=node)
        if k == P.RES_STARTED:
            return JobStartedEvent(r.task, r.attempt, ex, r.pid, r.started, cause_id=cause)
        if k == P.RES_ACCEPTED:
            return JobAcceptedEvent(r.task, r.attempt, ex, r.started, cause_id=cause)
        return None

    def batch(self, recs: Iterable[P.ResultRecord], cause: str, now: float, *,
              node: int | None = None) -> list[Event]:
        """Events of many records in order, plain exits gathered into one JobsFinishedEvent at the end.

        A plain exit (a status, no signal, timeout, failed start or output tail) of a job whose
        result nobody reads is the common case at scale: it costs a tuple, not an event.
        """
        out: list[Event] = []
        plain: list[tuple[int, int, int, int]] = []
        want = self.want
        for r in recs:
            if r.kind == P.RES_EXITED and not r.signal and not (r.flags & ~P.FLAG_TAIL) and r.task not in want:
                plain.append((r.task, r.attempt, r.executor if node is None else node, r.exit_code))
                continue
            ev = self.event(r, cause, node=node)
            if ev is not None:
                out.append(ev)
        if plain:
            out.append(JobsFinishedEvent(plain, now, cause_id=cause))
        return out
