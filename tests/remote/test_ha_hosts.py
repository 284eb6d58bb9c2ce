"""HA across hosts: the active and the standby schedulers and two agents, each on a "host" of its own (IPC, mount,
pid and UTS namespaces), sharing only a real nats-server and a real PostgreSQL journal."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import cli, wait_for
from tests.pgserver import PrivateServer
from tests.remote.conftest import NatsServer, free_port, nats_server_binary
from tests.remote.nodes import Node, SchedulerHost, unshare_available
from tests.remote.test_agent_runs import TRUSTING, plan_file
from wloadctl.core.states import JobState
from wloadctl.remote.broker import BrokerOptions, Subjects
from wloadctl.remote.link import BrokerLink
from wloadctl.remote.witness import read_leader
from wloadctl.store import Store
from wloadctl.store.postgres import scratch_database

pytestmark = pytest.mark.ipc
BEAT = ["--heartbeat-interval", "0.1", "--heartbeat-timeout", "0.6"]
"""Both schedulers: beats every 0.1 s, a lease of 0.6 s."""


@pytest.fixture
def agents(tmp_path: Path, nats_server: NatsServer) -> Iterator[list[Node]]:
    """Two agents of pool `etl`, each on its own host."""
    if not unshare_available():
        pytest.fail("these tests put each process on a host of its own: they need util-linux unshare, and root "
                    "or unprivileged user namespaces", pytrace=False)
    made: list[Node] = []
    try:
        for name in ("n1", "n2"):
            made.append(Node(name, nats_server.url, tmp_path / name, ["etl"]).start())
        wait_for(lambda: _agents_alive(nats_server.url) >= 2, timeout=30, what="both agents beating")
        yield made
    finally:
        for n in made:
            n.stop()


def _agents_alive(url: str) -> int:
    p = cli("agents", "--broker", url, "--json")
    return sum(1 for a in json.loads(p.stdout) if a["state"] == "ALIVE") if p.returncode == 0 else 0


class Pair:
    """The active (host A) and the standby (host B) of one run."""

    def __init__(self, tmp: Path, plan: Path, broker: str, journal: str, standby_broker: str | None = None,
                 standby_args: tuple[str, ...] = (), names: tuple[str, str] = ("hosta", "hostb"),
                 active_host: type[SchedulerHost] = SchedulerHost) -> None:
        self.active = active_host(names[0], broker, tmp / "a" / "sd",
                                  ["run", str(plan), "--broker", broker, "--journal", journal, "--executors", "1",
                                   "--quiet", *BEAT])
        self.standby = SchedulerHost(names[1], broker, tmp / "b" / "sd",
                                     ["scheduler", "--standby", "--broker", standby_broker or broker, "--journal",
                                      journal, *BEAT, *standby_args])

    def start(self) -> Pair:
        self.active.start()
        self.standby.start()
        wait_for(lambda: "standing by for run" in self.standby.output(), timeout=60, what="the standby watching")
        return self

    def stop(self) -> None:
        self.active.stop()
        self.standby.stop()


def runs_of(out: Path) -> dict[str, int]:
    """How many times each job started, from the jobs' own output."""
    got: dict[str, int] = {}
    for line in out.read_text().splitlines() if out.exists() else []:
        job, mark = line.split()[:2]
        if mark == "start":
            got[job] = got.get(job, 0) + 1
    return got


def ended(out: Path) -> set[str]:
    return {line.split()[0] for line in (out.read_text().splitlines() if out.exists() else [])
            if line.split()[1] == "end"}


def journal_run(url: str) -> tuple[str, int, dict[str, int]]:
    """(status, epoch, job -> state) of the journal's latest run."""
    with Store.open(None, journal=url, readonly=True) as st:
        run = st.latest_run()
        assert run is not None
        return run.status, run.epoch, {r[1]: r[2] for r in st.job_rows(run.id)}


def wide_plan(tmp: Path, out: Path, gated: bool = False, long: float = 4) -> Path:
    """Chains of pool jobs beside a long one of `long` s: work starts all along the run (`gated`: a09 waits for
    a09.go).

    The chains take about 2.8 s: a test whose run must still be going some time after it is under way (before a
    fault that does not stall it) keeps the long job at 4 s; one whose fault stalls the run may make it shorter.
    """
    jobs: dict[str, dict] = {"long": {"pool": "etl", "sleep": long}}
    for c in "ab":
        for k in range(12):
            jobs[f"{c}{k:02d}"] = {"pool": "etl", "sleep": 0.2, **({"depends_on": [f"{c}{k - 1:02d}"]} if k else {})}
    if gated:
        jobs["a09"]["gate"] = str(tmp / "a09.go")  # `a10` stays ahead until the test opens it
    jobs["last"] = {"pool": "etl", "depends_on": ["a11", "b11", "long"]}
    # The test's broker authenticates nobody: its callers are operators only because the plan says so.
    return plan_file(tmp / "plan.yaml", out, jobs, name="hosts", extra=TRUSTING)


