"""Sections on wloadctl alone: dependency evaluation, end to end, latency, memory."""

from __future__ import annotations

import statistics
from typing import Any

from wloadctl.bench import depeval
from wloadctl.bench.context import Context
from wloadctl.bench.figures import Extra, Figure, combine, ratio
from wloadctl.bench.runs import RunResult, chain_latencies
from wloadctl.gen import Shape

_MIB = 1024.0


def mib(kib: float) -> float:
    """KiB to MiB."""
    return kib / _MIB


def engine(ctx: Context) -> None:
    """Dependency evaluation: load, build, ready set, simulated run, reference loops."""
    s = ctx.settings
    cases: list[tuple[int, Shape]] = [(n, "bank") for n in s.sizes.engine]
    cases.append((s.sizes.engine_chain, "chain"))
    for jobs, shape in cases:
        plan = ctx.plan(jobs, shape, "noop")
        reps: list[dict[str, Any]] = []
        for k in range(s.repeat):
            ctx.say(
                f"dependency evaluation, {shape} {jobs:,} jobs ({k + 1}/{s.repeat})"
            )
            timeout = max(300.0, jobs / 1000) + 2 * s.sizes.rescan_cap
            r = depeval.run_child(plan, 0, s.sizes.rescan_cap, timeout)
            if "error" in r:
                ctx.notes.append(
                    f"dependency evaluation of {shape} {jobs:,}: {r['error']}"
                )
                break
            reps.append(r)
        if reps:
            _engine_figures(ctx, shape, jobs, reps)


def engine_bytes_per_job(r: dict[str, Any], jobs: int) -> float:
    """Memory per job of the engine alone: its process's peak above what it held before the plan.

    The peak covers the plan's load, the core's build and the simulated run, as the scheduler's
    in section memory covers its plan, core and run (that one with its journal and queues beside).
    """
    peak = max(r[p]["peak_kib"] for p in ("load", "build", "initial", "run"))
    return (peak - r["baseline_kib"]) * 1024 / max(1, jobs)


def _engine_figures(
    ctx: Context, shape: str, jobs: int, reps: list[dict[str, Any]]
) -> None:
    def phase(r: dict[str, Any], name: str) -> dict[str, Extra]:
        p = r[name]
        return {
            "seconds": p["seconds"],
            "cpu_seconds": p["cpu_seconds"],
            "peak_mib": mib(p["peak_kib"]),
        }

    basis = "phase wall time inside one process"
    add = ctx.figures.append
    if shape == "bank":
        add(
            combine(
                "engine",
                "load+validate (YAML)",
                "wloadctl",
                shape,
                jobs,
                [
                    {
                        **phase(r, "load"),
                        "plan_mib": mib(r["load"]["rss_after_kib"] - r["baseline_kib"]),
                    }
                    for r in reps
                ],
                basis,
            )
        )
        add(
            combine(
                "engine",
                "engine build (graph, arrays)",
                "wloadctl",
                shape,
                jobs,
                [{**phase(r, "build"), "edges": r["graph"]["edges"]} for r in reps],
                basis,
            )
        )
        add(
            combine(
                "engine",
                "initial ready set",
                "wloadctl",
                shape,
                jobs,
                [{**phase(r, "initial"), "ready": r["initial"]["ready"]} for r in reps],
                basis,
            )
        )
        add(
            combine(
                "engine",
                "load+validate+initial ready set",
                "wloadctl",
                shape,
                jobs,
                [
                    {
                        "seconds": r["load"]["seconds"]
                        + r["build"]["seconds"]
                        + r["initial"]["seconds"]
                    }
                    for r in reps
                ],
                "load + engine build + initial ready set",
            )
        )
    sim = [
        {
            "seconds": r["initial"]["seconds"] + r["run"]["seconds"],
            "cpu_seconds": r["initial"]["cpu_seconds"] + r["run"]["cpu_seconds"],
            "peak_mib": mib(max(r["initial"]["peak_kib"], r["run"]["peak_kib"])),
            "bytes_per_job": engine_bytes_per_job(r, jobs),
            "rounds": r["run"]["rounds"],
            "completed": r["run"]["completed"],
            "slots": r["slots"],
        }
        for r in reps
    ]
    add(
        combine(
            "engine",
            "simulated run",
            "wloadctl",
            shape,
            jobs,
            sim,
            "pure engine, run start to last completion, "
            "every dispatched job completing at once; bytes_per_job = (peak RSS from "
            "plan load to the last completion - RSS before the load) / jobs",
        )
    )
    add(
        combine(
            "engine",
            "simulated run",
            "counter loop",
            shape,
            jobs,
            [
                {
                    **phase(r, "counter"),
                    "rounds": r["counter"]["rounds"],
                    "completed": r["counter"]["completed"],
                    "graph_seconds": r["graph"]["seconds"],
                }
                for r in reps
            ],
            "loop only (its CSR build is graph_seconds)",
        )
    )
    rescan = []
    for r in reps:
        p = r["rescan"]
        # One wording for every repeat, so the figure's note says it once; the
        # rounds and checks reached are medians in its extras.
        note = (
            f"capped at {p['cap_seconds']:.0f}s (see rounds, and checks of total_checks); "
            "seconds estimated at the rate of checks reached"
            if p["capped"]
            else ""
        )
        rescan.append(
            {
                **phase(r, "rescan"),
                "seconds": p["estimated_seconds"],
                "measured_seconds": p["seconds"],
                "capped": p["capped"],
                "rounds": p["rounds"],
                "checks": p["checks"],
                "total_checks": p["total_checks"],
                "note": note,
            }
        )
    add(
        combine(
            "engine",
            "simulated run",
            "re-scan loop",
            shape,
            jobs,
            rescan,
            "loop only; estimated past the cap",
        )
    )
    eng = ctx.find("engine", "simulated run", "wloadctl", shape, jobs)
    ctx.add_ratio(
        ratio(
            f"engine {shape} {jobs}: re-scan loop time / engine time",
            ctx.find("engine", "simulated run", "re-scan loop", shape, jobs),
            eng,
            "seconds",
        )
    )
    ctx.add_ratio(
        ratio(
            f"engine {shape} {jobs}: engine time / counter loop time",
            eng,
            ctx.find("engine", "simulated run", "counter loop", shape, jobs),
            "seconds",
        )
    )


