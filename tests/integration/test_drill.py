"""`wloadctl drill failover` on live runs with real schedulers, standbys and executors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import ENV, cli, job_states, reap_orphans, status, wait_for
from tests.integration.test_ha import Cluster
from wloadctl.ipc.shm import remove_run_objects

pytestmark = pytest.mark.ipc


@pytest.fixture
def pair(no_ipc_leaks: None, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def start_pair(c: Cluster) -> tuple[Any, Any]:
    """A run in the middle (jobs left to start, held there by a gate) and a standby the active has published."""
    active = c.start_run(layers=4, sleep=0.3, gate_layer=2)
    c.wait_event("scheduler_start", timeout=30)  # the run is in the journal: a standby finds it there
    standby = c.standby()
    c.wait_mid_run()
    wait_for(lambda: c.board_header().standby_pid == standby.pid, what="the standby on the board")
    return active, standby


def drill(c: Cluster, *extra: str) -> dict[str, Any]:
    """`wloadctl drill failover`; the gate opens once a new epoch is on the board (the jobs after it start
    under the new active)."""
    epoch = c.board_header().epoch

    def taken_over() -> bool:
        try:
            return c.board_header().epoch > epoch
        except Exception:  # the board is gone: the run is over
            return True

    args = ["drill", "failover", "--state-dir", str(c.sd), "--json", *extra]
    with subprocess.Popen([sys.executable, "-m", "wloadctl", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=ENV) as p:
        try:
            wait_for(lambda: p.poll() is not None or taken_over(), timeout=90, every=0.05, what="a takeover")
        finally:
            c.open_gate()
        out, err = p.communicate(timeout=90)
    assert p.returncode == 0, err
    rep: dict[str, Any] = json.loads(out)
    print(rep["summary"])
    return rep


def test_failover_drill_kill_measures_the_takeover_and_the_run_then_finishes(pair: Cluster) -> None:
    # Given a live run with a standby
    active, standby = start_pair(pair)
    epoch = pair.board_header().epoch
    # When the drill kills the active
    rep = drill(pair)
    # Then it reports the takeover by the standby, with its figures, and no succeeded job ran again
    assert rep["ok"] and rep["problems"] == []
    assert (rep["active_pid"], rep["standby_pid"], rep["new_pid"]) == (active.pid, standby.pid, standby.pid)
    assert (rep["epoch_from"], rep["epoch_to"]) == (epoch, epoch + 1)
    assert 0 < rep["takeover_s"] <= rep["first_dispatch_s"] <= rep["first_start_s"]
    assert rep["succeeded_before"] >= 4 and rep["reran"] == []
    assert rep["old_active"] == "killed" and rep["old_epoch_dispatches"] == 0
    assert active.wait(5) == -signal.SIGKILL
    # and the run finishes under the new active, every job once
    assert standby.wait(60) == 0, pair.stderr("standby")
    pair.assert_exactly_once()
    # and the report is in the journal: `status` and `audit` show it
    st = status(pair.sd)
    assert st["last_drill"]["ok"] and "PASSED" in st["last_drill"]["summary"]
    text = cli("status", "--state-dir", str(pair.sd)).stdout
    assert "last drill" in text and "failover drill (kill)" in text
    audit = json.loads(cli("audit", "--state-dir", str(pair.sd), "--json").stdout)
    assert [a["verb"] for a in audit if a["verb"] == "drill"] == ["drill"]
    assert "drill    *" in (text := cli("audit", "--state-dir", str(pair.sd)).stdout) and "passed:" in text


def test_failover_drill_stop_fences_the_frozen_active_when_it_wakes(pair: Cluster) -> None:
    # Given a live run with a standby
    active, standby = start_pair(pair)
    # When the drill freezes the active, and wakes it once the standby took over
    rep = drill(pair, "--mode", "stop")
    # Then the old active left the run without dispatching, and the run finishes once
    assert rep["ok"], rep
    assert rep["old_active"].startswith("fenced") and rep["old_epoch_dispatches"] == 0
    assert rep["reran"] == [] and rep["takeover_s"] > 0 and rep["first_start_s"] > 0
    pair.assert_fenced_once(active, by=standby.pid)
    assert standby.wait(60) == 0, pair.stderr("standby")
    pair.assert_exactly_once()
    # and the text report names the figures
    assert "PASSED" in rep["summary"] and "old active fenced" in rep["summary"]


def test_failover_drill_refuses_without_a_standby_and_kills_nothing(pair: Cluster) -> None:
    # Given a live run with no standby
    active = pair.start_run(layers=3, sleep=0.3, gate_layer=1)
    pair.wait_mid_run()
    # When a drill is asked for
    p = cli("drill", "failover", "--state-dir", str(pair.sd))
    # Then it refuses in one line, and the active goes on
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "no live standby" in p.stderr and "Traceback" not in p.stderr
    assert active.poll() is None
    pair.open_gate()
    assert active.wait(60) == 0, pair.stderr("active")
    # and on a run that is over, it says there is no live run
    p = cli("drill", "failover", "--state-dir", str(pair.sd))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no live run" in p.stderr, p.stderr
    assert os.path.exists(pair.sd / "journal.db")


class PgPair(Cluster):
    """A pair on this host whose journal is in PostgreSQL (WLOADCTL_JOURNAL of every process started)."""

    url = ""

    def run_id(self) -> str:
        from wloadctl.store import Store

        with Store.open(None, journal=self.url, readonly=True) as st:
            run = st.latest_run()
        assert run is not None
        return run.run_id

    def wait_mid_run(self) -> None:
        def mid() -> bool:
            try:
                vals = list(job_states(self.sd).values())
            except (json.JSONDecodeError, ValueError):
                return False
            return vals.count("SUCCEEDED") >= 4  # each look is slower here: no window to hit

        wait_for(mid, timeout=30, what="a run in the middle")

    def stop(self) -> None:
        self.open_gate()
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait()
        if (self.sd / "events.jsonl").exists():
            rid = self.run_id()
            reap_orphans(rid, timeout=5.0)
            remove_run_objects(rid)


def test_failover_drill_on_a_postgresql_journal(
        no_ipc_leaks: None, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a live run with a standby on this host, both with the journal in PostgreSQL
    monkeypatch.setitem(ENV, "WLOADCTL_JOURNAL", pg_url)
    c = PgPair(tmp_path)
    c.url = pg_url
    try:
        _active, standby = start_pair(c)
        # When the drill kills the active, naming the journal
        rep = drill(c, "--journal", pg_url)
        # Then the standby took over, nothing ran twice, and the report is in that journal
        assert rep["ok"] and rep["new_pid"] == standby.pid and rep["takeover_s"] > 0 and rep["reran"] == []
        assert standby.wait(60) == 0, c.stderr("standby")
        c.assert_exactly_once()
        assert "PASSED" in status(c.sd)["last_drill"]["summary"]
    finally:
        c.stop()


def test_a_standby_started_before_the_run_waits_for_a_postgresql_journal_to_exist(
        no_ipc_leaks: None, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a standby started on an empty PostgreSQL database (no schema yet: no run has started)
    monkeypatch.setitem(ENV, "WLOADCTL_JOURNAL", pg_url)
    c = PgPair(tmp_path)
    c.url = pg_url
    try:
        standby = c.standby()
        # (it says so at its first look; then a few more looks, one per heartbeat interval)
        wait_for(lambda: standby.poll() is not None or "no running run in" in c.stderr("standby"), timeout=30,
                 every=0.05, what="the standby's first look")
        time.sleep(0.6)
        assert standby.poll() is None, c.stderr("standby")
        # When the run starts after it
        active = c.start_run(layers=3, sleep=0.2, gate_layer=1)
        # Then the standby waited, found the run, and stands by for it, rather than exiting
        def standing_by() -> bool:
            if standby.poll() is not None:
                return True
            try:
                return c.board_header().standby_pid == standby.pid
            except Exception:  # the run, its journal rows or its board are not there yet
                return False

        wait_for(standing_by, timeout=60, what="the standby on the board")
        assert standby.poll() is None, c.stderr("standby")
        c.open_gate()
        assert active.wait(90) == 0, c.stderr("active")
    finally:
        c.stop()
