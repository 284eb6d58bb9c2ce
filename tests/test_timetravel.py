"""`status --at`: the moments an operator may name, and the ones refused in one line."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from wloadctl.errors import UsageError
from wloadctl.timetravel import iso, parse_when

NOW = 1_796_540_000.0


@pytest.mark.parametrize(("text", "said"), [
    ("-99999999999d", "--at '-99999999999d': at most 100 years back (-36500d)"),
    ("-" + "9" * 400, "at most 100 years back"),
    ("-36501d", "at most 100 years back"),
    ("9999-12-31T23:59:59-12:00", "no such moment on this system's clock"),
    ("noon", "expected a clock time (23:40)"),
], ids=["11-digit-days", "400-digits", "past-100-years", "past-year-9999", "not-a-moment"])
def test_a_moment_no_clock_can_show_is_refused_in_one_line(text: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_when(text, now=NOW)
    message = str(caught.value)
    assert said in message and "\n" not in message and len(message) < 200


def other_digits(text: str, zero: int = 0x660) -> str:
    """`text` with its digits written in another script: Arabic-Indic (U+0660...), or fullwidth for 0xFF10."""
    return text.translate({ord("0") + d: zero + d for d in range(10)})


@pytest.mark.parametrize("text", [other_digits("01:30"), other_digits("-15m"), "-1" + other_digits("5") + "m",
                                  other_digits("10", 0xFF10) + ":00", other_digits("2026") + "-12-01T23:40:00"],
                         ids=["clock", "offset", "one-digit-of-an-offset", "fullwidth-clock", "timestamp"])
def test_digits_of_other_scripts_are_refused_in_one_line(text: str) -> None:
    # int() and float() read them as numbers: a moment is written in ASCII digits, as a plan's times are
    with pytest.raises(UsageError) as caught:
        parse_when(text, now=NOW)
    assert str(caught.value) == f"--at {text!r}: digits other than ASCII 0-9 (write e.g. 23:40, " \
        "2026-12-01T23:40:00 or -15m)"


def test_offsets_back_from_now_are_read() -> None:
    assert parse_when("-1h30m", now=NOW) == NOW - 5400
    assert parse_when("-36500d", now=NOW) == NOW - 36500 * 86400


PAGO = ZoneInfo("Pacific/Pago_Pago")
"""UTC-11 all year (no daylight saving)."""
MORNING = dt.datetime(2026, 12, 7, 7, 7, tzinfo=PAGO).timestamp()
"""07:07 on 2026-12-07, Pago Pago time."""


def test_a_clock_time_is_the_latest_such_moment_not_in_the_future() -> None:
    # Earlier today: today (it was read as tomorrow once the run had started before it)
    assert parse_when("07:04:00", now=MORNING, tz="Pacific/Pago_Pago") == \
        dt.datetime(2026, 12, 7, 7, 4, tzinfo=PAGO).timestamp()
    # Later than now: yesterday's, never a moment to come
    assert parse_when("23:00", now=MORNING, tz="Pacific/Pago_Pago") == \
        dt.datetime(2026, 12, 6, 23, 0, tzinfo=PAGO).timestamp()
    # Now itself is now
    assert parse_when("07:07", now=MORNING, tz="Pacific/Pago_Pago") == MORNING


def test_clock_times_and_timestamps_without_a_zone_are_read_in_the_plans_zone() -> None:
    assert parse_when("20:04", now=MORNING, tz="Pacific/Pago_Pago") == \
        dt.datetime(2026, 12, 6, 20, 4, tzinfo=PAGO).timestamp()
    assert parse_when("2026-12-06T20:04:00", now=MORNING, tz="Pacific/Pago_Pago") == \
        dt.datetime(2026, 12, 6, 20, 4, tzinfo=PAGO).timestamp()
    # A timestamp that names its zone is that moment, whatever the plan's
    assert parse_when("2026-12-07T00:00:00+00:00", now=MORNING, tz="Pacific/Pago_Pago") == \
        dt.datetime(2026, 12, 7, tzinfo=dt.UTC).timestamp()
    assert iso(MORNING, "Pacific/Pago_Pago") == "2026-12-07T07:07:00-11:00"


def test_a_moment_in_the_future_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError) as caught:
        parse_when("2026-12-07T07:08:00", now=MORNING, tz="Pacific/Pago_Pago")
    assert str(caught.value) == ("--at '2026-12-07T07:08:00': that is in the future (it is "
                                 "2026-12-07T07:07:00-11:00 now); give a moment of the past")


LONDON = ZoneInfo("Europe/London")


def test_a_clock_time_on_a_night_the_clocks_change_is_the_latest_pass_or_the_jump() -> None:
    # 2026-10-25: 01:00-01:59 comes twice. At 01:45 of its second pass, 01:30 is the one a quarter of an hour
    # ago (GMT), not the first pass an hour and a quarter ago (BST); 01:50 has come only once (BST).
    now = dt.datetime(2026, 10, 25, 1, 45, tzinfo=LONDON, fold=1).timestamp()
    assert parse_when("01:30", now=now, tz="Europe/London") == now - 900
    assert parse_when("01:50", now=now, tz="Europe/London") == \
        dt.datetime(2026, 10, 25, 0, 50, tzinfo=dt.UTC).timestamp()
    # 2026-03-29 goes from 01:00 to 02:00: 01:30 is the moment of the jump, as a deadline or trigger reads it
    now = dt.datetime(2026, 3, 29, 3, 0, tzinfo=LONDON).timestamp()
    assert iso(parse_when("01:30", now=now, tz="Europe/London"), "Europe/London") == "2026-03-29T02:00:00+01:00"
