"""Scrubbing a run's timeline: where a step by event or by minute lands (pure, no Textual)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

MINUTE = 60.0
"""Seconds of a minute step."""


@dataclass
class Scrub:
    """A position on a run's timeline: the moments some job changed state, and the time shown."""

    moments: list[float] = field(default_factory=list)
    """When some job changed state, oldest first."""
    at: float = 0.0
    """The moment shown (epoch seconds)."""

    def index(self) -> int:
        """Events at or before the moment shown (0: before the first)."""
        return bisect.bisect_right(self.moments, self.at)

    def by_event(self, step: int) -> float:
        """Move `step` events (negative: back); lands on an event's moment, or just before the first."""
        if not self.moments:
            return self.at
        k = self.index() + step
        if k <= 0:
            self.at = self.moments[0] - 1.0
        else:
            self.at = self.moments[min(k, len(self.moments)) - 1]
        return self.at

    def by_minute(self, step: int) -> float:
        """Move `step` minutes, kept between just before the first event and the last."""
        if not self.moments:
            return self.at
        self.at = min(max(self.at + step * MINUTE, self.moments[0] - 1.0), self.moments[-1])
        return self.at

    def to_end(self) -> float:
        """The last event (the run as it stands)."""
        if self.moments:
            self.at = self.moments[-1]
        return self.at

    def to_start(self) -> float:
        """Just before the first event."""
        if self.moments:
            self.at = self.moments[0] - 1.0
        return self.at
