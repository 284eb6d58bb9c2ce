"""Outbound commands of the scheduling core: what the process shell must carry out, in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Transition(NamedTuple):
    """One journaled job state change: the layout of the plain tuples `Persist` carries (the engine builds
    millions of them and makes no named tuple of each)."""

    job: int
    """Job index."""
    from_state: int
    """JobState value before."""
    to_state: int
    """JobState value after."""
    attempt: int
    """Attempt number at the time of the change."""
    ts: float
    """When it happened."""
    executor: int
    """Executor concerned, -1 if none."""
    exit_code: int | None
    """Exit status when the change is an attempt's end."""
    reason: str
    """Why, in words (empty for the ordinary flow)."""
    cause: str
    """cause_id of the event that produced it."""


class Expansion(NamedTuple):
    """A loop made its instances (journaled with the turn that made them)."""

    parent: int
    """The loop's job index."""
    first: int
    """Index of the first instance it added to the run."""
    items: tuple[str, ...]
    """Its items, in order; none: it forgot its list, to read it again."""
    made: int
    """How many instances it added (from `first`); the other items' instances it had made for an earlier list."""


@dataclass(frozen=True, slots=True)
class Persist:
    """Write these transitions to the journal (and commit) before carrying out anything else."""

    transitions: list[tuple[Any, ...]]
    """In the order they happened, each a plain tuple laid out as `Transition`."""
    added: list[Expansion] = field(default_factory=list)
    """`for_each` loops expanded meanwhile, journaled with the transitions. Their new instances are the
    jobs the transitions' new indices name."""


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Send these (job, attempt) pairs to the executors."""

    tasks: list[tuple[int, int]]
    """Job index and attempt number, in dispatch order (most urgent first)."""
    follow: frozenset[int] = frozenset()
    """Jobs of `tasks` that follow the task just before them: sent in the same message, to the same
    executor, and started by it the moment that task exits 0 (handed back otherwise)."""


@dataclass(frozen=True, slots=True)
class Kill:
    """Stop a running attempt's process group."""

    job: int
    """Job index."""
    attempt: int
    """The attempt to stop."""
    graceful: bool = False
    """Send SIGTERM first and requeue afterwards (preemption) rather than fail it."""


@dataclass(frozen=True, slots=True)
class Alert:
    """A job failed for good: raise an alert (alert log, on_failure hook)."""

    job: int
    """Job index."""
    state: int
    """Final JobState value."""
    attempts: int
    """Attempts made."""
    reason: str
    """Why it failed."""
    exit_code: int | None = None
    """Last exit status, if any."""


@dataclass(frozen=True, slots=True)
class Flag:
    """A job is at risk of missing, or has missed, its deadline."""

    job: int
    """Job index."""
    level: str
    """AT_RISK or LATE; MET when a job flagged AT_RISK finished before its deadline (the flag is cleared)."""
    deadline: float
    """The deadline, epoch seconds."""
    text: str
    """One line for operators."""


@dataclass(frozen=True, slots=True)
class Reply:
    """The outcome of an operator verb, per job, to send back to whoever asked."""

    verb: str
    """The verb that was applied."""
    results: list[tuple[int, bool, str]]
    """(job index, applied?, message) for each job the verb named."""
    touched: list[int] = field(default_factory=list)
    """Every job whose state the verb changed (e.g. the descendants of a rerun)."""


@dataclass(frozen=True, slots=True)
class RunFinished:
    """Every job reached a terminal state (or the cancelled run drained)."""

    ok: bool
    """True when every job succeeded or was skipped."""


Command = Persist | Dispatch | Kill | Alert | Flag | Reply | RunFinished
"""Every command the core emits."""
