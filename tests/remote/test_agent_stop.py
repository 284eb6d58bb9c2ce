"""An agent stopped cleanly (SIGTERM) is known stopped at once by the run's scheduler, as by `wloadctl agents`."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.integration.helpers import cli, job_states, status, wait_for
from tests.remote.conftest import NatsServer
from tests.remote.nodes import Node
from tests.remote.test_agent_runs import agents_of, no_run_left, plan_file, run_bg

pytestmark = pytest.mark.ipc
_ = no_run_left  # (autouse here too: a run a failed test left behind is stopped)


def _agent_states(sd: Path) -> dict[str, str]:
    try:
        return {a["agent"]: a["state"] for a in status(sd).get("agents", [])}
    except Exception:  # (between two writes of the run's files)
        return {}


def test_an_agent_stopped_cleanly_is_stopped_for_the_scheduler_at_once_and_its_job_runs_elsewhere(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    out, gate = tmp_path / "evidence", tmp_path / "go"
    plan = plan_file(tmp_path / "p.yaml", out, {"load": {"pool": "etl", "sleep": 0, "gate": gate}})
    sd = tmp_path / "sd"
    # Given a run whose job runs on an agent, with an agent timeout far longer than the test waits
    proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "120")
    wait_for(lambda: job_states(sd).get("load") == "RUNNING", timeout=60, what="load running")
    first = agents_of(out)["load"][0][1]
    other = next(n for n in nodes if n != first)
    # When that agent is stopped with SIGTERM
    nodes[first].signal_agent(signal.SIGTERM)
    # Then the scheduler says it STOPPED, as `wloadctl agents` does, without waiting out its timeout (silence
    # would make it SUSPECT only after 60 s), and the job it stopped runs on the other agent
    wait_for(lambda: _agent_states(sd).get(first) == "STOPPED", timeout=30, what=f"{first} STOPPED for the run")
    listed = cli("agents", "--broker", nats_server.url).stdout
    assert any(line.split()[0] == first and line.split()[-1] == "STOPPED" for line in listed.splitlines()[1:]), listed
    wait_for(lambda: [a for _s, a in agents_of(out).get("load", [])].count(other) >= 1, timeout=60,
             what="load started again on the other agent")
    gate.touch()
    _out, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    # and the stopped agent told its executors' clean exits as such, not as losses
    said = nodes[first].output()
    assert "executor 0 stopped: exited with status 0" in said and " lost:" not in said, said
