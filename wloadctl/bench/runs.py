"""End-to-end runs: `wloadctl run` as a user starts it, watched from outside."""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from wloadctl.bench.measure import RssSampler
from wloadctl.ipc import protocol as P

STOP_GRACE = 30.0
"""Seconds a stopped run gets to stop its executors and clean up before SIGKILL."""


@dataclass
class RunResult:
    """What one `wloadctl run` did, seen from outside."""

    status: str
    """The run's status (`succeeded`, ...), or `timed out` / `crashed`."""
    run_id: str
    """The run's id (also in its IPC names), empty when it never started."""
    jobs: int
    """Jobs in the plan."""
    wall_seconds: float | None
    """The run's own wall time (scheduler start to finish), from its --json summary."""
    process_seconds: float
    """The whole command: interpreter start, plan load, journal, run, summary."""
    cpu_seconds: float
    """User + system CPU of the scheduler and the executors it reaped."""
    peak_rss_kib: int
    """Largest scheduler RSS sampled until the run ended (before its summary)."""
    hwm_kib: int
    """The scheduler's own VmHWM at its last sample (includes the --json summary)."""
    window: tuple[float, float] | None = None
    """First task received by an executor .. last task completed (epoch seconds)."""
    records: list[P.ResultRecord] = field(default_factory=list)
    """Every executor result record, when asked for."""
    leftovers: list[str] = field(default_factory=list)
    """Queues, segments or processes of the run found after it exited (then removed)."""
    error: str = ""
    """Why the run did not succeed, in one line."""

    @property
    def ok(self) -> bool:
        """The run finished and every job succeeded."""
        return self.status == "succeeded"


def _wait(pid: int, timeout: float) -> tuple[int, resource.struct_rusage] | None:
    """(exit status, resource usage) of a child, or None after `timeout` seconds."""
    fd = os.pidfd_open(pid)
    try:
        if not select.select([fd], [], [], max(0.0, timeout))[0]:
            return None
    finally:
        os.close(fd)
    _, status, usage = os.wait4(pid, 0)
    return status, usage


