"""Time travel: a run's jobs as they stood at any moment, rebuilt from the journal's turns (`status --at`).

Every transition is journaled with its time, so replaying the turns up to a moment gives
each job's state, attempt, exit status and reason then. The console's timeline scrubs with
the same replay (wloadctl.client.RunClient.timeline gives the moments to step through).
"""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from wloadctl.core.durations import MAX_DURATION
from wloadctl.core.sla import host_zone, wall_instant
from wloadctl.core.states import JobState
from wloadctl.errors import UsageError
from wloadctl.whyread import retry_now

if TYPE_CHECKING:
    from wloadctl.store import RunRow, Store

# re.ASCII: `\d` matches other scripts' digits too (Arabic-Indic, fullwidth), which int() and float() read
# as numbers; a moment is written in ASCII digits, as a plan's times are.
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$", re.ASCII)
_AGO = re.compile(r"^-\s*(\d+(?:\.\d+)?\s*[smhd]?)+$", re.ASCII)
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)", re.ASCII)
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_when(text: str, now: float | None = None, tz: str | None = None) -> float:
    """A past moment given as a clock time (HH:MM[:SS]), an ISO timestamp, or an offset back from now (-15m, -1h30m).

    A clock time is the latest such moment that is not after now: today's, or yesterday's when today's is still
    to come. It, and a timestamp without a zone, are read in `tz`, the zone the run's times are shown in.

    Args:
        text: the moment as the operator wrote it.
        now: the present (epoch seconds; None: the system clock).
        tz: the run's plan's time zone (None: the host's local zone).

    Returns:
        The moment in epoch seconds.

    Raises:
        UsageError: none of those forms, or a moment after now (the journal knows nothing of it yet).
    """
    now = time.time() if now is None else now
    zone = ZoneInfo(tz) if tz else None
    t = text.strip()
    if not t.isascii() and any(c.isdigit() for c in t):
        raise UsageError(f"--at {_shown(text)}: digits other than ASCII 0-9 (write e.g. 23:40, "
                         "2026-12-01T23:40:00 or -15m)")
    if _AGO.match(t):
        back = sum(float(n) * _UNIT[u] for n, u in _PART.findall(t[1:]))
        if not back <= MAX_DURATION:  # an offset of a few hundred digits is infinite
            raise UsageError(f"--at {_shown(text)}: at most 100 years back (-36500d)")
        return _on_clock(now - back, text)
    m = _CLOCK.match(t)
    if m:
        h, mi, se = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        if h > 23 or mi > 59 or se > 59:
            raise UsageError(f"--at {_shown(text)}: no such clock time")
        return latest_clock_time(h, mi, se, now, zone or host_zone())
    try:
        moment = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--at {_shown(text)}: expected a clock time (23:40), an ISO timestamp "
                         "(2026-12-01T23:40:00) or an offset back from now (-15m)") from None
    try:
        when = _on_clock((moment if moment.tzinfo else moment.replace(tzinfo=zone)).timestamp(), text)
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"--at {_shown(text)}: no such moment on this system's clock") from None
    if when > now:
        raise UsageError(f"--at {_shown(text)}: that is in the future (it is {iso(now, tz)} now); "
                         "give a moment of the past")
    return when


def latest_clock_time(h: int, mi: int, se: int, now: float, zone: dt.tzinfo) -> float:
    """The latest moment not after `now` at which the wall clock of `zone` shows h:mi:se: today's or yesterday's,
    the second pass of a time the clocks going back repeat when that one has come, and for a time the clocks skip
    going forward the moment they jump past it (as deadlines and triggers read it)."""
    today = dt.datetime.fromtimestamp(now, zone).date()
    for ago in (0, 1):
        day = today - dt.timedelta(days=ago)
        base = dt.datetime.combine(day, dt.time(h, mi, se), zone)
        first, second = base.timestamp(), base.replace(fold=1).timestamp()
        passes = [second, first] if first < second else [wall_instant(day, h, mi, se, zone)]
        for when in passes:
            if when <= now:
                return when
    return when


def _on_clock(when: float, text: str) -> float:
    """`when`, once sure it is a local time this system can show (it is shown as one)."""
    try:
        dt.datetime.fromtimestamp(when)
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"--at {_shown(text)}: no such moment on this system's clock") from None
    return when


def _shown(text: str) -> str:
    """An --at value as messages quote it: a long one is cut, so the message stays one readable line."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}...({len(text)} characters)"


def iso(ts: float, tz: str | None = None) -> str:
    """An epoch second in ISO format to the second, in zone `tz` (None: the host's local time)."""
    when = dt.datetime.fromtimestamp(ts, ZoneInfo(tz) if tz else None)
    return (when if tz else when.astimezone()).isoformat(timespec="seconds")


def status_at(store: Store, run: RunRow, when: float, ids: list[str], tz: str | None = None) -> dict[str, Any]:
    """The run's jobs as they stood at `when`: counts per state and every job's row, as `status --json` gives.

    Args:
        store: the run's journal.
        run: the run.
        when: the moment (epoch seconds).
        ids: job ids by index.
        tz: the plan's time zone, `at_iso` is written in (None: the host's local zone).
    """
    cols = store.columns_at(run.id, when)
    cols.grow(len(ids))
    names = [s.name for s in JobState]
    counts: dict[str, int] = {}
    jobs = []
    for i, jid in enumerate(ids):
        _i, _j, state, attempt, _ex, code, started, ended, reason = cols.row(i, jid)
        name = names[state]
        counts[name] = counts.get(name, 0) + 1
        jobs.append({"job": jid, "state": name, "attempt": attempt, "exit_code": code, "started": started,
                     "ended": ended, "reason": reason})
    # (a job waiting for its retry at `when` says the time it had left then: whyread.retry_now)
    retry_now(store, run.id, dict(enumerate(jobs)), when)
    before = when < run.started
    after_end = run.ended is not None and when > run.ended
    return {"run": run.run_id, "plan": run.plan_name, "business_date": run.business_date, "at": round(when, 3),
            "at_iso": iso(when, tz), "timezone": tz, "started": run.started, "ended": run.ended,
            "note": "before the run started" if before else ("after the run ended" if after_end else ""),
            "counts": counts, "total": len(ids), "jobs": jobs}


def timeline(store: Store, run: RunRow) -> list[float]:
    """The distinct moments at which some job changed state, oldest first (the steps of a scrub)."""
    # Exact times, not rounded ones: replaying up to a moment must include the events at it.
    return sorted({r[5] for r in store.transitions_since(run.id, 0, limit=10_000_000)})
