"""The run header's figures: progress, elapsed time, a forecast of the end, the held jobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wloadctl.core.states import FAIL_STATES, OK_STATES, TERMINAL, JobState

if TYPE_CHECKING:
    from tui.view_model import JobsModel

S = JobState
_OK_VALUES = frozenset(int(s) for s in OK_STATES)
_FAIL_VALUES = frozenset(int(s) for s in FAIL_STATES)
_TERMINAL_VALUES = frozenset(int(s) for s in TERMINAL)


@dataclass(frozen=True)
class RunSummary:
    """The run-wide figures of the header."""

    total: int
    """Jobs in the run."""
    done: int
    """Jobs in a terminal state."""
    ok: int
    """Succeeded or skipped."""
    bad: int
    """Failed, timed out, cancelled or blocked by a failure."""
    active: int
    """Queued or running."""
    elapsed: float
    """Seconds since the run started (until it ended, when it has)."""
    forecast: float | None
    """Seconds until the run should end at its pace so far; None when unknown."""

    @property
    def percent(self) -> float:
        """Share of jobs done, 0-100."""
        return 100.0 * self.done / self.total if self.total else 100.0


def held_ids(model: JobsModel, limit: int) -> list[str]:
    """Ids of the first `limit` HELD jobs in plan order."""
    out: list[str] = []
    k = model.state.find(JobState.HELD)
    while k >= 0 and len(out) < limit:
        out.append(model.ids[k])
        k = model.state.find(JobState.HELD, k + 1)
    return out


def summarize(
    model: JobsModel, started: float, now: float, finished: bool, ended: float | None = None
) -> RunSummary:
    """Progress, elapsed time and a forecast of the end.

    The forecast extrapolates the pace of finished jobs; a plan's long tail makes it
    optimistic early on, which is why the header labels it a forecast.
    """
    c = model.counts
    done = model.done_count()
    ok = sum(c[s] for s in _OK_VALUES)
    bad = sum(c[s] for s in _FAIL_VALUES)
    active = c[S.QUEUED] + c[S.RUNNING]
    end = now
    if finished:
        if model.known is not None and ended:
            end = ended  # rows not all read: the run's own end
        else:
            ends = list(model.ended.values())
            end = max(ends) if ends else now
    elapsed = max(0.0, end - started)
    forecast: float | None = None
    total = len(model)
    if not finished and 0 < done < total and elapsed > 0:
        forecast = elapsed * (total - done) / done
    elif finished or done == total:
        forecast = 0.0
    return RunSummary(total, done, ok, bad, active, elapsed, forecast)
