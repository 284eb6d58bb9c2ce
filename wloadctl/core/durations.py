"""Durations (`90s`, `1h30m`) and times of day (`06:30`) as written in plans."""

from __future__ import annotations

import math
import re

DURATION_FORMS = (
    "a number of seconds (90, 1.5) or units ms/s/m/h/d (500ms, 20m, 1h30m, 2d)"
)
"""The accepted duration forms, for error messages."""

TIME_FORMS = "HH:MM or HH:MM:SS on a 24-hour clock (06:30, 23:59:59)"
"""The accepted time-of-day forms, for error messages."""

MAX_DURATION = 100 * 365 * 86400.0
"""The longest duration a plan may give (100 years): longer is a typo, and past a few hundred digits the
number is not even finite."""

FINEST = 0.001
"""The shortest duration a plan may give other than zero (a millisecond, its smallest unit): the executors
wait on their clocks in whole milliseconds, so a shorter span would end at once."""


class DurationRangeError(ValueError):
    """A duration written correctly but longer than MAX_DURATION, or shorter than the finest asked for."""


_UNIT_SECONDS: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}

# Units must appear largest first and at most once, so "30m1h" and "1h1h" are
# rejected: they are almost always typos, and accepting them hides the mistake.
_UNIT_ORDER = ("d", "h", "m", "s", "ms")
# re.ASCII throughout: `\d` matches other scripts' digits too (Arabic-Indic, fullwidth), which float()
# reads as numbers.
_PART = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|d|h|m|s)", re.ASCII)
_NUMBER = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*", re.ASCII)
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", re.ASCII)


def parse_duration(value: str | int | float, *, finest: float = 0.0) -> float:
    """Turn a plan duration into seconds.

    Args:
        value: a number of seconds, or text such as `90`, `90s`, `20m`,
            `1h30m`, `1h 30m`, `2d` or `500ms`.
        finest: the shortest duration accepted other than zero (FINEST for a
            plan being read; a plan already read is taken as it was accepted).

    Returns:
        The duration in seconds (never negative, at most MAX_DURATION).

    Raises:
        ValueError: the value is not a duration; the message names the bad
            text and the accepted forms.
        DurationRangeError: it is longer than MAX_DURATION, or shorter than
            `finest` but not zero.
    """
    if isinstance(value, bool):
        raise ValueError(f"'{value}' is not a duration; use {DURATION_FORMS}")
    if isinstance(value, int | float):
        # An int of a few hundred digits has no float: compare before converting.
        if value < 0 or (isinstance(value, float) and math.isnan(value)):
            raise ValueError(f"'{value}' is not a duration; use {DURATION_FORMS}")
        return _bounded(value, str(value), finest)
    text = str(value)
    whole = _NUMBER.fullmatch(text)
    if whole:
        return _bounded(float(whole.group(1)), text, finest)
    total = 0.0
    pos = 0
    seen = -1
    while pos < len(text):
        part = _PART.match(text, pos)
        if part is None or _UNIT_ORDER.index(part.group(2)) <= seen:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"'{text}' is not a duration; use {DURATION_FORMS}")
        seen = _UNIT_ORDER.index(part.group(2))
        total += float(part.group(1)) * _UNIT_SECONDS[part.group(2)]
        pos = part.end()
    if seen < 0:
        raise ValueError(f"'{text}' is not a duration; use {DURATION_FORMS}")
    return _bounded(total, text, finest)


def _bounded(seconds: float, text: str, finest: float) -> float:
    """The seconds as a float, refused past MAX_DURATION (an infinite one included) or under `finest` but
    not zero."""
    shown = text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
    if not seconds <= MAX_DURATION:
        raise DurationRangeError(f"'{shown.strip()}' is longer than the 100 years a duration may be")
    if 0 < seconds < finest:
        raise DurationRangeError(
            f"'{shown.strip()}' is shorter than {format_duration(finest)}, the shortest a duration may be "
            "other than 0"
        )
    return float(seconds)


# Unit words and capitals an operator may write, by the unit they mean. "M" is left out: in a
# duration it may be a month as well as a minute, and a guess must not pick one.
_UNIT_WORDS: dict[str, str] = {
    **{w: "ms" for w in ("msec", "msecs", "millis", "millisecond", "milliseconds", "MS")},
    **{w: "s" for w in ("sec", "secs", "second", "seconds", "S")},
    **{w: "m" for w in ("min", "mins", "minute", "minutes")},
    **{w: "h" for w in ("hr", "hrs", "hour", "hours", "H")},
    **{w: "d" for w in ("day", "days", "D")},
}
_WORD_PART = re.compile(r"(\d+(?:[.,]\d+)?)\s*([A-Za-z]*)\s*", re.ASCII)
_NEXT_UNIT = {"d": "h", "h": "m", "m": "s"}


def duration_guess(text: str) -> str | None:
    """The duration an operator most likely meant by text that is not one, or None without a good guess.

    Catches unit words (`10 mins`, `2 hours`), capitals (`5S`), a decimal comma (`1,5h`) and a
    last number left without its unit (`1h30` for `1h30m`).

    Args:
        text: a value `parse_duration` refused.

    Returns:
        A duration `parse_duration` accepts, written as the operator would (`10m`, `1h30m`), or None.
    """
    parts = []
    pos, last = 0, ""
    stripped = text.strip()
    while pos < len(stripped):
        m = _WORD_PART.match(stripped, pos)
        if m is None or m.end() == pos:
            return None
        number, unit = m.group(1).replace(",", "."), m.group(2)
        unit = unit if unit in _UNIT_SECONDS else _UNIT_WORDS.get(unit, _UNIT_WORDS.get(unit.lower(), ""))
        if not unit:
            if m.group(2) or m.end() < len(stripped) or last not in _NEXT_UNIT:
                return None
            unit = _NEXT_UNIT[last]  # the number that ends `1h30` counts the next smaller unit
        parts.append(number + unit)
        pos, last = m.end(), unit
    guess = "".join(parts)
    if not guess or guess == stripped:
        return None
    try:
        parse_duration(guess, finest=FINEST)
    except ValueError:
        return None
    return guess


