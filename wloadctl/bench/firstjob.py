"""Time to the first job of a big plan, and plan load per million jobs, one job a line and one key a line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from wloadctl.bench.context import Context
from wloadctl.bench.figures import Extra, Figure, combine, ratio
from wloadctl.bench.runs import _run_id_of, leftovers
from wloadctl.gen import write_plan

STYLES = ("flow", "block")
"""Plan styles measured: gen's one job a line, and one key a line as people write plans."""
_MILLION = 1_000_000


def _bare_parse(path: Path) -> dict[str, Extra]:
    """The baseline: libyaml's events of the whole file, nothing built from them."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    t0 = time.perf_counter()
    with open(path, "rb") as stream:
        for _ in yaml.parse(stream, Loader=loader):
            pass
    return {"seconds": time.perf_counter() - t0}


def _load(path: Path, jobs: int) -> dict[str, Extra]:
    from wloadctl.core.planfile import load_plan

    t0 = time.perf_counter()
    plan = load_plan(path)
    took = time.perf_counter() - t0
    return {"seconds": took, "seconds_per_million_jobs": took * _MILLION / jobs,
            "read_by_lines": plan.read_by_lines}


def _first_job(ctx: Context, plan: Path, marker: Path, timeout: float) -> dict[str, Extra]:
    """`wloadctl run` from its start until the first job has started (it touches `marker`), then stopped."""
    state_dir = ctx.scratch("firstjob-state")
    marker.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(state_dir),
            "--executors", "1", "--slots", "1", "--journal-sync", ctx.settings.journal_sync]
    t0 = time.perf_counter()
    with open(state_dir.with_name(state_dir.name + ".err"), "wb") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        took: float | None = None
        try:
            while time.perf_counter() - t0 < timeout and proc.poll() is None:
                if marker.exists():
                    took = time.perf_counter() - t0
                    break
                time.sleep(0.005)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    run_id, _ = _run_id_of(state_dir)
    if run_id:
        ctx.run_ids.append(run_id)
        ctx.leftovers += leftovers(run_id)
    out: dict[str, Extra] = {"seconds": took}
    if took is None:
        out["note"] = f"no job started within {timeout:.0f}s (exit {proc.returncode})"
    return out


def firstjob(ctx: Context) -> None:
    """Plan load per million jobs and time to the first job started, in both plan styles.

    Each is set beside a bare libyaml event parse of the same file, measured
    in the same run: the floor of any loader that reads the file through the
    YAML parser.
    """
    s = ctx.settings
    jobs = s.sizes.first_job
    marker = ctx.root / "first-job-started"
    made: dict[tuple[str, str], Figure] = {}
    for style in STYLES:
        path = ctx.root / f"firstjob-{style}-{jobs}.yaml"
        t0 = time.perf_counter()
        write_plan(path, jobs, "bank", s.seed, command=f"touch {marker}", style=style)  # type: ignore[arg-type]
        ctx.notes.append(f"generated {path.name} in {time.perf_counter() - t0:.1f}s")
        shape = f"bank, {style}"
        runs: dict[str, list[dict[str, Extra]]] = {"bare YAML event parse": [], "load+validate": [],
                                                   "time to first job started": []}
        for k in range(s.repeat):
            ctx.say(f"first job: {style} plan of {jobs:,} jobs ({k + 1}/{s.repeat})")
            runs["bare YAML event parse"].append(_bare_parse(path))
            runs["load+validate"].append(_load(path, jobs))
            runs["time to first job started"].append(
                _first_job(ctx, path, marker, timeout=max(120.0, jobs / 5000)))
        bases = {"bare YAML event parse": "in-process, libyaml events only (the baseline)",
                 "load+validate": "in-process load_plan",
                 "time to first job started": "whole `wloadctl run` command, from its start to the first "
                                              "job's process touching a file"}
        for name, reps in runs.items():
            fig = combine("firstjob", name, "wloadctl", shape, jobs, reps, bases[name])
            ctx.figures.append(fig)
            made[(style, name)] = fig
        base = made[(style, "bare YAML event parse")]
        for name in ("load+validate", "time to first job started"):
            ctx.add_ratio(ratio(f"first job {jobs} {style}: {name} / bare YAML event parse",
                                made[(style, name)], base, "seconds"))
    ctx.add_ratio(ratio(f"first job {jobs}: load+validate, one key a line / one job a line",
                        made[("block", "load+validate")], made[("flow", "load+validate")], "seconds"))
    marker.unlink(missing_ok=True)

