"""Inbound events of the scheduling core: facts that happened, in the past tense."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunStartedEvent:
    """The run begins (or resumes): compute the ready set and fill the slots."""

    now: float
    """Wall-clock time, seconds since the epoch."""
    cause_id: str = "start"
    """Identifier carried into every command and journal row this event causes."""


@dataclass(frozen=True, slots=True)
class JobStartedEvent:
    """An executor started a job's process (or accepted it)."""

    job: int
    """Job index in the plan."""
    attempt: int
    """Attempt number the executor ran (1-based)."""
    executor: int
    """Executor index."""
    pid: int
    """Process id (and process group id) of the job's process."""
    now: float
    """When it started."""
    cause_id: str = ""
    """Identifier carried into the rows this event causes."""


@dataclass(frozen=True, slots=True)
class JobAcceptedEvent:
    """An executor took a task into its backlog; it will start it when a slot frees."""

    job: int
    """Job index in the plan."""
    attempt: int
    """Attempt number."""
    executor: int
    """Executor index."""
    now: float
    """When it was accepted."""
    cause_id: str = ""
    """Identifier carried into the rows this event causes."""


@dataclass(frozen=True, slots=True)
class ExecutorLostEvent:
    """An executor died or stopped answering: every attempt it held is lost."""

    executor: int
    """Executor index."""
    now: float
    """When the loss was detected."""
    reason: str = "executor lost"
    """What was seen (exited with status, heartbeat timeout, ...)."""
    cause_id: str = "health"
    """Identifier carried into the rows this event causes."""
    unheard: bool = False
    """Its reports came through a node lost with it (an agent): what it had not said started may have
    (JobExitedEvent.unheard)."""


@dataclass(frozen=True, slots=True)
class TasksLostEvent:
    """Task records an executor took off the queue and died with before accepting them.

    The shell knows it when, after an executor was lost, the request queue has emptied and
    these jobs, unaccepted then, are still unaccepted well past the time any live executor
    takes to accept what it takes.
    """

    jobs: tuple[tuple[int, int], ...]
    """(job, attempt) pairs that were unaccepted when the executor was lost."""
    now: float
    """When it was decided."""
    cause_id: str = "health"
    """Identifier carried into the rows this event causes."""
    unheard: bool = False
    """Taken by a node (an agent) lost before its reports came through: they may have started
    (JobExitedEvent.unheard)."""


@dataclass(frozen=True, slots=True)
class JobExitedEvent:
    """A job's attempt ended: its process exited, was killed, timed out, or its executor was lost."""

    job: int
    """Job index in the plan."""
    attempt: int
    """The attempt that ended."""
    executor: int
    """Executor index (-1 when unknown)."""
    exit_code: int
    """Exit status; meaningful when `signal` is 0."""
    now: float
    """When it ended."""
    signal: int = 0
    """Signal that killed it, 0 if none."""
    timed_out: bool = False
    """The executor killed it for running past its timeout."""
    output_cut: bool = False
    """Its output passed its `max_output`: the executor stopped it (unless it had ended first) and cut its log
    back to the cap."""
    lost: bool = False
    """Its executor died or the scheduler crashed with it in flight; the outcome is unknown."""
    spawn_failed: bool = False
    """The command could not be started at all (missing program, bad cwd)."""
    returned: bool = False
    """With `lost`: handed back unstarted by an executor that took it ahead and stayed busy."""
    unheard: bool = False
    """With `lost`: not said started, yet it may have started: its executor's reports came through a node (an
    agent) lost with them, or its executor died while starting it (FLAG_STARTING in its journal). A job that may
    not run twice is held, not requeued."""
    run_down: bool = False
    """With `lost`: found lost by a resume, its executor gone while no scheduler ran (the whole run went down: a
    crash or power loss of the host). The loss is the run's, not the job's: it does not count toward MAX_LOST."""
    started: float = 0.0
    """When the attempt started (0 when unknown)."""
    tail: str = ""
    """Last lines of its output."""
    result: dict[str, object] | None = None
    """What the job wrote to its result file (read only for jobs a condition looks at)."""
    cause_id: str = ""
    """Identifier carried into the rows this event causes."""
    ended: float = 0.0
    """When it ended, for a report heard long after (then `now` is when it was heard); 0: at `now`."""


