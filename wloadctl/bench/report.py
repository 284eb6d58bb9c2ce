"""The benchmark's output: targets judged, a terminal table, the JSON file."""

from __future__ import annotations

import contextlib
import json
import operator
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from wloadctl.bench.figures import Extra, Figure, Ratio, Target, field_of
from wloadctl.bench.workflows import WORKFLOW_NAMES, WORKFLOW_SLOTS
from wloadctl.errors import UsageError

Op = Literal["<", "<=", ">="]
_COMPARE = {"<": operator.lt, "<=": operator.le, ">=": operator.ge}
"""How a target's value is judged against its bound."""


@dataclass(frozen=True)
class TargetSpec:
    """One target of the issue, and where its value comes from."""

    label: str
    """Short id (a1, b1, ...)."""
    text: str
    """The target in words."""
    source: str
    """A figure key, or `ratio:<name>`."""
    field: str
    """Field of the figure (`seconds`, `jobs_per_s`, an extra key); `value`: a ratio."""
    op: Op
    """How the value is compared with `bound`."""
    bound: float
    """The limit."""
    unit: str
    """Unit of the value."""
    full_only: bool = False
    """Judged only at full sizes: its figure keeps its name at --quick's smaller sizes."""


def _fig(section: str, name: str, tool: str, shape: str, jobs: int) -> str:
    return f"{section}/{name}/{tool}/{shape}/{jobs}"


def _shell_ratio(shape: str) -> str:
    return f"ratio:shell {shape} 10000: wloadctl / ninja -j2 throughput (whole command)"


