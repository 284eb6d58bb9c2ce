"""kill -9 of agents at random moments of a run, seeded: nothing lost, nothing done twice, nothing left."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import cli, wait_for
from tests.remote.conftest import NatsServer
from tests.remote.nodes import Node, unshare_available
from tests.remote.test_agent_runs import agents_of, plan_file, run_bg

pytestmark = pytest.mark.ipc

SEED = 20261202
KILLS = 6


@pytest.fixture
def fleet(tmp_path: Path, nats_server: NatsServer) -> Iterator[dict[str, Node]]:
    """Agents n1 and n2 of pool `etl`, each on its own host; stopped at teardown whatever happened."""
    if not unshare_available():
        pytest.fail("these tests put each agent in its own namespaces: they need util-linux unshare, and root "
                    "or unprivileged user namespaces", pytrace=False)
    made: dict[str, Node] = {}
    try:
        for name in ("n1", "n2"):
            made[name] = Node(name, nats_server.url, tmp_path / name, ["etl"]).start()
        for name in made:
            wait_for(lambda n=name: alive(nats_server.url, n), timeout=30, what=f"{name} beating")  # type: ignore[misc]
        yield made
    finally:
        for n in made.values():
            n.stop()


def alive(url: str, name: str) -> bool:
    p = cli("agents", "--broker", url, "--json")
    return p.returncode == 0 and any(a["agent"] == name and a["state"] == "ALIVE" for a in json.loads(p.stdout))


def test_a_seeded_loop_of_agent_kill_9s_loses_nothing_and_ends_no_job_twice(
        tmp_path: Path, nats_server: NatsServer, fleet: dict[str, Node]) -> None:
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
        name = rng.choice(sorted(fleet))
        fleet[name].kill_node()
        kills.append(name)
        fleet[name].start()
        wait_for(lambda n=name: alive(nats_server.url, n), timeout=30, what=f"{name} back")  # type: ignore[misc]
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
