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
GATE_FORCE = 8
"""Gate bit: an operator's skip or set-ok waits for the job's upstreams to end (core/forcing.py): it ends so, never
READY, when they have."""
GATE_DECIDES = GATE_READY | GATE_FORCE
"""Gate bits of a WAITING job whose end of waiting is decided off the hot path (`if`, loop, pending skip/set-ok)."""
TIER_SHIFT = 60
"""Where the SLA tier sits in a ready key (key >> TIER_SHIFT is the tier)."""
JOB_BITS = 26
"""Bits of the job index in a ready key (plans of up to 67,108,864 jobs)."""
RANK_BITS = 13
"""Bits of the critical-path rank in a ready key."""
RANK_MAX = (1 << RANK_BITS) - 1
"""The rank of a job with no remaining path to speak of (0: on the longest path of the plan)."""
RANK_FIELD = RANK_MAX << JOB_BITS
"""The rank bits of a ready key."""
MASK = (1 << JOB_BITS) - 1
"""The job index bits of a ready key."""
_PRIO_BIAS = 1 << 20


def ready_key(tier: int, priority: int, job: int, rank: int = 0) -> int:
    """One int that orders the ready queue: tier first, then higher priority, then the longer remaining
    critical path (lower rank), then plan order. It fits a signed 64-bit array item.

    Args:
        tier: SlaTier value (0 = critical).
        priority: the job's priority (higher first), clamped to +/- 2**20.
        job: job index, the tie-breaker.
        rank: critical-path rank, 0 (longest remaining path) to RANK_MAX.

    Returns:
        A key for a min-heap of ints (cheaper than tuples at a million jobs).
    """
    p = _PRIO_BIAS - max(-_PRIO_BIAS + 1, min(_PRIO_BIAS - 1, priority))
    return (tier << TIER_SHIFT) | (p << (JOB_BITS + RANK_BITS)) | (rank << JOB_BITS) | job
