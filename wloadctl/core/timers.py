"""Time in the core: retry delays with backoff and jitter, deadline and not-before timers."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from wloadctl.core import codes as C
from wloadctl.core.commands import Flag
from wloadctl.core.sla import RISK_WINDOW, TIMER_LATE, TIMER_NOT_BEFORE, TIMER_RISK
from wloadctl.core.states import JobState, SlaTier

if TYPE_CHECKING:
    from wloadctl.core.engine import SchedulerCore

S = JobState

TIER_RETRY_FACTOR: dict[SlaTier, float] = {
    SlaTier.CRITICAL: 0.25,
    SlaTier.HIGH: 0.5,
    SlaTier.STANDARD: 1.0,
    SlaTier.LOW: 1.5,
}
"""Retry delays are multiplied by the job's tier factor: urgent work is retried sooner."""


class TimersMixin:
    """Retry, deadline and not-before timers for SchedulerCore."""

    def retry_delay(self: SchedulerCore, i: int, used: int) -> float:
        """Delay before the retry following attempt number `used` of job i (backoff, tier factor, jitter)."""
        p = self.specs[i].retry
        base = min(p.max_delay, p.delay * (p.backoff ** (used - 1)))
        base *= TIER_RETRY_FACTOR[SlaTier(self.tier[i])]
        if p.jitter:
            base *= 1.0 + self.rng.uniform(-p.jitter, p.jitter)
        return max(0.0, min(base, p.max_delay))

    def _on_timer(self: SchedulerCore) -> None:
        timers, now = self.timers, self.now
        while timers and timers[0][0] <= now:
            _due, i, mark = heapq.heappop(timers)
            st = self.state[i]
            if mark >= 0:
                if st == C.RW and self.attempt[i] == mark:
                    self.retry_due.pop(i, None)
                    self._make_ready(i)
            elif mark == TIMER_NOT_BEFORE:
                if st == C.R:
                    heapq.heappush(self.ready, self.key_base[i] | i)
            elif st != C.OK and st != C.SKIP:
                self._flag(i, "LATE" if mark == TIMER_LATE else "AT_RISK")

    def _flag(self: SchedulerCore, i: int, level: str) -> None:
        dl = self.deadline[i]
        when = "passed" if level == "LATE" else "is near"
        text = f"{level}: deadline {when} ({S(self.state[i]).name})"
        if self.lateness.get(i, "").startswith("LATE"):
            return
        self.lateness[i] = text
        self._other.append(Flag(i, level, dl, text))

    def set_times(self: SchedulerCore, deadlines: dict[int, float], not_before: dict[int, float],
                  add: bool = False) -> None:
        """Give the core the absolute deadlines and not-before times of jobs (computed by the shell).

        Args:
            deadlines: absolute deadline by job.
            not_before: absolute earliest start by job.
            add: add to the times already given instead of replacing them.
        """
        if add:
            self.deadline.update(deadlines)
            self.not_before.update(not_before)
        else:
            self.deadline = dict(deadlines)
            self.not_before = dict(not_before)
        for i, dl in deadlines.items():
            window = max(RISK_WINDOW, self.specs[i].timeout or 0.0)
            heapq.heappush(self.timers, (dl - window, i, TIMER_RISK))
            heapq.heappush(self.timers, (dl, i, TIMER_LATE))
        for i, t in not_before.items():
            heapq.heappush(self.timers, (t, i, TIMER_NOT_BEFORE))

    def next_timer(self: SchedulerCore) -> float | None:
        """When the core next needs a TimerFiredEvent, or None."""
        timers = self.timers
        while timers and timers[0][2] >= 0 and (
                self.state[timers[0][1]] != C.RW or self.attempt[timers[0][1]] != timers[0][2]):
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    # -- readiness -----------------------------------------------------------------------
