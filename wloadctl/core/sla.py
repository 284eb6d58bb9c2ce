"""SLA policy of the core: slots reserved per tier, deadlines and not-before times as absolute instants."""

from __future__ import annotations

import datetime as dt
import functools
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from wloadctl.core.durations import parse_duration
from wloadctl.core.states import SlaTier

if TYPE_CHECKING:
    from wloadctl.core.plan import JobSpec

DEFAULT_RESERVE: dict[SlaTier, float] = {SlaTier.CRITICAL: 0.10, SlaTier.HIGH: 0.05}
"""Share of all slots kept for a tier and the tiers above it, so bulk low work cannot starve urgent work."""

RISK_WINDOW = 300.0
"""A job not finished this many seconds (or its timeout, if longer) before its deadline is AT_RISK."""


def risk_window(timeout: float | None) -> float:
    """How long before its deadline an unfinished job is AT_RISK: RISK_WINDOW, or its timeout if longer
    (a job that may run that long cannot be left to start later)."""
    return max(RISK_WINDOW, timeout or 0.0)


TIMER_RISK, TIMER_LATE, TIMER_NOT_BEFORE = -1, -2, -3
"""Markers in the core's timer heap (a non-negative marker is a retry of that attempt)."""

_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$", re.ASCII)


class TierSlots:
    """Which tier may take the next free slot, given the reserved shares and what each tier uses now."""

    def __init__(self, slots: int, reserve: dict[SlaTier, float] | None = None,
                 tiers: bytes | bytearray | None = None) -> None:
        """Slots of a run and what each tier keeps of them.

        Args:
            slots: the run's slots.
            reserve: share of the slots kept per tier (DEFAULT_RESERVE when None).
            tiers: the tier of every job of the plan, or None for a plan that may hold any tier. A tier
                no job has reserves nothing: with no urgent work to protect, a reserved slot would only
                stand idle (one slot in ten of a plan all of one tier).
        """
        self.reserve = dict(DEFAULT_RESERVE if reserve is None else reserve)
        """Share of slots reserved per tier."""
        # `in` over a bytearray is one memchr per tier, not a pass of Python over every job.
        self.present = [tiers is None or t in tiers for t in range(len(SlaTier))]
        """Whether the plan has a job of each tier (only those tiers keep their reserve)."""
        self.in_use = [0] * len(SlaTier)
        """Slots held now by each tier."""
        self.reserved = [0] * len(SlaTier)
        """Slots reserved for each tier (floor of share x slots)."""
        self.slots = slots
        """The run's slots."""
        self.resize(slots)

    def resize(self, slots: int) -> None:
        """Recompute the reserved counts for a new total of slots."""
        self.slots = slots
        self.reserved = [int(self.reserve.get(SlaTier(t), 0.0) * slots) if self.present[t] else 0
                         for t in range(len(SlaTier))]
        self.total_reserved = sum(self.reserved)
        """While more slots than this are free, no reservation can bind (a fast path)."""

    def admit(self, tier: int) -> None:
        """A job of `tier` joined the plan (an instance of a loop): the tier keeps its reserve from now on."""
        if not self.present[tier]:
            self.present[tier] = True
            self.resize(self.slots)

    def may_start(self, tier: int, free: int) -> bool:
        """Whether a job of `tier` may take one of `free` slots without eating a more urgent tier's reserve."""
        need = 0
        for u in range(tier):
            need += max(0, self.reserved[u] - self.in_use[u])
        return free - 1 >= need


def clock_time(text: str) -> tuple[int, int, int]:
    """Parse `HH:MM[:SS]`.

    Raises:
        ValueError: not a time of day.
    """
    m = _CLOCK.match(text.strip())
    if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59 or int(m.group(3) or 0) > 59:
        raise ValueError(f"'{text}' is not a time of day (HH:MM or HH:MM:SS)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def run_instants(specs: Iterable[JobSpec], business_date: str, run_started: float, tz: str | None,
                 deadlines: bool = True) -> tuple[dict[int, float], dict[int, float]]:
    """The absolute deadlines and not-before times of jobs (by their index in `specs`) for a run.

    Args:
        specs: the jobs' specs, by index.
        business_date: the run's business date.
        run_started: epoch seconds of the run's start.
        tz: IANA zone of the plan, None for local time.
        deadlines: work out the deadlines too (else only the not-before times; the deadlines come back empty).
    """
    dls: dict[int, float] = {}
    nbs: dict[int, float] = {}
    for i, spec in enumerate(specs):
        if deadlines and spec.deadline:
            dls[i] = instant(spec.deadline, business_date, run_started, tz)
        if spec.not_before:
            nbs[i] = instant(spec.not_before, business_date, run_started, tz, roll=False)
    return dls, nbs


