"""Prometheus metrics of a live run (`wloadctl run --metrics`), read over HTTP and parsed as Prometheus would."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import cli, start, status, stop_proc, wait_for
from tests.integration.metrics_scrape import free_port, scrape
from tests.integration.test_ha import Cluster

pytestmark = pytest.mark.ipc


def gate_plan(tmp_path: Path) -> tuple[Path, Path]:
    gate = tmp_path / "go"
    plan = tmp_path / "m.yaml"
    plan.write_text(yaml.safe_dump({"name": "metrics", "jobs": {
        "a": {"command": "true"},
        "b": {"command": "true", "depends_on": ["a"], "sla": "critical"},
        "wait": {"command": f"while [ ! -f {gate} ]; do sleep 0.05; done", "depends_on": ["b"]},
        "bad": {"command": "exit 3", "depends_on": ["a"]},
    }}))
    return plan, gate


def test_a_live_run_serves_prometheus_metrics_with_its_jobs_outcomes_and_latencies(tmp_path: Path) -> None:
    # Given a run whose last job waits for a file, with metrics on a free port
    plan, gate = gate_plan(tmp_path)
    sd = tmp_path / "sd"
    port = free_port()
    p = start("run", str(plan), "--state-dir", str(sd), "--quiet", "--metrics", f"127.0.0.1:{port}")
    run_id = ""
    try:
        wait_for(lambda: sd.joinpath("journal.db").exists() and status(sd)["counts"].get("RUNNING") == 1
                 and status(sd)["counts"].get("SUCCEEDED") == 2, what="wait running", timeout=60)
        run_id = status(sd)["run"]
        # When Prometheus scrapes it
        m = wait_for(lambda: (lambda s: s if s.get("wloadctl_jobs_finished_total", {}).get(
            (("outcome", "SUCCEEDED"),)) == 2 else None)(scrape(port)), what="a scrape with 2 done", timeout=30)
        # Then the jobs are there by state and tier, and the outcomes, latencies and queues too
        jobs = m["wloadctl_jobs"]
        assert jobs[(("state", "RUNNING"), ("tier", "standard"))] == 1
        assert jobs[(("state", "SUCCEEDED"), ("tier", "critical"))] == 1
        assert jobs[(("state", "FAILED"), ("tier", "standard"))] == 1
        assert sum(jobs.values()) == 4
        assert m["wloadctl_jobs_finished_total"][(("outcome", "FAILED"),)] == 1
        # READY to QUEUED: a, b and bad (wait follows b on its executor, never READY), or wait too
        assert m["wloadctl_dispatch_latency_seconds_count"][()] >= 3
        assert m["wloadctl_completion_to_start_seconds_count"][()] >= 2
        assert m["wloadctl_journal_commit_seconds_count"][()] >= 3
        assert m["wloadctl_loop_turn_seconds_count"][()] >= 1
        assert set(m["wloadctl_queue_depth_messages"]) == {(("queue", "request"),), (("queue", "response"),)}
        assert m["wloadctl_arena_capacity_bytes"][()] > 0
        assert m["wloadctl_arena_used_bytes"][()] >= 0  # payloads are freed when their job starts
        assert m["wloadctl_scheduler_active"][()] == 1
        assert m["wloadctl_runs_at_risk"][()] == 0
        assert m["wloadctl_agents"][(("state", "ALIVE"),)] == 0
        assert (("epoch", "1"), ("plan", "metrics"), ("run", run_id)) in m["wloadctl_run_info"]
        # The bucket counts only grow, ending at the count
        buckets = m["wloadctl_dispatch_latency_seconds_bucket"]
        ordered = sorted(buckets.items(), key=lambda kv: float(dict(kv[0])["le"]))
        assert [v for _k, v in ordered] == sorted(v for _k, v in ordered)
        assert ordered[-1][1] == m["wloadctl_dispatch_latency_seconds_count"][()]
        # And the sample dashboard asks only for metrics a scheduler serves (or an agent's, named in the source)
        dash = (Path(__file__).parents[2] / "contrib" / "grafana" / "wloadctl-dashboard.json").read_text()
        agent_src = (Path(__file__).parents[2] / "wloadctl" / "metrics.py").read_text()
        for name in set(re.findall(r"wloadctl_[a-z0-9_]+", dash)) - {"wloadctl_"}:
            assert name in m or name.removeprefix("wloadctl_") in agent_src, name
        gate.touch()
        assert p.wait(timeout=60) == 1  # `bad` failed
        # And the port is released with the run (as a server binds it: TIME_WAIT of the scrapes allowed)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    finally:
        gate.touch()
        stop_proc(p, run_id=run_id)


def test_a_taken_or_malformed_metrics_address_is_bad_input(tmp_path: Path) -> None:
    plan, _gate = gate_plan(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        r = cli("run", str(plan), "--state-dir", str(tmp_path / "a"), "--metrics", f"127.0.0.1:{taken}")
        assert r.returncode == 2, r.stderr
        assert "cannot listen" in r.stderr and "Traceback" not in r.stderr
        assert not (tmp_path / "a" / "journal.db").exists()  # refused before anything was made
    r = cli("run", str(plan), "--state-dir", str(tmp_path / "b"), "--metrics", "localhost")
    assert r.returncode == 2 and "expected HOST:PORT" in r.stderr
    r = subprocess.run([sys.executable, "-m", "wloadctl", "agent", "--broker", "nats://127.0.0.1:1",
                        "--metrics", "x:y"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "expected HOST:PORT" in r.stderr


@pytest.fixture
def cluster(no_ipc_leaks: None, tmp_path: Path) -> Iterator[Cluster]:
    """An active scheduler and a standby of one state directory (see test_ha)."""
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def test_a_standby_serves_metrics_inactive_until_it_takes_the_run_over(cluster: Cluster) -> None:
    # Given a run in the middle and a standby with metrics
    port = free_port()
    active = cluster.start_run(layers=3, sleep=0.3, gate_layer=1)
    standby = cluster.spawn("standby", "scheduler", "--standby", "--state-dir", str(cluster.sd),
                            "--metrics", f"127.0.0.1:{port}", *cluster.beat)
    cluster.wait_mid_run()
    wait_for(lambda: cluster.board_header().standby_pid == standby.pid, what="standby")
    # Then it says it drives nothing
    before = scrape(port)
    assert before["wloadctl_scheduler_active"][()] == 0 and "wloadctl_jobs" not in before
    # When the active scheduler is killed outright and the standby takes over
    os.kill(active.pid, signal.SIGKILL)
    active.wait()
    cluster.wait_event("takeover")
    # Then the same endpoint serves the run, under the new epoch
    after = wait_for(lambda: (lambda m: m if m["wloadctl_scheduler_active"][()] == 1 else None)(scrape(port)),
                     what="the standby active")
    assert [dict(k)["epoch"] for k in after["wloadctl_run_info"]] == ["2"]
    assert sum(after["wloadctl_jobs"].values()) == cluster.jobs
    cluster.open_gate()
    assert standby.wait(60) == 0, cluster.stderr("standby")
