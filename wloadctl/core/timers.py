"""Time in the core: retry delays with backoff and jitter, deadline and not-before timers, lateness flags."""

from __future__ import annotations

import heapq
import math
import random
import re
from array import array
from collections.abc import Iterable

from wloadctl.core import codes as C
from wloadctl.core.commands import Flag
from wloadctl.core.plan import JobSpec
from wloadctl.core.sla import TIMER_LATE, TIMER_NOT_BEFORE, TIMER_RISK, risk_window
from wloadctl.core.states import JobState, SlaTier

S = JobState

TIER_RETRY_FACTOR: dict[SlaTier, float] = {
    SlaTier.CRITICAL: 0.25,
    SlaTier.HIGH: 0.5,
    SlaTier.STANDARD: 1.0,
    SlaTier.LOW: 1.5,
}
"""Retry delays are multiplied by the job's tier factor: urgent work is retried sooner."""


_RETRY_IN = re.compile(r"; retry \d+/\d+ (in (\d+(?:\.\d+)?)s)$")
"""The end of a RETRY_WAIT transition's reason (retry_reason): the delay it waits."""


def retry_reason(why: str, used: int, count: int, delay: float) -> str:
    """The reason journaled with a move to RETRY_WAIT: why the attempt ended, and the retry it waits for."""
    return f"{why}; retry {used}/{count} in {delay:.1f}s"


def retry_due_journaled(transitions: Iterable[tuple]) -> float | None:
    """When a job in RETRY_WAIT becomes READY, by its journaled transitions: the time of its last move to
    RETRY_WAIT plus the delay its reason names (a stopped or crashed run's retry keeps its time). None when
    the journal does not say (the caller's now then).

    Args:
        transitions: the job's (from, to, attempt, ts, executor, exit_code, reason, ...), in order.
    """
    due = None
    for t in transitions:
        if t[1] == S.RETRY_WAIT:
            m = _RETRY_IN.search(t[6] or "")
            due = t[3] + float(m.group(2)) if m else None
    return due


def retry_left(due: float, now: float) -> str:
    """When a job in RETRY_WAIT becomes READY, seen at `now`, as `why` and `status` both say it: "in 5.7s"
    while its delay runs, "due now" once it is over (it becomes READY at its scheduler's next turn, or when a
    scheduler runs the run again).

    Args:
        due: when its delay ends (epoch seconds).
        now: the moment it is seen at.
    """
    left = due - now
    return f"in {left:.1f}s" if left >= 0.05 else "due now"


def retry_reason_at(reason: str, due: float | None, now: float) -> str:
    """A RETRY_WAIT reason (retry_reason) as it stands at `now`: the time left (retry_left) in place of the
    delay it was given when it was journaled, "exit status 1; retry 2/2 in 10.7s" becoming "... in 5.7s" five
    seconds on. The reason as given when it names no delay or `due` is None (the journal does not say).

    Args:
        reason: the reason journaled with the job's move to RETRY_WAIT.
        due: when its delay ends (retry_due_journaled).
        now: the moment it is seen at.
    """
    m = _RETRY_IN.search(reason)
    if m is None or due is None:
        return reason
    return reason[: m.start(1)] + retry_left(due, now)


