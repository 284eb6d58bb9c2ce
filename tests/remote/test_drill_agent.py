"""`wloadctl drill agent-loss` with a real nats-server, real agents of this host and a real scheduler."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import cli, status, wait_for
from tests.remote.conftest import NatsServer
from tests.remote.nodes import Node, unshare_available
from tests.remote.test_agent_runs import _alive, agents_of, no_run_left, plan_file, run_bg
from wloadctl.ipc.shm import remove_run_objects
from wloadctl.remote.agent import node_run_id

pytestmark = pytest.mark.ipc
__all__ = ["no_run_left"]


@pytest.fixture
def local_nodes(tmp_path: Path, nats_server: NatsServer) -> Iterator[dict[str, Node]]:
    """Two agents of pool `etl` on this host (its pids and host name); stopped and cleaned at teardown."""
    made: dict[str, Node] = {}
    try:
        for name in ("d1", "d2"):
            made[name] = Node(name, nats_server.url, tmp_path / name, ["etl"], isolated=False).start()
        wait_for(lambda: all(_alive(nats_server.url, n) for n in made), timeout=30, what="both agents beating")
        yield made
    finally:
        for n in made.values():
            n.stop()
            if n.proc is not None:
                n.proc.wait(10)
            remove_run_objects(node_run_id(n.name))


def test_agent_loss_drill_measures_lost_and_the_settling_and_the_run_finishes(
        tmp_path: Path, nats_server: NatsServer, local_nodes: dict[str, Node]) -> None:
    # Given a run whose long pool jobs run on both agents of this host
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {
        **{f"a{k}": {"pool": "etl", "sleep": 0.1} for k in range(4)},
        **{f"b{k}": {"pool": "etl", "sleep": 2.5, "depends_on": [f"a{k}"]} for k in range(4)},
    })
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "3")
    # (which agent takes the long jobs is the broker's to say: the drill kills one that runs one)
    lost = wait_for(lambda: next((v[-1][1] for j, v in agents_of(out).items()
                                  if j.startswith("b") and v[-1][0] == "start"), None),
                    timeout=60, every=0.05, what="a long job running on an agent")
    other = "d2" if lost == "d1" else "d1"
    # When the drill kills that agent
    p = cli("drill", "agent-loss", "--agent", lost, "--broker", nats_server.url, "--state-dir", str(sd),
            "--agent-timeout", "3", "--json", timeout=90)
    # Then it reports it LOST and its tasks settled and sent again, with positive figures
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    print(rep["summary"])
    assert rep["ok"] and rep["agent"] == lost and rep["held"]
    assert 0 < rep["lost_s"] <= rep["settled_s"] <= rep["reassigned_s"]
    assert rep["reran"] == [] and rep["agent_pid"] in rep["killed_pids"]
    # and the run finishes, what the lost agent was running done again on the other
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert set(json.loads(stdout)["jobs"].values()) == {"SUCCEEDED"}
    for job in rep["held"]:
        assert agents_of(out)[job][-1] == ("end", other)
    assert f"agent-loss drill of {lost}" in status(sd)["last_drill"]["summary"]


def test_agent_loss_drill_refuses_an_unknown_agent_in_one_line(
        tmp_path: Path, nats_server: NatsServer, local_nodes: dict[str, Node]) -> None:
    # Given a live run on the agents
    out = tmp_path / "evidence"
    gate = tmp_path / "go"
    plan = plan_file(tmp_path / "p.yaml", out, {"long": {"pool": "etl", "sleep": 0, "gate": str(gate)}})
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url)
    wait_for(lambda: "long" in agents_of(out), timeout=60, what="the job started")
    # When a drill names an agent the broker does not know
    p = cli("drill", "agent-loss", "--agent", "nobody", "--broker", nats_server.url, "--state-dir", str(sd))
    # Then it is refused in one line naming the known agents, and nothing is killed
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "unknown agent nobody" in p.stderr and "d1, d2" in p.stderr
    assert all(n.proc is not None and n.proc.poll() is None for n in local_nodes.values())
    # and an agent whose process this host cannot see (its own pid namespace) is refused too
    if not unshare_available():
        pytest.fail("this test puts an agent in its own namespaces: it needs util-linux unshare", pytrace=False)
    far = Node("x1", nats_server.url, tmp_path / "x1", ["other"]).start()
    try:
        wait_for(lambda: _alive(nats_server.url, "x1"), timeout=30, what="the namespaced agent beating")
        p = cli("drill", "agent-loss", "--agent", "x1", "--broker", nats_server.url, "--state-dir", str(sd))
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert "agent x1: pid" in p.stderr and "not its process on this host" in p.stderr
    finally:
        far.stop()
        gate.touch()
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
