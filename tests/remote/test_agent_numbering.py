"""A run's agents keep their numbers across its schedulers: a scheduler resuming the run without the first one's
files (another host's state directory) numbers them as the journal does, and `history` names the agent that ran."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli, wait_for
from tests.remote.conftest import NatsServer, _alive
from tests.remote.nodes import Node, unshare_available
from tests.remote.test_agent_runs import no_run_left, plan_file, run_bg
from tests.remote.test_ha_hosts import Pair, runs_of
from wloadctl.store import Store

pytestmark = pytest.mark.ipc
__all__ = ["no_run_left"]


@pytest.fixture(autouse=True)
def isolated_hosts() -> None:
    """The agents here each get a host of their own."""
    if not unshare_available():
        pytest.fail("these tests put each agent on a host of its own: they need util-linux unshare", pytrace=False)


def two_schedulers(tmp_path: Path, url: str, journal: list[str], between: Callable[[Path], None]) -> Path:
    """A run whose job `one` ran on agent n2 under its first scheduler, and `two` on n1 under a second that resumed
    it once n2 was gone (`between(state_dir)` done before); its state directory."""
    plan = plan_file(tmp_path / "p.yaml", tmp_path / "evidence", {
        "one": {"pool": "etl", "sleep": 0},
        "two": {"pool": "etl", "sleep": 0, "depends_on": ["one"], "confirm": True}})
    sd = tmp_path / "sd"
    made: list[Node] = []
    try:
        made.append(Node("n2", url, tmp_path / "n2", ["etl"]).start())
        wait_for(lambda: _alive(url, "n2"), timeout=30, what="n2 beating")
        first = run_bg(plan, sd, url, "--exit-on-hold", *journal)
        _out, err = first.communicate(timeout=120)
        assert first.returncode == 1, err
        made.pop().stop()
        made.append(Node("n1", url, tmp_path / "n1", ["etl"]).start())
        wait_for(lambda: _alive(url, "n1"), timeout=30, what="n1 beating")
        between(sd)
        assert cli("approve", "two", "--state-dir", str(sd), *journal).returncode == 0
        again = subprocess.run([sys.executable, "-m", "wloadctl", "resume", "--state-dir", str(sd), "--broker", url,
                                "--executors", "1", *journal], capture_output=True, text=True, timeout=120, env=ENV)
        assert again.returncode == 0, again.stderr
    finally:
        for n in made:
            n.stop()
    return sd


def ran_on(sd: Path | None, job: str, journal: list[str]) -> set[str]:
    """The agents `history` says the job ran on (the run of state directory `sd`, or the journal's latest)."""
    h = cli("history", job, *(("--state-dir", str(sd)) if sd is not None else ()), *journal)
    assert h.returncode == 0, h.stderr
    return {line.split(" on agent ")[1].split()[0] for line in h.stdout.splitlines() if " on agent " in line}


def numbering(sd: Path, journal: list[str]) -> dict[int, str]:
    """The journal's numbers of the latest run's agents."""
    with Store.open(sd, journal=journal[1] if journal else None, readonly=True) as st:
        run = st.latest_run()
        assert run is not None
        return st.agent_names(run.id)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_resume_without_the_first_schedulers_files_numbers_and_names_the_agents_as_the_journal_does(
        tmp_path: Path, nats_server: NatsServer, request: pytest.FixtureRequest, kind: str) -> None:
    journal = ["--journal", request.getfixturevalue("pg_url")] if kind == "postgres" else []
    # Given a run resumed, once its agent n2 was gone and n1 there, by a scheduler without the first's agents file
    sd = two_schedulers(tmp_path, nats_server.url, journal, lambda sd: (sd / "agents.json").unlink(missing_ok=True))
    # Then `history` names the agent that ran each job
    assert (ran_on(sd, "one", journal), ran_on(sd, "two", journal)) == ({"n2"}, {"n1"})
    # And n2 keeps the first number and n1 gets the next, in the journal
    assert numbering(sd, journal) == {1000: "n2", 1001: "n1"}


def test_a_run_numbered_in_its_agents_file_before_is_named_from_it_and_its_resume_journals_those_numbers(
        tmp_path: Path, nats_server: NatsServer) -> None:
    def as_before(sd: Path) -> None:
        # The run as a scheduler from before the journal kept the numbers left it: in the agents file only
        with closing(sqlite3.connect(sd / "journal.db")) as con, con:
            con.execute("DELETE FROM agents")
        (sd / "agents.json").write_text(json.dumps({"n2": 1000}))
        assert ran_on(sd, "one", []) == {"n2"}

    # Given such a run resumed once its agent n2 was gone and n1 there
    sd = two_schedulers(tmp_path, nats_server.url, [], as_before)
    # Then the journal has the file's numbers, and n1 the next
    assert numbering(sd, []) == {1000: "n2", 1001: "n1"}
    assert (ran_on(sd, "one", []), ran_on(sd, "two", [])) == ({"n2"}, {"n1"})


def test_a_standby_of_another_host_taking_the_run_over_numbers_and_names_the_agents_as_the_active_did(
        tmp_path: Path, nats_server: NatsServer, pg_url: str) -> None:
    # Given a run on host A, with a standby on host B, whose job `one` ran on agent n2, then n2 gone and n1 there
    out, gate = tmp_path / "evidence", tmp_path / "go"
    plan = plan_file(tmp_path / "p.yaml", out, {
        "one": {"pool": "etl", "sleep": 0},
        "wait": {"depends_on": ["one"], "gate": str(gate), "sleep": 0},
        "two": {"pool": "etl", "sleep": 0, "depends_on": ["wait"]}})
    made: list[Node] = []
    pair = Pair(tmp_path, plan, nats_server.url, pg_url)
    try:
        made.append(Node("n2", nats_server.url, tmp_path / "n2", ["etl"]).start())
        wait_for(lambda: _alive(nats_server.url, "n2"), timeout=30, what="n2 beating")
        pair.start()
        wait_for(lambda: "wait" in runs_of(out), timeout=60, what="one done and wait under way")
        made.pop().stop()
        made.append(Node("n1", nats_server.url, tmp_path / "n1", ["etl"]).start())
        wait_for(lambda: _alive(nats_server.url, "n1"), timeout=30, what="n1 beating")
        # When host A dies and the standby, with a state directory of its own, takes the run to its end
        pair.active.kill_node()
        wait_for(lambda: "took run" in pair.standby.output(), timeout=30, what="the takeover")
        gate.touch()
        assert pair.standby.wait(120) == 0, pair.standby.output()
    finally:
        gate.touch()
        pair.stop()
        for n in made:
            n.stop()
    # Then `history` names the agent that ran each job, and the journal numbers each as both schedulers did
    journal = ["--journal", pg_url]
    assert (ran_on(None, "one", journal), ran_on(None, "two", journal)) == ({"n2"}, {"n1"})
    with Store.open(None, journal=pg_url, readonly=True) as st:
        run = st.latest_run()
        assert run is not None and run.epoch == 2
        assert st.agent_names(run.id) == {1000: "n2", 1001: "n1"}