class Timers:
    """Owns every time the core waits for: retry delays, deadlines, not-before times, and the lateness they cause.

    The engine asks which timers are due and acts on the jobs they name; a timer that no
    longer applies (the job moved on) is skipped when it comes up.
    """

    def __init__(self, seed: int) -> None:
        self.heap: list[tuple[float, int, int]] = []
        """Min-heap of (due time, job, mark): mark is the attempt for a retry, else a TIMER_* code."""
        self.retry_due: dict[int, float] = {}
        """When each job in RETRY_WAIT becomes READY."""
        self.deadline: dict[int, float] = {}
        """Absolute deadline of each job that has one."""
        self.not_before: dict[int, float] = {}
        """Absolute earliest start of each job that has one."""
        self.lateness: dict[int, str] = {}
        """Jobs at risk of, or past, their deadline, with a sentence saying so."""
        self.rng = random.Random(seed)
        """Jitter source (seeded: the core stays deterministic)."""

    def retry_delay(self, spec: JobSpec, tier: int, used: int) -> float:
        """Delay before the retry following attempt number `used` of a job (backoff, tier factor, jitter).

        Args:
            spec: the job's spec (its retry policy).
            tier: the job's SlaTier value.
            used: attempts spent against the policy so far.

        Returns:
            The delay in seconds, within the policy's maximum.
        """
        p = spec.retry
        base = min(p.max_delay, p.delay)
        if used > 1 and p.backoff > 1.0 and 0.0 < base < p.max_delay:
            # Capped before it is computed: backoff ** (used - 1) overflows a float (OverflowError) long before
            # a retry count of 1000 runs out, and the delay stays at max_delay from the step that reaches it.
            steps = math.log(p.max_delay / base, p.backoff)
            base = p.max_delay if used - 1 >= steps else min(p.max_delay, base * p.backoff ** (used - 1))
        base *= TIER_RETRY_FACTOR[SlaTier(tier)]
        if p.jitter:
            base *= 1.0 + self.rng.uniform(-p.jitter, p.jitter)
        return max(0.0, min(base, p.max_delay))

    def wait_retry(self, i: int, due: float, attempt: int) -> None:
        """Job i, now in RETRY_WAIT after `attempt`, becomes READY at `due`."""
        self.retry_due[i] = due
        heapq.heappush(self.heap, (due, i, attempt))

    def shift_retries(self, by: float) -> None:
        """Move every retry wait by `by` seconds: the wall clock jumped, and a delay is a duration.

        Deadlines and not-before times stay: they are instants of the wall clock.
        """
        self.heap = [(due + by, i, mark) if mark >= 0 else (due, i, mark) for due, i, mark in self.heap]
        heapq.heapify(self.heap)
        for i in self.retry_due:
            self.retry_due[i] += by

    def due(self, now: float) -> list[tuple[int, int]]:
        """Take every timer due by `now`: (job, mark) pairs in due order."""
        heap = self.heap
        out: list[tuple[int, int]] = []
        while heap and heap[0][0] <= now:
            _due, i, mark = heapq.heappop(heap)
            out.append((i, mark))
        return out

    def met(self, i: int, now: float, how: str = "finished") -> Flag | None:
        """Job i succeeded (or an operator ended it, `how`): if it was flagged AT_RISK and its deadline has not
        passed, the MET flag that clears it (a job flagged LATE stays so)."""
        text = self.lateness.get(i, "")
        if not text.startswith("AT_RISK") or now > self.deadline.get(i, now):
            return None
        del self.lateness[i]
        return Flag(i, "MET", self.deadline[i], f"MET: {how} before its deadline")

    def flag(self, i: int, late: bool, state: int) -> Flag | None:
        """Job i's deadline is near or passed: the Flag to raise, or None if it was already flagged LATE."""
        level = "LATE" if late else "AT_RISK"
        when = "passed" if late else "is near"
        text = f"{level}: deadline {when} ({S(state).name})"
        if self.lateness.get(i, "").startswith("LATE"):
            return None
        self.lateness[i] = text
        return Flag(i, level, self.deadline[i], text)

    def set_times(self, deadlines: dict[int, float], not_before: dict[int, float], specs: list[JobSpec],
                  add: bool = False) -> None:
        """Take the absolute deadlines and not-before times of jobs (computed by the shell).

        Args:
            deadlines: absolute deadline by job.
            not_before: absolute earliest start by job.
            specs: job specs by index (a job's timeout widens its at-risk window).
            add: add to the times already given instead of replacing them.
        """
        if add:
            self.deadline.update(deadlines)
            self.not_before.update(not_before)
        else:
            self.deadline = dict(deadlines)
            self.not_before = dict(not_before)
        for i, dl in deadlines.items():
            window = risk_window(specs[i].timeout)
            heapq.heappush(self.heap, (dl - window, i, TIMER_RISK))
            heapq.heappush(self.heap, (dl, i, TIMER_LATE))
        for i, t in not_before.items():
            heapq.heappush(self.heap, (t, i, TIMER_NOT_BEFORE))

    def inherit(self, child: int, parent: int, specs: list[JobSpec]) -> None:
        """A job made at run time for `parent` gets its parent's deadline and not-before time."""
        if parent in self.deadline:
            self.set_times({child: self.deadline[parent]}, {}, specs, add=True)
        if parent in self.not_before:
            self.set_times({}, {child: self.not_before[parent]}, specs, add=True)

    def next_due(self, state: bytearray, attempt: array[int]) -> float | None:
        """When the core next needs a TimerFiredEvent, or None (retry timers of jobs that moved on are dropped).

        Args:
            state: JobState value per job.
            attempt: attempts started per job (an int array).
        """
        heap = self.heap
        while heap and heap[0][2] >= 0 and (
                state[heap[0][1]] != C.RW or attempt[heap[0][1]] != heap[0][2]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None