def instant(text: str, business_date: str, run_started: float, tz: str | None, roll: bool = True) -> float:
    """An absolute time for a deadline or not-before: `HH:MM[:SS]` on the business date, or `+duration` from the start.

    Times of day are read on the business date's own clock: the calendar day the run started
    on (in the plan's zone) stands for the business date, so yesterday's rerun or a replay of a
    sample's fixed date is judged as if it had started on its business date at the same time of
    day. For a deadline (`roll`), a time of day already past when the run started means the next
    day (a batch night that crosses midnight), so a run is never LATE from its start. A not-before
    time (`roll` False) already past at the start has been reached: its job may start at once (a
    run started at 02:59 starts a job not before 00:00 at once). `HH:MM+1d` names the day after
    explicitly, as a job not before 01:00 on a run started at 22:00 needs.

    Args:
        text: `HH:MM[:SS]`, `+1h30m`, or `HH:MM+1d` (the day after the business date).
        business_date: `YYYY-MM-DD` (checked; the times of day are laid on the start's day).
        run_started: epoch seconds of the run's start.
        tz: IANA zone of the plan, None for local time.
        roll: whether a time of day already past at the start means the next day's.

    Returns:
        Epoch seconds.
    """
    text = text.strip()
    if text.startswith("+"):
        return run_started + parse_duration(text[1:])
    days = 0
    if "+" in text:
        text, extra = text.split("+", 1)
        days = int(parse_duration(extra) // 86400)
    h, m, s = clock_time(text)
    dt.date.fromisoformat(business_date)  # a bad date fails here as before
    zone = ZoneInfo(tz) if tz else host_zone()
    # The run's start day in the plan's zone carries the business date's clock.
    d = dt.datetime.fromtimestamp(run_started, zone).date() + dt.timedelta(days=days)
    when = wall_instant(d, h, m, s, zone, after=run_started if roll else None)
    if roll and when < run_started:
        # Past at the start: the next occurrence (wall clock, so a DST change keeps HH:MM).
        when = wall_instant(d + dt.timedelta(days=1), h, m, s, zone)
    return when


def host_zone() -> dt.tzinfo:
    """The host's time zone with its rules ($TZ, else /etc/localtime): a plan without `timezone` fires at its
    times of day on the host's wall clock, summer and winter. (Only when neither can be read: the offset now.)"""
    return _host_zone(os.environ.get("TZ", "").lstrip(":"))


@functools.lru_cache(maxsize=4)
def _host_zone(key: str) -> dt.tzinfo:
    # Read once per $TZ: a plan's times are laid job by job, a million of them at the start of a big run.
    try:
        if key:
            return ZoneInfo(key)
        with open("/etc/localtime", "rb") as f:
            return ZoneInfo.from_file(f, key="localtime")
    except (OSError, ValueError, ZoneInfoNotFoundError):
        return dt.datetime.now().astimezone().tzinfo or dt.UTC


def wall_instant(d: dt.date, h: int, m: int, s: int, zone: dt.tzinfo, after: float | None = None) -> float:
    """Epoch seconds at which the wall clock of `zone` shows h:m:s on day `d`.

    A time the clocks skip going forward is the moment they jump past it (01:30 on the night London goes
    from 01:00 to 02:00 is 02:00 BST), as a trigger fires it. A time they repeat going back is its first
    pass, or its second when `after` (a deadline's run start) falls between the two: a run started in the
    repeated hour is not given a deadline a day later than the wall clock shows it.
    """
    first = dt.datetime(d.year, d.month, d.day, h, m, s, tzinfo=zone)
    t0, t1 = first.timestamp(), first.replace(fold=1).timestamp()
    if t0 < t1:
        return t1 if after is not None and t0 < after <= t1 else t0
    if t0 == t1:
        return t0
    # Skipped (fold 0 reads it with the offset before the jump: the later instant): the jump is the first
    # instant whose wall clock is past it.
    lo, hi = t1, t0
    while hi - lo > 0.5:
        mid = (lo + hi) / 2
        w = dt.datetime.fromtimestamp(mid, zone)
        if (w.date(), w.hour, w.minute, w.second) >= (d, h, m, s):
            hi = mid
        else:
            lo = mid
    return float(round(hi))


def business_date_at(when: float, tz: str | None) -> str:
    """The business date of a run started at `when` (seconds since the epoch) and not given one: that day in
    the plan's time zone `tz` (None: the host's local zone), where its times of day are laid, and the day its
    trigger would have named (core.calendar.business_date_of)."""
    return dt.datetime.fromtimestamp(when, ZoneInfo(tz) if tz else None).date().isoformat()


_DUE = re.compile(r"; due at (\d+(?:\.\d+)?)$")
"""The deadline a journaled AT_RISK or LATE alert names, epoch seconds (with_due)."""


def with_due(text: str, deadline: float) -> str:
    """An alert's text as journaled: the deadline it is about at its end."""
    return f"{text}; due at {deadline:.3f}"


def standing_flags(alerts: Iterable[tuple], now: float | None = None) -> dict[str, str]:
    """Jobs flagged AT_RISK or LATE, from a run's alerts in order ((ts, job, tier, state, attempts, reason, ...)
    as the journal keeps them): job -> its latest flag; one flagged AT_RISK that then finished before its
    deadline (MET) has none.

    `now` (a run no scheduler runs, read at that time): a job still AT_RISK whose deadline has passed since is
    LATE, as its scheduler would have flagged it.
    """
    out: dict[str, str] = {}
    due: dict[str, float] = {}
    for alert in alerts:
        job, state = alert[1], alert[3]
        if state in ("AT_RISK", "LATE"):
            out[job] = state
            m = _DUE.search(str(alert[5] or "")) if len(alert) > 5 else None
            if m is not None:
                due[job] = float(m[1])
        elif state == "MET":
            out.pop(job, None)
    if now is not None:
        for job, flag in out.items():
            if flag == "AT_RISK" and due.get(job, now) < now:
                out[job] = "LATE"
    return out


def flag_lines(flags: dict[str, str]) -> list[str]:
    """`LATE (n): jobs` and `AT_RISK (n): jobs` of a run's SLA flags (job -> flag), those it has: what `status`
    and the end of `run` print."""
    out = []
    for flag in ("LATE", "AT_RISK"):
        jobs = sorted(j for j, f in flags.items() if f == flag)
        if jobs:
            out.append(f"{flag} ({len(jobs)}): {', '.join(jobs[:20])}{' ...' if len(jobs) > 20 else ''}")
    return out
