"""kill -9 of agents at random moments of a run, seeded: nothing lost, nothing done twice, nothing left."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from tests.integration.helpers import wait_for
from tests.remote.conftest import NatsServer, _alive
from tests.remote.nodes import Node
from tests.remote.test_agent_runs import agents_of, plan_file, run_bg

pytestmark = pytest.mark.ipc

SEED = 20261202
KILLS = 6


def test_a_seeded_loop_of_agent_kill_9s_loses_nothing_and_ends_no_job_twice(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    rng = random.Random(SEED)
    # Given a run of three chains of pool jobs spread over two agents
    out = tmp_path / "evidence"
    jobs: dict[str, dict] = {}
    for c in "abc":
        for k in range(6):
            jobs[f"{c}{k}"] = {"pool": "etl", "sleep": round(rng.uniform(0.8, 1.8), 2),
                               **({"depends_on": [f"{c}{k - 1}"]} if k else {})}
    plan = plan_file(tmp_path / "p.yaml", out, jobs, name="agentkills")
    proc = run_bg(plan, tmp_path / "sd", nats_server.url, "--agent-timeout", "3")
    wait_for(lambda: len(agents_of(out)) >= 2, timeout=60, what="jobs started on the agents")
    # When agents are killed -9 (with their executors and jobs) at random moments, each restarted at once
    kills: list[str] = []
    while len(kills) < KILLS and proc.poll() is None:
        time.sleep(rng.uniform(0.3, 2.5))
        name = rng.choice(sorted(nodes))
        nodes[name].kill_node()
        kills.append(name)
        nodes[name].start()
        wait_for(lambda n=name: _alive(nats_server.url, n), timeout=30, what=f"{name} back")  # type: ignore[misc]
    stdout, stderr = proc.communicate(timeout=240)
    # Then the run succeeds, every job ended exactly once, and the loop had its kills
    assert proc.returncode == 0, stderr
    assert set(json.loads(stdout)["jobs"].values()) == {"SUCCEEDED"}
    ev = agents_of(out)
    assert set(ev) == set(jobs)
    for job, lines in ev.items():
        ends = [a for k, a in lines if k == "end"]
        assert len(ends) == 1, f"{job} ended {len(ends)} times: {lines}"
        assert lines[-1][0] == "end", f"{job} started again after it ended: {lines}"
    print(f"{len(kills)} agent kills: {kills}")
    assert len(kills) >= 4, f"the run ended after {len(kills)} kills: {kills}"
