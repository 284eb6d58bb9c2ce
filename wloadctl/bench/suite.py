"""`wloadctl bench`: its command line, the sections in order, and the report."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from wloadctl.bench.context import (
    FULL,
    QUICK,
    Context,
    Settings,
    clean_stale_scratch,
    progress,
)
from wloadctl.bench.figures import SECTIONS, Section, as_json
from wloadctl.bench.measure import machine_info
from wloadctl.bench.remote import NO_BROKER
from wloadctl.bench.report import judge, print_report, write_json
from wloadctl.bench.sections import NO_SERVER
from wloadctl.errors import UsageError

DEFAULT_OUT = "wloadctl-bench.json"
"""Where the JSON report goes unless --out says otherwise."""


def build_parser() -> argparse.ArgumentParser:
    """The arguments of `wloadctl bench`."""
    ap = argparse.ArgumentParser(
        prog="wloadctl bench",
        description="Benchmarks at bank scale: dependency evaluation, plan load and time to the first job, end-to-end "
        "throughput, shell jobs beside ninja and make, chain latency, scheduler "
        "memory, dask when installed, and jobs on agents through a private broker.",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="small sizes: everything in well under a minute",
    )
    ap.add_argument(
        "--out", default=DEFAULT_OUT, help=f"the JSON report (default {DEFAULT_OUT})"
    )
    ap.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        metavar="NAME",
        help=f"run only these sections: {', '.join(SECTIONS)}",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=0,
        help="repeats of each measurement, figures are medians "
        "(default: 3, or 1 with --quick)",
    )
    ap.add_argument(
        "--journal-sync",
        choices=("auto", "full", "normal"),
        default="auto",
        help="journal durability of every wloadctl run (auto is the product's default)",
    )
    ap.add_argument(
        "--executors",
        type=int,
        default=2,
        help="executors of the no-op runs (default 2)",
    )
    ap.add_argument(
        "--slots",
        type=int,
        default=512,
        help="slots per executor of the no-op runs (default 512)",
    )
    ap.add_argument(
        "--parallel",
        type=int,
        default=2,
        help="shell runs: executors with one slot each, and -j of ninja and make "
        "(default 2)",
    )
    ap.add_argument(
        "--pg",
        default="",
        metavar="URL",
        help="PostgreSQL server of the postgres section, e.g. postgresql://postgres@127.0.0.1:5432/postgres "
        "(default: $WLOADCTL_TEST_PG, else that one); a scratch database is made there and dropped",
    )
    ap.add_argument(
        "--prefetch",
        type=int,
        default=None,
        metavar="N",
        help="--prefetch of every wloadctl run: tasks per slot an executor takes ahead "
        "(default: the command's default)",
    )
    ap.add_argument("--engine-jobs", type=_job_count, nargs="+", default=None, metavar="N",
                    help="jobs of the bank plans of the engine section, e.g. 1000000 10000000 "
                    "(default: 100,000 and 1,000,000, or 2,000 and 10,000 with --quick)")
    ap.add_argument("--first-job-jobs", type=_job_count, default=0, metavar="N",
                    help="jobs of the plans of the firstjob section (default: 1,000,000, or 2,000 with --quick)")
    ap.add_argument("--seed", type=int, default=1, help="seed of every generated plan")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return ap


MOST_JOBS = 100_000_000
"""The largest plan the benchmark generates (what `wloadctl gen` writes at most)."""


def _job_count(text: str) -> int:
    """A plan size given on the command line: a whole number of jobs, at least 1, at most MOST_JOBS."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job count (a whole number, at least 1)")
    if n > MOST_JOBS:
        raise argparse.ArgumentTypeError(f"{text!r} jobs: at most {MOST_JOBS:,} (a plan of about 10 GB)")
    return n


def _refuse_unwritable_out(out: Path) -> None:
    """Refuse, before anything is measured, a report path the report could not be written to at the end.

    Raises:
        UsageError: it is a directory, or its directory is missing or not writable.
    """
    if out.is_dir():
        raise UsageError(f"--out {out}: it is a directory", hint="give the JSON file to write")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: cannot write in {parent}", hint="give a JSON file in a directory you can write")


def settings_from(a: argparse.Namespace) -> Settings:
    """Settings from parsed arguments."""
    only: tuple[Section, ...] = tuple(s for s in SECTIONS if not a.only or s in a.only)
    repeat = a.repeat if a.repeat > 0 else (1 if a.quick else 3)
    sizes = QUICK if a.quick else FULL
    if a.first_job_jobs > 0:
        sizes = dataclasses.replace(sizes, first_job=a.first_job_jobs)
    if a.engine_jobs:
        sizes = dataclasses.replace(sizes, engine=tuple(a.engine_jobs))
    return Settings(
        sizes=sizes,
        quick=a.quick,
        repeat=repeat,
        sections=only,
        seed=a.seed,
        journal_sync=a.journal_sync,
        executors=max(1, a.executors),
        slots=max(1, a.slots),
        shell_parallel=max(1, a.parallel),
        pg=a.pg,
        prefetch=a.prefetch,
    )


