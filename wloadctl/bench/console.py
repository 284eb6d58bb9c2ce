"""The console on a big run: attach seconds, memory and what keys cost, beside `status`, the old attach and
the old sorts (by start, duration, attempt or executor, reading every job's row).

The console is measured in a child process (`python -m tui.probe`), one per repeat, so its
memory is its own; the Textual side stays out of this package.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from wloadctl.bench.context import Context
from wloadctl.bench.figures import Extra, Figure, combine, ratio


def _probe(state_dir: Path, *flags: str, timeout: float) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "tui.probe", str(state_dir), *flags], capture_output=True,
                         text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(out.stdout)


def _slowest(keys_ms: dict[str, float]) -> float:
    """The slowest key but those that read a whole column once (the first sort by id or by start)."""
    return max(v for k, v in keys_ms.items() if "(first)" not in k)


def _status(state_dir: Path) -> dict[str, Extra]:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "wloadctl", "status", "--json", "--state-dir", str(state_dir)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"seconds": time.perf_counter() - t0}


def console(ctx: Context) -> None:
    """A finished no-op bank run of the big size; the console attaching to it, from its shape and from its plan."""
    s = ctx.settings
    jobs = s.sizes.big
    ctx.say(f"console: no-op bank {jobs:,} jobs, kept for attaching")
    run = ctx.run(ctx.plan(jobs, "bank", "noop"), jobs, executors=s.executors, slots=s.slots, keep_state=True)
    state_dir = ctx.last_state_dir
    basis = "child process: read the run into the console's model (journal opened, nothing cached)"
    if not run.ok:
        ctx.figures.append(combine("console", "attach", "wloadctl", "bank", jobs, [], basis,
                                   note=f"run {run.status}: {run.error}"))
        return
    timeout = max(600.0, jobs / 1000)
    ctx.say(f"console: attach to {jobs:,} jobs ({s.repeat} times), from the plan once, sorts reading every row"
            " once, `status --json`")
    reps = [_probe(state_dir, "--app", timeout=timeout) for _ in range(s.repeat)]
    old = _probe(state_dir, "--from-plan", timeout=timeout)
    rows = _probe(state_dir, "--every-row", timeout=timeout)
    made: dict[str, Figure] = {}

    def add(name: str, samples: list[dict[str, Any]], what: str = basis) -> None:
        bad = next((r["error"] for r in samples if "error" in r), "")
        runs = [] if bad else [{"seconds": r["attach_seconds"], "rss_mib": r["rss_mib"],
                                "rss_keys_mib": r["rss_keys_mib"], "rss_all_rows_mib": r["rss_all_rows_mib"],
                                "peak_rss_mib": r["peak_rss_mib"],
                                **({"app_seconds": r["app_attach_seconds"]} if "app_attach_seconds" in r else {}),
                                **{f"{k} ms": v for k, v in r["keys_ms"].items()},
                                "slowest key ms": _slowest(r["keys_ms"])} for r in samples]
        made[name] = combine("console", name, "wloadctl", "bank", jobs, runs, what, note=bad)
        ctx.figures.append(made[name])

    add("attach (run's shape)", reps)
    add("attach (parsing the plan, as before)", [old])
    add("attach (sorts reading every row, as before)", [rows],
        basis + "; the sorts by start, duration, attempt and executor read every job's row, not the flat rows")
    made["status"] = combine("console", "status --json (command)", "wloadctl", "bank", jobs,
                             [_status(state_dir) for _ in range(s.repeat)], "whole command")
    ctx.figures.append(made["status"])
    now, was = made["attach (run's shape)"], made["attach (parsing the plan, as before)"]
    ctx.add_ratio(ratio(f"console {jobs}: attach / status --json command", now, made["status"], "seconds"))
    ctx.add_ratio(ratio(f"console {jobs}: attach from the shape / from the plan", now, was, "seconds"))
    ctx.add_ratio(ratio(f"console {jobs}: memory from the shape / from the plan", now, was, "rss_mib"))
    ctx.add_ratio(ratio(f"console {jobs}: slowest key from the shape / from the plan", now, was, "slowest key ms"))
    every = made["attach (sorts reading every row, as before)"]
    ctx.add_ratio(ratio(f"console {jobs}: first sort by start, flat rows / every row", now, every,
                        "sort: start (first) ms"))
    ctx.add_ratio(ratio(f"console {jobs}: memory after every sort, flat rows / every row", now, every,
                        "rss_all_rows_mib"))
    shutil.rmtree(state_dir, ignore_errors=True)
