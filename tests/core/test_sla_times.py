"""Deadlines and not-before times laid on the business date's own clock."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.conftest import make_plan
from wloadctl.core.commands import Flag
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import (
    JobExitedEvent,
    JobsFinishedEvent,
    JobStartedEvent,
    RunStartedEvent,
    TimerFiredEvent,
)
from wloadctl.core.sla import RISK_WINDOW, instant

UTC = dt.UTC


def at(y: int, mo: int, d: int, h: int, mi: int = 0) -> float:
    return dt.datetime(y, mo, d, h, mi, tzinfo=UTC).timestamp()


def test_a_time_of_day_ahead_of_the_start_is_that_time_on_the_start_day() -> None:
    assert instant("19:00", "2026-12-01", at(2026, 12, 1, 10), "UTC") == at(2026, 12, 1, 19)


def test_a_run_started_after_the_time_of_day_is_not_late_from_the_start() -> None:
    # The bank sample's 19:00 deadline on a run started at 22:10: the next evening, not LATE at once.
    started = at(2026, 12, 1, 22, 10)
    assert instant("19:00", "2026-12-01", started, "UTC") == at(2026, 12, 2, 19)
    assert instant("19:00", "2026-12-01", started, "UTC") > started


def test_a_run_for_another_business_date_keeps_the_times_of_day_of_the_day_it_runs() -> None:
    # A replay of 2024-03-29 (the bank sample's BUSINESS_DATE) started this morning.
    started = at(2026, 12, 1, 9)
    assert instant("19:00", "2024-03-29", started, "UTC") == at(2026, 12, 1, 19)
    assert instant("06:00+1d", "2024-03-29", started, "UTC") == at(2026, 12, 2, 6)


def test_relative_deadlines_count_from_the_start_and_zones_apply() -> None:
    started = at(2024, 3, 29, 20)
    assert instant("+4h", "2024-03-29", started, "UTC") == started + 4 * 3600
    # New York is UTC-4 on 29 March 2024: 18:00 there is 22:00 UTC, ahead of the start.
    assert instant("18:00", "2024-03-29", started, "America/New_York") == at(2024, 3, 29, 22)


def test_every_clock_deadline_lies_after_the_start_at_any_hour() -> None:
    for hour in range(24):
        started = at(2026, 12, 1, hour, 30)
        for text in ("00:00", "06:00", "19:00", "23:59", "23:30+1d"):
            assert instant(text, "2026-12-01", started, "Europe/London") >= started


def test_a_not_before_time_reached_before_the_start_lets_the_job_start_at_once() -> None:
    # The tutorial's `not_before: "00:00"` on a run started at 02:59, or at 23:00: reached, not tomorrow's midnight
    for hour in (2, 23):
        started = at(2026, 12, 6, hour, 59)
        assert instant("00:00", "2026-12-06", started, "UTC", roll=False) == at(2026, 12, 6, 0)
    assert instant("18:00", "2026-12-06", at(2026, 12, 6, 19), "UTC", roll=False) == at(2026, 12, 6, 18)
    # A deadline at the same time still means the next one: a run is never LATE from its start
    assert instant("00:00", "2026-12-06", at(2026, 12, 6, 2, 59), "UTC") == at(2026, 12, 7, 0)


def test_a_not_before_time_after_midnight_is_written_for_the_next_day() -> None:
    # A run started at 22:00 keeps a job not before 01:00+1d until after midnight
    assert instant("01:00+1d", "2026-12-06", at(2026, 12, 6, 22), "UTC", roll=False) == at(2026, 12, 7, 1)
    # Ahead of the start on the same day: that time
    assert instant("23:30", "2026-12-06", at(2026, 12, 6, 8), "UTC", roll=False) == at(2026, 12, 6, 23, 30)


@pytest.mark.parametrize("batched", [True, False])
def test_a_job_at_risk_that_finishes_before_its_deadline_is_flagged_met_and_one_late_stays_late(
        batched: bool) -> None:
    # Given two jobs due at t=1000, at risk from 700 (RISK_WINDOW before it)
    core = SchedulerCore(make_plan({"a": {}, "b": {}}), slots=2)
    core.set_times({0: 1000.0, 1: 1000.0}, {})
    core.handle(RunStartedEvent(0.0))
    for i in (0, 1):
        core.handle(JobStartedEvent(i, 1, 0, 100 + i, 1.0))
    risk = [c for c in core.handle(TimerFiredEvent(1000.0 - RISK_WINDOW)) if isinstance(c, Flag)]
    assert sorted((f.job, f.level) for f in risk) == [(0, "AT_RISK"), (1, "AT_RISK")]

    def end(i: int, now: float) -> list:
        ev = JobsFinishedEvent(((i, 1, 0, 0),), now) if batched else JobExitedEvent(i, 1, 0, 0, now)
        return [c for c in core.handle(ev) if isinstance(c, Flag)]

    # When one finishes in time, then it is MET and no longer at risk
    met = end(0, 900.0)
    assert [(f.job, f.level) for f in met] == [(0, "MET")]
    assert 0 not in core.timers.lateness
    # and the other, late, stays LATE when it finishes
    late = [c for c in core.handle(TimerFiredEvent(1000.0)) if isinstance(c, Flag)]
    assert [(f.job, f.level) for f in late] == [(1, "LATE")]
    assert end(1, 1100.0) == [] and core.timers.lateness[1].startswith("LATE")


@pytest.mark.parametrize(("verb", "said"), [("set-ok", "set ok by ana"), ("skip", "skipped by ana")])
def test_a_job_at_risk_an_operator_sets_ok_or_skips_before_its_deadline_is_at_risk_no_more(verb: str,
                                                                                          said: str) -> None:
    from tests.core.test_verbs import op

    # Given a job due at t=1000, held by an operator, at risk from 700
    core = SchedulerCore(make_plan({"a": {"deps": ["gate"]}, "gate": {}}), slots=2)
    core.set_times({0: 1000.0}, {})
    core.handle(RunStartedEvent(0.0))
    op(core, "hold", "a")
    core.handle(JobExitedEvent(1, 1, 0, 0, 10.0))
    risk = [c for c in core.handle(TimerFiredEvent(1000.0 - RISK_WINDOW)) if isinstance(c, Flag)]
    assert [(f.job, f.level) for f in risk] == [(0, "AT_RISK")]
    # When an operator sets it ok (or skips it) before the deadline
    flags = [c for c in op(core, verb, "a")[1] if isinstance(c, Flag)]
    # Then its risk is cleared, saying who ended it
    assert [(f.job, f.level, f.text) for f in flags] == [(0, "MET", f"MET: {said} before its deadline")]
    assert 0 not in core.timers.lateness


def test_times_of_day_the_clocks_skip_or_repeat_are_read_as_an_operator_reads_them() -> None:
    utc = dt.UTC
    london = "Europe/London"
    # The night London goes from 01:00 GMT to 02:00 BST (2027-03-28): a run started at 00:59:30
    spring = dt.datetime(2027, 3, 28, 0, 59, 30, tzinfo=utc).timestamp()
    jump = dt.datetime(2027, 3, 28, 1, 0, tzinfo=utc).timestamp()
    # 01:30 never shows: it is reached when the clocks jump (as `trigger` fires it), with 02:00, before 02:10
    assert instant("01:30", "2027-03-28", spring, london, roll=False) == jump
    assert instant("02:00", "2027-03-28", spring, london, roll=False) == jump
    assert instant("02:10", "2027-03-28", spring, london) == jump + 600
    # The night it goes back (2027-10-31), for a run started at 01:45 GMT, the second pass of 01:45
    autumn = dt.datetime(2027, 10, 31, 1, 45, tzinfo=utc).timestamp()
    # a deadline of 01:50 is the 01:50 the wall clock shows in five minutes, not tomorrow's
    assert instant("01:50", "2027-10-31", autumn, london) == autumn + 300
    # and one of 01:40, passed on this pass too, is tomorrow's
    assert instant("01:40", "2027-10-31", autumn, london) == dt.datetime(2027, 11, 1, 1, 40, tzinfo=utc).timestamp()


def test_a_time_of_day_in_digits_of_another_script_is_no_time() -> None:
    # (a plan's deadline so written is refused when the plan is read; the run's reading of it refuses it too)
    arabic = "12:00".translate({ord("0") + d: 0x660 + d for d in range(10)})
    with pytest.raises(ValueError, match="is not a time of day"):
        instant(arabic, "2026-12-01", at(2026, 12, 1, 10), "UTC")
