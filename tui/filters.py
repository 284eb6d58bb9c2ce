"""Textual-free filters of the job table: parsing what the operator types after `/`."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

from tui.labels import SHORT, STATE_NAMES, TIER_SHORT
from wloadctl.core.states import ACTIVE, TERMINAL, JobState, SlaTier

S = JobState

STATE_GROUPS: dict[str, frozenset[JobState]] = {
    "bad": frozenset({S.FAILED, S.TIMED_OUT, S.UPSTREAM_FAILED, S.CANCELLED}),
    "active": frozenset(ACTIVE),
    "done": frozenset(TERMINAL),
    "open": frozenset(set(JobState) - TERMINAL),
    "stuck": frozenset(
        {S.HELD, S.FAILED, S.TIMED_OUT, S.RETRY_WAIT, S.UPSTREAM_FAILED}
    ),
}
"""Named groups of states usable in filters (`state:bad`)."""


class FilterError(ValueError):
    """A typed filter cannot be understood; the message says what would be."""


@dataclass(frozen=True)
class JobFilter:
    """Which jobs the table shows: an id pattern, states, tiers (each empty = any)."""

    pattern: str = ""
    """A glob on the job id, or text found anywhere in it (case-insensitive)."""
    states: frozenset[int] = frozenset()
    """State values to show."""
    tiers: frozenset[int] = frozenset()
    """SLA tier values to show."""
    text: str = ""
    """The filter as the operator typed it (group names and all)."""
    sla: frozenset[str] = frozenset()
    """SLA flags to show ("risk": at risk, "late": past the deadline); with `states`, a job
    in either shows."""

    @property
    def active(self) -> bool:
        """Whether the filter hides anything."""
        return bool(self.pattern or self.states or self.tiers or self.sla)

    def describe(self) -> str:
        """The filter in the syntax it is typed in."""
        if self.text:
            return self.text
        parts = [self.pattern] if self.pattern else []
        if self.states:
            parts.append(
                "state:" + ",".join(STATE_NAMES[s].lower() for s in sorted(self.states))
            )
        if self.tiers:
            parts.append(
                "tier:" + ",".join(SlaTier(t).label for t in sorted(self.tiers))
            )
        if self.sla:
            parts.append("sla:" + ",".join(sorted(self.sla)))
        return " ".join(parts)

    def matcher(self) -> Callable[[str], bool]:
        """A predicate on job ids for the pattern part."""
        pat = self.pattern.lower()
        if not pat:
            return lambda _j: True
        if any(c in pat for c in "*?["):
            return lambda j: fnmatch.fnmatchcase(j.lower(), pat)
        return lambda j: pat in j.lower()


def _state_by_word(word: str) -> frozenset[JobState]:
    w = word.strip().lower().replace("-", "_")
    for s in JobState:
        if w in (s.name.lower(), SHORT[s].lower()):
            return frozenset({s})
    if w in STATE_GROUPS:
        return STATE_GROUPS[w]
    choices = ", ".join(s.name.lower() for s in JobState)
    raise FilterError(
        f"'{word}' is not a state; use one of {choices}, "
        f"or a group: {', '.join(STATE_GROUPS)}"
    )


def _tier_by_word(word: str) -> SlaTier:
    w = word.strip().lower()
    for t in SlaTier:
        if w in (t.label, TIER_SHORT[t]):
            return t
    raise FilterError(
        f"'{word}' is not an SLA tier; use one of {', '.join(t.label for t in SlaTier)}"
    )


SLA_FLAGS = ("risk", "late")
"""Values of `sla:` in a filter: jobs the SLA pane names at risk, or late."""

TROUBLE = "state:stuck sla:risk,late"
"""What `!` shows: jobs that need an operator, and jobs whose deadline is in danger."""


def parse_filter(text: str) -> JobFilter:
    """Read a filter as typed after `/`: `load_* state:failed,held tier:critical`.

    Args:
        text: words separated by spaces; `state:` (or `s:`) and `tier:` (or `t:`)
            take comma-separated values, as does `sla:` (risk, late: the jobs the SLA
            pane names; with `state:`, a job matching either shows); any other word is
            the id pattern.

    Returns:
        The filter (empty text gives the empty filter).

    Raises:
        FilterError: an unknown state or tier, an empty value, or two id patterns.
    """
    pattern = ""
    states: set[int] = set()
    tiers: set[int] = set()
    sla: set[str] = set()
    for word in text.split():
        key, sep, value = word.partition(":")
        key = key.lower()
        if sep and key == "sla":
            for v in value.lower().split(","):
                if v and v not in SLA_FLAGS:
                    raise FilterError(f"'{v}' is not an SLA flag; use risk or late")
            sla.update(v for v in value.lower().split(",") if v)
            if not sla:
                raise FilterError(f"'{word}' has no value; e.g. sla:risk or sla:late")
        elif sep and key in ("state", "s", "tier", "t"):
            if not value.strip(","):
                raise FilterError(
                    f"'{word}' has no value; e.g. state:failed or tier:critical"
                )
            for v in value.split(","):
                if not v:
                    continue
                if key in ("state", "s"):
                    states.update(int(s) for s in _state_by_word(v))
                else:
                    tiers.add(int(_tier_by_word(v)))
        elif pattern:
            raise FilterError(
                f"one id pattern at a time: '{pattern}' and '{word}'; "
                "use a glob like 'load_*'"
            )
        else:
            pattern = word
    return JobFilter(
        pattern,
        frozenset(states),
        frozenset(tiers),
        " ".join(text.split()),
        frozenset(sla),
    )