def test_kill_9_of_the_active_host_the_standby_takes_over_and_every_job_runs_once_with_operators_on_any_host(
        tmp_path: Path, nats_server: NatsServer, agents: list[Node], pg_url: str) -> None:
    # Given a run on host A with a standby on host B, and an operator on a third host
    out = tmp_path / "evidence"
    pair = Pair(tmp_path, wide_plan(tmp_path, out, gated=True), nats_server.url, pg_url).start()
    try:
        wait_for(lambda: {"a02", "long"} <= set(runs_of(out)), timeout=60, what="the run under way")
        st = json.loads(cli("status", "--journal", pg_url, "--json", check=True).stdout)
        assert st["live"] and st["status"] == "running" and st["scheduler_host"] == "hosta", st
        # the operator holds a job through the broker: the active on host A answers
        held = cli("hold", "a10", "--reason", "check", "--broker", nats_server.url, "--journal", pg_url, "--json")
        assert held.returncode == 0, held.stderr
        assert json.loads(held.stdout)["live"]
        (tmp_path / "a09.go").touch()
        # When host A is killed mid-run
        pair.active.kill_node()
        # Then host B takes over, and the verbs now reach it
        wait_for(lambda: "took run" in pair.standby.output(), timeout=30, what="the takeover")
        rel = wait_for(lambda: (p := cli("release", "a10", "--broker", nats_server.url, "--journal", pg_url,
                                         "--json")).returncode == 0 and p, timeout=30, what="the release answered")
        assert json.loads(rel.stdout)["results"][0][1], rel.stdout
        assert pair.standby.wait(120) == 0, (pair.standby.output(), journal_run(pg_url), runs_of(out))
        st = json.loads(cli("status", "--journal", pg_url, "--json", check=True).stdout)
        assert st["status"] == "succeeded" and not st["live"], st
    finally:
        (tmp_path / "a09.go").touch()
        pair.stop()
    # And every job ran exactly once: the long one, running on an agent across the takeover, was kept
    status, epoch, states = journal_run(pg_url)
    assert status == "succeeded" and epoch == 2
    assert runs_of(out) == {j: 1 for j in states}, runs_of(out)
    assert ended(out) == set(states)
    # and the broker's leader entry of the run moved to epoch 2, held by host B
    with Store.open(None, journal=pg_url, readonly=True) as st:
        run = st.latest_run()
        assert run is not None
    with BrokerLink.open(BrokerOptions(nats_server.url), name="test") as link:
        leader = read_leader(link, Subjects(), run.run_id)
    assert leader is not None and leader["epoch"] == 2 and str(leader["holder"]).startswith("hostb:"), leader
    audit = cli("audit", "--journal", pg_url, "--json", check=True)
    acts = [(a["verb"], a["job"], a["applied"]) for a in json.loads(audit.stdout)]
    assert ("hold", "a10", True) in acts and ("release", "a10", True) in acts, acts
    assert "agents hold" in pair.standby.output()