def run_extra(
    r: RunResult, ctx: Context, executors: int, slots: int
) -> dict[str, Extra]:
    """The figures of one end-to-end run, `seconds` being the run's own wall time."""
    win = r.window[1] - r.window[0] if r.window else None
    return {
        "seconds": r.wall_seconds if r.ok else None,
        "process_seconds": r.process_seconds,
        "command_jobs_per_s": r.jobs / r.process_seconds if r.ok and r.process_seconds else None,
        "cpu_seconds": r.cpu_seconds,
        "window_seconds": win,
        "window_jobs_per_s": r.jobs / win if win else None,
        "peak_rss_mib": mib(r.peak_rss_kib),
        "status": r.status,
        "executors": executors,
        "slots": slots,
        "journal_sync": ctx.settings.journal_sync,
        "note": f"run {r.status}: {r.error}" if not r.ok else "",
    }


E2E_BASIS = "the run's own wall time (scheduler start to finish, executors included)"


def e2e(ctx: Context) -> None:
    """No-op jobs through the real scheduler, queues, shared memory and executors."""
    s = ctx.settings
    for jobs in s.sizes.e2e:
        plan = ctx.plan(jobs, "bank", "noop")
        runs: list[RunResult] = []
        for k in range(s.repeat):
            ctx.say(f"end to end, no-op bank {jobs:,} jobs ({k + 1}/{s.repeat})")
            runs.append(
                ctx.run(plan, jobs, executors=s.executors, slots=s.slots, cache="noop")
            )
            if not runs[-1].ok:
                break
        e2e_figure(ctx, jobs, runs)


def e2e_figure(ctx: Context, jobs: int, runs: list[RunResult]) -> Figure:
    """The end-to-end no-op throughput figure of these runs (kept in the context, and returned)."""
    s = ctx.settings
    fig = combine("e2e", "no-op throughput", "wloadctl", "bank", jobs,
                  [run_extra(r, ctx, s.executors, s.slots) for r in runs], E2E_BASIS)
    ctx.figures.append(fig)
    return fig


def memory(ctx: Context) -> None:
    """Scheduler memory per job: peak RSS of a large run above that of a one-job run."""
    s = ctx.settings
    big = s.sizes.big
    runs = ctx.cached_runs("noop", big)
    if not runs:
        ctx.say(f"end to end, no-op bank {big:,} jobs (memory)")
        runs = [
            ctx.run(
                ctx.plan(big, "bank", "noop"),
                big,
                executors=s.executors,
                slots=s.slots,
                cache="noop",
            )
        ]
        if big not in s.sizes.e2e:
            e2e_figure(ctx, big, runs)
    tiny = []
    for k in range(s.repeat):
        ctx.say(f"end to end, one no-op job (memory baseline) ({k + 1}/{s.repeat})")
        tiny.append(
            ctx.run(
                ctx.plan(1, "bank", "noop"), 1, executors=s.executors, slots=s.slots
            )
        )
    base = statistics.median(r.peak_rss_kib for r in tiny)
    reps: list[dict[str, Extra]] = []
    for r in runs:
        per_job = (r.peak_rss_kib - base) * 1024 / big
        reps.append(
            {
                "seconds": r.wall_seconds if r.ok else None,
                "peak_rss_mib": mib(r.peak_rss_kib),
                "baseline_rss_mib": mib(base),
                "bytes_per_job": per_job,
                "hwm_with_summary_mib": mib(r.hwm_kib),
                "status": r.status,
                "note": f"run {r.status}: {r.error}" if not r.ok else "",
            }
        )
    ctx.figures.append(
        combine(
            "memory",
            "scheduler memory per job",
            "wloadctl",
            "bank",
            big,
            reps,
            "the run's own wall time; bytes_per_job = (peak RSS until the run "
            "ended - peak RSS of a "
            "one-job run) / jobs",
        )
    )


