"""The run header's figures: progress, elapsed time, a forecast of the end, the held jobs."""

from __future__ import annotations

import itertools
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
    """Seconds until the run should end: at its pace so far, and never before its longest remaining path
    of expected work; None when unknown."""

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


_FRONTIER = (S.READY, S.QUEUED, S.RUNNING, S.HELD, S.RETRY_WAIT)
"""States of the jobs a run's remaining work starts from: whatever is WAITING is downstream of one of them
(or of a time condition, which the expected durations know nothing of)."""

_FRONTIER_LIMIT = 5_000
"""Frontier jobs above which `path_ahead` gives up: a run that wide ends with its work, not its path."""


_UNFINISHED = bytes(0 if v in _TERMINAL_VALUES else 1 for v in range(256))
"""State value -> 1 for a job not finished: a translate table, so a million states are
masked at C speed."""


def work_ahead(model: JobsModel, now: float) -> float:
    """Seconds of expected work in the jobs not finished, less what the running ones have run
    (each up to its expected duration)."""
    mask = model.state.translate(_UNFINISHED)
    work = sum(itertools.compress(model.expected, mask))
    for st in (S.RUNNING, S.QUEUED):
        k = model.state.find(st)
        while k >= 0:
            work -= min(model.duration(k, now) or 0.0, model.expected[k])
            k = model.state.find(st, k + 1)
    return max(0.0, work)


def _has_basis(model: JobsModel) -> bool:
    """Whether some job's expected duration is known (an `expected:` key or a history)."""
    from wloadctl.core.critical import DEFAULT_EXPECTED

    if model.guessed:
        return model.guessed.count(1) < len(model.guessed)
    return model.expected.count(DEFAULT_EXPECTED) < len(model.expected)


def path_ahead(model: JobsModel, now: float) -> float | None:
    """Seconds of expected work on the longest path still ahead (None: not known, or not worth a walk).

    The path from a job not yet started is its whole remaining critical path; a running job's own part
    shrinks as it runs (never below 0: it overran, and its end is anyone's guess), its downstream stays.
    """
    remaining, expected = model.remaining, model.expected
    if len(remaining) != len(model):
        return None  # not ranked (jobs made during the run)
    state = model.state
    longest = 0.0
    seen = 0
    for st in _FRONTIER:
        k = state.find(st)
        while k >= 0:
            seen += 1
            if seen > _FRONTIER_LIMIT:
                return None
            path = remaining[k]
            if st in (S.RUNNING, S.QUEUED):
                ran = model.duration(k, now) or 0.0
                path -= min(ran, expected[k])
            longest = max(longest, path)
            k = state.find(st, k + 1)
    return longest


def last_activity(model: JobsModel) -> float | None:
    """When a job of the run last started, stopped or changed state (None: none ever did): the end of a run
    that stopped without journaling one."""
    times = [max(col.values(), default=None) for col in (model.started, model.ended)]
    times += [max(model.stopped.values(), default=None), model.last_change]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def summarize(
    model: JobsModel,
    started: float,
    now: float,
    finished: bool,
    ended: float | None = None,
    stopped_at: float | None = None,
) -> RunSummary:
    """Progress, elapsed time and a forecast of the end.

    The forecast is the longest path of expected work still ahead (`path_ahead`: a running job's time
    so far counts against its expected duration), and never shorter than the expected work left spread
    over the jobs in flight. It is None (the header says `?`) where there is no basis: no job has a
    history or an `expected:`. The pace of finished jobs is not used:
    ten quick jobs done in ten seconds say nothing of the hour the eleventh takes.

    `stopped_at` is when a run that is not live and not finished stopped: its elapsed time ends there.
    """
    c = model.counts
    done = model.done_count()
    ok = sum(c[s] for s in _OK_VALUES)
    bad = sum(c[s] for s in _FAIL_VALUES)
    active = c[S.QUEUED] + c[S.RUNNING]
    end = now
    if stopped_at is not None and not finished:
        end = min(now, stopped_at)  # a stopped run's clock stopped with it
    elif finished:
        if model.known is not None and ended:
            end = ended  # rows not all read: the run's own end
        else:
            ends = list(model.ended.values())
            end = max(ends) if ends else now
    elapsed = max(0.0, end - started)
    forecast: float | None = None
    total = len(model)
    if not finished and done < total and elapsed > 0 and _has_basis(model):
        # The work left spread over the jobs in flight bounds a wide plan the longest path misses
        # (and stands alone where the path is not walked); both stand on expected durations, not on
        # the pace so far, which swung from 2m to 10m and back as quick and slow jobs ended first.
        spread = work_ahead(model, now) / max(1, active)
        forecast = max(path_ahead(model, now) or 0.0, spread)
    elif finished or done == total:
        forecast = 0.0
    return RunSummary(total, done, ok, bad, active, elapsed, forecast)
