"""Textual-free SLA figures: deadlines, per-tier progress, late and at-risk jobs."""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfoNotFoundError

from tui.view_model import JobsModel
from wloadctl.core.sla import RISK_WINDOW, instant
from wloadctl.core.states import OK_STATES, TERMINAL, JobState, SlaTier

S = JobState
STUCK: frozenset[int] = frozenset(
    int(s)
    for s in (
        S.FAILED,
        S.TIMED_OUT,
        S.HELD,
        S.UPSTREAM_FAILED,
        S.CANCELLED,
        S.RETRY_WAIT,
    )
)
"""States in which a job with a deadline cannot make it without an operator."""
CLOSE = "deadline close"
"""Why a job is at risk by the scheduler's rule (within its risk window, not ended): the AT_RISK of `status`."""
_OK = frozenset(int(s) for s in OK_STATES)
_DONE = frozenset(int(s) for s in TERMINAL)


def deadline_at(
    text: str, business_date: str, run_started: float, timezone: str | None
) -> float | None:
    """The absolute time of a plan deadline.

    The engine's own rule (wloadctl.core.sla.instant), so the console shows the
    deadline the scheduler flags against.

    Args:
        text: `HH:MM[:SS]` or `+duration`.
        business_date: `YYYY-MM-DD`.
        run_started: when the run started (epoch seconds).
        timezone: IANA zone name, or None for local time.

    Returns:
        Epoch seconds, or None when the text or the date cannot be read.
    """
    try:
        return instant(text, business_date, run_started, timezone)
    except (ValueError, ZoneInfoNotFoundError):
        return None


@dataclass(frozen=True)
class Due:
    """One job's deadline as the SLA panel shows it."""

    job: str
    """Job id."""
    at: float
    """Deadline, epoch seconds."""
    text: str
    """Deadline as written in the plan."""
    state: JobState
    """The job's state."""
    why: str
    """Why it is at risk or late (empty when on track)."""
    index: int = -1
    """The job's index in the model."""


@dataclass(frozen=True)
class TierFigures:
    """One SLA tier's line in the panel."""

    tier: SlaTier
    """The tier."""
    total: int
    """Jobs in the tier."""
    done: int
    """Succeeded or skipped."""
    running: int
    """Queued or running."""
    failed: int
    """Failed, timed out, cancelled or blocked by a failure."""
    late: int
    """Past their deadline and not done, or done after it."""
    next_due: Due | None
    """The soonest deadline of an unfinished job of this tier."""
    at_risk: int = 0
    """Unfinished jobs of this tier whose deadline is in danger."""


@dataclass(frozen=True)
class SlaView:
    """Everything the SLA panel shows."""

    tiers: list[TierFigures]
    """One entry per tier that has jobs, most urgent first."""
    at_risk: list[Due]
    """Unfinished jobs that will or may miss their deadline; most urgent first."""
    late: list[Due]
    """Jobs already past their deadline without having succeeded."""


def sla_view(model: JobsModel, now: float) -> SlaView:
    """Per-tier figures and the jobs whose deadlines are in danger.

    Only jobs with a deadline are walked, so this stays cheap on large runs. A job is at
    risk by the scheduler's rule (wloadctl.core.sla.risk_window): unfinished within
    RISK_WINDOW of its deadline, or within its timeout when that is longer.

    Args:
        model: the jobs.
        now: the time.
    """
    windows = model.risk_window
    late_by_tier = [0] * len(SlaTier)
    risk_by_tier = [0] * len(SlaTier)
    next_by_tier: list[Due | None] = [None] * len(SlaTier)
    at_risk: list[Due] = []
    late: list[Due] = []
    for i, at in sorted(model.deadline.items(), key=lambda kv: kv[1]):
        st = model.state[i]
        tier = model.tier[i]
        text = model.deadline_text.get(i, "")
        state = JobState(st)
        ended = model.ended[i]
        if st in _OK:
            if ended is not None and ended > at:
                late_by_tier[tier] += 1
            continue
        if now > at:
            late_by_tier[tier] += 1
            late.append(Due(model.ids[i], at, text, state, "past its deadline", i))
            continue
        if next_by_tier[tier] is None and st not in _DONE:
            next_by_tier[tier] = Due(model.ids[i], at, text, state, "")
        close = at - now <= windows.get(i, RISK_WINDOW)
        if st in STUCK or close:
            risk_by_tier[tier] += 1
        if st in STUCK:
            at_risk.append(
                Due(model.ids[i], at, text, state, "blocked: needs an operator", i)
            )
        elif close:
            at_risk.append(Due(model.ids[i], at, text, state, CLOSE, i))
    figures = []
    for t in SlaTier:
        row = model.tier_counts[t]
        total = sum(row)
        if not total:
            continue
        figures.append(
            TierFigures(
                t,
                total,
                row[S.SUCCEEDED] + row[S.SKIPPED],
                row[S.QUEUED] + row[S.RUNNING],
                row[S.FAILED]
                + row[S.TIMED_OUT]
                + row[S.CANCELLED]
                + row[S.UPSTREAM_FAILED],
                late_by_tier[t],
                next_by_tier[t],
                risk_by_tier[t],
            )
        )
    at_risk.sort(
        key=lambda d: (d.state not in (S.FAILED, S.TIMED_OUT, S.UPSTREAM_FAILED), d.at)
    )
    return SlaView(figures, at_risk, late)


def flagged(model: JobsModel, now: float, kinds: frozenset[str]) -> frozenset[int]:
    """Indices of the jobs the SLA pane names: "risk" (at risk) and/or "late".

    Args:
        model: the jobs.
        now: the time.
        kinds: which of "risk" and "late" to take.
    """
    view = sla_view(model, now)
    out: set[int] = set()
    if "risk" in kinds:
        out.update(d.index for d in view.at_risk)
    if "late" in kinds:
        out.update(d.index for d in view.late)
    return frozenset(out)