def test_an_active_frozen_past_its_lease_is_fenced_when_it_wakes_and_writes_nothing(
        tmp_path: Path, nats_server: NatsServer, agents: list[Node], pg_url: str) -> None:
    # Given a run on host A with a standby on host B (A frozen, nothing more is dispatched: a long job of 3 s)
    out = tmp_path / "evidence"
    pair = Pair(tmp_path, wide_plan(tmp_path, out, long=3), nats_server.url, pg_url).start()
    try:
        wait_for(lambda: {"a02", "long"} <= set(runs_of(out)), timeout=60, what="the run under way")
        # When host A's scheduler freezes past its lease, and B takes over
        pair.active.pause()
        wait_for(lambda: "took run" in pair.standby.output(), timeout=30, what="the takeover")
        with Store.open(None, journal=pg_url, readonly=True) as st:
            run = st.latest_run()
            assert run is not None
            seq = st.last_seq(run.id)
        # and A wakes up
        pair.active.resume()
        # Then A finds itself fenced and exits with a message, without finishing the run
        code = pair.active.wait(60)
        assert code != 0
        assert "fenced" in pair.active.output(), pair.active.output()
        assert pair.standby.wait(120) == 0, pair.standby.output()
    finally:
        pair.stop()
    # And nothing of A's reached the journal after the takeover (every turn since is B's), and each job ran once
    with Store.open(None, journal=pg_url, readonly=True) as st:
        run = st.latest_run()
        assert run is not None and run.status == "succeeded" and run.epoch == 2
        later = st.transitions_since(run.id, seq)
        assert later, "the successor journaled the rest of the run"
    _status, _epoch, states = journal_run(pg_url)
    assert runs_of(out) == {j: 1 for j in states}, runs_of(out)
    a_events = [json.loads(line) for line in (tmp_path / "a" / "sd" / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "fenced" for e in a_events)


def test_the_takeover_reports_the_silence_of_the_active_as_the_journal_and_the_broker_saw_it(
        tmp_path: Path, nats_server: NatsServer, agents: list[Node], pg_url: str) -> None:
    # Given a run on host A watched for a while by a standby on host B
    out = tmp_path / "evidence"
    pair = Pair(tmp_path, wide_plan(tmp_path, out), nats_server.url, pg_url).start()
    try:
        wait_for(lambda: {"a02", "long"} <= set(runs_of(out)), timeout=60, what="the run under way")
        time.sleep(2)  # the standby has watched this active much longer than its lease
        # When A's scheduler freezes, and B takes over
        frozen = time.time()
        pair.active.pause()
        wait_for(lambda: "took run" in pair.standby.output(), timeout=30, what="the takeover")
        pair.active.resume()
        assert pair.standby.wait(120) == 0, pair.standby.output()
    finally:
        pair.stop()
    # Then the silence it reports and journals is the one since A's last sign of life, not since B began to watch
    b_events = [json.loads(line) for line in (tmp_path / "b" / "sd" / "events.jsonl").read_text().splitlines()]
    took = next(e for e in b_events if e["event"] == "takeover")
    assert 0.6 <= took["silent_for"] <= took["claimed_at"] - frozen + 0.3, (took, frozen)
    said = float(pair.standby.output().split("(silent ", 1)[1].split("s;", 1)[0])
    assert abs(said - took["silent_for"]) <= 0.06, pair.standby.output()


def test_a_postgresql_restart_mid_run_loses_nothing_with_a_standby_watching(
        tmp_path: Path, nats_server: NatsServer, agents: list[Node]) -> None:
    # Given a run with a standby, on a PostgreSQL server of this test alone
    server = PrivateServer()
    server.start()
    try:
        with scratch_database(server.url, "wl_test") as url:
            out = tmp_path / "evidence"
            # (no journal, no progress: a long job of 3 s)
            pair = Pair(tmp_path, wide_plan(tmp_path, out, long=3), nats_server.url, url).start()
            try:
                wait_for(lambda: {"a02", "long"} <= set(runs_of(out)), timeout=60, what="the run under way")
                # When PostgreSQL restarts in the middle of the run
                server.stop("fast")
                time.sleep(1.0)  # longer than the lease: the active renews it in the journal every 0.1 s
                server.start()
                # Then the run finishes under one of the two schedulers
                wait_for(lambda: pair.active.proc.poll() is not None and pair.standby.proc.poll() is not None,
                         timeout=120, what="both schedulers done")
                status, epoch, states = journal_run(url)
            finally:
                pair.stop()
            # And every job ran exactly once, and whoever ended the run said what happened to the journal
            assert status == "succeeded", (pair.active.output(), pair.standby.output())
            assert runs_of(out) == {j: 1 for j in states}, runs_of(out)
            said = pair.active.output() + pair.standby.output()
            assert "unreachable" in said, said
            if epoch == 2:
                assert "took run" in pair.standby.output() and "fenced" in pair.active.output()
    finally:
        server.remove()


def test_a_broker_restart_mid_run_loses_nothing_and_the_active_keeps_the_run(
        tmp_path: Path, nats_server: NatsServer, agents: list[Node], pg_url: str) -> None:
    # Given a run with a standby (no broker, no dispatch: a long job of 3 s)
    out = tmp_path / "evidence"
    pair = Pair(tmp_path, wide_plan(tmp_path, out, long=3), nats_server.url, pg_url).start()
    try:
        wait_for(lambda: {"a02", "long"} <= set(runs_of(out)), timeout=60, what="the run under way")
        # When the broker restarts in the middle of it
        nats_server.stop()
        time.sleep(1.0)  # longer than the lease (0.6 s): the standby could claim the run, were it not kept
        nats_server.start()
        # Then the run finishes under the active (it kept the lease in the journal all along)
        assert pair.active.wait(120) == 0, pair.active.output()
        assert pair.standby.wait(60) == 0, pair.standby.output()
    finally:
        pair.stop()
    status, epoch, states = journal_run(pg_url)
    assert status == "succeeded" and epoch == 1
    assert "took run" not in pair.standby.output()
    # And every job ran exactly once
    assert runs_of(out) == {j: 1 for j in states}, runs_of(out)


def test_a_standby_that_cannot_reach_the_agents_does_not_take_over_while_the_active_holds_the_lease(
        tmp_path: Path, nats_server: NatsServer, agents: list[Node], pg_url: str) -> None:
    # Given a standby on a broker the agents are not on (it hears none of them)
    binary = nats_server_binary()
    assert binary is not None
    (tmp_path / "other").mkdir()
    other = NatsServer(binary, tmp_path / "other", free_port())
    other.start()
    out = tmp_path / "evidence"
    pair = Pair(tmp_path, wide_plan(tmp_path, out, long=3), nats_server.url, pg_url, standby_broker=other.url)
    try:
        pair.start()
        # When the run goes on to its end under the active
        assert pair.active.wait(120) == 0, pair.active.output()
        assert pair.standby.wait(60) == 0, pair.standby.output()
    finally:
        pair.stop()
        other.stop()
    # Then the standby never took over: one epoch, every job once
    status, epoch, states = journal_run(pg_url)
    assert status == "succeeded" and epoch == 1
    assert "took run" not in pair.standby.output()
    assert "is succeeded; the standby exits" in pair.standby.output(), pair.standby.output()
    assert runs_of(out) == {j: 1 for j in states}


def test_jobs_of_pool_local_in_flight_at_a_takeover_are_named_and_retried_under_their_policy(
        tmp_path: Path, nats_server: NatsServer, agents: list[Node], pg_url: str) -> None:
    # Given a run whose plan also has jobs on the active's own executors (pool local), one of them not idempotent
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "plan.yaml", out, {
        "here": {"sleep": 30},
        "once": {"sleep": 30, "idempotent": False},
        "far": {"pool": "etl", "sleep": 0.2},
    }, name="mixed")
    pair = Pair(tmp_path, plan, nats_server.url, pg_url).start()
    try:
        wait_for(lambda: {"here", "once"} <= set(runs_of(out)) and "far" in ended(out), timeout=60,
                 what="the local jobs running")
        # When host A dies with them
        pair.active.kill_node()
        # Then the standby takes over, names them in one line, retries the idempotent one and holds the other
        wait_for(lambda: "took run" in pair.standby.output(), timeout=30, what="the takeover")
        said = wait_for(lambda: next((line for line in pair.standby.output().splitlines()
                                      if "pool local were in flight" in line), None), timeout=30, what="the line")
        assert "here" in said and "once" in said and "agents (pool:/agent:)" in said, said
        wait_for(lambda: runs_of(out).get("here") == 2, timeout=30, what="here retried on host B")
        wait_for(lambda: journal_run(pg_url)[2].get("once") == JobState.HELD, timeout=30, what="once HELD")
    finally:
        pair.stop()
    assert runs_of(out)["once"] == 1 and runs_of(out)["far"] == 1


