"""Checks of single YAML values in plans: a typed value, or a FieldError with a hint."""

from __future__ import annotations

import difflib
import functools
import math

from wloadctl.core.durations import (
    DURATION_FORMS,
    FINEST,
    DurationRangeError,
    duration_guess,
    parse_duration,
)
from wloadctl.core.yamltree import Entry, describe


class FieldError(Exception):
    """One field is wrong; carries what a problem report needs."""

    def __init__(self, message: str, line: int, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        """What was wrong."""
        self.line = line
        """1-based line of the offending node."""
        self.hint = hint
        """What would be accepted."""


KEY_SHOWN = 80
"""Longest key a message shows whole."""


def key_text(key: str) -> str:
    """A key as a message names it: whole, or its start and its length when it is long."""
    return key if len(key) <= KEY_SHOWN else f"{key[:60]}...({len(key)} characters)"


KEY_SYNONYMS: dict[str, str] = {
    "cmd": "command",
    "script": "command",
    "run": "command",
    "exec": "command",
    "requires": "depends_on",
    "needs": "depends_on",
    "after": "depends_on",
    "deps": "depends_on",
    "depends": "depends_on",
    "dependencies": "depends_on",
    "upstream": "depends_on",
    "environment": "env",
    "retry": "retries",
    "tasks": "jobs",
    "steps": "jobs",
}
"""Keys other schedulers and CI files use for what a plan calls otherwise (run: is a command in CI files):
the spelling is no near miss of the plan's key, so the closest spelling would point elsewhere (cmd: to cwd)."""


def key_hint(key: str, accepted: tuple[str, ...]) -> str:
    """The hint for an unknown key: the accepted keys and the closest one.

    A key in other letter case, or with `-` for `_` (`COMMAND`, `depends-on`), is that key; a name other
    schedulers use (KEY_SYNONYMS) is the plan's; else the closest spelling.

    Args:
        key: the key as written.
        accepted: the keys allowed at that place.

    Returns:
        "did you mean 'x'? accepted: a, b, c" (without the guess when none is close).
    """
    # (a key of megabytes is no misspelling, and comparing it with each would take seconds)
    meant = meant_key(key, accepted) if len(key) <= KEY_SHOWN else None
    guess = f"did you mean '{meant}'? " if meant else ""
    return f"{guess}accepted: {', '.join(accepted)}"


@functools.lru_cache(maxsize=256)
def meant_key(key: str, accepted: tuple[str, ...]) -> str | None:
    """The accepted key that `key` (at most KEY_SHOWN long) likely means, or None.

    Kept for the keys asked last: a generator's misspelt key is in every job, and comparing it with each
    accepted key again for each of 200,000 jobs took twenty seconds.
    """
    folded = key.strip().lower().replace("-", "_")
    meant = folded if folded in accepted else KEY_SYNONYMS.get(folded)
    if meant is None:
        close = difflib.get_close_matches(folded, accepted, n=1, cutoff=0.6)
        return close[0] if close else None
    # (a key another scheduler uses for what is not taken here: the closest spelling would mislead)
    return meant if meant in accepted else None


def choice_hint(word: str, accepted: tuple[str, ...] | list[str]) -> str:
    """The hint for a value outside a closed set, with the closest choice."""
    close = difflib.get_close_matches(word, accepted, n=1, cutoff=0.5)
    guess = f"did you mean '{close[0]}'? " if close else ""
    return f"{guess}use one of: {', '.join(accepted)}"


def text_of(entry: Entry, what: str, *, lenient: bool = False) -> str:
    """A string field.

    Args:
        entry: the YAML entry.
        what: the field's name for messages.
        lenient: accept any scalar's text (`description: 42`); otherwise an
            unquoted number or boolean is refused, since YAML read it as one.

    Returns:
        The text.

    Raises:
        FieldError: not a string.
    """
    value, line, text = entry
    if type(value) is str:
        return value
    if lenient and text is not None and value is not None:
        return text
    quote = f" (quote it: '{text}')" if text and value is not None else ""
    raise FieldError(f"{what} must be text, not {describe(value)}{quote}", line)


def integer(entry: Entry, what: str, low: int, high: int) -> int:
    """An int field within [low, high]; booleans are refused."""
    value, line, _ = entry
    if type(value) is not int:
        raise FieldError(f"{what} must be a whole number, not {describe(value)}", line)
    if not low <= value <= high:
        raise FieldError(f"{what} must be between {low} and {high}, not {value}", line)
    return value


def number(entry: Entry, what: str, low: float, high: float | None = None) -> float:
    """A float field within [low, high]."""
    value, line, _ = entry
    if type(value) not in (int, float) or value != value:
        raise FieldError(f"{what} must be a number, not {describe(value)}", line)
    if value < low or (high is not None and value > high):
        span = (
            f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        )
        raise FieldError(f"{what} must be {span}, not {value}", line)
    return float(value)


def positive_number(entry: Entry, what: str, hint: str | None = None) -> float:
    """A float field more than zero (a weight)."""
    value = number(entry, what, -math.inf)
    if not value > 0:
        raise FieldError(f"{what} must be more than zero, not {entry[0]}", entry[1], hint)
    return value


def boolean(entry: Entry, what: str) -> bool:
    """A yes/no field."""
    value, line, _ = entry
    if type(value) is not bool:
        raise FieldError(f"{what} must be true or false, not {describe(value)}", line)
    return value


def duration(entry: Entry, what: str, *, positive: bool = False) -> float:
    """A duration field (`90`, `20m`, `1h30m`) in seconds: zero, or from FINEST to MAX_DURATION.

    Every duration of a plan is read here, so each is held to the same bounds and its
    misspellings (`10 mins`, `5S`, `1h30`) get the same guess.

    Args:
        entry: the YAML entry.
        what: the field's name for messages.
        positive: refuse zero as well (a timeout of nothing).

    Raises:
        FieldError: not a duration, or out of bounds.
    """
    value, line, text = entry
    if text is None or value is None or type(value) is bool:
        raise FieldError(
            f"{what} must be a duration, not {describe(value)}", line, DURATION_FORMS
        )
    try:
        seconds = parse_duration(text, finest=FINEST)
    except DurationRangeError as err:
        raise FieldError(f"{what}: {err}", line) from None
    except ValueError:
        raise FieldError(
            f"{what}: '{text}' is not a duration", line, duration_hint(text)
        ) from None
    if positive and seconds <= 0:
        raise FieldError(f"{what} must be more than zero, not '{text}'", line)
    return seconds


def duration_hint(text: str, prefix: str = "") -> str:
    """The hint for text that is not a duration: the likely meaning, then the accepted forms.

    Args:
        text: the refused text (after `prefix`, when there is one).
        prefix: what the accepted form starts with (`+` in a deadline).
    """
    guess = duration_guess(text)
    return f"did you mean '{prefix}{guess}'? " * (guess is not None) + f"use {DURATION_FORMS}"


def mapping(entry: Entry, what: str) -> dict[str, Entry]:
    """A field that must be a mapping."""
    if type(entry[0]) is not dict:
        raise FieldError(
            f"{what} must be a mapping, not {describe(entry[0])}", entry[1]
        )
    return entry[0]


def amounts(entry: Entry, what: str, problems: list[FieldError]) -> list[tuple[str, int, int]]:
    """A mapping of names to positive whole numbers, as (name, amount, line).

    Args:
        entry: the YAML entry.
        what: the name of one item for messages.
        problems: where each wrong amount is told; the others are returned.

    Raises:
        FieldError: not a mapping.
    """
    out = []
    for name, item in mapping(entry, what).items():
        value = item[0]
        if type(value) is not int or value < 1:
            problems.append(FieldError(
                f"{what} '{name}' must be a whole number of at least 1, "
                f"not {describe(value)}",
                item[1],
            ))
            continue
        out.append((name, value, item[1]))
    return out


def first_repeated(items: list[str]) -> str:
    """The first item of `items` that an earlier one repeats (its first item when none does).

    A set, not the items before each: a list of many thousands is checked in one pass."""
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return items[0]
