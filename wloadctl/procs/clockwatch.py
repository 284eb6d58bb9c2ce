"""Tells a jump of the wall clock (set forward or back) from time passing, for the scheduler loop."""

from __future__ import annotations

import time
from collections.abc import Callable

JUMP_TOLERANCE = 1.0
"""Seconds the wall clock may move beyond the monotonic clock between two looks before it counts as a jump
(NTP's slewing moves it far less; a step of the clock, by an operator or NTP, far more)."""


class ClockWatch:
    """Compares the wall clock with the monotonic clock at each loop turn.

    The core measures retry delays on the wall-clock times it is given; a jump of that clock
    would stall retries for the jump's length (set back) or end every wait at once (set
    forward). The loop feeds the core a ClockJumpedEvent instead, and the core moves its
    retry waits by the jump. Both clocks are injected so tests can jump them.
    """

    def __init__(self, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic,
                 tolerance: float = JUMP_TOLERANCE) -> None:
        self.wall = wall
        """Reads the wall clock (seconds since the epoch)."""
        self.mono = mono
        """Reads the monotonic clock."""
        self.tolerance = tolerance
        """See JUMP_TOLERANCE."""
        self.offset = wall() - mono()
        """Wall minus monotonic at the last look."""

    def jumped(self) -> tuple[float, float] | None:
        """(now, seconds jumped) if the wall clock jumped since the last look, else None."""
        now = self.wall()
        offset = now - self.mono()
        by, self.offset = offset - self.offset, offset
        if abs(by) < self.tolerance:
            return None  # slow drift is absorbed look by look, never adding up to a jump
        return now, by