def _percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency_extra(r: RunResult) -> dict[str, Extra]:
    """p50/p99/mean/max of the chain latencies in a run's executor records (ms)."""
    lat = chain_latencies(r.records, r.jobs)
    if not lat:
        return {}
    return {
        "p50_ms": _percentile(lat, 0.50) * 1e3,
        "p99_ms": _percentile(lat, 0.99) * 1e3,
        "mean_ms": statistics.fmean(lat) * 1e3,
        "max_ms": max(lat) * 1e3,
        "gaps": len(lat),
    }


def latency(ctx: Context) -> None:
    """Completion-to-dependent-start latency on a no-op chain (executors' clocks)."""
    s = ctx.settings
    jobs = s.sizes.latency
    plan = ctx.plan(jobs, "chain", "noop")
    reps: list[dict[str, Extra]] = []
    for k in range(s.repeat):
        ctx.say(f"latency, no-op chain {jobs:,} jobs ({k + 1}/{s.repeat})")
        r = ctx.run(plan, jobs, executors=s.executors, slots=s.slots, keep_records=True)
        reps.append({**run_extra(r, ctx, s.executors, s.slots), **latency_extra(r)})
        if not r.ok:
            break
    ctx.figures.append(
        combine(
            "latency",
            "completion-to-dependent-start",
            "wloadctl",
            "chain",
            jobs,
            reps,
            "the run's own wall time; p50/p99 from job k's end to job k+1's "
            "start at the executors",
        )
    )


NO_SERVER = "no PostgreSQL server"
"""Start of the note of a postgres figure that could not be measured for want of a server."""


def postgres(ctx: Context) -> None:
    """No-op jobs end to end with the journal in PostgreSQL, beside the SQLite journal measured in this run."""
    from wloadctl.store.base import pg_server
    from wloadctl.store.postgres import scratch_database, server_answers

    s = ctx.settings
    jobs = s.sizes.e2e[-1]
    plan = ctx.plan(jobs, "bank", "noop")
    server = pg_server(s.pg)
    where = server.split("@")[-1]
    if not server_answers(server):
        ctx.figures.append(combine("postgres", "no-op throughput", "wloadctl+postgresql", "bank", jobs, [],
                                   E2E_BASIS, note=f"{NO_SERVER} answered at {where}"))
        return
    if ctx.find("e2e", "no-op throughput", "wloadctl", "bank", jobs) is None:
        runs = ctx.cached_runs("noop", jobs)
        for k in range(s.repeat - len(runs)):
            ctx.say(f"end to end, no-op bank {jobs:,} jobs, SQLite journal ({k + 1}/{s.repeat})")
            runs.append(ctx.run(plan, jobs, executors=s.executors, slots=s.slots, cache="noop"))
        e2e_figure(ctx, jobs, runs)
    pg_runs: list[RunResult] = []
    for k in range(s.repeat):
        ctx.say(f"end to end, no-op bank {jobs:,} jobs, PostgreSQL journal at {where} ({k + 1}/{s.repeat})")
        # A database of its own per run: every run starts from an empty journal, as the SQLite ones do.
        with scratch_database(server, "wl_bench") as url:
            pg_runs.append(ctx.run(plan, jobs, executors=s.executors, slots=s.slots, journal=url))
        if not pg_runs[-1].ok:
            break
    pg = combine("postgres", "no-op throughput", "wloadctl+postgresql", "bank", jobs,
                 [run_extra(r, ctx, s.executors, s.slots) for r in pg_runs], E2E_BASIS)
    ctx.figures.append(pg)
    ctx.add_ratio(ratio(f"e2e {jobs}: PostgreSQL journal jobs/s / SQLite journal jobs/s", pg,
                        ctx.find("e2e", "no-op throughput", "wloadctl", "bank", jobs)))
