"""What an agent killed -9 at its worst moments says when it is started again: its run goes on, nothing runs twice."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.integration.helpers import wait_for
from tests.remote.conftest import NatsServer, _alive
from tests.remote.nodes import Node
from tests.remote.test_agent_adopt import taken
from tests.remote.test_agent_runs import agents_of, no_run_left, plan_file, run_bg
from wloadctl.ipc import protocol as P
from wloadctl.procs.localpool import read_results, result_journals
from wloadctl.remote.agent import node_run_id
from wloadctl.remote.broker import BrokerOptions, Subjects
from wloadctl.remote.failpoints import AGENT_FAILPOINT_ENV, STRUCK
from wloadctl.remote.link import BrokerLink

pytestmark = pytest.mark.ipc

__all__ = ["no_run_left"]


def refused_on_node(state_dir: Path, name: str, local: int) -> bool:
    """Whether an executor of agent `name`'s node journaled refusing local task `local` for its older epoch."""
    return any(r.kind == P.RES_REJECTED and r.task == local
               for _ex, _pid, path in result_journals(state_dir, node_run_id(name)) for r in read_results(path))


def journal_of(state_dir: Path, name: str) -> list[dict]:
    """Agent `name`'s journal entries."""
    path = state_dir / f"agent-{name}.journal"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def all_taken_ended(state_dir: Path, name: str, job_id: str) -> bool:
    """Whether agent `name` journaled an end for every task of job `job_id` it journaled as taken."""
    recs = journal_of(state_dir, name)
    took = {r["local"] for r in recs if r.get("k") == "take" and r["job_id"] == job_id}
    return bool(took) and took <= {r["local"] for r in recs if r.get("k") == "end"}


def test_an_executor_refusing_a_task_record_of_an_earlier_agent_start_never_fences_the_run(
        tmp_path: Path, nats_server: NatsServer) -> None:
    out = tmp_path / "evidence"
    gate = tmp_path / "go"
    # Given an agent of one slot running `first` and holding `second` ahead in its node's queue
    a1 = Node("a1", nats_server.url, tmp_path / "a1", ["etl"], slots=1, isolated=False).start()
    try:
        wait_for(lambda: _alive(nats_server.url, "a1"), timeout=30, what="a1 beating")
        plan = plan_file(tmp_path / "p.yaml", out, {
            "first": {"pool": "etl", "sleep": 0, "gate": gate},
            "second": {"pool": "etl", "sleep": 0}})
        sd = tmp_path / "sd"
        proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "30")
        wait_for(lambda: "first" in agents_of(out), timeout=60, what="first started")
        wait_for(lambda: "second" in taken(a1.state_dir, "a1"), timeout=30, what="a1 to take second ahead")
        local = taken(a1.state_dir, "a1")["second"]
        # When the agent process alone is killed -9 (its executor and `first` live on), and started again it is
        # killed too, once its own epoch is on the node's board and before it reported anything
        a1.signal_agent(signal.SIGKILL)
        assert a1.proc is not None
        a1.proc.wait(10)
        a1.env[AGENT_FAILPOINT_ENV] = "after-open"
        a1.start()
        a1.proc.wait(60)
        assert (a1.state_dir / STRUCK).exists(), a1.output()
        # and `first` ends, so the executor takes `second`'s record of the first start and refuses it (older epoch)
        gate.touch()
        wait_for(lambda: refused_on_node(a1.state_dir, "a1", local), timeout=30,
                 what="a1's executor to refuse second's old record")
        # and the agent is started once more, and reads that refusal in its executor's journal
        a1.start()
        stdout, stderr = proc.communicate(timeout=120)
        # Then the run was never told its own epoch was refused (it would stand down as fenced): it ends with
        # both jobs succeeded, each run once, on a1
        assert proc.returncode == 0, stderr
        assert "fenced" not in stderr, stderr
        assert json.loads(stdout)["jobs"] == {"first": "SUCCEEDED", "second": "SUCCEEDED"}, stdout
        assert agents_of(out)["first"] == [("start", "a1"), ("end", "a1")]
        assert agents_of(out)["second"] == [("start", "a1"), ("end", "a1")]
    finally:
        a1.stop()


def test_a_task_an_agent_journaled_and_died_before_acknowledging_runs_once(
        tmp_path: Path, nats_server: NatsServer) -> None:
    count = tmp_path / "count"
    # Given an agent that kills itself -9 once it has journaled `only` as taken, before it acknowledges the
    # dispatch that brought it (the broker delivers that dispatch again once its ack wait is out)
    a1 = Node("a1", nats_server.url, tmp_path / "a1", ["etl"], slots=2, isolated=False,
              env={AGENT_FAILPOINT_ENV: "after-take:only"}).start()
    link = BrokerLink.open(BrokerOptions(nats_server.url), name="test")
    try:
        wait_for(lambda: _alive(nats_server.url, "a1"), timeout=30, what="a1 beating")
        plan = plan_file(tmp_path / "p.yaml", tmp_path / "evidence", {
            "only": {"pool": "etl", "command": f"echo ran >> {count}"}})
        sd = tmp_path / "sd"
        proc = run_bg(plan, sd, nats_server.url)
        assert a1.proc is not None
        a1.proc.wait(60)
        assert (a1.state_dir / STRUCK).exists(), a1.output()
        # When the agent is started again: it finds `only` in its journal, held by no executor, and says so
        a1.start()
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        assert json.loads(stdout)["jobs"] == {"only": "SUCCEEDED"}, stdout
        # and every dispatch of the pool is delivered and acknowledged (the first one, again, after its ack wait),
        # and every copy of `only` the agent took has ended
        subjects = Subjects()
        wait_for(lambda: link.consumer_backlog(subjects.dispatch_stream, subjects.pool_consumer("etl")) == (0, 0)
                 and all_taken_ended(a1.state_dir, "a1", "only"), timeout=120,
                 what="every dispatch acknowledged and every copy ended")
        # Then the job's command ran once
        assert count.read_text().splitlines() == ["ran"], a1.output()
    finally:
        link.close()
        a1.stop()
