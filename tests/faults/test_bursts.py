"""Bursts: 10,000 jobs finishing together, and a job printing a gigabyte."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import ENV, cli, executor_pids, ipc_names, wait_for
from wloadctl.core.states import JobState
from wloadctl.store import Store

pytestmark = pytest.mark.ipc


def test_ten_thousand_jobs_finishing_at_once_are_each_recorded_once(tmp_path: Path) -> None:
    # Given 10,000 independent jobs: 9,500 no-ops that finish as soon as they are sent, and 500
    # shell jobs that each say they wait, then wait at the same gate (a FIFO: opening it for
    # reading blocks until the test opens it, and lets every job waiting there go at once)
    gate, waiting = tmp_path / "gate", tmp_path / "waiting"
    os.mkfifo(gate)
    wait = f"echo . >> {waiting}; : < {gate}"
    jobs = {f"j{i:05d}": ({"command": wait} if i % 20 == 0 else {"type": "noop"}) for i in range(10_000)}
    plan = tmp_path / "burst.yaml"
    plan.write_text(yaml.safe_dump({"name": "burst", "jobs": jobs}))
    sd = tmp_path / "sd"
    # When they run on 4 executors of 128 slots, and the gate opens once no more jobs come to it
    # (all 500, or as many as run at once: the rest pass it as they start)
    args = ["run", str(plan), "--state-dir", str(sd), "--executors", "4", "--slots", "128", "--quiet", "--json"]
    p = subprocess.Popen([sys.executable, "-m", "wloadctl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=ENV, start_new_session=True)
    seen = [0, time.monotonic()]

    def all_at_the_gate() -> bool:
        n = len(waiting.read_bytes()) // 2 if waiting.exists() else 0
        if n != seen[0]:
            seen[:] = [n, time.monotonic()]
        return p.poll() is not None or n == 500 or (n > 0 and time.monotonic() - seen[1] > 2.0)

    held, out, err, finished = -1, "", "", False
    try:
        wait_for(all_at_the_gate, timeout=240, every=0.05, what="jobs at the gate")
        opened = time.time()
        held = os.open(gate, os.O_RDWR | os.O_NONBLOCK)  # a writer for as long as the run lasts
        out, err = p.communicate(timeout=300)
        finished = True
    finally:
        if held < 0:
            held = os.open(gate, os.O_RDWR | os.O_NONBLOCK)
        if not finished:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
        os.close(held)
    # Then every one succeeded, once, and the gated jobs ended after the gate opened
    assert p.returncode == 0, err[-2000:]
    assert set(json.loads(out)["jobs"].values()) == {"SUCCEEDED"}
    with Store.open(sd, readonly=True) as st:
        run = st.latest_run()
        assert run is not None
        ends: dict[int, list[float]] = {}
        for _seq, idx, _f, to, _a, ts, *_ in st.transitions_since(run.id, 0):
            if to == JobState.SUCCEEDED:
                ends.setdefault(idx, []).append(ts)
        ids = st.job_ids(run.id)
    assert len(ends) == 10_000 and all(len(v) == 1 for v in ends.values())
    assert all(ends[k][0] >= opened for k, j in enumerate(ids) if int(j[1:]) % 20 == 0)
    assert executor_pids(run.run_id) == [] and ipc_names(run.run_id) == []


def test_a_job_printing_a_gigabyte_keeps_it_in_its_log_and_a_tail_in_memory(tmp_path: Path) -> None:
    plan = tmp_path / "big.yaml"
    cmd = "head -c 1073741824 /dev/zero | tr '\\0' 'x'; echo; echo the-last-line"
    plan.write_text(yaml.safe_dump({"name": "big", "jobs": {"loud": {"command": cmd}, "after": {
        "command": "echo after", "depends_on": ["loud"]}}}))
    sd = tmp_path / "sd"
    try:
        p = cli("run", str(plan), "--state-dir", str(sd), "--json", timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        assert json.loads(p.stdout)["jobs"] == {"loud": "SUCCEEDED", "after": "SUCCEEDED"}
        logs = [lg for lg in (sd / "logs").rglob("*") if lg.is_file() and "loud" in lg.name]
        assert len(logs) == 1 and logs[0].stat().st_size == 1024**3 + len("\nthe-last-line\n")
        why = json.loads(cli("history", "loud", "--state-dir", str(sd), "--json").stdout)
        assert why["state"] == "SUCCEEDED" and why["attempts"] == 1
        with open(logs[0], "rb") as f:
            f.seek(-64, os.SEEK_END)
            assert f.read().endswith(b"x\nthe-last-line\n")
    finally:
        for lg in (sd / "logs").rglob("*"):
            if lg.is_file():
                os.unlink(lg)
