"""Dozens of runs side by side as one user under the default queue quota, and a clear refusal past it."""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import executor_pids, ipc_names, stop_proc, wait_for
from wloadctl.ipc.cleanup import scan_objects
from wloadctl.ipc.mq import queue_charge
from wloadctl.ipc.quota import MIN_MESSAGE, KernelLimits, run_shapes

pytestmark = [pytest.mark.ipc, pytest.mark.exclusive]  # (they fill the user's queue quota)

RUNS = 25
"""Runs started side by side (each would take 199,296 bytes of queues with the old fixed shapes)."""
BULK = 100
"""No-op jobs behind each run's gate: enough for the largest queue shapes."""


def _plan(path: Path, name: str, gate: str) -> Path:
    jobs: dict[str, dict[str, object]] = {"gate": {"command": gate}}
    for i in range(BULK):
        jobs[f"n{i:03d}"] = {"type": "noop", "depends_on": ["gate"]}
    path.write_text(yaml.safe_dump({"name": name, "jobs": jobs}, sort_keys=False))
    return path


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WLOADCTL_HOME": str(root)}
    env.pop("WLOADCTL_STATE_DIR", None)
    return env


def _wl(env: dict[str, str], *args: str, limit: Callable[[], None] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wloadctl", *args], capture_output=True, text=True,
                          timeout=120, env=env, preexec_fn=limit)


def _quota(limit: int) -> Callable[[], None]:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (limit, resource.getrlimit(resource.RLIMIT_MSGQUEUE)[1]))

    return lower


def _our_run_ids() -> set[str]:
    return {o.run_id for o in scan_objects()}


def test_twenty_five_runs_side_by_side_under_the_default_quota(tmp_path: Path, no_ipc_leaks: None) -> None:
    soft = resource.getrlimit(resource.RLIMIT_MSGQUEUE)[0]
    assert soft != resource.RLIM_INFINITY and soft <= 819200, "the suite runs under the default ulimit -q"
    root, bar = tmp_path / "home", tmp_path / "bar"
    bar.mkdir()
    env = _env(root)
    # Each gate waits until every run's gate has started: the runs can only succeed side by side.
    gate = (f'touch {bar}/"$WLOADCTL_RUN_ID"; n=0; while [ "$(ls {bar} | wc -l)" -lt {RUNS} ]; do '
            'n=$((n+1)); [ $n -gt 900 ] && exit 1; sleep 0.2; done')
    before = _our_run_ids()
    procs = []
    try:
        # Given 25 plans started at once as one user, two executors' worth of processes each
        for k in range(RUNS):
            plan = _plan(tmp_path / f"p{k}.yaml", f"line{k:02d}", gate)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "wloadctl", "run", str(plan), "--quiet", "--executors", "1",
                 "--slots", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                start_new_session=True))
        # When they run to the end
        outs = [p.communicate(timeout=400) for p in procs]
    finally:
        for p in procs:
            stop_proc(p, grace=60)
    # Then every one succeeded, having waited for all the others at its gate
    failed = [(k, p.returncode, err.strip()) for k, (p, (_o, err)) in enumerate(zip(procs, outs, strict=True))
              if p.returncode != 0]
    assert not failed, failed
    assert len(os.listdir(bar)) == RUNS
    # And `runs --json` lists all of them, finished, each with its jobs done
    p = _wl(env, "runs", "--json")
    assert p.returncode == 0, p.stderr
    listed = {r["plan"]: r for r in json.loads(p.stdout)}
    assert set(listed) == {f"line{k:02d}" for k in range(RUNS)}
    assert {(r["status"], r["done"], r["total"]) for r in listed.values()} == {("succeeded", BULK + 1, BULK + 1)}
    # And nothing is left: no queue or segment (no_ipc_leaks), no executor
    for r in listed.values():
        assert not ipc_names(r["run"]) and not executor_pids(r["run"])
    assert _our_run_ids() <= before


def test_a_full_quota_refuses_the_run_in_one_line_and_leaves_nothing(tmp_path: Path,
                                                                      no_ipc_leaks: None) -> None:
    root = tmp_path / "home"
    env = _env(root)
    live = _plan(tmp_path / "a.yaml", "first", "sleep 60")
    # Given a queue quota with room for one run only: runs' queues shrink with the quota down to
    # their smallest shapes, which one run takes and two do not fit
    limit = 3 * queue_charge(1, MIN_MESSAGE)
    one = run_shapes(BULK + 1, dataclasses.replace(KernelLimits.read(), quota=limit)).charge
    assert one <= limit < 2 * one
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(live), "--executors", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True, preexec_fn=_quota(limit))
    try:
        wait_for(lambda: any(r["status"] == "running" for r in json.loads(_wl(env, "runs", "--json").stdout)),
                 what="the first run live")
        before = _our_run_ids()
        # When a second run starts under the same quota
        second = _plan(tmp_path / "b.yaml", "second", "true")
        p = _wl(env, "run", str(second), limit=_quota(limit))
        # Then it is refused in one line naming the limit, the runs holding queues and how to raise it
        assert p.returncode == 3, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, p.stderr
        assert f"ulimit -q {limit} bytes" in lines[0] and "1 run(s) hold queues now" in lines[0]
        assert "raise it with `ulimit -q BYTES`" in lines[0]
        # And nothing of it was started: no run journaled, no queue, segment or process of it
        plans = {r["plan"] for r in json.loads(_wl(env, "runs", "--json").stdout)}
        assert plans == {"first"}
        assert _our_run_ids() == before
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
