"""Dependency evaluation in its own process: load, build, simulation, reference loops.

Run as `python -m wloadctl.bench.depeval --plan FILE` it prints one JSON object;
a fresh process per plan keeps each phase's peak memory its own.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from itertools import repeat
from pathlib import Path
from typing import Any

from wloadctl.bench.measure import memory_kib, reset_peak


class Phase:
    """Times one phase (wall and CPU) and reads its peak resident memory."""

    def __init__(self, resettable: bool) -> None:
        self.resettable = resettable
        self.out: dict[str, Any] = {}

    def __enter__(self) -> dict[str, Any]:
        gc.collect()
        if self.resettable:
            reset_peak()
        self._wall = time.perf_counter()
        self._cpu = time.process_time()
        return self.out

    def __exit__(self, *exc: object) -> None:
        self.out["seconds"] = time.perf_counter() - self._wall
        self.out["cpu_seconds"] = time.process_time() - self._cpu
        mem = memory_kib()
        if mem is not None:
            self.out["rss_after_kib"], self.out["peak_kib"] = mem


def _simulate(core: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start the run, then complete every dispatched job at once, until none is."""
    from wloadctl.core.commands import Dispatch
    from wloadctl.core.events import JobsFinishedEvent, RunStartedEvent
    from wloadctl.core.states import JobState

    resettable = reset_peak()
    with Phase(resettable) as initial:
        cmds = core.handle(RunStartedEvent(0.0, cause_id="bench"))
    initial["ready"] = (
        core.counts[int(JobState.READY)] + core.counts[int(JobState.QUEUED)]
    )
    # The stand-in for the executors below makes a whole stage's results at once (a quarter of a
    # million tuples at 10M jobs), which no loop turn of the scheduler holds: the collector is held
    # off for it as the engine holds it off for its own batches, so neither is charged the other's
    # walks of those lists.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with Phase(resettable) as run:
            rounds = 0
            while True:
                tasks = [t for c in cmds if isinstance(c, Dispatch) for t in c.tasks]
                cmds = []  # the journal would have taken the turn's transitions by now
                if not tasks:
                    break
                rounds += 1
                # What the executors report: every job exited 0 (on executor 0).
                jobs, attempts = zip(*tasks, strict=True)
                del tasks
                done = list(zip(jobs, attempts, repeat(0), repeat(0)))
                del jobs, attempts
                core.feed(JobsFinishedEvent(done, float(rounds), cause_id="bench"))
                del done
                cmds = core.flush()
    finally:
        if collecting:
            gc.enable()
    run["rounds"] = rounds
    run["completed"] = core.counts[int(JobState.SUCCEEDED)]
    return initial, run


def evaluate(plan_path: str, slots: int, rescan_cap: float) -> dict[str, Any]:
    """Measure every phase of dependency evaluation on one plan.

    Args:
        plan_path: a plan made by `wloadctl gen`.
        slots: executor slots the engine is given (0: one per job, so every ready
            job is dispatched in the round it becomes ready, like the reference loops).
        rescan_cap: seconds after which the re-scanning loop stops.

    Returns:
        A JSON-ready dict of phases: load, build, initial, run, graph, counter, rescan.
    """
    from wloadctl.bench.baselines import (
        build_graph,
        counter_run,
        rescan_run,
        rescan_total_checks,
    )
    from wloadctl.core.engine import SchedulerCore
    from wloadctl.core.planfile import load_plan

    resettable = reset_peak()
    base = memory_kib()
    out: dict[str, Any] = {
        "peak_resettable": resettable,
        "baseline_kib": base[0] if base else 0,
    }
    with Phase(resettable) as load:
        plan = load_plan(plan_path)
    n = len(plan.jobs)
    out["jobs"] = n
    out["load"] = load
    slots = slots or n
    out["slots"] = slots
    # As the scheduler does (procs/runner.py): the collector off while the core is built, where it
    # would walk the plan's millions of objects at each collection the build's allocations trigger.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with Phase(resettable) as build:
            core = SchedulerCore(plan, slots)
    finally:
        if collecting:
            gc.enable()
    out["build"] = build
    # As the scheduler does once its plan and core are built: the collector leaves the
    # millions of long-lived objects alone (the reference loops get the same below).
    gc.freeze()
    out["initial"], out["run"] = _simulate(core)
    del core
    with Phase(resettable) as graph:
        g = build_graph(plan)
    graph["edges"] = g.edges
    gc.freeze()
    out["graph"] = graph
    with Phase(resettable) as counter:
        sizes = counter_run(g)
    counter["rounds"] = len(sizes)
    counter["completed"] = sum(sizes)
    out["counter"] = counter
    with Phase(resettable) as rescan:
        r = rescan_run(g, rescan_cap)
    total = rescan_total_checks(n, sizes)
    rescan.update(
        rounds=r.rounds,
        completed=r.completed,
        checks=r.checks,
        capped=r.capped,
        total_checks=total,
        cap_seconds=rescan_cap,
    )
    # When capped, the rest is estimated at the rate of checks reached so far:
    # every round costs about the same per waiting job examined.
    rescan["estimated_seconds"] = (
        rescan["seconds"] * total / r.checks
        if r.capped and r.checks
        else rescan["seconds"]
    )
    out["rescan"] = rescan
    return out


def run_child(
    plan: Path, slots: int, rescan_cap: float, timeout: float
) -> dict[str, Any]:
    """Run `evaluate` in a fresh interpreter and return its figures.

    Returns:
        The figures, or {"error": why} when the child failed or ran past `timeout`.
    """
    argv = [
        sys.executable,
        "-m",
        "wloadctl.bench.depeval",
        "--plan",
        str(plan),
        "--slots",
        str(slots),
        "--rescan-cap",
        str(rescan_cap),
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {
            "error": f"dependency evaluation ran past {timeout:.0f}s and was stopped"
        }
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
        return {
            "error": f"dependency evaluation failed (exit {done.returncode}): {tail[0]}"
        }
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m wloadctl.bench.depeval`."""
    ap = argparse.ArgumentParser(prog="python -m wloadctl.bench.depeval")
    ap.add_argument("--plan", required=True)
    ap.add_argument(
        "--slots", type=int, default=0, help="engine slots (0: one per job)"
    )
    ap.add_argument(
        "--rescan-cap",
        type=float,
        default=60.0,
        help="seconds before the re-scan loop stops",
    )
    a = ap.parse_args(argv)
    print(json.dumps(evaluate(a.plan, a.slots, a.rescan_cap)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
