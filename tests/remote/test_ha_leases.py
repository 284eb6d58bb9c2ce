"""A run's lease held by a live scheduler of another host: operator verbs without a broker, resumes from the old
host, a fenced active and a standby cut off from the broker leave it to its holder; a refused start leaves no run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import cli, wait_for
from tests.remote.conftest import NatsServer
from tests.remote.nodes import ENV, SchedulerHost, host_command, unshare_available
from tests.remote.test_agent_runs import plan_file
from tests.remote.test_ha_hosts import BEAT, Pair, journal_run, runs_of
from wloadctl.errors import Fenced
from wloadctl.store import Store

pytestmark = pytest.mark.ipc


@pytest.fixture
def hosts() -> Iterator[list[SchedulerHost]]:
    """Schedulers started on hosts of their own by a test, stopped at its end whatever happened."""
    if not unshare_available():
        pytest.fail("these tests put each scheduler on a host of its own: they need util-linux unshare, and root "
                    "or unprivileged user namespaces", pytrace=False)
    made: list[SchedulerHost] = []
    try:
        yield made
    finally:
        for h in made:
            h.stop()


def gated_plan(tmp: Path, out: Path, gate: Path, far: bool = False) -> Path:
    """`wait` runs until `gate` exists, then `end` (`far`: `end` runs on an agent of pool etl)."""
    return plan_file(tmp / "plan.yaml", out, {
        "wait": {"gate": str(gate), "sleep": 0.1},
        "end": {"depends_on": ["wait"], "sleep": 0.1, **({"pool": "etl"} if far else {})},
    }, name="leased")


def started_pair(tmp_path: Path, nats_server: NatsServer, pg_url: str, hosts: list[SchedulerHost],
                 far: bool = False, standby_args: tuple[str, ...] = ()) -> tuple[Pair, Path, Path]:
    """A gated run on host A with a standby on host B, under way: (the pair, its evidence file, its gate)."""
    out, gate = tmp_path / "evidence", tmp_path / "go"
    pair = Pair(tmp_path, gated_plan(tmp_path, out, gate, far=far), nats_server.url, pg_url,
                standby_args=standby_args)
    hosts += [pair.active, pair.standby]
    pair.start()
    wait_for(lambda: "wait" in runs_of(out), timeout=60, what="the run under way")
    return pair, out, gate


def elsewhere(hidden: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`wloadctl ARGS` on a host of its own (hostc), where `hidden` (a run's files) is an empty directory."""
    script = f"mount -t tmpfs tmpfs {hidden} && exec \"$@\""
    return subprocess.run(host_command(["sh", "-c", script, "op", sys.executable, "-m", "wloadctl", *args],
                                       hostname="hostc"), capture_output=True, text=True, timeout=120, env=ENV)


def holder(url: str) -> tuple[int, str]:
    """(epoch, holder) of the journal's latest run."""
    with Store.open(None, journal=url, readonly=True) as st:
        run = st.latest_run()
        assert run is not None
        return run.epoch, st.holder_host(run.id) or ""


def test_a_verb_without_a_broker_from_another_host_is_refused_naming_the_holder_and_the_run_goes_on(
        tmp_path: Path, pg_url: str, hosts: list[SchedulerHost]) -> None:
    # Given a run of a PostgreSQL journal whose scheduler is on host A, its job `wait` running
    out, gate = tmp_path / "evidence", tmp_path / "go"
    active = SchedulerHost("hosta", "", tmp_path / "a" / "sd",
                           ["run", str(gated_plan(tmp_path, out, gate)), "--journal", pg_url, "--executors", "1",
                            "--quiet"])
    hosts.append(active.start())
    wait_for(lambda: "wait" in runs_of(out), timeout=60, what="the run under way")
    # When an operator on host C, who sees none of the run's files, holds `end` and kills `wait` without a broker
    for verb, job in (("hold", "end"), ("kill", "wait")):
        p = elsewhere(tmp_path / "a", verb, job, "--journal", pg_url)
        # Then each is refused in one line naming the holder and the broker option, and applied nowhere
        assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
        said = p.stderr.strip()
        assert "\n" not in said and "is held by scheduler pid " in said and " on hosta (epoch 1, lease until " in said
        assert "--broker URL" in said, said
    # And the run goes on under its scheduler to its end, every job once, nothing held
    gate.touch()
    assert active.wait(60) == 0, active.output()
    status, epoch, _states = journal_run(pg_url)
    assert (status, epoch) == ("succeeded", 1)
    assert runs_of(out) == {"wait": 1, "end": 1}
    acts = json.loads(cli("audit", "--journal", pg_url, "--json", check=True).stdout)
    assert not [a for a in acts if a["verb"] in ("hold", "kill")], acts


