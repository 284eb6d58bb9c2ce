"""Helpers of the process tests: write plans whose jobs leave evidence, run the real CLI, read what happened."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def evidence_plan(path: Path, out: Path, jobs: dict[str, dict[str, Any]], name: str = "it",
                  sleep: float = 0.0, extra: dict[str, Any] | None = None) -> Path:
    """Write a plan whose every job appends `<job> start|end <time>` lines to `out`.

    `jobs` maps id -> extra job keys (depends_on, retries, ...); a job may set `exit` to fail
    with that status, `sleep` to run longer, or `gate` (a path) to wait until that file exists.
    """
    spec: dict[str, Any] = {"name": name, "jobs": {}}
    if extra:
        spec.update(extra)
    for jid, keys in jobs.items():
        keys = dict(keys)
        code = keys.pop("exit", 0)
        nap = keys.pop("sleep", sleep)
        gate = keys.pop("gate", None)
        wait = f"while [ ! -e {gate} ]; do sleep 0.05; done; " if gate else ""
        cmd = (f'echo "{jid} start $(date +%s.%N) $WLOADCTL_ATTEMPT" >> {out}; {wait}sleep {nap}; '
               f'echo "{jid} end $(date +%s.%N) $WLOADCTL_ATTEMPT" >> {out}; exit {code}')
        spec["jobs"][jid] = {"command": cmd, **keys}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def read_evidence(out: Path) -> dict[str, list[tuple[str, float]]]:
    """job -> [(start|end, time), ...] in file order."""
    got: dict[str, list[tuple[str, float]]] = {}
    if not out.exists():
        return got
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            got.setdefault(parts[0], []).append((parts[1], float(parts[2])))
    return got


def cli(*args: str, timeout: float = 120, check: bool = False,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m wloadctl ARGS` and wait for it (`env`: variables added to the tests' environment)."""
    p = subprocess.run([sys.executable, "-m", "wloadctl", *args], capture_output=True, text=True,
                       timeout=timeout, env={**ENV, **env} if env else ENV)
    if check and p.returncode != 0:
        raise AssertionError(f"wloadctl {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def start(*args: str) -> subprocess.Popen[bytes]:
    """Start `python -m wloadctl ARGS` in the background (its own session, like a real operator's shell)."""
    return subprocess.Popen([sys.executable, "-m", "wloadctl", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)


def status(state_dir: Path) -> dict[str, Any]:
    """`wloadctl status --json` as a dict."""
    p = cli("status", "--state-dir", str(state_dir), "--json", timeout=30)
    return json.loads(p.stdout)


def job_states(state_dir: Path) -> dict[str, str]:
    """job -> state name."""
    return {j["job"]: j["state"] for j in status(state_dir)["jobs"]}


def wait_for(pred: Any, timeout: float = 30.0, every: float = 0.1, what: str = "condition") -> Any:
    """Poll `pred` until it returns something truthy.

    A `pred` that raises is asked again (a run's first moments: its journal being made, no run recorded yet);
    its last error is told when the time is up.
    """
    deadline = time.time() + timeout
    last: Exception | None = None
    while time.time() < deadline:
        try:
            v = pred()
        except Exception as e:  # polled again; told at the end
            last = e
        else:
            if v:
                return v
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}" + (f"; last error: {last}" if last else ""))


def executor_pids(run_id: str | None = None) -> list[int]:
    """Pids of running executor processes (optionally of one run)."""
    out = subprocess.run(["pgrep", "-f", "wloadctl.procs.executor" + (f" --run {run_id}" if run_id else "")],
                         capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def kill_all(pids: Iterable[int]) -> None:
    """SIGKILL these processes, ignoring the gone."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def reap_orphans(run_id: str, timeout: float = 10.0) -> None:
    """Wait for the executors of a run to go (they exit when their run is done); kill the stragglers."""
    deadline = time.time() + timeout
    while executor_pids(run_id) and time.time() < deadline:
        time.sleep(0.1)
    kill_all(executor_pids(run_id))


def stop_proc(proc: subprocess.Popen[Any], grace: float = 0.0, run_id: str | None = "", term: bool = True,
              group: bool = False) -> None:
    """End a process a test started, whatever became of the test: close its pipes, reap its run's executors.

    A process still running is given `grace` seconds to end, after SIGTERM (a scheduler stopped so unlinks its
    run's queues and segments) or, with `term` False, of itself; then, or at once without `grace`, killed (with
    `group`, its whole process group: one started in a session of its own, with what it started).
    `run_id`: the run whose executors to wait for and kill the stragglers of (reap_orphans), when known.
    """
    if proc.poll() is None and grace > 0:
        if term:
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    if proc.poll() is None:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    proc.wait()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None:
            with contextlib.suppress(BrokenPipeError):  # (what a stdin still held, for a process gone)
                f.close()
    if run_id:
        reap_orphans(run_id)


def ipc_names(run_id: str) -> list[str]:
    """Queues and segments of a run still present."""
    found = []
    for d in ("/dev/mqueue", "/dev/shm"):
        try:
            found += [n for n in os.listdir(d) if run_id in n]
        except OSError:
            pass
    return found
