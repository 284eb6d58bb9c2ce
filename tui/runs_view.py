"""Textual-free projection of the run list: rows, the host's risk line, and finding a run by name."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

LIVE = ("running", "holding")
"""Statuses of runs whose scheduler is up."""


class RunLike(Protocol):
    """What the list reads of a run (wloadctl.runlist.RunEntry, frozen: read, never set)."""

    @property
    def run(self) -> str: ...

    @property
    def plan(self) -> str: ...

    @property
    def business_date(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def done(self) -> int: ...

    @property
    def total(self) -> int: ...

    @property
    def at_risk(self) -> int: ...

    @property
    def late(self) -> int: ...

    @property
    def started(self) -> float: ...

    @property
    def state_dir(self) -> str: ...

    @property
    def latest(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class HostRisk:
    """The runs of a host in one line."""

    runs: int
    """Runs listed."""
    live: int
    """Runs whose scheduler is up."""
    at_risk_runs: int
    """Live runs with a job AT_RISK or LATE."""
    at_risk_jobs: int
    """Jobs AT_RISK across the live runs."""
    late_jobs: int
    """Jobs LATE across the live runs."""

    def line(self) -> str:
        """`12 runs, 3 live, 1 at risk (2 jobs AT_RISK, 1 LATE)`."""
        return (f"{self.runs} runs, {self.live} live, {self.at_risk_runs} at risk "
                f"({self.at_risk_jobs} jobs AT_RISK, {self.late_jobs} LATE)")


def host_risk(runs: Sequence[RunLike]) -> HostRisk:
    """How many runs there are, how many are live and how many of those are at risk."""
    live = [r for r in runs if r.status in LIVE]
    return HostRisk(len(runs), len(live), sum(1 for r in live if r.at_risk or r.late),
                    sum(r.at_risk for r in live), sum(r.late for r in live))


def run_row(r: RunLike) -> tuple[str, ...]:
    """The cells of one run: plan, run id, status, progress, risk, business date, started."""
    pct = f"{100 * r.done // r.total:3d}%" if r.total else "  -"
    risk = "-" if not (r.at_risk or r.late) else f"{r.at_risk} risk/{r.late} late"
    started = dt.datetime.fromtimestamp(r.started).strftime("%m-%d %H:%M") if r.started else "-"
    return (r.plan, r.run, r.status, f"{r.done}/{r.total} {pct}", risk, r.business_date, started)


COLUMNS = ("PLAN", "RUN", "STATUS", "PROGRESS", "SLA", "DATE", "STARTED")
"""Column titles of `run_row`. The run id comes next to the plan: two runs of a plan differ by it alone."""


def columns_fitting(rows: Sequence[tuple[str, ...]], width: int) -> int:
    """How many of COLUMNS to show in `width` cells: all of them, or all but STARTED when they would not
    fit (the run id starts with the same time), so that no column is cut off.

    Args:
        rows: the cells of each run (`run_row`).
        width: the table's width inside its border (0: not known yet).
    """
    widths = [max(map(len, column)) for column in zip(COLUMNS, *rows, strict=True)]
    # A table pads each cell by one column on either side.
    need = sum(widths) + 2 * len(widths)
    return len(COLUMNS) - 1 if 0 < width < need else len(COLUMNS)


def find_run(runs: Sequence[RunLike], name: str) -> RunLike | None:
    """The run a `:run NAME` means: a run id, else the newest run of a plan of that name, else a prefix."""
    for r in runs:
        if r.run == name:
            return r
    by_plan = [r for r in runs if r.plan == name]
    if not by_plan:
        by_plan = [r for r in runs if r.plan.startswith(name) or r.run.startswith(name)]
    return max(by_plan, key=lambda r: r.started) if by_plan else None