def format_duration(seconds: float) -> str:
    """Write seconds the way an operator reads them.

    Under a minute keeps one decimal when it matters (`1.2s`, `45s`,
    `250ms`); longer spans use whole units (`1h30m`, `2d3h`, `20m5s`).

    Args:
        seconds: the duration; negative values are shown with a minus sign.

    Returns:
        A short text such as `1h30m`, `45s` or `1.2s`.
    """
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 1:
        ms = round(seconds * 1000)
        return "1s" if ms >= 1000 else f"{ms}ms"
    if seconds < 60:
        tenths = round(seconds, 1)
        if tenths >= 60:
            return "1m"
        return f"{tenths:.0f}s" if tenths == int(tenths) else f"{tenths:.1f}s"
    rest = round(seconds)
    out = []
    for unit in ("d", "h", "m", "s"):
        size = int(_UNIT_SECONDS[unit])
        count, rest = divmod(rest, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)


def parse_time_of_day(text: str) -> int:
    """Turn `HH:MM` or `HH:MM:SS` into seconds after midnight.

    Args:
        text: the time as written in the plan.

    Returns:
        Seconds after midnight, from 0 to 86399.

    Raises:
        ValueError: the text is not a time of day on a 24-hour clock.
    """
    match = _CLOCK.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"'{text}' is not a time of day; use {TIME_FORMS}")
    hours, minutes = int(match.group(1)), int(match.group(2))
    secs = int(match.group(3) or 0)
    if hours > 23 or minutes > 59 or secs > 59:
        raise ValueError(f"'{text}' is not a time of day; use {TIME_FORMS}")
    return hours * 3600 + minutes * 60 + secs


def parse_day_time(text: str) -> tuple[int, int]:
    """Read `HH:MM[:SS]`, optionally followed by `+Nd`: N days after the business date.

    Batch nights cross midnight: `01:30+1d` is half past one on the next day.

    Args:
        text: the time as written in the plan.

    Returns:
        (days after the business date, seconds after that day's midnight).

    Raises:
        ValueError: not of that form.
    """
    clock, plus, later = text.strip().partition("+")
    days = 0
    if plus:
        try:
            span = parse_duration(later)
        except DurationRangeError:
            raise
        except ValueError:
            span = -1.0
        if span < 0 or span % 86400:
            raise ValueError(
                f"'{text}' is not a time of day; use {TIME_FORMS}, "
                "then +1d for the next day"
            )
        days = int(span // 86400)
    return days, parse_time_of_day(clock)


def parse_deadline(text: str, *, finest: float = 0.0) -> tuple[bool, float]:
    """Read a deadline or not-before: a time of day, or `+duration` after the start.

    Args:
        text: `HH:MM[:SS]`, `HH:MM[:SS]+Nd` (N days after the business date),
            or `+` followed by a duration (`+2h`).
        finest: the shortest `+duration` accepted other than zero (see parse_duration).

    Returns:
        (relative, seconds): relative is True for `+duration`, and seconds is
        the duration; otherwise seconds after the business date's midnight.

    Raises:
        ValueError: the text is none of these forms.
    """
    stripped = text.strip()
    try:
        if stripped.startswith("+"):
            return True, parse_duration(stripped[1:], finest=finest)
        days, seconds = parse_day_time(stripped)
        return False, float(days * 86400 + seconds)
    except DurationRangeError:
        raise
    except ValueError:
        raise ValueError(
            f"'{text}' is not a time; use {TIME_FORMS} (+1d for the next day), "
            "or +duration from the run's start (+2h, +90m)"
        ) from None


def closed_window(not_before: str, deadline: str) -> tuple[str, str] | None:
    """Why a job with this not-before and this deadline can never meet its deadline, or None.

    Two times of day (each maybe with `+Nd`) are compared as written on the business date, and
    so are two `+duration`s from the start: a not-before at or after the deadline leaves the
    job no time to run. A time of day against a `+duration` depends on when the run starts,
    and is not judged. A deadline of the next day is written with `+1d` (`01:00+1d`): the
    plan then says what it means whenever the run starts.

    Args:
        not_before: the job's not-before, as `parse_deadline` accepts it.
        deadline: the job's deadline, likewise.

    Returns:
        (what is wrong, what would be accepted), or None when the two may be met.
    """
    nb_relative, nb = parse_deadline(not_before)
    dl_relative, dl = parse_deadline(deadline)
    if nb_relative != dl_relative or nb < dl:
        return None
    at = "the same time as" if nb == dl else "after"
    problem = f"not_before '{not_before}' is {at} the deadline '{deadline}': the job can never meet it"
    if dl_relative:
        return problem, "give a deadline later than the not_before"
    if nb < 86400 and "+" not in deadline:  # (the deadline a day later is then after the not-before)
        return problem, f"for a deadline on the next day write deadline: '{deadline.strip()}+1d'"
    return problem, "give a deadline later than the not_before"