class LingeringHost(SchedulerHost):
    """A scheduler's host that lives on after the scheduler exits (says `exit N`), its other processes too."""

    def command(self) -> list[str]:
        return ["sh", "-c", '"$@"; echo "exit $?"; sleep 120', "sh", *super().command()]


def test_a_fenced_active_stops_its_local_jobs_when_its_successor_is_a_host_of_the_same_name(
        tmp_path: Path, nats_server: NatsServer, agents: list[Node], pg_url: str) -> None:
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "plan.yaml", out, {"here": {"sleep": 20}, "far": {"pool": "etl", "sleep": 0.2}},
                     name="twins", extra=TRUSTING)
    # Given an active and a standby on two hosts that share a host name (and nothing else)
    pair = Pair(tmp_path, plan, nats_server.url, pg_url, names=("twin", "twin"), active_host=LingeringHost).start()
    active, standby = pair.active, pair.standby
    try:
        wait_for(lambda: "here" in runs_of(out), timeout=60, what="the local job running on the active's host")
        # When the active freezes past its lease, the standby takes over, and the active wakes fenced
        active.pause()
        wait_for(lambda: "took run" in standby.output(), timeout=30, what="the takeover")
        active.resume()
        wait_for(lambda: "exit 4" in active.output(), timeout=60, what="the fenced active's exit")
        assert standby.wait(120) == 0, standby.output()
    finally:
        pair.stop()
    # Then the fenced active stopped its copy of the local job, its host still up: only the successor's ran to its end
    assert runs_of(out)["here"] == 2
    assert [line.split()[0] for line in out.read_text().splitlines() if line.split()[1] == "end"].count("here") == 1
