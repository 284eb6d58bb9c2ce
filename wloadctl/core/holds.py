"""Operator holds and confirmations that outlast a job's leaving HELD.

An operator's hold is the operator's until released, and a confirmation job (`confirm: true`) waits for its
approve until approved. The job may still leave HELD meanwhile without either: an upstream fails (UPSTREAM_FAILED),
the run is cancelled, a loop reads its list again. Whatever reopens it then (an upstream's retry or rerun, a set-ok
or skip of an upstream, a loop listing it again, a rerun of it) brings it back HELD, never to run unreleased. The
core keeps what holds each job (`SchedulerCore.holds`: job -> what held it, in words); a resume rebuilds it from the
run's journaled actions (`holds_journaled`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from wloadctl.core.forcing import CALLED_OFF, CALLS_OFF
from wloadctl.core.plan import JobSpec

HELD_BY = "held"
"""How an operator's hold reads in a transition's reason (`held by USER: REASON`)."""
CONFIRM_WAIT = "waiting for confirmation"
"""How a confirmation job's wait for its approve reads in a transition's reason."""
STILL = "still "
"""Before what held a job, in the reason of a job reopened or ended while it is held."""
_LETS_GO = frozenset({"release", "approve", "set-ok", "skip"})
"""Verbs that, applied to a job, end what held it (the operator decided about that very job)."""
_CONFIRMING = frozenset({"approve", "set-ok", "skip"})
"""Verbs that end a confirmation job's wait for its approve."""


def held_by(user: str, reason: str) -> str:
    """What an operator's hold says: `held`, `held by USER`, `held by USER: REASON`."""
    who = f" by {user}" if user else ""
    because = f": {reason}" if reason else ""
    return f"{HELD_BY}{who}{because}"


def confirm_wait(job: str) -> str:
    """What a confirmation job waiting for its approve says."""
    return f"{CONFIRM_WAIT}: `wloadctl approve {job}`"


def still_held(text: str, ended: bool = False) -> str:
    """The reason of a job held again (or, `ended`, ended) while `text` still holds it. An ended job's confirmation
    is said without its approve, which applies once the job is reopened and HELD again, not now."""
    if ended and text.startswith(CONFIRM_WAIT):
        return f"{STILL}{CONFIRM_WAIT} once it is reopened"
    return STILL + text


def says_held(reason: str) -> bool:
    """Whether a job's reason says an operator's hold or a confirmation still holds it (the console reads it)."""
    return reason.startswith((HELD_BY + " ", CONFIRM_WAIT)) or reason == HELD_BY or \
        f"{STILL}{HELD_BY}" in reason or f"{STILL}{CONFIRM_WAIT}" in reason


class HeldJobs(Protocol):
    """What holds_journaled reads of a core rebuilt from a journal."""

    ids: list[str]
    index: Mapping[str, int]
    specs: list[JobSpec]
    to_confirm: list[int]


def holds_journaled(actions: Iterable[tuple], core: HeldJobs) -> dict[int, str]:
    """What held each job when the run's scheduler stopped, by its journaled actions (the core's `holds`).

    Args:
        actions: the run's (ts, user, verb, job, reason, outcome, applied), in order.
        core: a core restored from the journal: a job its plan no longer has is left out, and each confirmation
            job whose wait began (not in its `to_confirm`) waits for its approve until an applied approve (or
            set-ok, skip) of it.

    Returns:
        job index -> what holds it, in words.
    """
    ids, index, waits = core.ids, core.index, set(core.to_confirm)
    out: dict[int, str] = {i: confirm_wait(ids[i]) for i, j in enumerate(core.specs) if j.confirm and i not in waits}
    for a in actions:
        verb, job, applied = a[2], a[3], a[6]
        i = index.get(job)
        if i is None or not applied:
            continue
        if verb == "hold":
            out[i] = held_by(a[1], a[4])
        elif verb in CALLS_OFF and core.specs[i].confirm and CALLED_OFF in str(a[5]):
            out[i] = confirm_wait(ids[i])  # (its set-ok or skip, waiting for its upstreams, was called off)
        elif verb in _LETS_GO:
            out.pop(i, None)
    return out


def confirmed_journaled(actions: Iterable[tuple], index: Mapping[str, int]) -> set[int]:
    """Confirmation jobs an operator has decided about, by the run's journaled actions: an applied approve,
    set-ok or skip of the job (its wait for an approve is over, whatever state the journal shows it in).

    Args:
        actions: the run's (ts, user, verb, job, reason, outcome, applied), in order.
        index: job index by id.
    """
    return {i for a in actions if a[6] and a[2] in _CONFIRMING and (i := index.get(a[3])) is not None}
