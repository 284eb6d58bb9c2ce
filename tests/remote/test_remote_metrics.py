"""Metrics of an agent and of the scheduler that dispatches to it: real nats-server, agent and scheduler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.helpers import cli, wait_for
from tests.integration.metrics_scrape import free_port, scrape
from tests.remote.conftest import NatsServer
from tests.remote.nodes import Node
from tests.remote.test_agent_runs import _alive, plan_file, run_bg

pytestmark = pytest.mark.ipc


def test_an_agent_and_its_scheduler_serve_metrics_of_the_remote_job(tmp_path: Path, nats_server: NatsServer) -> None:
    # Given an agent with metrics, and a run with metrics whose job on it waits for a file
    agent_port, sched_port = free_port(), free_port()
    node = Node("m1", nats_server.url, tmp_path / "m1", ["etl"], isolated=False,
                extra=("--metrics", f"127.0.0.1:{agent_port}")).start()
    gate = tmp_path / "go"
    proc = None
    try:
        wait_for(lambda: _alive(nats_server.url, "m1"), timeout=30, what="the agent beating")
        plan = plan_file(tmp_path / "p.yaml", tmp_path / "out", {
            "wait": {"pool": "etl", "command": f"while [ ! -f {gate} ]; do sleep 0.05; done"}})
        proc = run_bg(plan, tmp_path / "sd", nats_server.url, "--metrics", f"127.0.0.1:{sched_port}")
        # When both are scraped while the job runs on the agent
        agent = wait_for(lambda: (lambda m: m if m.get("wloadctl_agent_tasks", {}).get((("state", "RUNNING"),))
                                  == 1 else None)(scrape(agent_port)), timeout=60, what="the agent running it")
        sched = wait_for(lambda: (lambda m: m if m["wloadctl_agents"].get((("state", "ALIVE"),)) == 1 and
                                  m["wloadctl_jobs"].get((("state", "RUNNING"), ("tier", "standard"))) == 1
                                  else None)(scrape(sched_port)), timeout=60, what="the scheduler seeing it")
        # Then the agent says who it is and what it holds, and the scheduler counts the agent ALIVE
        assert (("agent", "m1"), ("pools", "etl")) in agent["wloadctl_agent_info"]
        assert agent["wloadctl_agent_slots"][()] == 4
        assert set(agent["wloadctl_queue_depth_messages"]) == {(("queue", "request"),), (("queue", "response"),)}
        assert sched["wloadctl_agents"][(("state", "LOST"),)] == 0
        # and `top` gives the agent its own start figures, beside the executors'
        def agent_row() -> dict | None:
            p = cli("top", "--state-dir", str(tmp_path / "sd"), "--json")
            rows = [g for g in json.loads(p.stdout)["agents"] if g["agent"] == "m1"] if p.returncode == 0 else []
            return rows[0] if rows and rows[0]["started"] == 1 else None

        row = wait_for(agent_row, timeout=30, what="the agent's figures in top")
        assert row["dispatch_to_start"]["n"] == 1 and row["dispatch_to_start"]["p50"] is not None, row
        text = cli("top", "--state-dir", str(tmp_path / "sd")).stdout
        assert "D->START p50/p99" in text.split("AGENT", 1)[1] and "m1" in text, text
        gate.touch()
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        assert json.loads(stdout)["jobs"] == {"wait": "SUCCEEDED"}
        assert "metrics at http://127.0.0.1:" in node.output()
    finally:
        gate.touch()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
        node.stop()