def compile_package() -> str:
    """Compile the package's modules where Python keeps their bytecode, as an installed package has them.

    A checkout run with PYTHONDONTWRITEBYTECODE set (or from a read-only copy) keeps none, and then every
    wloadctl process the benchmark starts compiles some 130 modules again: about a second of each run,
    time no installed scheduler spends. Returns a note for the report when that is what was found."""
    import compileall

    import wloadctl

    if not sys.dont_write_bytecode:
        return ""  # each run's first import writes them
    root = Path(wloadctl.__file__).parent
    ok = compileall.compile_dir(str(root), quiet=1, workers=1)
    return (f"PYTHONDONTWRITEBYTECODE is set: the package's bytecode was compiled first ({root})" if ok else
            f"PYTHONDONTWRITEBYTECODE is set and {root} could not all be compiled: its runs compile modules "
            "at each start, and their figures include it")


def run_suite(settings: Settings, out: Path, quiet: bool = False) -> dict[str, Any]:
    """Run the chosen sections, write the JSON report and return it.

    Every plan, build file and state directory lives in a scratch directory
    that is removed at the end, whatever happens; each run is checked for
    queues, segments and processes left behind.
    """
    from wloadctl.bench import compare, console, firstjob, reads, remote, sections, workflows

    runners = {
        "engine": sections.engine,
        "firstjob": firstjob.firstjob,
        "e2e": sections.e2e,
        "postgres": sections.postgres,
        "shell": compare.shell,
        "latency": sections.latency,
        "memory": sections.memory,
        "reads": reads.reads,
        "console": console.console,
        "workflows": workflows.workflows,
        "dask": compare.dask,
        "remote": remote.remote,
    }
    started = dt.datetime.now(dt.UTC)
    machine = machine_info()
    stale = clean_stale_scratch()
    ctx = Context(settings, say=progress(quiet))
    ctx.notes += [
        f"removed the scratch directory of a killed benchmark: {d}" for d in stale
    ]
    if compiled := compile_package():
        ctx.notes.append(compiled)
    t0 = time.perf_counter()
    try:
        for name in settings.sections:
            runners[name](ctx)
    finally:
        ctx.cleanup()
    machine["load_average_end"] = list(os.getloadavg())
    targets = judge(ctx.figures, ctx.ratios, quick=settings.quick)
    data: dict[str, Any] = {
        "benchmark": "wloadctl bench",
        "mode": "quick" if settings.quick else "full",
        "started": started.isoformat(timespec="seconds"),
        "seconds": time.perf_counter() - t0,
        "out": str(out),
        "settings": {
            "sizes": dataclasses.asdict(settings.sizes),
            "repeat": settings.repeat,
            "sections": settings.sections,
            "seed": settings.seed,
            "journal_sync": settings.journal_sync,
            "executors": settings.executors,
            "slots": settings.slots,
            "shell_parallel": settings.shell_parallel,
            "pg": settings.pg,
            "prefetch": settings.prefetch,
        },
        "machine": machine,
        **as_json(ctx.figures, ctx.ratios, targets),
        "notes": ctx.notes,
        "cleanup": {
            "scratch_dir": str(ctx.root),
            "scratch_removed": not ctx.root.exists(),
            "run_ids": ctx.run_ids,
            "leftovers": ctx.leftovers,
        },
    }
    write_json(out, data)
    print_report(data, ctx.figures, ctx.ratios, targets)
    return data


def main(argv: list[str] | None = None) -> int:
    """Entry point of `wloadctl bench` and `benchmarks/run.py`.

    Returns:
        0 when every measurement ran and nothing was left behind; 1 otherwise
        (missing targets do not fail the benchmark: they are what it reports).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    # `wloadctl bench -- --quick`: the top-level parser hands the separator over too.
    if args[:1] == ["--"]:
        args = args[1:]
    a = build_parser().parse_args(args)
    _refuse_unwritable_out(Path(a.out))

    def stop(signum: int, _frame: object) -> None:
        # Unwind like Ctrl-C, so the run in progress is stopped and the scratch
        # directory removed; the default action would leave both behind.
        raise SystemExit(128 + signum)

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        data = run_suite(settings_from(a), Path(a.out), quiet=a.quiet)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    failed = [
        f for f in data["figures"]
        # A comparison tool that could not finish (dask out of memory or out of time) is
        # reported, not a failure of the benchmark.
        if f["seconds"] is None
        and not f["tool"].startswith("dask")
        and not f["note"].startswith((NO_SERVER, NO_BROKER))
    ]
    if data["cleanup"]["leftovers"] or failed:
        for f in failed:
            print(f"bench: {f['key']} did not complete: {f['note']}", file=sys.stderr)
        for x in data["cleanup"]["leftovers"]:
            print(f"bench: left behind by a run (removed): {x}", file=sys.stderr)
        return 1
    return 0