def _stop(proc: subprocess.Popen[bytes]) -> tuple[int, resource.struct_rusage] | None:
    """Stop a run that took too long as an operator would: SIGTERM, then SIGKILL."""
    try:
        os.kill(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    got = _wait(proc.pid, STOP_GRACE)
    if got is None:
        os.kill(proc.pid, signal.SIGKILL)
        got = _wait(proc.pid, STOP_GRACE)
    return got


def _run_id_of(state_dir: Path, journal: str | None = None) -> tuple[str, float | None]:
    """The run's id and end time from its journal ("" and None when there is none)."""
    from wloadctl.errors import WloadError
    from wloadctl.store import Store

    try:
        with Store.open(state_dir, create=False, readonly=True, journal=journal) as store:
            row = store.latest_run()
    except WloadError:
        return "", None
    return (row.run_id, row.ended) if row else ("", None)


def run_processes(run_id: str) -> list[int]:
    """Pids of live processes whose command line names the run (its executors)."""
    me = os.getpid()
    found = []
    needle = run_id.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def leftovers(run_id: str, wait: float = 5.0) -> list[str]:
    """Find what a finished run left behind, remove it, and say what it was.

    Executors exit on their own once they see the run done; they get `wait`
    seconds before they are killed by pid.

    Returns:
        One label per object or process found (empty when the run cleaned up).
    """
    from wloadctl.ipc.shm import list_objects, remove_run_objects

    if not run_id:
        return []
    deadline = time.time() + wait
    while run_processes(run_id) and time.time() < deadline:
        time.sleep(0.05)
    found = [f"process {pid}" for pid in run_processes(run_id)]
    for pid in run_processes(run_id):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    objs = [label for label in list_objects() if f".{run_id}." in label]
    if objs:
        remove_run_objects(run_id)
    return found + objs


def _executor_records(state_dir: Path, run_id: str) -> list[P.ResultRecord]:
    from wloadctl.procs.localpool import read_results, result_journals

    records: list[P.ResultRecord] = []
    for _ex, _pid, path in result_journals(state_dir, run_id):
        records += read_results(path)
    return records


def run_wloadctl(
    plan: Path,
    state_dir: Path,
    jobs: int,
    *,
    executors: int,
    slots: int,
    journal_sync: str,
    timeout: float,
    keep_records: bool = False,
    sample_interval: float = 0.02,
    keep_state: bool = False,
    journal: str | None = None,
    broker: str | None = None,
    prefetch: int | None = None,
) -> RunResult:
    """Run `python -m wloadctl run PLAN --json` to the end and measure it from outside.

    The state directory is removed afterwards (unless `keep_state`), and anything
    the run left behind (queues, segments, executor processes) is reported and removed.

    Args:
        plan: the plan file.
        state_dir: a fresh directory for the run's state.
        jobs: jobs in the plan.
        executors: `--executors`.
        slots: `--slots`.
        journal_sync: `--journal-sync` (`auto`, `full` or `normal`).
        timeout: seconds before the run is stopped (SIGTERM, as an operator would).
        keep_records: also return every executor result record (for latencies).
        sample_interval: seconds between RSS samples of the scheduler.
        keep_state: leave the state directory for the caller to remove later.
        journal: `--journal URL` (a PostgreSQL journal), or None for SQLite in the state directory.
        broker: `--broker URL` (the plan's `pool:` jobs run on agents there), or None.
        prefetch: `--prefetch N`, or None for the command's default.

    Returns:
        The run's figures; `status` says how it ended.
    """
    out_path = state_dir.with_name(state_dir.name + ".json")
    err_path = state_dir.with_name(state_dir.name + ".err")
    argv = [
        sys.executable,
        "-m",
        "wloadctl",
        "run",
        str(plan),
        "--state-dir",
        str(state_dir),
        "--executors",
        str(executors),
        "--slots",
        str(slots),
        "--json",
        "--journal-sync",
        journal_sync,
        *(["--journal", journal] if journal else []),
        *(["--broker", broker] if broker else []),
        *(["--prefetch", str(prefetch)] if prefetch is not None else []),
    ]
    try:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            t0 = time.perf_counter()
            # Its own session: a Ctrl-C at the terminal reaches the benchmark, which
            # stops the run itself, rather than racing it.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            sampler = RssSampler(proc.pid, sample_interval).start()
            got: tuple[int, resource.struct_rusage] | None = None
            timed_out = False
            try:
                got = _wait(proc.pid, timeout)
                if got is None:
                    timed_out = True
                    got = _stop(proc)
            except BaseException:
                # Interrupted: the run must not outlive the benchmark.
                if got is None:
                    _stop(proc)
                raise
            finally:
                sampler.stop()
            process_seconds = time.perf_counter() - t0
        status_word, usage = got if got is not None else (0, None)
        proc.returncode = (
            os.waitstatus_to_exitcode(status_word) if got is not None else -9
        )
        return _collect(
            state_dir,
            out_path,
            err_path,
            jobs,
            proc.returncode,
            timed_out,
            timeout,
            process_seconds,
            usage,
            sampler,
            keep_records,
            journal,
        )
    finally:
        if not keep_state:
            shutil.rmtree(state_dir, ignore_errors=True)
        for p in (out_path, err_path):
            p.unlink(missing_ok=True)


def _collect(
    state_dir: Path,
    out_path: Path,
    err_path: Path,
    jobs: int,
    code: int,
    timed_out: bool,
    timeout: float,
    process_seconds: float,
    usage: resource.struct_rusage | None,
    sampler: RssSampler,
    keep_records: bool,
    journal: str | None = None,
) -> RunResult:
    """Read a finished run's summary, journal and executor results; find leftovers."""
    summary: dict[str, object] = {}
    try:
        with open(out_path, "rb") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        pass
    run_id, ended = _run_id_of(state_dir, journal)
    run_id = str(summary.get("run") or run_id)
    status = "timed out" if timed_out else str(summary.get("status") or "crashed")
    error = ""
    if status != "succeeded":
        lines = (
            err_path.read_text(errors="replace").strip().splitlines()
            if err_path.exists()
            else []
        )
        error = f"exit {code}" + (f": {lines[-1]}" if lines else "")
        if timed_out:
            error = f"stopped after {timeout:.0f}s; {error}"
    records = _executor_records(state_dir, run_id) if run_id else []
    # A task handed back unstarted (FLAG_RETURNED) never ran: it stamps no start and is no job's end.
    ran = [r for r in records if r.started > 0 and not r.flags & P.FLAG_RETURNED]
    exited = [r for r in ran if r.kind == P.RES_EXITED]
    window = None
    if exited:
        first = min(r.started for r in ran if r.kind in (P.RES_EXITED, P.RES_STARTED, P.RES_ACCEPTED))
        window = (first, max(r.ended for r in exited))
    wall = summary.get("wall_seconds")
    # wait4 counts the scheduler and every child it reaped: executors and their jobs.
    cpu = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
    return RunResult(
        status=status,
        run_id=run_id,
        jobs=jobs,
        wall_seconds=float(wall) if isinstance(wall, (int, float)) else None,
        process_seconds=process_seconds,
        cpu_seconds=cpu,
        peak_rss_kib=sampler.peak_until(ended),
        hwm_kib=sampler.last_hwm(),
        window=window,
        records=records if keep_records else [],
        leftovers=leftovers(run_id),
        error=error,
    )


def chain_latencies(records: list[P.ResultRecord], jobs: int) -> list[float]:
    """Seconds from chain job k's end to job k+1's start, as the executors saw them.

    A no-op job starts and ends when its executor receives it; a shell job starts
    when its process is spawned. Job k+1 depends on job k, and chain plans number
    jobs in chain order.
    """
    ended: dict[int, float] = {}
    started: dict[int, float] = {}
    for r in records:
        if r.kind == P.RES_EXITED and r.exit_code == 0 and not r.signal and not r.flags & P.FLAG_RETURNED:
            ended[r.task] = r.ended
            if r.started:
                started.setdefault(r.task, r.started)
        elif r.kind == P.RES_STARTED:
            started[r.task] = r.started
    return [
        started[k + 1] - ended[k]
        for k in range(jobs - 1)
        if k in ended and k + 1 in started
    ]
