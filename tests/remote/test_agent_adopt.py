"""An agent killed -9 and started again on its node, after its scheduler gave its work to another agent."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.integration.helpers import cli, job_states, wait_for
from tests.remote.conftest import NatsServer, _alive
from tests.remote.nodes import Node
from tests.remote.test_agent_runs import agents_of, no_run_left, plan_file, run_bg
from wloadctl.ipc import protocol as P
from wloadctl.procs.executor import SILENT_START
from wloadctl.procs.localpool import read_results, result_journals
from wloadctl.remote.agent import node_run_id

pytestmark = pytest.mark.ipc

__all__ = ["no_run_left"]


def taken(state_dir: Path, name: str) -> dict[str, int]:
    """The tasks agent `name` journaled as taken: job id -> its local id on the node."""
    path = state_dir / f"agent-{name}.journal"
    lines = path.read_text().splitlines() if path.exists() else []
    recs = [json.loads(line) for line in lines if line.endswith("}")]
    return {r["job_id"]: r["local"] for r in recs if r.get("k") == "take"}


def ended(state_dir: Path, name: str) -> set[int]:
    """The local ids of the tasks agent `name` journaled as ended (run, or given back)."""
    path = state_dir / f"agent-{name}.journal"
    lines = path.read_text().splitlines() if path.exists() else []
    return {r["local"] for r in (json.loads(line) for line in lines if line.endswith("}")) if r.get("k") == "end"}


def accepted_on_node(state_dir: Path, name: str, local: int) -> bool:
    """Whether an executor of agent `name`'s node journaled taking local task `local`."""
    return any(r.kind == P.RES_ACCEPTED and r.task == local
               for _ex, _pid, path in result_journals(state_dir, node_run_id(name)) for r in read_results(path))


def test_a_task_an_agent_took_ahead_and_the_run_gave_another_agent_never_starts_when_the_agent_comes_back(
        tmp_path: Path, nats_server: NatsServer) -> None:
    out = tmp_path / "evidence"
    gate = tmp_path / "go"
    # Given an agent of one slot running `first` and holding `second` ahead in its node's queue
    a1 = Node("a1", nats_server.url, tmp_path / "a1", ["etl"], slots=1, isolated=False).start()
    b1: Node | None = None
    try:
        wait_for(lambda: _alive(nats_server.url, "a1"), timeout=30, what="a1 beating")
        plan = plan_file(tmp_path / "p.yaml", out, {
            "first": {"pool": "etl", "sleep": 0, "gate": gate, "idempotent": False},
            "second": {"pool": "etl", "sleep": 0}})
        sd = tmp_path / "sd"
        proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "3")
        wait_for(lambda: "first" in agents_of(out), timeout=60, what="first started")
        wait_for(lambda: "second" in taken(a1.state_dir, "a1"), timeout=30, what="a1 to take second ahead")
        b1 = Node("b1", nats_server.url, tmp_path / "b1", ["etl"], slots=2).start()
        # When the agent process alone is killed -9 (its executor and `first` live on)
        a1.signal_agent(signal.SIGKILL)
        assert a1.proc is not None
        a1.proc.wait(10)
        killed = time.monotonic()
        # and the run, hearing no more of it, gives `second` to the other agent, where it runs
        wait_for(lambda: [w for k, w in agents_of(out).get("second", []) if k == "end"] == ["b1"], timeout=60,
                 what="second run on b1")
        wait_for(lambda: job_states(sd).get("second") == "SUCCEEDED", timeout=30, what="second succeeded")
        # and `first` ends on the silent node once its executor starts nothing more on its own, so the executor
        # takes `second`'s old copy from the node's queue and keeps it for the agent's return
        time.sleep(max(0.0, killed + SILENT_START + 1.0 - time.monotonic()))
        gate.touch()
        local = taken(a1.state_dir, "a1")["second"]
        wait_for(lambda: accepted_on_node(a1.state_dir, "a1", local), timeout=30,
                 what="a1's executor to take second's old copy")
        # and the agent is started again on its node
        a1.start()
        stdout, stderr = proc.communicate(timeout=120)
        # (the run may end first: the old copy is done with once the agent has journaled its end, run or not)
        wait_for(lambda: local in ended(a1.state_dir, "a1"), timeout=30, what="a1 to settle second's old copy")
        # Then that old copy never starts: `second` ran once, on the agent the run gave it to
        assert [w for k, w in agents_of(out)["second"] if k == "start"] == ["b1"], agents_of(out)
        # and the run tells one story: `first` ran once on a1 and its end is taken; `second` succeeded on b1
        assert proc.returncode == 0, stderr
        assert json.loads(stdout)["jobs"] == {"first": "SUCCEEDED", "second": "SUCCEEDED"}, stdout
        assert agents_of(out)["first"] == [("start", "a1"), ("end", "a1")]
    finally:
        if b1 is not None:
            b1.stop()
        a1.stop()


