"""`status --at`: the moments an operator may name, and the ones refused in one line."""

from __future__ import annotations

import pytest

from wloadctl.errors import UsageError
from wloadctl.timetravel import parse_when

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
        parse_when(text, NOW, now=NOW)
    message = str(caught.value)
    assert said in message and "\n" not in message and len(message) < 200


def test_offsets_back_from_now_are_read() -> None:
    assert parse_when("-1h30m", NOW, now=NOW) == NOW - 5400
    assert parse_when("-36500d", NOW, now=NOW) == NOW - 36500 * 86400
