"""Textual-free words of the console: state labels, tones, durations, the legend."""

from __future__ import annotations

import ast
import inspect
import itertools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.cells import cell_len, get_character_cell_size

from wloadctl.core.states import TRANSITIONS, JobState, SlaTier
from wloadctl.core.verbs import VERB_FROM

S = JobState
STATE_NAMES: tuple[str, ...] = tuple(s.name for s in JobState)
"""State names by value."""

SHORT: dict[JobState, str] = {
    S.WAITING: "WAIT",
    S.READY: "READY",
    S.QUEUED: "QUEUE",
    S.RUNNING: "RUN",
    S.SUCCEEDED: "OK",
    S.FAILED: "FAIL",
    S.TIMED_OUT: "TIMEOUT",
    S.RETRY_WAIT: "RETRY",
    S.HELD: "HELD",
    S.SKIPPED: "SKIP",
    S.CANCELLED: "CANCEL",
    S.UPSTREAM_FAILED: "UPFAIL",
}
"""Short state labels for narrow columns; the help maps them to the full names."""

TONE: dict[JobState, str] = {
    S.WAITING: "idle",
    S.READY: "idle",
    S.QUEUED: "run",
    S.RUNNING: "run",
    S.SUCCEEDED: "ok",
    S.FAILED: "bad",
    S.TIMED_OUT: "bad",
    S.RETRY_WAIT: "warn",
    S.HELD: "warn",
    S.SKIPPED: "ok",
    S.CANCELLED: "bad",
    S.UPSTREAM_FAILED: "bad",
}
"""What each state means to an operator; widgets turn the tone into a colour."""

TINY: dict[JobState, str] = {
    JobState.FAILED: "F",
    JobState.TIMED_OUT: "TO",
    JobState.UPSTREAM_FAILED: "UF",
    JobState.HELD: "H",
    JobState.RETRY_WAIT: "RT",
    JobState.RUNNING: "R",
    JobState.QUEUED: "Q",
    JobState.READY: "RD",
    JobState.WAITING: "W",
    JobState.SUCCEEDED: "OK",
    JobState.SKIPPED: "SK",
    JobState.CANCELLED: "CX",
}
"""The labels of the counts on a line too narrow for the short ones (the help's legend names them too)."""

TIER_SHORT: dict[SlaTier, str] = {
    SlaTier.CRITICAL: "crit",
    SlaTier.HIGH: "high",
    SlaTier.STANDARD: "std",
    SlaTier.LOW: "low",
}
"""Short SLA tier labels."""


# -- formatting ----------------------------------------------------------------------


def fmt_duration(seconds: float | None) -> str:
    """A short duration: `0.4s`, `12s`, `4m05s`, `1h02m`, `2d03h`; empty for None."""
    if seconds is None:
        return ""
    s = max(0.0, seconds)
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def fmt_clock(
    ts: float | None, localtime: Callable[[float], object] | None = None
) -> str:
    """A time of day `HH:MM:SS` in local time; empty for None."""
    if ts is None:
        return ""
    t = (localtime or time.localtime)(ts)
    return f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"  # type: ignore[attr-defined]


def clip_id(job: str, width: int) -> str:
    """Cut a job id to `width` columns in its middle, keeping head and tail (ASCII only).

    Ids of one family share a long head and differ at the end (`load_gl_postings_emea`,
    `load_gl_postings_apac`): cutting the end would make them look the same.
    """
    if width <= 0:
        return ""
    if len(job) <= width:
        return job
    if width < 5:
        return clip(job, width)
    head = (width - 1 + 1) // 2
    tail = width - 1 - head
    return job[:head] + "~" + job[len(job) - tail :]


_WORD_SEPARATORS = re.compile(r"([_.-])")


def abbrev_id(job: str, width: int) -> str:
    """Fit a job id to `width` columns word by word: its longest words lose letters first, its last word
    last, so that `load_accounts_amer`, `load_payments_amer` and `load_accounts_apac` stay apart
    (`lo_acc_amer`, `lo_pay_amer`, `lo_acc_apac`) where a cut in the middle shows them all as
    `loa~mer`. An id of one word, or of too many for the width, is cut in its middle (clip_id)."""
    if len(job) <= width:
        return job
    parts = _WORD_SEPARATORS.split(job)
    words, seps = parts[0::2], parts[1::2]
    if len(words) < 2 or len(seps) + len(words) > width or not all(words):
        return clip_id(job, width)
    lens = [len(w) for w in words]
    over = len(job) - width
    last = len(words) - 1
    while over > 0:
        # The longest word gives a letter (the last word counts two letters shorter: it often tells
        # siblings apart); the earliest of equals goes first.
        k = max((i for i in range(len(words)) if lens[i] > 1),
                key=lambda i: (lens[i] - (2 if i == last else 0), -i), default=None)
        if k is None:
            return clip_id(job, width)
        lens[k] -= 1
        over -= 1
    return "".join(w[:n] + (seps[i] if i < len(seps) else "") for i, (w, n) in enumerate(zip(words, lens, strict=True)))


