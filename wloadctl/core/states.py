"""Job and executor lifecycles: the enums, the one table of legal transitions, and the terminal sets."""

from __future__ import annotations

import enum
from collections.abc import Sequence


class JobState(enum.IntEnum):
    """The life of one job in a run. Values are stable: they are stored in the journal and on the state board."""

    WAITING = 0
    """Some dependency has not finished yet."""
    READY = 1
    """Every dependency is met; waiting for a free slot and resources."""
    QUEUED = 2
    """Sent to the executors' request queue; no executor has started it yet."""
    RUNNING = 3
    """An executor runs it now."""
    SUCCEEDED = 4
    """Finished with exit status 0, or forced OK by an operator."""
    FAILED = 5
    """Finished unsuccessfully and no retry remains (or it is not retryable)."""
    TIMED_OUT = 6
    """Killed for running past its timeout and no retry remains."""
    RETRY_WAIT = 7
    """Failed, and waits for its retry delay before becoming READY again."""
    HELD = 8
    """Held by an operator; does not start until released."""
    SKIPPED = 9
    """Will not run (condition false or skipped by an operator); dependents treat it as success."""
    CANCELLED = 10
    """The run was cancelled before this job started."""
    UPSTREAM_FAILED = 11
    """A dependency it needed to succeed failed for good, so it will not run."""

    @property
    def label(self) -> str:
        """The upper-case name shown to users."""
        return self.name


_S = JobState

TRANSITIONS: frozenset[tuple[JobState, JobState]] = frozenset(
    {
        (_S.WAITING, _S.READY),
        (_S.WAITING, _S.HELD),
        (_S.WAITING, _S.SKIPPED),
        (_S.WAITING, _S.CANCELLED),
        (_S.WAITING, _S.UPSTREAM_FAILED),
        (_S.WAITING, _S.SUCCEEDED),  # set-ok by an operator; a loop whose instances all ended
        (_S.WAITING, _S.FAILED),  # a for_each over output gives no usable list, or an `if` cannot be evaluated
        (_S.WAITING, _S.QUEUED),  # follows its last upstream onto that one's executor (engine.FOLLOW)
        (_S.WAITING, _S.WAITING),  # an operator's skip or set-ok waits for its upstreams, or is called off
        (_S.READY, _S.QUEUED),
        (_S.READY, _S.HELD),
        (_S.READY, _S.SKIPPED),
        (_S.READY, _S.CANCELLED),
        (_S.READY, _S.WAITING),  # an upstream was rerun
        (_S.READY, _S.SUCCEEDED),  # set-ok
        (_S.READY, _S.UPSTREAM_FAILED),
        (_S.QUEUED, _S.RUNNING),
        (_S.QUEUED, _S.READY),  # executor lost before start, or preempted; requeue
        (_S.QUEUED, _S.SUCCEEDED),  # a no-op job reports start and end at once
        (_S.QUEUED, _S.FAILED),
        (_S.QUEUED, _S.TIMED_OUT),
        (_S.QUEUED, _S.RETRY_WAIT),
        (_S.QUEUED, _S.HELD),  # executor lost and the job is not idempotent
        (_S.QUEUED, _S.WAITING),  # a follower handed back before its upstream succeeded
        (_S.RUNNING, _S.SUCCEEDED),
        (_S.RUNNING, _S.FAILED),
        (_S.RUNNING, _S.TIMED_OUT),
        (_S.RUNNING, _S.RETRY_WAIT),
        (_S.RUNNING, _S.READY),  # preempted: requeued without counting an attempt
        (_S.RUNNING, _S.HELD),  # executor lost and the job is not idempotent
        (_S.RETRY_WAIT, _S.READY),
        (_S.RETRY_WAIT, _S.WAITING),  # an upstream was rerun with its downstream: it waits for it again
        (_S.RETRY_WAIT, _S.HELD),
        (_S.RETRY_WAIT, _S.CANCELLED),
        (_S.RETRY_WAIT, _S.SUCCEEDED),  # set-ok
        (_S.RETRY_WAIT, _S.SKIPPED),
        (_S.HELD, _S.WAITING),
        (_S.HELD, _S.RETRY_WAIT),  # released while its retry's delay still ran: the rest of it applies
        (_S.HELD, _S.READY),
        (_S.HELD, _S.SKIPPED),
        (_S.HELD, _S.SUCCEEDED),  # set-ok
        (_S.HELD, _S.CANCELLED),
        (_S.HELD, _S.UPSTREAM_FAILED),
        # operator retry / rerun of finished jobs
        (_S.FAILED, _S.READY),
        (_S.FAILED, _S.WAITING),
        (_S.FAILED, _S.SUCCEEDED),
        (_S.FAILED, _S.SKIPPED),
        (_S.TIMED_OUT, _S.READY),
        (_S.TIMED_OUT, _S.WAITING),
        (_S.TIMED_OUT, _S.SUCCEEDED),
        (_S.TIMED_OUT, _S.SKIPPED),
        (_S.SUCCEEDED, _S.READY),
        (_S.SUCCEEDED, _S.WAITING),
        (_S.SKIPPED, _S.READY),
        (_S.SKIPPED, _S.WAITING),
        (_S.SKIPPED, _S.SUCCEEDED),
        (_S.UPSTREAM_FAILED, _S.WAITING),
        (_S.UPSTREAM_FAILED, _S.READY),
        (_S.UPSTREAM_FAILED, _S.SUCCEEDED),
        (_S.UPSTREAM_FAILED, _S.SKIPPED),
        (_S.CANCELLED, _S.WAITING),
        (_S.CANCELLED, _S.READY),
        (_S.CANCELLED, _S.SUCCEEDED),
        (_S.CANCELLED, _S.SKIPPED),
    }
)
"""Every legal (from, to) pair. The table is the spec: anything else raises InvalidTransition."""