TARGETS: tuple[TargetSpec, ...] = (
    TargetSpec(
        "a1",
        "engine: simulated run of a 1,000,000-job bank DAG under 5 s",
        _fig("engine", "simulated run", "wloadctl", "bank", 1_000_000),
        "seconds",
        "<",
        5.0,
        "s",
    ),
    TargetSpec(
        "a2",
        "load and validate the same plan from YAML under 30 s",
        _fig("engine", "load+validate (YAML)", "wloadctl", "bank", 1_000_000),
        "seconds",
        "<",
        30.0,
        "s",
    ),
    TargetSpec(
        "a3",
        "engine: simulated run of a 10,000,000-job bank DAG within 30 s (--engine-jobs 10000000)",
        _fig("engine", "simulated run", "wloadctl", "bank", 10_000_000),
        "seconds",
        "<=",
        30.0,
        "s",
    ),
    TargetSpec(
        "a4",
        "the same within 1 KiB of memory per job (plan, core and run)",
        _fig("engine", "simulated run", "wloadctl", "bank", 10_000_000),
        "bytes_per_job",
        "<=",
        1024.0,
        "bytes/job",
    ),
    TargetSpec(
        "b1",
        "no-op jobs end to end at 100,000 jobs: 35,000 jobs/s or more",
        _fig("e2e", "no-op throughput", "wloadctl", "bank", 100_000),
        "jobs_per_s",
        ">=",
        35_000.0,
        "jobs/s",
    ),
    TargetSpec(
        "b3",
        "the same with the journal in PostgreSQL: 10,000 jobs/s or more",
        _fig("postgres", "no-op throughput", "wloadctl+postgresql", "bank", 100_000),
        "jobs_per_s",
        ">=",
        10_000.0,
        "jobs/s",
    ),
    TargetSpec(
        "b2",
        "a 1,000,000-job no-op run end to end at 60,000 jobs/s or more",
        _fig("e2e", "no-op throughput", "wloadctl", "bank", 1_000_000),
        "jobs_per_s",
        ">=",
        60_000.0,
        "jobs/s",
    ),
    TargetSpec(
        "c1",
        "shell jobs, bank 10,000: 0.8 x ninja -j2 or better",
        _shell_ratio("bank"),
        "value",
        ">=",
        0.8,
        "x",
    ),
    TargetSpec(
        "c2",
        "shell jobs, wide 10,000: 0.8 x ninja -j2 or better",
        _shell_ratio("wide"),
        "value",
        ">=",
        0.8,
        "x",
    ),
    TargetSpec(
        "c3",
        "shell jobs, chain 10,000: 0.9 x ninja -j2 or better",
        _shell_ratio("chain"),
        "value",
        ">=",
        0.9,
        "x",
    ),
    *(
        TargetSpec(
            f"c{k}",
            f"shell jobs, {shape} 10,000: CPU per job at most ninja -j2's (every process, the jobs' own included)",
            f"ratio:shell {shape} 10000: wloadctl / ninja -j2 CPU per job",
            "value",
            "<=",
            1.0,
            "x",
        )
        for k, shape in ((4, "bank"), (5, "wide"), (6, "chain"))
    ),
    TargetSpec(
        "d",
        "chain of 1,000 no-op jobs: completion-to-dependent-start p50 under 1 ms",
        _fig("latency", "completion-to-dependent-start", "wloadctl", "chain", 1_000),
        "p50_ms",
        "<",
        1.0,
        "ms",
    ),
    TargetSpec(
        "e",
        "scheduler memory at 1,000,000 jobs under 1.5 KiB per job",
        _fig("memory", "scheduler memory per job", "wloadctl", "bank", 1_000_000),
        "bytes_per_job",
        "<",
        1536.0,
        "bytes/job",
    ),
    TargetSpec(
        "f1",
        "no-op jobs through 2 agents and a broker, 20,000 jobs: 0.5 x the local path or better (goal)",
        "ratio:remote 20000: 2 agents jobs/s / local jobs/s",
        "value",
        ">=",
        0.5,
        "x",
    ),
    TargetSpec(
        "f2",
        "the same: 10 x Dask distributed with 2 worker processes or better (floor; Dask on 4,000 jobs)",
        "ratio:remote 20000: 2 agents jobs/s / Dask distributed jobs/s",
        "value",
        ">=",
        10.0,
        "x",
    ),
    TargetSpec(
        "r1",
        "status of a finished 1,000,000-job run within 0.2 s, without replaying it",
        _fig("reads", "status", "wloadctl", "bank", 1_000_000),
        "seconds",
        "<",
        0.2,
        "s",
    ),
    TargetSpec(
        "r2",
        "history of one job of the same run within 50 ms",
        _fig("reads", "history of one job", "wloadctl", "bank", 1_000_000),
        "seconds",
        "<",
        0.05,
        "s",
    ),
    TargetSpec(
        "r3",
        "why of one job of the same run within 50 ms",
        _fig("reads", "why of one job", "wloadctl", "bank", 1_000_000),
        "seconds",
        "<",
        0.05,
        "s",
    ),
    TargetSpec(
        "s1",
        "time to the first job started of a 1,000,000-job plan (one job a line) within 5 s",
        _fig("firstjob", "time to first job started", "wloadctl", "bank, flow", 1_000_000),
        "seconds",
        "<",
        5.0,
        "s",
    ),
    TargetSpec(
        "k1",
        "the console attaches to a finished 1,000,000-job run (app loaded and painted) within 5 s",
        _fig("console", "attach (run's shape)", "wloadctl", "bank", 1_000_000),
        "app_seconds",
        "<",
        5.0,
        "s",
    ),
    TargetSpec(
        "k2",
        "the same console holds under 300 MB after its keys and filters",
        _fig("console", "attach (run's shape)", "wloadctl", "bank", 1_000_000),
        "rss_keys_mib",
        "<",
        300.0,
        "MiB",
    ),
    TargetSpec(
        "k3",
        "its keys and filters answer within 100 ms (the first sort by id or start, which reads a column, aside)",
        _fig("console", "attach (run's shape)", "wloadctl", "bank", 1_000_000),
        "slowest key ms",
        "<",
        100.0,
        "ms",
    ),
    TargetSpec(
        "k4",
        "and under 300 MB after its sorts by start, duration, attempt and executor (read from the flat rows)",
        _fig("console", "attach (run's shape)", "wloadctl", "bank", 1_000_000),
        "rss_all_rows_mib",
        "<",
        300.0,
        "MiB",
    ),
    TargetSpec(
        "s2",
        "load of a plan written one key a line within 10 s per million jobs",
        _fig("firstjob", "load+validate", "wloadctl", "bank, block", 1_000_000),
        "seconds",
        "<",
        10.0,
        "s",
    ),
    *(
        TargetSpec(
            f"w{k}",
            f"workflow {name}, {label}: makespan at most {bound} x ninja -j{WORKFLOW_SLOTS}'s",
            f"ratio:workflow {name}: wloadctl {label} / ninja -j{WORKFLOW_SLOTS} makespan",
            "value",
            "<=",
            bound,
            "x",
            full_only=True,
        )
        for k, (label, bound, name) in enumerate(
            ((label, bound, name) for label, bound in (("first run", 1.0), ("second run (history)", 0.9))
             for name in WORKFLOW_NAMES), start=1)
    ),
)
"""The issue's targets (on 2 cores)."""


