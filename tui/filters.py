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


def _state_by_word(word: str) -> frozenset[JobState] | None:
    """The states a word names (a state's name or short label, or a group); None: none."""
    w = word.strip().lower().replace("-", "_")
    for s in JobState:
        if w in (s.name.lower(), SHORT[s].lower()):
            return frozenset({s})
    return STATE_GROUPS.get(w)


def _tier_by_word(word: str) -> SlaTier | None:
    """The SLA tier a word names (its label or short label); None: none."""
    w = word.strip().lower()
    for t in SlaTier:
        if w in (t.label, TIER_SHORT[t]):
            return t
    return None


def _unknown(words: list[str], what: str, whats: str, accepted: str) -> list[str]:
    """One problem naming every word of a kind that is not known, and what would be accepted."""
    if not words:
        return []
    named = ", ".join(f"'{w}'" for w in words)
    return [f"{named} {'is not ' + what if len(words) == 1 else 'are not ' + whats}; use {accepted}"]


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
        FilterError: unknown states, tiers or SLA flags, an empty value, or two id patterns: every one of
            them in one message.
    """
    pattern = ""
    states: set[int] = set()
    tiers: set[int] = set()
    sla: set[str] = set()
    bad_states: list[str] = []
    bad_tiers: list[str] = []
    bad_flags: list[str] = []
    problems: list[str] = []  # (the other kinds: a word without a value, a second pattern)
    for word in text.split():
        key, sep, value = word.partition(":")
        key = key.lower()
        if sep and key == "sla":
            flags = [v for v in value.lower().split(",") if v]
            bad_flags += [v for v in flags if v not in SLA_FLAGS]
            sla.update(v for v in flags if v in SLA_FLAGS)
            if not flags:
                problems.append(f"'{word}' has no value; e.g. sla:risk or sla:late")
        elif sep and key in ("state", "s", "tier", "t"):
            if not value.strip(","):
                problems.append(f"'{word}' has no value; e.g. state:failed or tier:critical")
            for v in value.split(","):
                if not v:
                    continue
                if key in ("state", "s"):
                    named = _state_by_word(v)
                    if named is None:
                        bad_states.append(v)
                    else:
                        states.update(int(s) for s in named)
                else:
                    tier = _tier_by_word(v)
                    if tier is None:
                        bad_tiers.append(v)
                    else:
                        tiers.add(int(tier))
        elif pattern:
            problems.append(f"one id pattern at a time: '{pattern}' and '{word}'; use a glob like 'load_*'")
        else:
            pattern = word
    problems = [
        *_unknown(bad_states, "a state", "states", "one of " + ", ".join(s.name.lower() for s in JobState)
                  + f", or a group: {', '.join(STATE_GROUPS)}"),
        *_unknown(bad_tiers, "an SLA tier", "SLA tiers", "one of " + ", ".join(t.label for t in SlaTier)),
        *_unknown(bad_flags, "an SLA flag", "SLA flags", "risk or late"),
        *problems,
    ]
    if problems:
        # Every problem at once, on one line (the prompt shows one message): fixing one word at a time
        # would take the operator a round trip per word.
        raise FilterError(" | ".join(problems))
    return JobFilter(
        pattern,
        frozenset(states),
        frozenset(tiers),
        " ".join(text.split()),
        frozenset(sla),
    )