def tail_id(job: str, width: int) -> str:
    """Cut a job id to `width` columns from its start (`~` first), keeping its end whole: the
    digits of `s02_fx_rates_000715` and `s02_fx_rates_000724` that tell them apart."""
    if len(job) <= width:
        return job
    if width < 2:
        return job[len(job) - width :] if width > 0 else ""
    return "~" + job[len(job) - width + 1 :]


_ID_CUTS: tuple[Callable[[str, int], str], ...] = (clip_id, abbrev_id, tail_id)
"""Ways to fit an id, in order of preference: an id moves to the next one while its label is
the same as another's. The first keeps the end, where generated siblings differ
(`s02_fx_rates_000715`, `..._000724`): cut word by word first, they read `s_f_r_0007` and
`s_f_ra_0007`, distinct strings that no one can tell apart."""


def distinct_ids(widths: dict[str, int]) -> dict[str, str]:
    """Fit each job id to its width (job -> columns) so that no two labels read the same.

    Each id is cut in its middle first, keeping head and tail (clip_id); ids whose labels clash
    are cut word by word instead (abbrev_id), then from the start keeping the end (tail_id).
    Ids given fewer than 12 columns are cut from the start at once. Only ids too long for any
    cut to tell apart in their width still share a label.

    Returns:
        job -> label.
    """
    # Under a dozen columns the head left by a middle cut says nothing (`s02~15`): keep the end.
    step = {j: 0 if w >= 12 else 2 for j, w in widths.items()}
    labels = {j: _ID_CUTS[step[j]](j, w) for j, w in widths.items()}
    for _ in range(len(_ID_CUTS) - 1):
        seen: dict[str, int] = {}
        for label in labels.values():
            seen[label] = seen.get(label, 0) + 1
        clash = [j for j, label in labels.items() if seen[label] > 1 and step[j] + 1 < len(_ID_CUTS)]
        if not clash:
            break
        for j in clash:
            step[j] += 1
            labels[j] = _ID_CUTS[step[j]](j, widths[j])
    return labels


def fit_title(text: str, width: int) -> str:
    """Cut a border title to a widget `width` wide, with `~`: Textual would cut it with a
    non-ASCII ellipsis (the corners and a blank either side take 6 columns)."""
    return clip(text, width - 6) if width > 6 else text


def clip(text: str, width: int) -> str:
    """Cut text to `width` columns, marking the cut with `~` (ASCII only).

    Columns are the terminal's: a CJK character or an emoji takes two, so text in any script is cut
    where the screen needs it, never through a character (the result may be a column short of `width`).
    """
    if width <= 0:
        return ""
    if cell_len(text) <= width:
        return text
    return _head(text, width - 1) + "~" if width > 1 else _head(text, 1)


def pad(text: str, width: int, right: bool = False) -> str:
    """`text` with blanks to fill `width` columns (before it when `right`), counting columns as `clip` does."""
    fill = " " * max(0, width - cell_len(text))
    return fill + text if right else text + fill


def _head(text: str, width: int) -> str:
    """The longest start of `text` that fits in `width` columns."""
    used = 0
    for k, char in enumerate(text):
        used += get_character_cell_size(char)
        if used > width:
            return text[:k]
    return text


def progress_bar(fraction: float, width: int) -> str:
    """An ASCII progress bar `[#####.....]` of `width` columns."""
    inner = max(1, width - 2)
    full = round(max(0.0, min(1.0, fraction)) * inner)
    return "[" + "#" * full + "." * (inner - full) + "]"


# -- the legend ----------------------------------------------------------------------


def _member_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of an enum's members, read from its source."""
    try:
        tree = ast.parse(inspect.getsource(cls))
    except (OSError, TypeError, SyntaxError):
        return {}
    docs: dict[str, str] = {}
    body = (
        tree.body[0].body
        if tree.body and isinstance(tree.body[0], ast.ClassDef)
        else []
    )
    for a, b in itertools.pairwise(body):
        if (
            isinstance(a, ast.Assign)
            and len(a.targets) == 1
            and isinstance(a.targets[0], ast.Name)
            and isinstance(b, ast.Expr)
            and isinstance(b.value, ast.Constant)
            and isinstance(b.value.value, str)
        ):
            docs[a.targets[0].id] = " ".join(b.value.value.split())
    return docs


@dataclass(frozen=True)
class LegendEntry:
    """One state in the help screen's legend."""

    state: JobState
    """The state."""
    short: str
    """Its label in the table."""
    meaning: str
    """What it means (the enum's own documentation)."""
    leads_to: tuple[str, ...]
    """States it may move to, from the transition table."""
    verbs: tuple[str, ...]
    """Operator verbs that apply to it."""


def legend() -> list[LegendEntry]:
    """The state legend, generated from the transition table and the verbs' table."""
    docs = _member_docs(JobState)
    out = []
    for s in JobState:
        # (WAITING -> WAITING, a skip or set-ok waiting for the job's upstreams, leads to no other state)
        to = tuple(b.name for b in JobState if (s, b) in TRANSITIONS and b != s)
        verbs = tuple(
            v for v, states in VERB_FROM.items() if s in states and v != "cancel"
        )
        out.append(LegendEntry(s, SHORT[s], docs.get(s.name, ""), to, verbs))
    return out
