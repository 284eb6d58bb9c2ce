"""An agent's name outliving the agent: started again without its state, or shared by two live agents."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from tests.integration.helpers import cli, job_states, wait_for
from tests.remote.conftest import NatsServer, _alive
from tests.remote.ghost import Ghost
from tests.remote.nodes import Node, _children, unshare_available
from tests.remote.test_agent_runs import agents_of, no_run_left, plan_file, ran_once_on_a_new_agent, run_bg

pytestmark = pytest.mark.ipc

__all__ = ["no_run_left"]  # the fixture that stops a run a failed test left


@pytest.fixture(autouse=True)
def isolated_hosts() -> None:
    if not unshare_available():
        pytest.fail("these tests put each agent in its own namespaces: they need util-linux unshare, and root "
                    "or unprivileged user namespaces", pytrace=False)


def _runs(node: Node, marker: str) -> bool:
    """Whether a process of the node's host has `marker` in its command line."""
    assert node.proc is not None
    for pid in _children(node.proc.pid, deep=True):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def test_jobs_of_an_agent_started_again_without_its_state_are_lost_and_a_kill_of_one_is_done(
        tmp_path: Path, nats_server: NatsServer) -> None:
    # Given an agent re-a1 running two pinned jobs, each waiting for its gate file
    node = Node("re-a1", nats_server.url, tmp_path / "re-a1", []).start()
    try:
        wait_for(lambda: _alive(nats_server.url, "re-a1"), timeout=30, what="the agent beating")
        out = tmp_path / "evidence"
        retries = {"count": 2, "delay": "1s"}
        plan = plan_file(tmp_path / "p.yaml", out, {
            "pinned": {"agent": "re-a1", "gate": tmp_path / "go-pinned", "retries": retries},
            "doomed": {"agent": "re-a1", "gate": tmp_path / "never", "retries": retries}})
        sd = tmp_path / "sd"
        # (the agent timeout outlasts the restart below, so the agent is never lost: its jobs are found not held,
        # after as long)
        proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "6")
        wait_for(lambda: {"pinned", "doomed"} <= set(agents_of(out)), timeout=60, every=0.05,
                 what="both jobs started")
        # (and the scheduler heard so: a node killed before its reports left holds jobs only the broker knows it took)
        wait_for(lambda: {job_states(sd).get(j) for j in ("pinned", "doomed")} == {"RUNNING"}, timeout=60,
                 what="both jobs heard running")
        # When its whole host is killed -9, its state dir removed, and an agent of the name started again at once
        node.kill_node()
        shutil.rmtree(node.state_dir)
        node.start()
        wait_for(lambda: "ALIVE" in cli("status", "--state-dir", str(sd)).stdout, timeout=30, what="re-a1 heard")
        # and an operator kills one of the jobs the new agent never heard of
        told = cli("kill", "doomed", "--state-dir", str(sd))
        assert told.returncode == 0, told.stderr
        # Then the other is found lost and runs again on the new agent
        wait_for(lambda: len(agents_of(out).get("pinned", [])) >= 2, timeout=60, every=0.05,
                 what="pinned started again")
        (tmp_path / "go-pinned").touch()
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 1, stderr
        jobs = json.loads(stdout)["jobs"]
        # and the killed one ends killed, never run again
        assert jobs == {"pinned": "SUCCEEDED", "doomed": "FAILED"}, jobs
        assert [k for k, _a in agents_of(out)["doomed"]] == ["start"]
        assert [k for k, _a in agents_of(out)["pinned"]] == ["start", "start", "end"]
        history = cli("history", "doomed", "--state-dir", str(sd)).stdout
        assert "killed" in history, history
        assert '"jobs_not_held"' in (sd / "events.jsonl").read_text()
    finally:
        node.stop()


def test_two_live_agents_of_one_name_are_said_and_the_jobs_of_the_one_that_dies_are_lost(
        tmp_path: Path, nats_server: NatsServer) -> None:
    # Given two agents named twin on two hosts (cloned machines: the second started while the first was frozen,
    # so it saw no live agent of the name) and a job pinned to twin
    a = Node("twin", nats_server.url, tmp_path / "host-a", []).start()
    b = Node("twin", nats_server.url, tmp_path / "host-b", [])
    try:
        wait_for(lambda: "serving" in a.output(), timeout=30, what="the first twin serving")
        a.signal_agent(signal.SIGSTOP)
        b.start()
        # (both write the log of their name)
        wait_for(lambda: b.output().count("serving") == 2, timeout=30, what="the second twin serving")
        a.signal_agent(signal.SIGCONT)
        wait_for(lambda: _alive(nats_server.url, "twin"), timeout=30, what="twin beating")
        out = tmp_path / "evidence"
        gate = tmp_path / "go"
        plan = plan_file(tmp_path / "p.yaml", out, {"pinned": {"agent": "twin", "gate": gate}})
        sd = tmp_path / "sd"
        proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "2")
        wait_for(lambda: "pinned" in agents_of(out), timeout=60, every=0.05, what="pinned started")
        # Then status says that two agents share the name
        wait_for(lambda: "2 agents run under the name twin" in cli("status", "--state-dir", str(sd)).stdout,
                 timeout=30, what="the shared name said in status")
        # When the host running the job is killed -9 while the other twin beats on
        ran, other = (a, b) if _runs(a, str(gate)) else (b, a)
        assert _runs(ran, str(gate))
        ran.kill_node()
        # Then the job is found lost and runs again on the other
        wait_for(lambda: len(agents_of(out).get("pinned", [])) >= 2, timeout=60, every=0.05,
                 what="pinned started again")
        assert _runs(other, str(gate))
        gate.touch()
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        assert json.loads(stdout)["jobs"] == {"pinned": "SUCCEEDED"}
        assert job_states(sd) == {"pinned": "SUCCEEDED"}
        assert '"agent_duplicate"' in (sd / "events.jsonl").read_text()
    finally:
        a.stop()
        b.stop()


def test_a_dispatch_an_agent_took_before_it_was_started_again_without_its_state_is_sent_again(
        tmp_path: Path, nats_server: NatsServer) -> None:
    """An agent that takes a dispatch and is started again before it said anything of it (its state directory
    lost) is never silent for the agent timeout: its new process beats on, holding nothing. The task it took is
    settled as a lost agent's would be (the broker has no dispatch left to hand out, no live agent holds it)."""
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {"only": {"pool": "etl", "sleep": 0.1}})
    with Ghost(nats_server.url, ["etl"]) as ghost:
        # Given a run whose pool has one agent, which takes the dispatch and acknowledges it
        ghost.beat("first")
        sd = tmp_path / "sd"
        proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "30")
        ghost.take("etl", boot="first")
        # When it is started again with no record of it, and beats on (well within the agent timeout)
        def lost() -> bool:
            ghost.beat("second")
            return b"tasks_lost" in (sd / "events.jsonl").read_bytes()

        wait_for(lost, timeout=25, every=0.5, what="the task the first process took found lost")
        # Then the task is sent again: it runs once, on an agent that joins the pool, and the run succeeds
        ran_once_on_a_new_agent(proc, out, tmp_path, nats_server.url)
