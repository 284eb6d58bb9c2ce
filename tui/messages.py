"""Messages that cross screens: what the feed and the supervisor tell the console."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message

from tui.view_model import JobsModel
from wloadctl.core.dag import Dag


@dataclass(frozen=True)
class RunInfo:
    """What does not change during a run: its identity."""

    run_id: str
    """The run's id."""
    plan_name: str
    """The plan's name."""
    business_date: str
    """Business date, YYYY-MM-DD."""
    started: float
    """When the run started (epoch seconds)."""
    state_dir: str
    """Where its journal, logs and lock live."""
    ended: float | None = None
    """When the run ended, as the journal has it (None: not ended); read again while no scheduler is live."""
    latest: bool = True
    """Whether it is the latest run of its state directory (an earlier one is only read)."""


@dataclass(frozen=True)
class ExecutorView:
    """One executor as the node panel shows it."""

    index: int
    """Executor index (its slot)."""
    pid: int
    """Process id."""
    health: str
    """alive, suspect or dead."""
    beat_age: float
    """Seconds since its last heartbeat."""
    running: int
    """Jobs it runs now."""
    slots: int
    """Jobs it may run at once."""
    load1: float
    """Host load average (1 min)."""
    rss_kb: int
    """Resident memory of it and its jobs, KiB."""
    jobs_done: int
    """Jobs it finished since it started."""
    restarts: int = 0
    """Times the console saw this slot taken by a new process."""


@dataclass(frozen=True)
class AgentView:
    """One agent (a node on another host) as the node panel shows it."""

    name: str
    """Its name."""
    label: str
    """Its short label in the jobs table's EX column (a0, a1...)."""
    state: str
    """ALIVE, SUSPECT or LOST."""
    pools: str
    """Pools it serves, comma-separated."""
    used: int
    """Jobs it runs now."""
    slots: int
    """Jobs it may run at once."""
    load1: float
    """Its host's load average (1 min)."""
    held: int
    """Jobs it holds (queued or running)."""
    age: float | None
    """Seconds since its last heartbeat."""


@dataclass(frozen=True)
class LiveStatus:
    """The run's live side, read from the boards a few times a second."""

    live: bool
    """A scheduler is running the run now."""
    scheduler_pid: int | None
    """Its process id."""
    epoch: int
    """Its fencing epoch (goes up at every scheduler start)."""
    beat_age: float | None
    """Seconds since the scheduler last published."""
    executors: tuple[ExecutorView, ...] = ()
    """Executors from the heartbeat board."""
    supervision: str = ""
    """How the console watches the scheduler (or why it does not)."""
    error: str = ""
    """The last error reading the run, if the feed is failing."""
    agents: tuple[AgentView, ...] = ()
    """Agents on other hosts (runs with a broker)."""
    paused: str = ""
    """Why the scheduler does not dispatch now (e.g. a full disk), "" when it does."""
    broker_lost: str = ""
    """The broker the scheduler has lost and since when ("" while it has it, or has none)."""
    responding: bool = True
    """Whether the live scheduler beats its board: False once its last beat is older than `wloadctl status`
    allows (wloadctl.client.silent), when it is stopped or hung and the counts are as of its last beat."""


class ModelLoaded(Message):
    """The feed read the whole run once: the console now owns this model."""

    def __init__(self, info: RunInfo, model: JobsModel, dag: Dag) -> None:
        super().__init__()
        self.info = info
        """The run's identity."""
        self.model = model
        """Every job's state; from now on changed only on the UI thread."""
        self.dag = dag
        """The plan's graph."""


class RunInfoChanged(Message):
    """The run's record read again says other times (a resumed run that ended again has a new end)."""

    def __init__(self, info: RunInfo) -> None:
        super().__init__()
        self.info = info
        """The run's identity and times as the journal has them now."""


class LoadStep(Message):
    """What the feed is reading while it loads the run (a large plan takes a while)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        """The step, e.g. "reading the plan (100,000 jobs)"."""

    def can_replace(self, message: Message) -> bool:
        """Only the latest step matters."""
        return isinstance(message, LoadStep)


class JobsChanged(Message):
    """New transitions wait in the feed (a newer message makes this one redundant)."""

    def can_replace(self, message: Message) -> bool:
        """A pending JobsChanged supersedes this one (transitions wait in the feed)."""
        return isinstance(message, JobsChanged)


class StatusChanged(Message):
    """A fresh reading of the scheduler and executors; only the latest matters."""

    def __init__(self, status: LiveStatus) -> None:
        super().__init__()
        self.status = status
        """The reading."""

    def can_replace(self, message: Message) -> bool:
        """A newer reading makes this one redundant."""
        return isinstance(message, StatusChanged)


@dataclass(frozen=True)
class Note:
    """Something the operator sees once: a restart, a finished run, a failed action."""

    text: str
    """One line."""
    level: str = "information"
    """information, warning or error (the notification's severity)."""
    ts: float = 0.0
    """When it happened."""
    tags: tuple[str, ...] = field(default_factory=tuple)
    """What it is about: "scheduler", "executor", "run"."""


class NoteAdded(Message):
    """A Note for the operator; never coalesced."""

    def __init__(self, note: Note) -> None:
        super().__init__()
        self.note = note
        """The note."""
