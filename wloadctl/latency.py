"""Latency histograms kept cheaply in a hot loop: log buckets since start, and the last minute by second.

The scheduler hands each histogram a loop turn's values at once, and each value costs a
logarithm and two increments, so every dispatch and every start can be recorded. The buckets are quarter powers of two
from about 15 microseconds to 1024 seconds; the Prometheus exposition uses every fourth
bound (the powers of two), which fall exactly on bucket bounds.
"""

from __future__ import annotations

import math
from collections import deque

SUB = 4
"""Buckets per doubling."""
LOW = -16
"""The first bucket holds values up to 2**LOW seconds."""
HIGH = 10
"""The last finite bound is 2**HIGH seconds; larger values go to the overflow bucket."""
NB = (HIGH - LOW) * SUB + 2
"""Buckets, the overflow included."""
WINDOW = 60
"""Seconds of the recent window (p50/p99 over the last minute)."""
_BOUNDS = [2.0 ** (LOW + k / SUB) for k in range(NB - 1)] + [math.inf]
_BASE = -LOW * SUB


def bucket_of(v: float) -> int:
    """The bucket index of a value in seconds."""
    if v <= _BOUNDS[0]:
        return 0
    k = math.ceil(math.log2(v) * SUB) + _BASE
    return k if k < NB - 1 else NB - 1


def quantile(counts: dict[int, int] | list[int], q: float) -> float | None:
    """The q-quantile (0..1) of bucketed counts, interpolated inside its bucket; None when empty."""
    items = sorted(counts.items()) if isinstance(counts, dict) else [(k, c) for k, c in enumerate(counts) if c]
    total = sum(c for _k, c in items)
    if not total:
        return None
    rank = q * total
    seen = 0
    for k, c in items:
        if seen + c >= rank:
            lo = _BOUNDS[k - 1] if k > 0 else 0.0
            hi = _BOUNDS[k] if k < NB - 1 else _BOUNDS[NB - 2] * 2
            return lo + (hi - lo) * max(0.0, min(1.0, (rank - seen) / c))
        seen += c
    return _BOUNDS[NB - 2]


class Histogram:
    """One latency's counts: all of them since start (cumulative) and the last minute's, by second."""

    __slots__ = ("count", "counts", "recent", "second", "sum")

    def __init__(self) -> None:
        self.counts = [0] * NB
        """Observations per bucket since start."""
        self.count = 0
        """Observations since start."""
        self.sum = 0.0
        """Sum of the observed values (seconds)."""
        self.recent: deque[tuple[int, list[int]]] = deque()
        """(second, counts per bucket) of the last WINDOW seconds that saw observations, oldest first."""
        self.second = -1
        """The second the newest recent entry counts."""

    def observe(self, v: float, now: float) -> None:
        """Record one value (seconds) observed at `now` (epoch seconds)."""
        self.observe_many((v,), now)

    def observe_many(self, values: list[float] | tuple[float, ...], now: float) -> None:
        """Record values (seconds) observed at `now` (epoch seconds): one call per loop turn, not per value."""
        if not values:
            return
        sec = int(now)
        if sec != self.second:
            self.second = sec
            self.recent.append((sec, [0] * NB))
            self._trim(sec)
        slot = self.recent[-1][1]
        counts, log2, ceil, first, top = self.counts, math.log2, math.ceil, _BOUNDS[0], NB - 1
        total = 0.0
        for v in values:
            if v <= first:
                # Also clocks of two processes: a start reported a hair before its release.
                k = 0
                v = max(v, 0.0)
            else:
                k = ceil(log2(v) * SUB) + _BASE
                if k > top:
                    k = top
            counts[k] += 1
            slot[k] += 1
            total += v
        self.count += len(values)
        self.sum += total

    def _trim(self, sec: int) -> None:
        recent = self.recent
        while recent and recent[0][0] <= sec - WINDOW:
            recent.popleft()

    def window(self, now: float) -> dict[int, int]:
        """Bucket counts of the last minute."""
        self._trim(int(now))
        out: dict[int, int] = {}
        for _s, slot in list(self.recent):
            for k, c in enumerate(slot):
                if c:
                    out[k] = out.get(k, 0) + c
        return out

    def summary(self, now: float) -> dict[str, float | int | None]:
        """{"n", "p50", "p99"} of the last minute (seconds, None when nothing was observed)."""
        w = self.window(now)
        p50, p99 = quantile(w, 0.5), quantile(w, 0.99)
        return {"n": sum(w.values()), "p50": None if p50 is None else round(p50, 6),
                "p99": None if p99 is None else round(p99, 6)}

    def prometheus_buckets(self) -> list[tuple[str, int]]:
        """Cumulative (le, count) pairs at the powers of two, ending with +Inf (Prometheus exposition)."""
        out: list[tuple[str, int]] = []
        acc = 0
        counts = list(self.counts)
        for k in range(NB - 1):
            acc += counts[k]
            if k % SUB == 0:
                out.append((_le(_BOUNDS[k]), acc))
        out.append(("+Inf", acc + counts[NB - 1]))
        return out


def _le(v: float) -> str:
    """A bucket bound as Prometheus shows it."""
    return repr(float(v))


class Rate:
    """Events per second over the last few seconds, from a counter that only grows."""

    __slots__ = ("samples", "span")

    def __init__(self, span: float = 10.0) -> None:
        self.samples: deque[tuple[float, int]] = deque()
        """(time, counter value) readings, oldest first."""
        self.span = span
        """Seconds the rate is taken over: short enough to show a queue filling now."""

    def update(self, now: float, value: int) -> float:
        """Take a reading of the counter; return the rate over the last `span` seconds."""
        s = self.samples
        s.append((now, value))
        while len(s) > 2 and s[1][0] <= now - self.span:
            s.popleft()
        t0, v0 = s[0]
        return (value - v0) / (now - t0) if now > t0 else 0.0