def test_a_resume_on_the_old_host_is_refused_while_the_standby_that_took_over_holds_the_lease(
        tmp_path: Path, nats_server: NatsServer, pg_url: str, hosts: list[SchedulerHost]) -> None:
    # Given a run on host A that a standby on host B took over after a kill -9 of host A
    pair, out, gate = started_pair(tmp_path, nats_server, pg_url, hosts)
    pair.active.kill_node()
    wait_for(lambda: runs_of(out).get("wait") == 2, timeout=60, what="the takeover running `wait` again")
    # When the old host comes back and resumes the run from its state directory
    again = SchedulerHost("hosta", nats_server.url, tmp_path / "a" / "sd",
                          ["resume", "--broker", nats_server.url, "--journal", pg_url, *BEAT])
    hosts.append(again.start())
    # Then it is refused in one line (exit 2) naming the holder and when its lease ends
    assert again.wait(60) == 2, again.output()
    said = [line for line in again.output().splitlines() if line.strip()]
    assert len(said) == 1 and "on hostb holds the lease of run" in said[0] and "runs until" in said[0], said
    # And the run goes on under host B alone, to its end
    assert holder(pg_url) == (2, "hostb")
    gate.touch()
    assert pair.standby.wait(60) == 0, pair.standby.output()
    assert journal_run(pg_url)[:2] == ("succeeded", 2)
    assert runs_of(out) == {"wait": 2, "end": 1}


def test_a_fenced_active_says_so_once_and_exits_with_the_status_its_service_does_not_restart(
        tmp_path: Path, nats_server: NatsServer, pg_url: str, hosts: list[SchedulerHost]) -> None:
    # Given a run on host A with a standby on host B
    pair, _out, gate = started_pair(tmp_path, nats_server, pg_url, hosts)
    # When A freezes past its lease, B takes over, and A wakes
    pair.active.pause()
    wait_for(lambda: "took run" in pair.standby.output(), timeout=30, what="the takeover")
    pair.active.resume()
    # Then A exits with the fenced status, having said so in one line
    assert pair.active.wait(60) == Fenced.exit_code == 4, pair.active.output()
    told = [line for line in pair.active.output().splitlines() if "fenced" in line]
    assert len(told) == 1 and "fenced: fenced" not in told[0] and "on hostb took run" in told[0], told
    gate.touch()
    assert pair.standby.wait(60) == 0, pair.standby.output()


def test_a_standby_that_cannot_reach_the_broker_does_not_claim_the_run_and_takes_it_once_the_broker_answers(
        tmp_path: Path, nats_server: NatsServer, pg_url: str, hosts: list[SchedulerHost]) -> None:
    # Given a run with a job on agents, on host A, and a standby on host B (which gives up on a broker that does
    # not answer after 1 s rather than 5: how long it waits is not this test's matter)
    pair, out, _gate = started_pair(tmp_path, nats_server, pg_url, hosts, far=True,
                                    standby_args=("--broker-timeout", "1"))
    # When the broker goes away and host A dies
    nats_server.stop()
    pair.active.kill_node()
    # Then the standby says it cannot take the run over, claims nothing and keeps waiting
    wait_for(lambda: "this standby cannot take it over" in pair.standby.output(), timeout=60,
             what="the standby waiting for the broker")
    assert holder(pg_url) == (1, "hosta")
    assert pair.standby.proc is not None and pair.standby.proc.poll() is None, pair.standby.output()
    # And once the broker is back it takes the run over and drives it
    nats_server.start()
    wait_for(lambda: "took run" in pair.standby.output(), timeout=90, what="the takeover")
    wait_for(lambda: runs_of(out).get("wait") == 2, timeout=60, what="`wait` run again on host B")
    assert holder(pg_url) == (2, "hostb")
    assert pair.standby.proc.poll() is None, pair.standby.output()


@pytest.mark.parametrize("journal", ["sqlite", "postgresql"])
@pytest.mark.parametrize("broker", ["nats://127.0.0.1:1", None])
def test_a_start_refused_for_its_broker_leaves_no_run(tmp_path: Path, journal: str, broker: str | None,
                                                      request: pytest.FixtureRequest) -> None:
    # Given a plan with a job on agents
    sd = tmp_path / "sd"
    where = ["--state-dir", str(sd)]
    if journal == "postgresql":
        where += ["--journal", request.getfixturevalue("pg_url")]
    plan = gated_plan(tmp_path, tmp_path / "evidence", tmp_path / "go", far=True)
    # When it is started with a broker that does not answer (given up on after half a second), or with none
    p = cli("run", str(plan), *where, *(["--broker", broker, "--broker-timeout", "0.5"] if broker else []))
    # Then it is refused in one line, and no run of it is recorded
    assert p.returncode == (3 if broker else 2), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    st = cli("status", *where)
    assert st.returncode == 2 and "no run" in st.stderr, st.stdout + st.stderr
    if journal == "sqlite":
        assert json.loads(cli("runs", "--root", str(tmp_path), "--json", check=True).stdout) == []
    else:
        with Store.open(None, journal=where[-1], readonly=True) as journaled:
            assert journaled.runs() == []
    assert not (tmp_path / "evidence").exists()
