"""The comparing sections: shell jobs beside ninja and make, no-op beside dask."""

from __future__ import annotations

from wloadctl.bench import buildtools, daskcmp
from wloadctl.bench.context import Context
from wloadctl.bench.figures import Extra, combine, ratio
from wloadctl.bench.measure import file_create_micros
from wloadctl.bench.sections import latency_extra, mib


def shell(ctx: Context) -> None:
    """Shell jobs running `true`, beside ninja and make on the same DAG and -j."""
    s = ctx.settings
    jobs, par = s.sizes.shell, s.shell_parallel
    tools = [t for t in buildtools.TOOLS if buildtools.available(t)]
    for t in buildtools.TOOLS:
        if t not in tools:
            ctx.notes.append(
                f"{t} is not installed: the shell comparison runs without it"
            )
    ctx.notes.append(
        f"creating a file in the scratch directory costs {file_create_micros(ctx.scratch('files')):.0f} us "
        "(each shell job's log is a new file; ninja and make create none); the shell runs' state "
        "directories are kept until the end, so no run pays for the deletion of another's logs"
    )
    for shape in ("bank", "wide", "chain"):
        plan = ctx.plan(jobs, shape, "shell")
        dirs = {}
        for t in tools:
            d = dirs[t] = ctx.scratch(f"{t}-{shape}")
            writer = (
                buildtools.write_ninja_file
                if t == "ninja"
                else buildtools.write_makefile
            )
            writer(
                d / ("build.ninja" if t == "ninja" else "Makefile"),
                jobs,
                shape,
                s.seed,
                "true",
            )
        wl: list[dict[str, Extra]] = []
        other: dict[str, list[dict[str, Extra]]] = {t: [] for t in tools}
        for k in range(s.repeat):
            # Tools take turns within each repeat, so a busy moment of a shared machine
            # falls on all of them alike.
            ctx.say(
                f"shell jobs, {shape} {jobs:,}: wloadctl, {', '.join(tools)} "
                f"({k + 1}/{s.repeat})"
            )
            # Shell jobs are bounded by process spawning (1,500-1,900/s here), and a
            # chain by the latency of each hop: a slower bound than no-op runs.
            r = ctx.run(
                plan,
                jobs,
                executors=par,
                slots=1,
                keep_records=shape == "chain",
                timeout=max(300.0, jobs / 10),
                keep_state=True,
            )
            run_s = r.wall_seconds if r.ok else None
            wl.append(
                {
                    "seconds": r.process_seconds if r.ok else None,
                    "run_seconds": run_s,
                    "run_jobs_per_s": jobs / run_s if run_s else None,
                    "cpu_seconds": r.cpu_seconds,
                    "peak_rss_mib": mib(r.peak_rss_kib),
                    **(
                        {
                            k2: v
                            for k2, v in latency_extra(r).items()
                            if k2 in ("p50_ms", "p99_ms")
                        }
                        if shape == "chain"
                        else {}
                    ),
                    "note": f"run {r.status}: {r.error}" if not r.ok else "",
                }
            )
            for t in tools:
                tr = buildtools.run_tool(t, dirs[t], par, timeout=max(120.0, jobs / 50))
                other[t].append(
                    {
                        "seconds": tr.seconds if tr.ok else None,
                        "cpu_seconds": tr.cpu_seconds,
                        "note": "" if tr.ok else f"{t} failed: {tr.error}",
                    }
                )
        name = "shell jobs (true)"
        whole = "the whole command, start to exit"
        ctx.figures.append(
            combine(
                "shell",
                name,
                "wloadctl",
                shape,
                jobs,
                wl,
                f"{whole} (run_seconds: the run's own wall time)",
            )
        )
        for t in tools:
            ctx.figures.append(
                combine("shell", name, f"{t} -j{par}", shape, jobs, other[t], whole)
            )
        mine = ctx.find("shell", name, "wloadctl", shape, jobs)
        for t in tools:
            theirs = ctx.find("shell", name, f"{t} -j{par}", shape, jobs)
            ctx.add_ratio(
                ratio(
                    f"shell {shape} {jobs}: wloadctl / {t} -j{par} throughput "
                    "(whole command)",
                    mine,
                    theirs,
                )
            )
            ctx.add_ratio(
                ratio(
                    f"shell {shape} {jobs}: wloadctl / {t} -j{par} throughput "
                    "(run only)",
                    mine,
                    theirs,
                    "run_jobs_per_s",
                    "jobs_per_s",
                )
            )
            # The same jobs on both sides: the ratio of their CPU is that of CPU per job (every process of
            # the command, the jobs' own included).
            ctx.add_ratio(
                ratio(
                    f"shell {shape} {jobs}: wloadctl / {t} -j{par} CPU per job",
                    mine,
                    theirs,
                    "cpu_seconds",
                )
            )


def dask(ctx: Context) -> None:
    """dask's threaded scheduler on the same no-op DAG, when dask is installed."""
    s = ctx.settings
    if not daskcmp.available():
        ctx.notes.append(daskcmp.MISSING)
        return
    limit = daskcmp.memory_limit_bytes()
    workers = ctx.settings.executors
    for jobs in s.sizes.dask:
        reps: list[dict[str, Extra]] = []
        for k in range(s.repeat):
            ctx.say(f"dask threaded, no-op bank {jobs:,} jobs ({k + 1}/{s.repeat})")
            r = daskcmp.run_child(
                jobs, "bank", s.seed, workers, limit, timeout=max(120.0, jobs / 100)
            )
            if "error" in r:
                reps.append(
                    {"seconds": None, "note": f"dask did not finish: {r['error']}"}
                )
                break
            reps.append(
                {
                    "seconds": r["seconds"],
                    "graph_seconds": r["graph_seconds"],
                    "peak_mib": mib(r["peak_kib"]),
                    "workers": r["workers"],
                    "memory_limit_mib": limit >> 20,
                }
            )
        tool = "dask threaded"
        ctx.figures.append(
            combine(
                "dask",
                "no-op DAG",
                tool,
                "bank",
                jobs,
                reps,
                "dask.threaded.get on the DAG's sinks (graph built beforehand)",
            )
        )
        ctx.add_ratio(
            ratio(
                f"no-op bank {jobs}: wloadctl end to end / dask threaded throughput",
                ctx.find("e2e", "no-op throughput", "wloadctl", "bank", jobs),
                ctx.find("dask", "no-op DAG", tool, "bank", jobs),
            )
        )
