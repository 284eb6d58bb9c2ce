"""Business calendars and cron triggers."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from wloadctl.core import calendar
from wloadctl.core.calendar import (
    HORIZON,
    due_fire,
    fires_on_business_days,
    is_business_day,
    next_triggers,
    valid_cron,
)
from wloadctl.core.plan import Schedule


def test_triggers_skip_weekends_and_holidays_in_the_plans_zone() -> None:
    s = Schedule("30 18 * * *", holidays=("2026-12-25",))
    got = next_triggers(s, dt.datetime(2026, 12, 24, 19, 0), 3, "Europe/Paris")
    assert [t.isoformat() for t in got] == [
        "2026-12-28T18:30:00+01:00", "2026-12-29T18:30:00+01:00", "2026-12-30T18:30:00+01:00"]


def test_custom_business_days() -> None:
    s = Schedule("0 6 * * *", business_days=(5,))  # Saturdays only
    got = next_triggers(s, dt.datetime(2026, 11, 29, 0, 0), 2, "UTC")
    assert all(t.weekday() == 5 for t in got) and len(got) == 2
    assert not is_business_day(dt.date(2026, 11, 30), s)


def test_a_calendar_without_business_days_ends_the_search() -> None:
    assert next_triggers(Schedule("0 * * * *", business_days=()), dt.datetime(2026, 1, 1), 1, "UTC",
                         horizon_days=3) == []


def test_a_cron_no_date_matches_has_no_triggers() -> None:
    # The 30th of February: valid cron, never a date (croniter gives up on it with an error of its own)
    assert valid_cron("0 0 30 2 *")
    assert next_triggers(Schedule("0 0 30 2 *"), dt.datetime(2026, 1, 1), 2, "UTC") == []


def test_cron_validation() -> None:
    assert valid_cron("30 18 * * 1-5") and not valid_cron("61 25 * * *")


def test_a_cron_of_six_fields_is_not_valid_though_croniter_reads_it_as_seconds() -> None:
    assert not valid_cron("0 0 * * * *") and not valid_cron("@daily") and valid_cron("0 0 * * *")


def test_whether_a_cron_ever_falls_on_a_business_day_is_known_without_a_clock() -> None:
    assert not fires_on_business_days(Schedule("0 0 31 2 *"))
    assert not fires_on_business_days(Schedule("* * * * sat,sun"))
    assert not fires_on_business_days(Schedule("0 6 * * *", business_days=()))
    assert fires_on_business_days(Schedule("0 0 29 2 *", business_days=(0,)))  # a Monday in 2016
    assert fires_on_business_days(Schedule("0 0 13 * 6", business_days=(4,)))  # the 13th or Saturdays


def test_triggers_are_looked_for_as_far_ahead_as_validate_checks() -> None:
    # Given the 29th of February on Saturdays, which validate accepts: after 2027 it falls on one in 2048 only
    sat = Schedule("0 0 29 2 *", business_days=(5,))
    assert fires_on_business_days(sat)
    # Then the trigger finds it, 21 years ahead, and none after it within the horizon (2076 is past it)
    got = next_triggers(sat, dt.datetime(2027, 1, 1), 2, "UTC")
    assert [t.isoformat() for t in got] == ["2048-02-29T00:00:00+00:00"]
    # And on weekdays every 29th of February in those years is listed, in order (2040's was missed at 10 years)
    week = next_triggers(Schedule("0 0 29 2 *"), dt.datetime(2027, 1, 1), 99, "UTC")
    assert [t.year for t in week] == [2028, 2036, 2040, 2044, 2052]
    assert HORIZON == dt.timedelta(days=10_227)  # 28 years of 365 days and 7 leap days


def test_a_cron_of_every_minute_crosses_days_off_a_day_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # Saturdays only, and every Saturday of a year a holiday: the first trigger is a year and more away
    saturdays = tuple((dt.date(2027, 1, 2) + dt.timedelta(weeks=k)).isoformat() for k in range(53))
    s = Schedule("* * * * *", business_days=(5,), holidays=saturdays)
    days: list[dt.date] = []
    judge = calendar.is_business_day

    def counted(day: dt.date, schedule: Schedule) -> bool:
        days.append(day)
        return judge(day, schedule)

    monkeypatch.setattr(calendar, "is_business_day", counted)
    got = next_triggers(s, dt.datetime(2027, 1, 1), 2, "UTC")
    assert [t.isoformat() for t in got] == ["2028-01-08T00:00:00+00:00", "2028-01-08T00:01:00+00:00"]
    assert len(days) < 400  # (minute by minute: 530,000 steps, about 40 s)


def test_a_plan_without_a_zone_fires_on_the_hosts_wall_clock_across_a_clock_change(monkeypatch) -> None:
    # Given a host in New York, in winter (EST), and a plan with no `timezone`
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        s = Schedule("30 18 * * 1-5")
        # When its next fires are asked from a summer Friday night and from a winter one
        summer = next_triggers(s, dt.datetime(2027, 7, 10, 3, 0, tzinfo=dt.UTC), 1)
        winter = next_triggers(s, dt.datetime(2027, 11, 6, 3, 0, tzinfo=dt.UTC), 1)
        # Then each is Monday 18:30 on the host's wall clock: EDT in July, EST in November
        assert [t.isoformat() for t in summer + winter] == ["2027-07-12T18:30:00-04:00", "2027-11-08T18:30:00-05:00"]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_fires_that_came_while_the_last_run_ran_are_made_up_for_by_one_run_of_the_latest() -> None:
    daily = Schedule("0 18 * * *", business_days=(0, 1, 2, 3, 4, 5, 6))
    utc = dt.UTC
    last = dt.datetime(2027, 3, 1, 18, 0, tzinfo=utc)
    # A run that ended before the next fire: that fire is waited for
    assert due_fire(daily, dt.datetime(2027, 3, 1, 23, 0, tzinfo=utc), last, "UTC") == (
        dt.datetime(2027, 3, 2, 18, 0, tzinfo=utc), [])
    # One that ran past two fires: the latest runs at once, and both are named
    when, missed = due_fire(daily, dt.datetime(2027, 3, 3, 19, 0, tzinfo=utc), last, "UTC")
    assert when == dt.datetime(2027, 3, 3, 18, 0, tzinfo=utc)
    assert [t.day for t in missed] == [2, 3]
    # A clock set back while it ran: its own fire is not run again
    assert due_fire(daily, dt.datetime(2027, 3, 1, 17, 0, tzinfo=utc), last, "UTC")[0] == (
        dt.datetime(2027, 3, 2, 18, 0, tzinfo=utc))
    # And a trigger just started makes up for nothing
    assert due_fire(daily, dt.datetime(2027, 3, 3, 19, 0, tzinfo=utc), None, "UTC") == (
        dt.datetime(2027, 3, 4, 18, 0, tzinfo=utc), [])


def test_a_day_off_whose_last_hour_comes_twice_is_crossed_once() -> None:
    # Santiago's clocks go back at midnight: Saturday 2027-04-03 has 23:00-23:59 twice. Going on from the first
    # pass of its last minute met its second pass, again a day off, for ever (`trigger` hung at 100 % CPU).
    s = Schedule("30 * * * *")
    got = next_triggers(s, dt.datetime(2027, 4, 2, 22, 0), 3, "America/Santiago")
    assert [t.isoformat() for t in got] == [
        "2027-04-02T22:30:00-03:00", "2027-04-02T23:30:00-03:00", "2027-04-05T00:30:00-04:00"]
    due, missed = due_fire(Schedule("0 23 * * *"), dt.datetime(2027, 4, 3, 3, 0, tzinfo=dt.UTC), None,
                           "America/Santiago")
    assert due is not None and due.isoformat() == "2027-04-05T23:00:00-04:00" and missed == []
