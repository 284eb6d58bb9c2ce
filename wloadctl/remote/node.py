"""An agent's book of the tasks it took, and its journal: what survives an agent restart on its node.

The agent gives every task it takes a local id, so tasks of several runs (whose job indices
overlap) share the node's executors; the book maps local ids back to (run, job, attempt, epoch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from wloadctl.core.events import Event, ExecutorLostEvent, JobAcceptedEvent, TasksLostEvent
from wloadctl.core.states import JobState
from wloadctl.ipc import protocol as P

QUEUED, RUNNING = int(JobState.QUEUED), int(JobState.RUNNING)


@dataclass(slots=True)
class Held:
    """One task an agent took from the broker."""

    local: int
    """Its id on this node's executors."""
    run: str
    """The run it belongs to."""
    job: int
    """Its job index in that run."""
    attempt: int
    """The run's attempt number."""
    epoch: int
    """The epoch of the scheduler that sent it."""
    job_id: str
    """The job's id (for its files)."""
    pool: str
    """The pool it came through ("" when pinned to this agent)."""
    log: str = ""
    """Its log file on this node."""
    result: str = ""
    """Its result file on this node."""
    state: str = "queued"
    """queued, running or exited (as an inventory reply names them)."""


class _Column(dict[int, int]):
    """One of a book's columns by local id: an id it does not hold (dropped, or never taken) reads as `missing`,
    as an index of the engine's arrays reads a job in no such state (a pool reads any task id it was told of)."""

    def __init__(self, missing: int) -> None:
        super().__init__()
        self.missing = missing

    def __missing__(self, key: int) -> int:
        return self.missing


class NodeBook:
    """The tasks an agent holds, in the shape a LocalPool reads (see localpool.Book), plus their runs."""

    def __init__(self, slots: int) -> None:
        self.n = 1 << 31
        """Local ids are below this."""
        self.slots = slots
        """Slots of the node's executors in all."""
        self.state = _Column(-1)
        """JobState value per local id still held (QUEUED or RUNNING; -1 for an id not held)."""
        self.attempt = _Column(0)
        """Local attempt per id (always 1: a task comes once; a retry is another task; 0 for an id not held)."""
        self.executor = _Column(-1)
        """Local executor holding each id (-1: none yet, or not held)."""
        self.tier: dict[int, int] = {}
        """SLA tier per id."""
        self.held: dict[int, Held] = {}
        """What each local id is."""
        self.by_key: dict[tuple[str, int, int], int] = {}
        """Local id of each (run, job, attempt) held."""
        self.lost: list[int] = []
        """Local ids the pool found lost with their executor, not yet reported."""
        self.held_lost: dict[int, int] = {}
        """(Book) An agent holds nothing for an operator: its lost tasks are reported lost to their runs."""
        self.next_id = 1
        """The next local id."""

    def take(self, h: Held, tier: int) -> None:
        """Hold a task (QUEUED until an executor accepts it)."""
        self.held[h.local] = h
        self.by_key[(h.run, h.job, h.attempt)] = h.local
        self.state[h.local] = QUEUED
        self.attempt[h.local] = 1
        self.executor[h.local] = -1
        self.tier[h.local] = tier
        self.next_id = max(self.next_id, h.local + 1)

    def started(self, local: int) -> None:
        """An executor started it."""
        if local in self.state:
            self.state[local] = RUNNING
            self.held[local].state = "running"

    def drop(self, local: int) -> Held | None:
        """It ended (or was lost): no longer held."""
        h = self.held.pop(local, None)
        for d in (self.state, self.attempt, self.executor, self.tier):
            d.pop(local, None)
        if h is not None:
            self.by_key.pop((h.run, h.job, h.attempt), None)
        return h

    def unaccepted(self) -> tuple[tuple[int, int], ...]:
        """QUEUED tasks no executor has accepted yet."""
        return tuple((i, 1) for i, st in self.state.items() if st == QUEUED and self.executor.get(i, -1) < 0)

    def feed(self, ev: Event) -> None:
        """What the local pool learned about its executors."""
        if isinstance(ev, JobAcceptedEvent):
            if ev.job in self.executor:
                self.executor[ev.job] = ev.executor
        elif isinstance(ev, ExecutorLostEvent):
            self.lost.extend(i for i, ex in self.executor.items() if ex == ev.executor)
        elif isinstance(ev, TasksLostEvent):
            self.lost.extend(i for i, _a in ev.jobs if i in self.held)

    def running_count(self) -> int:
        """Tasks running now."""
        return sum(1 for st in self.state.values() if st == RUNNING)


