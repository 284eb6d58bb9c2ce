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


_HIDDEN_HOLDER = r"""
import json, os, resource, subprocess, sys
import posix_ipc
limit, plan, sd = int(sys.argv[1]), sys.argv[2], sys.argv[3]
resource.setrlimit(resource.RLIMIT_MSGQUEUE, (limit, resource.getrlimit(resource.RLIMIT_MSGQUEUE)[1]))
# A queue another process made and removed, still open here: charged to the quota, listed nowhere
held = posix_ipc.MessageQueue("/held-elsewhere", posix_ipc.O_CREX, max_messages=1, max_message_size=limit // 2)
held.unlink()
p = subprocess.run([sys.executable, "-m", "wloadctl", "run", plan, "--state-dir", sd, "--executors", "1"],
                   capture_output=True, text=True, timeout=60)
print(json.dumps({"rc": p.returncode, "stderr": p.stderr, "holder": os.getpid()}))
"""


def test_a_quota_held_by_queues_listed_nowhere_refuses_the_run_before_its_journal(tmp_path: Path) -> None:
    # (the room was judged from /dev/mqueue alone: the run was journaled, then its queues were refused, and an
    # interrupted run that never started stayed in the state directory, with a message pointing at cleanup)
    # Given a quota of its own (an IPC namespace) with room for one run, half of it held by a removed queue
    # another process keeps open
    ns = ["unshare", "-U", "-r", "-i", "-m"]
    if subprocess.run([*ns, "true"], capture_output=True).returncode != 0:
        pytest.skip("no user and IPC namespaces here (unshare -U -r -i -m)")
    limit = 3 * queue_charge(1, MIN_MESSAGE)
    plan, sd = _plan(tmp_path / "p.yaml", "hidden", "true"), tmp_path / "sd"
    script = tmp_path / "holder.py"
    script.write_text(_HIDDEN_HOLDER)
    # When a run starts there
    p = subprocess.run([*ns, "sh", "-c", 'mount -t mqueue none /dev/mqueue && exec "$0" "$@"', sys.executable,
                        str(script), str(limit), str(plan), str(sd)],
                       capture_output=True, text=True, timeout=90, env=_env(tmp_path / "home"))
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    # Then it is refused in one line that says where the quota went, and nothing of it is journaled
    assert got["rc"] == 3, got["stderr"]
    lines = got["stderr"].strip().splitlines()
    assert len(lines) == 1, got["stderr"]
    assert "held by queues listed nowhere: removed while a process keeps them open" in lines[0]
    assert f"pid {got['holder']}" in lines[0] and "Traceback" not in got["stderr"]
    assert not (sd / "journal.db").exists()
