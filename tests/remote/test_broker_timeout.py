"""`--broker-timeout S`: how long a process waits for a broker that does not answer before it refuses (5 s unless
told), on every command that takes --broker; a broker that refuses the credentials is still said at once."""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.helpers import cli
from tests.remote.conftest import free_port, serve
from tests.remote.test_agents import REMOTE_PLAN
from wloadctl.errors import TransportError, UsageError
from wloadctl.remote.broker import BrokerOptions, add_broker_args
from wloadctl.remote.link import BrokerLink


def _said(stderr: str) -> list[str]:
    """The lines a refused start says (a run first removes what crashed runs of this user left: not the matter)."""
    return [line for line in stderr.strip().splitlines() if not line.startswith("wloadctl: removed ")]


def test_a_run_gives_up_on_a_broker_that_does_not_answer_after_its_broker_timeout(tmp_path: Path) -> None:
    # Given a plan with a job on agents, and a broker address where nothing listens
    plan = tmp_path / "p.yaml"
    plan.write_text(REMOTE_PLAN)
    url = f"nats://127.0.0.1:{free_port()}"
    # When it is run with --broker-timeout 0.5
    t0 = time.monotonic()
    ran = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--broker", url, "--broker-timeout", "0.5",
              timeout=60)
    took = time.monotonic() - t0
    # Then it is refused in one line naming the broker and the wait it was given, well before the default 5 s
    assert ran.returncode == 3, ran.stderr
    said = _said(ran.stderr)
    assert len(said) == 1 and said[0].startswith(f"wloadctl: cannot reach the broker at {url} within 0.5s"), said
    assert took < 4.0, f"refused after {took:.1f}s"
    # And nothing of the run is made (a journal and lock were left: `runs` then listed the directory as broken)
    assert not (tmp_path / "sd").exists()
    # Nor for a plan with jobs on agents and no broker at all
    ran = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), timeout=60)
    assert ran.returncode == 2 and "no broker was given" in ran.stderr and not (tmp_path / "sd").exists()


COMMANDS = [("run", "PLAN"), ("resume",), ("scheduler", "--standby"), ("console",), ("agents",),
            ("agent", "--name", "n1", "--pool", "etl"), ("hold", "x"), ("logs", "x"), ("drill", "failover"),
            ("drill", "agent-loss", "n1")]
"""Commands that take --broker (PLAN: a plan file)."""


def _with_timeout(tmp_path: Path, command: tuple[str, ...], value: str) -> subprocess.CompletedProcess[str]:
    plan = tmp_path / "p.yaml"
    plan.write_text(REMOTE_PLAN)
    argv = [str(plan) if a == "PLAN" else a for a in command]
    return cli(*argv, "--broker", "nats://127.0.0.1:1", "--broker-timeout", value, timeout=60)


def _usage_error(p: subprocess.CompletedProcess[str], value: str) -> None:
    assert p.returncode == 2, p.stderr
    assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "--broker-timeout" in p.stderr and repr(value) in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_a_bad_broker_timeout_is_a_one_line_usage_error(tmp_path: Path, value: str) -> None:
    _usage_error(_with_timeout(tmp_path, ("run", "PLAN"), value), value)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_that_takes_a_broker_takes_and_checks_its_timeout(tmp_path: Path,
                                                                       command: tuple[str, ...]) -> None:
    _usage_error(_with_timeout(tmp_path, command, "0"), "0")
    helped = cli(*[a for a in command if a != "PLAN"], "--help", timeout=60)
    assert helped.returncode == 0 and "--broker-timeout S" in helped.stdout, helped.stdout + helped.stderr


def test_broker_options_carry_the_timeout_and_refuse_a_bad_one() -> None:
    from wloadctl.remote.broker import CONNECT_TIMEOUT, ENV_TIMEOUT

    assert BrokerOptions("nats://h").connect_timeout == CONNECT_TIMEOUT == 5.0
    for bad in (0.0, -2.0, float("nan")):
        with pytest.raises(UsageError, match="--broker-timeout"):
            BrokerOptions("nats://h", connect_timeout=bad)
    # From a command line: the option, else $WLOADCTL_BROKER_TIMEOUT, else the command's default
    p = argparse.ArgumentParser()
    add_broker_args(p, timeout=3.0)
    url = ["--broker", "nats://h"]
    assert BrokerOptions.from_args(p.parse_args(url), {}).connect_timeout == 3.0
    assert BrokerOptions.from_args(p.parse_args(url), {ENV_TIMEOUT: "1.5"}).connect_timeout == 1.5
    assert BrokerOptions.from_args(p.parse_args([*url, "--broker-timeout", "0.2"]), {ENV_TIMEOUT: "1.5"}) \
        .connect_timeout == 0.2
    with pytest.raises(UsageError, match=f"{ENV_TIMEOUT}='0': give a number of seconds above 0"):
        BrokerOptions.from_args(p.parse_args(url), {ENV_TIMEOUT: "0"})
    # A link opened without a timeout of its own waits the options' one
    with pytest.raises(TransportError, match=r"within 0\.3s"):
        BrokerLink.open(BrokerOptions(f"nats://127.0.0.1:{free_port()}", connect_timeout=0.3))


def test_a_broker_refusing_the_credentials_is_said_at_once_whatever_the_broker_timeout(tmp_path: Path) -> None:
    # Given a broker where every client logs in, and a plan with a job on agents
    servers = serve(tmp_path, "authorization {\n  users = [\n    {user: ops, password: ops-pw}\n  ]\n}\n")
    server = next(servers)
    try:
        plan = tmp_path / "p.yaml"
        plan.write_text(REMOTE_PLAN)
        # When it is run with a wrong password and a broker timeout of a minute
        ran = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--broker", server.url, "--broker-user",
                  "ops", "--broker-password", "wrong", "--broker-timeout", "60", timeout=45)
    finally:
        servers.close()
    # Then the refusal is said in one line, without waiting the minute out (cli's own timeout would fail first)
    assert ran.returncode == 3, ran.stderr
    said = _said(ran.stderr)
    assert len(said) == 1, said
    assert said[0].startswith(f"wloadctl: the broker at {server.url} refused the credentials (user 'ops'"), said