def judge(figures: list[Figure], ratios: list[Ratio], quick: bool = False) -> list[Target]:
    """Each target with its measured value (None when this run did not measure it)."""
    by_key = {f.key: f for f in figures}
    by_ratio = {r.name: r for r in ratios}
    out = []
    for t in TARGETS:
        value: float | None = None
        if quick and t.full_only:
            pass
        elif t.source.startswith("ratio:"):
            r = by_ratio.get(t.source[len("ratio:") :])
            value = r.value if r is not None else None
        elif (f := by_key.get(t.source)) is not None:
            value = field_of(f, t.field)
        met = None if value is None else _COMPARE[t.op](value, t.bound)
        out.append(Target(t.label, t.text, t.source, value, t.unit, met))
    return out


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write the report (atomically: a reader never sees half a file).

    Raises:
        UsageError: it cannot be written there (the figures were printed already).
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write the report to {path}: {e.strerror or e}",
                         hint="the figures are in the table above; give --out a file you can write") from None


_DETAILS = (
    ("peak_mib", "peak {:.0f} MiB"),
    ("peak_rss_mib", "peak RSS {:.0f} MiB"),
    ("bytes_per_job", "{:.0f} B/job"),
    ("p50_ms", "p50 {:.2f} ms"),
    ("p99_ms", "p99 {:.2f} ms"),
    ("run_jobs_per_s", "run only {:,.0f}/s"),
    ("window_jobs_per_s", "steady {:,.0f}/s"),
    ("process_seconds", "command {:.1f}s"),
    ("cpu_seconds", "cpu {:.1f}s"),
    ("rounds", "{:,} rounds"),
)


def _number(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else spec.format(v)


def _details(extra: dict[str, Extra], note: str) -> str:
    parts = []
    for key, spec in _DETAILS:
        v = extra.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            parts.append(spec.format(v))
    if note:
        parts.append(note)
    return ", ".join(parts)


def print_report(
    data: dict[str, Any],
    figures: list[Figure],
    ratios: list[Ratio],
    targets: list[Target],
) -> None:
    """Print the figures, ratios, targets and notes as tables on the terminal."""
    # rich is a dependency of the CLI's display only; the engine never imports it.
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # Piped or redirected output would wrap at 80 columns: give the table room.
    console = Console(width=None if sys.stdout.isatty() else 160)
    m = data["machine"]
    start, end = m["load_average_start"][0], m["load_average_end"][0]
    load = f"{start:.1f} at start, {end:.1f} at end"
    console.print(
        f"[bold]wloadctl bench[/] ({data['mode']}, median of "
        f"{data['settings']['repeat']}) on {m['cores']} cores, {m['cpu']}, "
        f"Python {m['python']}, {m['platform']}; load average {load}"
    )
    t = Table(title="figures", show_lines=False)
    for col in ("section", "measurement", "tool", "shape", "jobs"):
        t.add_column(col)
    t.add_column("seconds", justify="right")
    t.add_column("jobs/s", justify="right")
    t.add_column("details", overflow="fold")
    for f in figures:
        t.add_row(
            f.section,
            f.name,
            f.tool,
            f.shape,
            f"{f.jobs:,}",
            _fmt(f.seconds, "{:.3f}"),
            _fmt(f.jobs_per_s, "{:,.0f}"),
            escape(_details(f.extra, f.note)),
        )
    console.print(t)
    if ratios:
        rt = Table(title="ratios (same run)")
        rt.add_column("ratio")
        rt.add_column("value", justify="right")
        for r in ratios:
            rt.add_row(r.name, f"{r.value:.2f}")
        console.print(rt)
    tt = Table(title="targets of the issue")
    for col in ("", "target", "measured", "met"):
        tt.add_column(col)
    for g in targets:
        met = "-" if g.met is None else ("[green]yes[/]" if g.met else "[red]no[/]")
        shown = (
            "not measured at this size"
            if g.value is None
            else f"{_number(g.value)} {g.unit}"
        )
        tt.add_row(g.label, g.text, shown, met)
    console.print(tt)
    for note in data["notes"]:
        console.print(f"note: {escape(note)}")
    console.print(f"JSON: {data['out']}")