@dataclass(frozen=True, slots=True)
class JobsFinishedEvent:
    """Many attempts ended with a plain exit status (no signal, no timeout): one event per received batch."""

    results: list[tuple[int, int, int, int]]
    """(job, attempt, executor, exit status) per attempt."""
    now: float
    """When they were received."""
    cause_id: str = ""
    """Identifier carried into the rows this event causes."""


@dataclass(frozen=True, slots=True)
class TimerFiredEvent:
    """Time advanced: due retry delays end and time-based checks run."""

    now: float
    """The current time."""
    cause_id: str = "timer"
    """Identifier carried into the rows this event causes."""


@dataclass(frozen=True, slots=True)
class ClockJumpedEvent:
    """The wall clock was set forward (`by` > 0) or back (`by` < 0) against the monotonic clock.

    Waits that measure a duration (retry delays) keep what remained of them; deadlines and
    not-before times are instants of the wall clock and are judged against the new time.
    """

    now: float
    """The current time (after the jump)."""
    by: float
    """Seconds the wall clock moved beyond the time that passed."""
    cause_id: str = "clock"
    """Identifier carried into the rows this event causes."""


@dataclass(frozen=True, slots=True)
class SlotsChangedEvent:
    """The number of executor slots available changed (an executor died or joined)."""

    slots: int
    """Total slots now available across live executors."""
    now: float
    """When it changed."""
    cause_id: str = "slots"
    """Identifier carried into the rows this event causes."""


@dataclass(frozen=True, slots=True)
class PlaceCapacityEvent:
    """The slots a place offers changed: a pool's agents joined or were lost, an agent's slots changed.

    A place is `pool:NAME` or `agent:NAME` (see SchedulerCore.place_of); `pool:local` is this host.
    """

    place: str
    """The place."""
    slots: int
    """Slots it offers now (0: nothing can run there; its jobs wait)."""
    now: float
    """When it changed."""
    cause_id: str = "capacity"
    """Identifier carried into the rows this event causes."""


@dataclass(frozen=True, slots=True)
class HostClaimsEvent:
    """The share of the host's cpu and memory this run may hold now changed (`wloadctl host --cpus/--memory`).

    From the first one on, a job that claims `cpu` or `memory` and runs on this host also holds them
    out of the run's share: it waits READY while the share has no room for it.
    """

    cpu: int
    """Thousandths of a CPU the run's jobs may claim in all (HOST_UNLIMITED: no host limit)."""
    memory: int
    """MiB the run's jobs may claim in all (HOST_UNLIMITED: no host limit)."""
    contended: bool
    """Other runs wait for the host's cpu or memory: what a job gives back goes back to the host, to be
    shared again at the next beat, rather than to this run's next job."""
    now: float
    """When it changed."""
    cause_id: str = "host-share"
    """Identifier carried into the rows this event causes."""


@dataclass(frozen=True, slots=True)
class OperatorEvent:
    """An operator verb (hold, release, retry, rerun, kill, set-ok, skip, cancel) on some jobs."""

    verb: str
    """The verb."""
    jobs: tuple[int, ...]
    """Job indices it names."""
    now: float
    """When it was asked."""
    user: str = ""
    """Who asked."""
    reason: str = ""
    """Why, as the operator gave it."""
    downstream: bool = False
    """For rerun: also rerun everything that depends on the jobs."""
    cause_id: str = "op"
    """Identifier carried into the rows this event causes."""
    offline: bool = False
    """Applied on the journal of a run with no live scheduler, where kill (it signals) does not apply: a refusal
    names only the verbs that do."""


Event = (
    RunStartedEvent
    | JobAcceptedEvent
    | JobStartedEvent
    | JobExitedEvent
    | JobsFinishedEvent
    | ExecutorLostEvent
    | TasksLostEvent
    | TimerFiredEvent
    | ClockJumpedEvent
    | SlotsChangedEvent
    | PlaceCapacityEvent
    | HostClaimsEvent
    | OperatorEvent
)
"""Every event the core accepts."""