TERMINAL: frozenset[JobState] = frozenset(
    {_S.SUCCEEDED, _S.FAILED, _S.TIMED_OUT, _S.SKIPPED, _S.CANCELLED, _S.UPSTREAM_FAILED}
)
"""States a job stays in unless an operator acts."""

ACTIVE: frozenset[JobState] = frozenset({_S.QUEUED, _S.RUNNING})
"""States in which the job holds an executor slot."""

OK_STATES: frozenset[JobState] = frozenset({_S.SUCCEEDED, _S.SKIPPED})
"""Terminal states that count as success for `success` dependencies and the run's exit code."""

FAIL_STATES: frozenset[JobState] = frozenset({_S.FAILED, _S.TIMED_OUT, _S.UPSTREAM_FAILED, _S.CANCELLED})
"""Terminal states that count as failure."""

MOVING: frozenset[JobState] = frozenset({_S.READY, _S.QUEUED, _S.RUNNING, _S.RETRY_WAIT})
"""States of work in hand or due: while any job is in one, a run with HELD jobs is not only holding."""


def is_holding(counts: Sequence[int]) -> bool:
    """True when a run waits only on operators: some jobs HELD, none ready, in flight or due a retry.

    Args:
        counts: jobs per state value (the core's counts or a board header's).
    """
    def n(s: JobState) -> int:
        return counts[s] if s < len(counts) else 0

    return n(_S.HELD) > 0 and not any(n(s) for s in MOVING)

# A flat lookup for the hot path: LEGAL[from * N + to].
_N = len(JobState)
LEGAL: bytes = bytes(
    1 if (JobState(a), JobState(b)) in TRANSITIONS else 0 for a in range(_N) for b in range(_N)
)
"""TRANSITIONS as a byte table indexed by `from * len(JobState) + to`, for the engine's hot path."""


class ExecutorState(enum.IntEnum):
    """Health of one executor process as the scheduler sees it."""

    STARTING = 0
    """Spawned; no heartbeat seen yet."""
    ALIVE = 1
    """Heartbeats arrive on time."""
    SUSPECT = 2
    """A heartbeat is late; nothing new is sent to it."""
    DEAD = 3
    """Gone or stuck past the timeout; its jobs were reassigned."""
    STOPPED = 4
    """Exited cleanly at the end of a run."""


EXECUTOR_TRANSITIONS: frozenset[tuple[ExecutorState, ExecutorState]] = frozenset(
    {
        (ExecutorState.STARTING, ExecutorState.ALIVE),
        (ExecutorState.STARTING, ExecutorState.DEAD),
        (ExecutorState.STARTING, ExecutorState.STOPPED),
        (ExecutorState.ALIVE, ExecutorState.SUSPECT),
        (ExecutorState.ALIVE, ExecutorState.DEAD),
        (ExecutorState.ALIVE, ExecutorState.STOPPED),
        (ExecutorState.SUSPECT, ExecutorState.ALIVE),
        (ExecutorState.SUSPECT, ExecutorState.DEAD),
        (ExecutorState.SUSPECT, ExecutorState.STOPPED),
    }
)
"""Legal executor health changes; DEAD and STOPPED are final."""


class SlaTier(enum.IntEnum):
    """SLA tiers, most urgent first; the value orders the ready queue."""

    CRITICAL = 0
    """Regulatory or business-critical; retried soonest, goes first, has reserved slots."""
    HIGH = 1
    """Important; ahead of standard work."""
    STANDARD = 2
    """The default tier."""
    LOW = 3
    """Bulk work that may wait."""

    @property
    def label(self) -> str:
        """The lower-case name used in plans."""
        return self.name.lower()


class DepKind(enum.IntEnum):
    """What a dependency waits for."""

    SUCCESS = 0
    """Run after the upstream succeeded (or was skipped)."""
    FAILURE = 1
    """Run only if the upstream failed for good."""
    DONE = 2
    """Run after the upstream finished, whatever the outcome."""
