"""A pool over the in-memory transport, for tests of the scheduler loop without processes.

It keeps the pool seam's side of the contract (what SchedulerLoop calls) and "runs" each task
at once by asking a function for its outcome; reports travel as real result records through
an in-memory response queue and reach the engine through the same ReportReader as live ones.
Like dramatiq's StubBroker, it stands beside the real pools so the loop's tests need no fork.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from wloadctl.core.commands import Kill
from wloadctl.core.events import ExecutorLostEvent
from wloadctl.core.states import JobState
from wloadctl.ipc import protocol as P
from wloadctl.ipc.memory import MemoryQueue
from wloadctl.procs.pools import Book, Feed
from wloadctl.procs.reports import ReportReader

if TYPE_CHECKING:
    from wloadctl.procs.control import ControlDesk

Outcome = Callable[[int, int], int | None]
"""(job, attempt) -> exit status, or None to leave the attempt running until `finish` or a kill."""


@dataclass
class StubPool:
    """Executors that are functions: what they run ends when `outcome` says."""

    core: Book
    """The engine (read only)."""
    reader: ReportReader
    """Records to events."""
    outcome: Outcome
    """How each attempt ends."""
    rsp: MemoryQueue
    """In-memory response queue the reports travel through."""
    executors: int = 2
    """Executors it pretends to have (indices first..first+executors-1)."""
    first: int = 0
    """Index of its first executor (a second stub pool beside it numbers its own after the first's)."""
    takes: Callable[[int], bool] = field(default=lambda _i: True)
    """Which jobs it serves."""
    sent: list[tuple[int, int]] = field(default_factory=list)
    """Every (job, attempt) it was given, in order."""
    killed: list[tuple[int, int]] = field(default_factory=list)
    """Every (job, attempt) it was asked to kill."""
    running: dict[int, int] = field(default_factory=dict)
    """Job -> executor of attempts still running."""
    lost: list[int] = field(default_factory=list)
    """Executors to report lost at the next health check."""
    waiting: list[tuple[int, int]] = field(default_factory=list)
    """Dispatches not started yet."""
    health_due: bool = False
    """Whether the loop should judge health at once."""
    received: int = 0
    """Response messages drained."""
    restarts: dict[int, int] = field(default_factory=dict)
    """Times each executor died and was replaced (at once, as a real pool's supervisor does)."""
    _next: int = 0

    keeps_jobs: ClassVar[bool] = False
    """A stop ends the stub's attempts (stop_all)."""

    def serves(self, job: int) -> bool:
        """Whether `takes` says the job is its."""
        return self.takes(job)

    def join_desk(self, desk: ControlDesk) -> None:
        """No channel of its own."""

    def attach(self, poller: select.poll) -> None:
        """Wait on the response queue."""
        poller.register(self.rsp.fd, select.POLLIN)

    def on_ready(self, fd: int, cause: str) -> bool:
        """Apply the reports waiting in the response queue."""
        if fd != self.rsp.fd:
            return False
        self.drain(self.core.feed, cause)
        return True

    def drain(self, feed: Feed, cause: str) -> None:
        """Feed the engine every report in the response queue."""
        recs: list[P.ResultRecord] = []
        while (data := self.rsp.recv_nowait()) is not None:
            self.received += 1
            recs += P.decode_results(data)
        for ev in self.reader.batch(recs, cause, time.time()):
            feed(ev)

    def submit(self, tasks: list[tuple[int, int]], follow: frozenset[int] = frozenset()) -> None:
        """Take dispatches (the engine sends this pool no followers)."""
        self.waiting.extend(tasks)

    def pump(self) -> None:
        """Start what was dispatched: report each accepted and started, and ended when its outcome is known."""
        out: list[P.ResultRecord] = []
        now = time.time()
        for i, att in self.waiting:
            if self.core.state[i] != JobState.QUEUED or self.core.attempt[i] != att:
                continue
            ex = self.first + self._next % self.executors
            self._next += 1
            self.sent.append((i, att))
            out.append(P.ResultRecord(P.RES_STARTED, 0, ex, i, att, 0, 0, 1, 1000 + i, now, 0.0, 0, 0))
            code = self.outcome(i, att)
            if code is None:
                self.running[i] = ex
            else:
                out.append(P.ResultRecord(P.RES_EXITED, 0, ex, i, att, 0, code, 1, 1000 + i, now, now, 0, 0))
        self.waiting.clear()
        self._send(out)

    def finish(self, job: int, code: int = 0) -> None:
        """End a running attempt now (as its process would)."""
        ex = self.running.pop(job)
        now = time.time()
        self._send([P.ResultRecord(P.RES_EXITED, 0, ex, job, self.core.attempt[job], 0, code, 1, 1000 + job,
                                   now, now, 0, 0)])

    def _send(self, recs: list[P.ResultRecord]) -> None:
        per = P.results_per_message(self.rsp.max_message_size)
        for k in range(0, len(recs), per):
            if not self.rsp.send_nowait(P.encode_results(recs[k : k + per])):
                raise AssertionError("the stub's response queue is full: drain it more often")

    def after_commit(self) -> None:
        """Nothing to let go."""

    def take_ahead(self) -> bool:
        """Nothing is taken ahead."""
        return False

    def flush(self, timeout: float) -> None:
        """Nothing waits."""

    def pending(self) -> bool:
        """Dispatches not yet started."""
        return bool(self.waiting)

    def backlog(self) -> int:
        """Dispatches not yet started."""
        return len(self.waiting)

    def starved(self) -> bool:
        """Never: payloads stay in the engine."""
        return False

    def traffic(self) -> tuple[int, int]:
        """No request messages; the response messages drained."""
        return 0, self.received

    def next_due(self) -> float:
        """Nothing is timed here."""
        return float("inf")

    def fire_kills(self, now: float) -> None:
        """Kills take effect at once (see kill)."""

    def kill(self, c: Kill) -> None:
        """A killed attempt ends by SIGTERM at once."""
        self.killed.append((c.job, c.attempt))
        ex = self.running.pop(c.job, None)
        if ex is not None:
            now = time.time()
            self._send([P.ResultRecord(P.RES_EXITED, 0, ex, c.job, c.attempt, 15, 143, 1, 1000 + c.job, now, now,
                                       0, 0)])

    def lose(self, executor: int) -> None:
        """Make an executor die: its running attempts are lost at the next health check."""
        self.lost.append(executor)
        self.health_due = True

    def check(self, now: float, feed: Feed, cause: str, replace: bool = True) -> None:
        """Report the executors made to die."""
        self.health_due = False
        for ex in self.lost:
            for job in [j for j, e in self.running.items() if e == ex]:
                del self.running[job]
            feed(ExecutorLostEvent(ex, now, "stub executor lost", cause_id=cause))
            self.restarts[ex] = self.restarts.get(ex, 0) + 1
        self.lost.clear()

    def health(self, now: float) -> list[dict[str, object]]:
        """One row per executor (each alive: a lost one was replaced)."""
        return [{"executor": ex, "state": "ALIVE", "restarts": self.restarts.get(ex, 0)}
                for ex in range(self.first, self.first + self.executors)]

    def inventory(self) -> dict[int, set[tuple[int, int]]]:
        """The attempts each live executor still runs."""
        out: dict[int, set[tuple[int, int]]] = {ex: set() for ex in range(self.first, self.first + self.executors)}
        for job, ex in self.running.items():
            out[ex].add((job, self.core.attempt[job]))
        return out

    def alive(self) -> int:
        """Executors alive."""
        return self.executors

    def stop_all(self) -> None:
        """Running attempts end as stopped (SIGTERM)."""
        for job in list(self.running):
            self.kill(Kill(job, self.core.attempt[job], True))
