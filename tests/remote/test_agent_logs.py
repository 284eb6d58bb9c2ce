"""`wloadctl logs` of jobs that ran on agents: copied from the agent that ran the attempt, whole once it ended."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, wait_for
from tests.remote.conftest import NatsServer, _alive, serve
from tests.remote.nodes import Node, unshare_available
from tests.remote.test_agent_runs import no_run_left, plan_file, run_bg

pytestmark = pytest.mark.ipc
__all__ = ["no_run_left"]


@pytest.fixture(autouse=True)
def isolated_hosts() -> None:
    """The agents here each get a host of their own."""
    if not unshare_available():
        pytest.fail("these tests need util-linux unshare, and root or user namespaces", pytrace=False)


def _logs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wloadctl", "logs", *args], capture_output=True, text=True,
                          timeout=60, env=env or ENV)


def test_logs_of_an_agent_job_read_while_it_ran_are_whole_once_it_ended(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    # Given a job on an agent that has printed its first line and waits
    gate = tmp_path / "gate"
    plan = plan_file(tmp_path / "p.yaml", tmp_path / "evidence", {"talk": {
        "pool": "etl", "command": f"echo first; while [ ! -e {gate} ]; do sleep 0.05; done; echo second"}})
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url)
    wait_for(lambda: _logs("talk", "--state-dir", str(sd)).stdout == "first\n", timeout=60, what="first")
    follow = subprocess.Popen([sys.executable, "-m", "wloadctl", "logs", "talk", "--follow", "--state-dir", str(sd)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        wait_for(lambda: _logs("talk", "--state-dir", str(sd)).stdout == "first\n", timeout=60, what="a copy")
        # When it prints the rest and ends
        gate.touch()
        _out, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        followed, err = follow.communicate(timeout=60)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.communicate()
    # Then `logs` prints the whole of it, and so did `logs --follow` before it exited
    assert followed == "first\nsecond\n", err
    again = _logs("talk", "--state-dir", str(sd))
    assert (again.returncode, again.stdout) == (0, "first\nsecond\n"), again.stderr


def test_logs_of_an_attempt_are_read_from_the_agent_that_ran_that_attempt(
        tmp_path: Path, nats_server: NatsServer) -> None:
    # Given a job whose first attempt failed on n1 and whose second ran on n2
    plan = plan_file(tmp_path / "p.yaml", tmp_path / "evidence", {"flaky": {
        "pool": "etl", "retries": {"count": 1, "delay": "1s"},
        "command": 'echo "attempt $WLOADCTL_ATTEMPT on $WLOADCTL_AGENT"; [ "$WLOADCTL_ATTEMPT" != 1 ]'}})
    sd = tmp_path / "sd"
    made: list[Node] = []
    try:
        n1 = Node("n1", nats_server.url, tmp_path / "n1", ["etl"]).start()
        made.append(n1)
        wait_for(lambda: _alive(nats_server.url, "n1"), timeout=30, what="n1 beating")
        proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "3")
        wait_for(lambda: "attempt 1 on n1" in _logs("flaky", "--state-dir", str(sd)).stdout, timeout=60,
                 what="attempt 1 on n1")
        n1.stop()
        made.append(Node("n2", nats_server.url, tmp_path / "n2", ["etl"]).start())
        _out, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        made.append(Node("n1", nats_server.url, tmp_path / "n1", ["etl"]).start())
        wait_for(lambda: _alive(nats_server.url, "n1"), timeout=30, what="n1 back")
        # When each attempt's log is asked for (attempt 1's copy gone from this host)
        for f in (sd / "logs").rglob("flaky*"):
            f.unlink()
        first = _logs("flaky", "--attempt", "1", "--state-dir", str(sd))
        second = _logs("flaky", "--attempt", "2", "--state-dir", str(sd))
    finally:
        for n in made:
            n.stop()
    # Then each comes from the agent that ran it
    assert (first.returncode, first.stdout) == (0, "attempt 1 on n1\n"), first.stderr
    assert (second.returncode, second.stdout) == (0, "attempt 2 on n2\n"), second.stderr


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server where every client logs in as user `ops`."""
    yield from serve(tmp_path, "authorization {\n  users = [\n    {user: ops, password: ops-pw}\n  ]\n}\n")


def test_logs_logs_in_to_a_broker_with_users_as_run_does(tmp_path: Path, auth_server: NatsServer) -> None:
    # Given a job that ran on an agent through a broker that wants a user and a password
    login = ("--broker-user", "ops", "--broker-password", "ops-pw")
    plan = plan_file(tmp_path / "p.yaml", tmp_path / "evidence", {"hello": {"pool": "etl", "command": "echo hi"}})
    sd = tmp_path / "sd"
    node = Node("a1", auth_server.url, tmp_path / "a1", ["etl"], extra=login).start()
    try:
        proc = run_bg(plan, sd, auth_server.url, *login)
        _out, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        # When its log is read with the user on the command line and the password in the environment
        env = {**ENV, "WLOADCTL_BROKER_PASSWORD": "ops-pw"}
        p = _logs("hello", "--broker-user", "ops", "--state-dir", str(sd), env=env)
    finally:
        node.stop()
    # Then it is copied from the agent
    assert (p.returncode, p.stdout) == (0, "hi\n"), p.stderr


def test_logs_of_an_agent_job_on_a_host_that_cannot_name_the_agent_say_so_not_that_no_broker_is_known(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    # Given a run whose job ran on an agent
    plan = plan_file(tmp_path / "p.yaml", tmp_path / "evidence", {"talk": {"pool": "etl", "command": "echo hi"}})
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url)
    _out, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    # When its log is asked for, with the broker, where the agents' names are not kept (a run numbered before its
    # journal kept them, read without the agents file of its scheduler's state directory)
    with closing(sqlite3.connect(sd / "journal.db")) as con, con:
        con.execute("DELETE FROM agents")
    got = _logs("talk", "--state-dir", str(sd), "--broker", nats_server.url)
    # Then the reader says it cannot name the agent, not that no broker is known
    assert got.returncode != 0
    assert "whose name is not known here" in got.stderr and "no broker" not in got.stderr, got.stderr
