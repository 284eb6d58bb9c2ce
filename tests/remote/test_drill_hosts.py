"""`wloadctl drill failover --broker --journal` of a pair that spans hosts: the active and the standby each on a
"host" of its own (IPC, mount, pid and UTS namespaces) with two agents, a private nats-server and a scratch
PostgreSQL journal; the drill runs from here, which sees neither scheduler's processes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import cli, wait_for
from tests.remote.conftest import NatsServer
from tests.remote.nodes import Node
from tests.remote.test_agent_runs import TRUSTING, plan_file
from tests.remote.test_ha_hosts import Pair, journal_run, runs_of

pytestmark = pytest.mark.ipc
ADMINS = {"roles": {"admin": {"broker_users": ["unauthenticated"]}}}
"""The test's broker authenticates nobody: the plan makes its callers admins, whom a drill needs."""


def drill_plan(tmp: Path, out: Path) -> Path:
    """A chain of pool jobs held at a03, and a long job, until `go` exists; then the chain runs on past the drill."""
    gate = str(tmp / "go")
    jobs: dict[str, dict] = {"long": {"pool": "etl", "sleep": 2, "gate": gate}}
    for k in range(12):
        jobs[f"a{k:02d}"] = {"pool": "etl", "sleep": 0.25, **({"depends_on": [f"a{k - 1:02d}"]} if k else {})}
    jobs["a03"]["gate"] = gate  # the run waits there, under way, until the drill begins
    return plan_file(tmp / "plan.yaml", out, jobs, name="drill", extra=ADMINS)


def drill(url: str, journal: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli("drill", "failover", "--broker", url, "--journal", journal, *extra, timeout=90)


def run_drill(pair: Pair, url: str, journal: str, mode: str, go: Path) -> dict[str, Any]:
    """The drill of `mode` from here, once the standby watches and the run goes on past `go`; its report."""
    pair.standby.start()
    wait_for(lambda: "standing by for run" in pair.standby.output(), timeout=60, what="the standby watching")
    # The chain goes on as the drill begins: the jobs after a03 are dispatched across the takeover.
    go.touch()
    p = drill(url, journal, "--mode", mode, "--json", "--timeout", "30")
    assert p.returncode == 0, p.stdout + p.stderr + pair.active.output() + pair.standby.output()
    rep = json.loads(p.stdout)
    print(rep["summary"])
    # Then the standby of host B took over from host A, measured, and nothing that had succeeded ran again
    assert rep["ok"] and rep["problems"] == [], rep
    assert (rep["active_host"], rep["standby_host"], rep["new_host"]) == ("hosta", "hostb", "hostb")
    assert (rep["epoch_from"], rep["epoch_to"]) == (1, 2)
    assert 0 < rep["takeover_s"] <= rep["first_dispatch_s"] <= rep["first_start_s"]
    assert rep["succeeded_before"] >= 1 and rep["reran"] == [] and rep["old_epoch_dispatches"] == 0
    return rep


def check_after(pair: Pair, out: Path, journal: str, mode: str, struck: str) -> None:
    """The run ended under host B, every job once; the report and the request are in the journal."""
    status, epoch, states = journal_run(journal)
    assert status == "succeeded" and epoch == 2
    assert runs_of(out) == {j: 1 for j in states}, runs_of(out)
    st = json.loads(cli("status", "--journal", journal, "--json", check=True).stdout)
    assert st["last_drill"]["ok"] and f"failover drill ({mode}) of run" in st["last_drill"]["summary"]
    audit = json.loads(cli("audit", "--journal", journal, "--json", check=True).stdout)
    asked = [a for a in audit if a["verb"] == "drill" and a["job"] == "scheduler"]
    assert len(asked) == 1 and asked[0]["applied"] and f"{struck} of scheduler pid" in asked[0]["outcome"], asked
    assert asked[0]["user"].startswith("unauthenticated@")


@contextmanager
def run_under_way(tmp_path: Path, out: Path, url: str, journal: str) -> Iterator[Pair]:
    """A run on host A, under way (its standby is not started); everything stopped after."""
    pair = Pair(tmp_path, drill_plan(tmp_path, out), url, journal)
    try:
        pair.active.start()
        wait_for(lambda: {"a03", "long"} <= set(runs_of(out)), timeout=60, what="the run under way")
        yield pair
    finally:
        (tmp_path / "go").touch()
        pair.stop()


def test_a_drill_through_the_broker_refuses_without_a_standby_then_the_active_kills_itself_and_host_b_takes_over(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node], pg_url: str) -> None:
    # Given a run on host A, under way, with no standby yet
    out = tmp_path / "evidence"
    with run_under_way(tmp_path, out, nats_server.url, pg_url) as pair:
        # When a drill is asked from here with no standby beating
        p = drill(nats_server.url, pg_url)
        # Then it refuses in one line, and the active goes on
        assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
        assert "no live standby beating on the broker" in p.stderr and "on hosta" in p.stderr, p.stderr
        assert pair.active.proc is not None and pair.active.proc.poll() is None
        # When a standby watches from host B and the drill asks the active to kill itself
        rep = run_drill(pair, nats_server.url, pg_url, "kill", tmp_path / "go")
        # Then its lease went to host B, and the old active is gone
        assert rep["old_active"].startswith("killed (the lease went to hostb:"), rep
        assert pair.active.wait(30) != 0
        assert pair.standby.wait(120) == 0, pair.standby.output()
    check_after(pair, out, pg_url, "kill", "SIGKILL")


def test_a_drill_through_the_broker_freezes_the_active_whose_waker_thaws_it_and_it_stands_down(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node], pg_url: str) -> None:
    # Given a run on host A, under way
    out = tmp_path / "evidence"
    with run_under_way(tmp_path, out, nats_server.url, pg_url) as pair:
        # When a standby watches from host B and the drill asks the active to freeze itself
        rep = run_drill(pair, nats_server.url, pg_url, "stop", tmp_path / "go")
        # Then the active, woken on its own host once taken over, said it stood down and left the run
        assert rep["old_active"] == "fenced (stood down: it found the newer epoch)", rep
        assert pair.active.wait(30) != 0
        assert "wloadctl: fenced: scheduler pid" in pair.active.output(), pair.active.output()
        assert pair.standby.wait(120) == 0, pair.standby.output()
    check_after(pair, out, pg_url, "stop", "SIGSTOP")


def test_a_drill_refused_for_the_callers_role_is_one_line_and_exit_2(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node], pg_url: str) -> None:
    # Given a run on host A with a standby on host B, whose plan makes the drill's caller an operator, not an admin
    out = tmp_path / "evidence"
    gate = tmp_path / "go"
    plan = plan_file(tmp_path / "plan.yaml", out, {"long": {"pool": "etl", "gate": str(gate)}}, name="drill",
                     extra=TRUSTING)
    pair = Pair(tmp_path, plan, nats_server.url, pg_url)
    try:
        pair.start()
        wait_for(lambda: "long" in runs_of(out), timeout=60, what="the run under way")
        # When the drill is asked
        p = drill(nats_server.url, pg_url)
        # Then the active refuses it, said in one line as a refusal (exit 2, not a failed check), and goes on
        assert p.returncode == 2, p.stdout + p.stderr
        assert p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
        assert "refused the drill" in p.stderr, p.stderr
        assert pair.active.proc is not None and pair.active.proc.poll() is None
    finally:
        gate.touch()
        pair.stop()