def test_a_dead_agent_s_executor_never_starts_a_task_its_run_gave_another_agent_under_a_short_agent_timeout(
        tmp_path: Path, nats_server: NatsServer) -> None:
    out = tmp_path / "evidence"
    gate = tmp_path / "go"
    # Given a run whose agents are LOST after 2 s of silence, and an agent of one slot running `first` and holding
    # `second` ahead in its node's queue
    a1 = Node("a1", nats_server.url, tmp_path / "a1", ["etl"], slots=1, isolated=False).start()
    b1: Node | None = None
    try:
        wait_for(lambda: _alive(nats_server.url, "a1"), timeout=30, what="a1 beating")
        plan = plan_file(tmp_path / "p.yaml", out, {
            "first": {"pool": "etl", "sleep": 0, "gate": gate, "idempotent": False},
            "second": {"pool": "etl", "sleep": 0}})
        sd = tmp_path / "sd"
        proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "2")
        wait_for(lambda: "first" in agents_of(out), timeout=60, what="first started")
        wait_for(lambda: "second" in taken(a1.state_dir, "a1"), timeout=30, what="a1 to take second ahead")
        local = taken(a1.state_dir, "a1")["second"]
        b1 = Node("b1", nats_server.url, tmp_path / "b1", ["etl"], slots=2).start()
        wait_for(lambda: _alive(nats_server.url, "b1"), timeout=30, what="b1 beating")
        # When the agent process alone is killed -9 (its executor and `first` live on), the run gives `second` to
        # the other agent as soon as it counts a1 lost, and `first` ends on the silent node at once after that, so
        # its executor takes `second`'s old copy from the node's queue
        a1.signal_agent(signal.SIGKILL)
        assert a1.proc is not None
        a1.proc.wait(10)
        wait_for(lambda: ("start", "b1") in agents_of(out).get("second", []), timeout=60, what="second started on b1")
        gate.touch()
        wait_for(lambda: accepted_on_node(a1.state_dir, "a1", local), timeout=30,
                 what="a1's executor to take second's old copy")
        # and the agent is started again on its node, and settles that copy
        a1.start()
        stdout, stderr = proc.communicate(timeout=120)
        wait_for(lambda: local in ended(a1.state_dir, "a1"), timeout=30, what="a1 to settle second's old copy")
        # Then that old copy never started: `second` ran once, on the agent the run gave it to
        assert [w for k, w in agents_of(out)["second"] if k == "start"] == ["b1"], agents_of(out)
        assert proc.returncode == 0, stderr
        assert json.loads(stdout)["jobs"] == {"first": "SUCCEEDED", "second": "SUCCEEDED"}, stdout
    finally:
        if b1 is not None:
            b1.stop()
        a1.stop()


def test_a_run_refuses_an_agent_timeout_its_agents_executors_could_outlast(tmp_path: Path) -> None:
    p = cli("run", "samples/tutorial.yaml", "--state-dir", str(tmp_path / "sd"), "--agent-timeout", "1.5")
    assert p.returncode == 2, p.stderr
    assert "--agent-timeout" in p.stderr and "'1.5': give 2 seconds or more" in p.stderr, p.stderr
