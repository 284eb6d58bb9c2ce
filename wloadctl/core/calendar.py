"""Business calendars and cron triggers: when the next runs of a plan start, and for which business date."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from wloadctl.core.plan import Schedule
from wloadctl.core.sla import host_zone

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
"""Weekday names as written in plans (index = Python's weekday())."""


def is_business_day(day: dt.date, schedule: Schedule) -> bool:
    """Whether `day` is a business day of the schedule's calendar."""
    return day.weekday() in schedule.business_days and day.isoformat() not in schedule.holidays


CRON_FIELDS = "minute hour day-of-month month day-of-week"
"""The five fields of a plan's cron, in order."""
HORIZON_YEARS = 28
"""How far ahead a schedule's fires are looked for, by `validate` and `trigger` alike: in 28 years (between 1901
and 2099, where every fourth year is a leap year) each date of the year falls on each weekday, so a cron that ever
fires on a business day does so within them (the 29th of February on a Saturday: 21 years after 2027's)."""
HORIZON = dt.timedelta(days=HORIZON_YEARS * 365 + HORIZON_YEARS // 4)
"""HORIZON_YEARS as a span of days (10,227)."""
_CYCLE_START = dt.datetime(2001, 1, 1)
_CYCLE_END = _CYCLE_START + HORIZON
"""One horizon of dates (2001 to 2028) in which each date of the year falls on each weekday."""


def valid_cron(expr: str) -> bool:
    """Whether a cron expression parses and has five fields (croniter reads a sixth as seconds)."""
    return len(expr.split()) == 5 and bool(croniter.is_valid(expr))


def fires_on_business_days(schedule: Schedule) -> bool:
    """Whether the schedule's cron ever falls on one of its business days (holidays aside).

    Which days a cron fires on does not depend on its minute and hour, and every
    date falls on every weekday within 28 years: one such cycle, day by day, decides.

    Args:
        schedule: a schedule whose cron is valid.
    """
    if not schedule.business_days:
        return False
    days = croniter("0 0 " + " ".join(schedule.cron.split()[2:]), _CYCLE_START - dt.timedelta(minutes=1))
    try:
        while True:
            when = days.get_next(dt.datetime)
            if when >= _CYCLE_END:
                return False
            if when.weekday() in schedule.business_days:
                return True
    except CroniterBadDateError:
        return False  # no date matches at all (the 31st of February)


def next_triggers(schedule: Schedule, after: dt.datetime, count: int = 1, tz: str | None = None,
                  horizon_days: int = HORIZON.days) -> list[dt.datetime]:
    """The next `count` trigger times strictly after `after` that fall on business days.

    Args:
        schedule: cron expression and calendar.
        after: start of the search (aware, or naive in `tz`).
        count: how many times to return.
        tz: the plan's time zone (None: the host's local zone).
        horizon_days: stop searching this far ahead (HORIZON, the span `validate` checks, by default).

    Returns:
        Aware datetimes in the plan's zone, in order: every trigger within the horizon, up to `count` of them
        (none when the schedule fires on no business day in it).
    """
    zone = ZoneInfo(tz) if tz else host_zone()
    start = after if after.tzinfo else after.replace(tzinfo=zone)
    start = start.astimezone(zone)
    it = croniter(schedule.cron, start)
    out: list[dt.datetime] = []
    limit = start + dt.timedelta(days=horizon_days)
    while len(out) < count:
        try:
            when = it.get_next(dt.datetime)
        except CroniterBadDateError:
            break  # an expression no date matches (the 30th of February): it never fires
        if when > limit:
            break
        if not is_business_day(when.date(), schedule):
            # The rest of the day fires on no business day either: go on from its last minute, so a cron of
            # every minute crosses weekends and holidays a day at a time, not 1,440 steps a day.
            it = croniter(schedule.cron, last_minute_of(when))
            continue
        if not repeated_wall_time(when):
            out.append(when)
    return out


def last_minute_of(when: dt.datetime) -> dt.datetime:
    """The last minute of `when`'s calendar day in its zone, reckoned back from the next day's start: where the
    clocks go back at midnight (Santiago, Beirut) the day's 23:00-23:59 comes twice and this is its second pass,
    so a search that goes on from it never meets that day again (from the first pass it would, for ever)."""
    zone = when.tzinfo
    midnight = dt.datetime.combine(when.date() + dt.timedelta(days=1), dt.time(), zone)
    last = (midnight.astimezone(dt.UTC) - dt.timedelta(minutes=1)).astimezone(zone)
    # A zone whose clocks jump over midnight itself has no such minute on this date: go on from `when`, a fire
    # at a time (slower, never back).
    return last if last.date() == when.date() and last > when else when


def due_fire(schedule: Schedule, now: dt.datetime, last: dt.datetime | None,
             tz: str | None = None) -> tuple[dt.datetime | None, list[dt.datetime]]:
    """The fire a trigger waits for next, and the fires that passed while its last run (at `last`) ran.

    After a run, the trigger never fires at its time again (a clock set back while it ran): what follows
    `last` is due. Fires already past are made up for by one run, of the latest, at once: (the latest of
    them, all of them). Otherwise (the next fire, []), or (None, []) when the schedule fires no more.
    """
    nxt = next_triggers(schedule, now if last is None else last, 1, tz)
    missed: list[dt.datetime] = []
    while last is not None and nxt and nxt[0] <= now:
        missed.append(nxt[0])
        nxt = next_triggers(schedule, nxt[0], 1, tz)
    if missed:
        return missed[-1], missed
    return (nxt[0] if nxt else None), []


def repeated_wall_time(when: dt.datetime) -> bool:
    """Whether `when` is the second pass of a wall-clock time the clocks going back repeat (01:30 EST after
    01:30 EDT). A cron fires once at each wall-clock time, at its first pass, as cron does: a schedule never
    starts a second run of a business date in the repeated hour (the clocks going forward are another matter:
    a time they skip fires at the hour after it, as croniter gives it)."""
    return bool(when.fold) and when.replace(fold=0).utcoffset() != when.utcoffset()


def business_date_of(when: dt.datetime) -> str:
    """The business date a run triggered at `when` is for (the trigger's calendar day)."""
    return when.date().isoformat()
