"""dask on the same no-op DAG, in its own memory-limited process: the threaded
scheduler, or dask.distributed with a LocalCluster of worker processes.

dask and distributed are an optional extra (`pip install 'wloadctl[bench]'`); without
them the benchmark says so and skips the comparison. Run as `python -m
wloadctl.bench.daskcmp --jobs N --shape bank [--scheduler distributed]` it prints one
JSON object.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any, Literal

from wloadctl.bench.measure import memory_kib, reset_peak

MISSING = (
    "dask is not installed: the dask comparison is skipped"
    " (pip install 'wloadctl[bench]')"
)
"""What the report says when dask is missing."""


MISSING_DISTRIBUTED = (
    "dask.distributed is not installed: the Dask distributed comparison is skipped"
    " (pip install 'wloadctl[bench]')"
)
"""What the report says when distributed is missing."""

Scheduler = Literal["threaded", "distributed"]
"""Which dask scheduler runs the graph."""


def available(scheduler: Scheduler = "threaded") -> bool:
    """Whether dask (and, for `distributed`, dask.distributed) can be imported here."""
    names = ("dask", "distributed") if scheduler == "distributed" else ("dask",)
    return all(importlib.util.find_spec(n) is not None for n in names)


def _noop(*_upstream: object) -> None:
    """A task that does nothing with its upstreams' results."""
    return None


def measure(jobs: int, shape: str, seed: int, workers: int, scheduler: Scheduler = "threaded") -> dict[str, Any]:
    """Run the DAG of `wloadctl gen` as a dask graph.

    dask is asked for the DAG's sinks (jobs nothing depends on), which runs
    every job once; asking for every key instead is about twice as slow here,
    so this is the fairer use. With `distributed`, a LocalCluster of `workers`
    worker processes (one thread each) is started before the clock starts and
    closed after it stops.

    Returns:
        graph_seconds, seconds (the computation), peak_kib, baseline_kib, workers
        (and start_seconds, the cluster's start, with `distributed`).
    """
    import dask

    from wloadctl.gen import iter_jobs

    base = memory_kib()
    t0 = time.perf_counter()
    graph: dict[str, tuple[Any, ...]] = {
        job: (_noop, *deps)
        for job, deps, _ in iter_jobs(jobs, shape, seed)  # type: ignore[arg-type]
    }
    upstream = {dep for task in graph.values() for dep in task[1:]}
    keys = [job for job in graph if job not in upstream]
    graph_seconds = time.perf_counter() - t0
    extra: dict[str, Any] = {}
    if scheduler == "distributed":
        seconds, extra["start_seconds"] = _distributed(graph, keys, workers)
    else:
        import dask.threaded

        gc.collect()
        reset_peak()
        t1 = time.perf_counter()
        dask.threaded.get(graph, keys, num_workers=workers)
        seconds = time.perf_counter() - t1
    mem = memory_kib()
    return {
        **extra,
        "scheduler": scheduler,
        "graph_seconds": graph_seconds,
        "seconds": seconds,
        "workers": workers,
        "sinks": len(keys),
        "peak_kib": mem[1] if mem else 0,
        "baseline_kib": base[0] if base else 0,
        "dask": dask.__version__,
    }


def _distributed(graph: dict[str, tuple[Any, ...]], keys: list[str], workers: int) -> tuple[float, float]:
    """(seconds of the computation, seconds of the cluster's start) on a LocalCluster of worker processes."""
    from dask.distributed import Client, LocalCluster

    t0 = time.perf_counter()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(workers)
        start = time.perf_counter() - t0
        gc.collect()
        reset_peak()
        t1 = time.perf_counter()
        client.get(graph, keys)
        seconds = time.perf_counter() - t1
    return seconds, start


def run_child(
    jobs: int, shape: str, seed: int, workers: int, memory_limit: int, timeout: float,
    scheduler: Scheduler = "threaded",
) -> dict[str, Any]:
    """Run `measure` in a fresh interpreter under an address-space limit.

    Returns:
        Its figures, or {"error": why} (out of memory, timed out, failed).
    """
    argv = [
        sys.executable,
        "-m",
        "wloadctl.bench.daskcmp",
        "--jobs",
        str(jobs),
        "--shape",
        shape,
        "--seed",
        str(seed),
        "--workers",
        str(workers),
        "--memory-limit",
        str(memory_limit),
        "--scheduler",
        scheduler,
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {timeout:.0f}s"}
    if done.returncode != 0:
        text = (done.stdout + done.stderr).strip().splitlines()
        last = text[-1] if text else f"exit {done.returncode}"
        if "MemoryError" in (done.stderr or "") or "out of memory" in last:
            return {"error": f"out of memory (limit {memory_limit >> 20} MiB)"}
        return {"error": last}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def memory_limit_bytes() -> int:
    """Address space the dask child may use: half the available memory, at most 8 GiB.

    The machine may be shared: a comparison must not push others out of memory.
    """
    avail = 0
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    return min(8 << 30, avail // 2) if avail else 4 << 30


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m wloadctl.bench.daskcmp`."""
    ap = argparse.ArgumentParser(prog="python -m wloadctl.bench.daskcmp")
    ap.add_argument("--jobs", type=int, required=True)
    ap.add_argument("--shape", default="bank")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--memory-limit", type=int, default=0, help="bytes of address space (0: none)"
    )
    ap.add_argument("--scheduler", choices=("threaded", "distributed"), default="threaded")
    a = ap.parse_args(argv)
    if a.memory_limit:
        resource.setrlimit(resource.RLIMIT_AS, (a.memory_limit, a.memory_limit))
    try:
        print(json.dumps(measure(a.jobs, a.shape, a.seed, a.workers, a.scheduler)))
    except MemoryError:
        print("out of memory", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