_HELD_FIELDS = tuple(f.name for f in fields(Held))


RAN_KEPT = 100_000
"""Tasks that ran here an agent remembers (a dispatch delivered again after one ran is not run again)."""


def ran_to_an_exit(kind: int, flags: int) -> bool:
    """Whether a task's end says it ran (not lost, nor handed back unstarted): its dispatch must not run again."""
    return kind == P.RES_EXITED and not flags & (P.FLAG_LOST | P.FLAG_RETURNED)


def remember_ran(ran: dict[tuple[str, int, int], None], key: tuple[str, int, int]) -> None:
    """Add a task that ran to the agent's memory of them, forgetting the oldest past RAN_KEPT."""
    ran[key] = None
    if len(ran) > RAN_KEPT:
        del ran[next(iter(ran))]


@dataclass
class NodeJournal:
    """An append-only journal of what an agent took, and of which results the broker stored.

    A task is written here before the dispatch that brought it is acknowledged, and a
    result's storing is written once the broker acknowledged it: an agent restarted on its
    node rebuilds its book from here and publishes again what was not stored.
    """

    path: Path
    """The journal file."""
    f: IO[str] | None = None
    held: dict[int, Held] = field(default_factory=dict)
    """Tasks taken and not yet ended, as read back."""
    unsent: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Results journaled but not yet stored by the broker, by local id."""
    next_id: int = 1
    """One past the highest local id seen."""
    epochs: dict[str, int] = field(default_factory=dict)
    """Highest epoch seen per run."""
    ran: dict[tuple[str, int, int], None] = field(default_factory=dict)
    """(run, job, attempt) of the latest tasks that ran here to an exit, oldest first (RAN_KEPT of them)."""

    def load(self) -> None:
        """Read the journal back (a torn last line, from a crash mid-write, is ignored)."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            kind = rec.pop("k", "")
            if kind == "take":
                h = Held(**rec)
                self.held[h.local] = h
                self.next_id = max(self.next_id, h.local + 1)
                self.epochs[h.run] = max(self.epochs.get(h.run, 0), h.epoch)
            elif kind == "end":
                self.held.pop(int(rec["local"]), None)
                self.unsent[int(rec["local"])] = rec
                if ran_to_an_exit(int(rec.get("kind", 0)), int(rec.get("flags", 0))):
                    remember_ran(self.ran, (str(rec["run"]), int(rec["job"]), int(rec["attempt"])))
            elif kind == "stored":
                for loc in rec["locals"]:
                    self.unsent.pop(int(loc), None)
            elif kind == "epoch":
                self.epochs[str(rec["run"])] = max(self.epochs.get(str(rec["run"]), 0), int(rec["epoch"]))
        self.f = open(self.path, "a", encoding="utf-8")

    def _write(self, obj: dict[str, Any]) -> None:
        assert self.f is not None
        self.f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def take(self, tasks: list[Held]) -> None:
        """Record tasks taken (flushed to the kernel before the dispatch is acknowledged)."""
        # A flat copy of the fields (asdict deep-copies, which costs more than the write).
        names = _HELD_FIELDS
        for h in tasks:
            self._write({"k": "take", **{n: getattr(h, n) for n in names}})
        self.flush()

    def epoch(self, run: str, epoch: int) -> None:
        """Record a newer epoch seen for a run."""
        self._write({"k": "epoch", "run": run, "epoch": epoch})

    def end(self, local: int, entry: dict[str, Any]) -> None:
        """Record a task's end, with what its result message carries."""
        self._write({"k": "end", "local": local, **entry})

    def stored(self, locals_: list[int]) -> None:
        """Record results the broker acknowledged."""
        self._write({"k": "stored", "locals": locals_})

    def flush(self) -> None:
        """Hand what was written to the kernel: it then survives a crash of this process (the agent's
        executors and jobs, which a node's power loss takes too, are what the journal follows)."""
        if self.f is not None:
            self.f.flush()

    def close(self) -> None:
        """Close the file."""
        if self.f is not None:
            self.f.close()
            self.f = None
