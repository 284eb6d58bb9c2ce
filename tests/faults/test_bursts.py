"""Bursts: 10,000 jobs finishing together, and a job printing a gigabyte."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import cli, executor_pids, ipc_names
from wloadctl.core.states import JobState
from wloadctl.store import Store

pytestmark = pytest.mark.ipc


def test_ten_thousand_jobs_finishing_at_once_are_each_recorded_once(tmp_path: Path) -> None:
    # Given 10,000 independent jobs: 9,500 no-ops that finish as soon as they are sent, and 500
    # shell jobs that all wait for the same second of the clock
    barrier = int(time.time()) + 12
    wait = f"t=$(({barrier} - $(date +%s))); [ $t -gt 0 ] && sleep $t; true"
    jobs = {f"j{i:05d}": ({"command": wait} if i % 20 == 0 else {"type": "noop"}) for i in range(10_000)}
    plan = tmp_path / "burst.yaml"
    plan.write_text(yaml.safe_dump({"name": "burst", "jobs": jobs}))
    sd = tmp_path / "sd"
    # When they run on 4 executors of 128 slots
    p = cli("run", str(plan), "--state-dir", str(sd), "--executors", "4", "--slots", "128", "--quiet", "--json",
            timeout=300)
    # Then every one succeeded, once, and the barrier jobs ended at or after their second
    assert p.returncode == 0, p.stderr[-2000:]
    assert set(json.loads(p.stdout)["jobs"].values()) == {"SUCCEEDED"}
    with Store.open(sd, readonly=True) as st:
        run = st.latest_run()
        assert run is not None
        ends: dict[int, list[float]] = {}
        for _seq, idx, _f, to, _a, ts, *_ in st.transitions_since(run.id, 0):
            if to == JobState.SUCCEEDED:
                ends.setdefault(idx, []).append(ts)
        ids = st.job_ids(run.id)
    assert len(ends) == 10_000 and all(len(v) == 1 for v in ends.values())
    assert all(ends[k][0] >= barrier for k, j in enumerate(ids) if int(j[1:]) % 20 == 0)
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
