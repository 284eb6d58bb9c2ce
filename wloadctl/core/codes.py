"""Integer codes of the engine's hot paths: job state values, gate bits and ready-queue keys, bound once."""

from __future__ import annotations

from wloadctl.core.states import TERMINAL, JobState

S = JobState
N_STATES = len(JobState)
W, R, Q, RUN = int(S.WAITING), int(S.READY), int(S.QUEUED), int(S.RUNNING)
OK, FAIL, TO, RW = int(S.SUCCEEDED), int(S.FAILED), int(S.TIMED_OUT), int(S.RETRY_WAIT)
HELD, SKIP, CANC, UPF = int(S.HELD), int(S.SKIPPED), int(S.CANCELLED), int(S.UPSTREAM_FAILED)
TERMINAL_FLAGS = bytes(1 if JobState(s) in TERMINAL else 0 for s in range(N_STATES))
"""1 at the index of each terminal state value."""

GATE_READY = 1
"""Gate bit: an `if` or a loop over output decides what happens when the job has nothing left to wait for."""
GATE_EXIT = 2
"""Gate bit: the job's exit needs more than the bulk path (resources to free, a result someone reads, until)."""
GATE_RES = 4
"""Gate bit: the job holds resources while it runs (dispatch must acquire them)."""
MASK = (1 << 32) - 1
"""The job index bits of a ready key."""
_PRIO_BIAS = 1 << 20


def ready_key(tier: int, priority: int, job: int) -> int:
    """One int that orders the ready queue: tier first, then higher priority, then plan order.

    Args:
        tier: SlaTier value (0 = critical).
        priority: the job's priority (higher first), clamped to +/- 2**20.
        job: job index, the tie-breaker.

    Returns:
        A key for a min-heap of ints (cheaper than tuples at a million jobs).
    """
    p = _PRIO_BIAS - max(-_PRIO_BIAS + 1, min(_PRIO_BIAS - 1, priority))
    return (tier << 53) | (p << 32) | job
