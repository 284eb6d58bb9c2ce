"""Real runs with the journal in PostgreSQL: the bank plan end to end, status from anywhere, a server restart."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.integration.helpers import (
    ENV,
    cli,
    evidence_plan,
    ipc_names,
    read_evidence,
    reap_orphans,
    stop_proc,
    wait_for,
)
from tests.pgserver import PrivateServer
from wloadctl.ipc import protocol as P
from wloadctl.ipc.boards import StateBoard
from wloadctl.ipc.naming import ROLE_BOARD, object_name
from wloadctl.store import Store
from wloadctl.store.postgres import scratch_database

pytestmark = pytest.mark.ipc
ROOT = Path(__file__).parents[2]


def test_the_bank_plan_runs_on_a_postgresql_journal_and_status_reads_it_from_anywhere(
        tmp_path: Path, pg_url: str) -> None:
    # When the bank's end-of-day plan runs with --journal
    sd = tmp_path / "sd"
    p = cli("run", str(ROOT / "samples" / "eod_bank.yaml"), "--state-dir", str(sd), "--journal", pg_url, "--json",
            timeout=300)
    # Then it succeeds, with no SQLite journal in the state directory (only the run's local files)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["status"] == "succeeded"
    assert not (sd / "journal.db").exists() and (sd / "events.jsonl").exists()
    assert not ipc_names(summary["run"])
    # And `status --journal URL --json` from another directory, with no state directory, reads it all
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in ENV.items() if k not in ("WLOADCTL_STATE_DIR", "WLOADCTL_JOURNAL")}
    s = subprocess.run([sys.executable, "-m", "wloadctl", "status", "--journal", pg_url, "--json"],
                       capture_output=True, text=True, cwd=elsewhere, env=env, timeout=60)
    assert s.returncode == 0, s.stderr
    st = json.loads(s.stdout)
    assert st["run"] == summary["run"] and st["status"] == "succeeded" and not st["live"]
    assert st["total"] == len(summary["jobs"])
    assert {j["job"]: j["state"] for j in st["jobs"]} == summary["jobs"]
    # And the reads of a run go to the same journal
    h = cli("history", "open_business_day", "--journal", pg_url, "--json")
    assert h.returncode == 0, h.stderr


def journal_events(sd: Path) -> list[dict]:
    """The run's journal_lost / journal_back events, in order."""
    lines = (sd / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] in ("journal_lost", "journal_back")]


@pytest.fixture
def private_pg() -> Iterator[PrivateServer]:
    """A PostgreSQL server of this test alone: it is stopped and started mid-run (never the shared one)."""
    server = PrivateServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


def test_a_postgresql_restart_mid_run_loses_nothing(tmp_path: Path, private_pg: PrivateServer) -> None:
    # Given a chain of jobs running with the journal on a private server
    out = tmp_path / "evidence"
    jobs = {f"j{i:02d}": ({"depends_on": [f"j{i - 1:02d}"]} if i else {}) for i in range(30)}
    jobs.update({f"side{i}": {} for i in range(6)})
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs, name="pgrestart", sleep=0.1)
    sd = tmp_path / "sd"
    with scratch_database(private_pg.url, "wl_test") as url:
        err = open(tmp_path / "run.err", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd),
                                 "--journal", url, "--json", "--executors", "2", "--slots", "2"],
                                stdout=subprocess.PIPE, stderr=err, env=ENV, start_new_session=True)
        run_id = ""
        try:
            def some_done() -> bool:
                nonlocal run_id
                try:
                    with Store.open(None, journal=url, readonly=True) as st:
                        run = st.latest_run()
                        run_id = run.run_id if run is not None else ""
                        return run is not None and dict(st.state_counts(run.id)).get(4, 0) >= 5
                except Exception:
                    return False

            wait_for(some_done, timeout=60, what="five jobs succeeded")
            board = StateBoard.open(object_name(run_id, ROLE_BOARD))
            try:
                # When PostgreSQL restarts in the middle of the run (every connection dropped)
                private_pg.stop("fast")
                # Then, while it is away, the board says why nothing is dispatched (status and the
                # console read it there) and the event log says the journal was lost
                wait_for(lambda: board.read_header().paused == P.PAUSE_JOURNAL_LOST, timeout=30,
                         what="the board paused for the journal")
                assert [e["event"] for e in journal_events(sd)] == ["journal_lost"]
            finally:
                board.close()
            private_pg.start()
            stdout, _ = proc.communicate(timeout=180)
        finally:
            stop_proc(proc, group=True)
            err.close()
        # Then the run finishes, every job succeeded exactly once, in order
        stderr = (tmp_path / "run.err").read_text()
        assert proc.returncode == 0, stderr
        summary = json.loads(stdout)
        run_id = summary["run"]
        reap_orphans(run_id)
        assert summary["status"] == "succeeded" and set(summary["jobs"].values()) == {"SUCCEEDED"}
        ev = read_evidence(out)
        assert sorted(ev) == sorted(jobs)
        assert all([k for k, _t in marks] == ["start", "end"] for marks in ev.values()), ev
        for i in range(1, 30):
            assert ev[f"j{i:02d}"][0][1] >= ev[f"j{i - 1:02d}"][1][1]
        # And the scheduler said what happened, on stderr and in the event log, and the journal
        # holds every transition once
        assert "unreachable" in stderr and "is back after" in stderr
        said = journal_events(sd)
        assert [e["event"] for e in said] == ["journal_lost", "journal_back"]
        assert "unreachable" in said[0]["notice"] and "is back after" in said[1]["notice"]
        with Store.open(None, journal=url, readonly=True) as st:
            run = st.get_run(run_id)
            assert run is not None and run.status == "succeeded"
            rows = st.job_rows(run.id)
            assert all(r[2] == 4 and r[3] == 1 for r in rows), rows
            for r in rows:
                to_states = [t[1] for t in st.transitions_of(run.id, r[0])]
                assert to_states.count(4) == 1 and to_states.count(3) == 1, (r[1], to_states)
        assert not ipc_names(run_id)


def test_a_signal_while_the_postgresql_journal_is_away_stops_the_run_at_once_and_it_resumes_later(
        tmp_path: Path, private_pg: PrivateServer) -> None:
    # Given a run journaling to a private server, a job running
    out = tmp_path / "evidence"
    jobs = {"a": {}, "b": {"depends_on": ["a"]}, "c": {"depends_on": ["b"]}}
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs, name="pgstop", sleep=3)
    sd = tmp_path / "sd"
    with scratch_database(private_pg.url, "wl_test") as url:
        proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd),
                                 "--journal", url, "--executors", "1", "--slots", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                                start_new_session=True)
        try:
            wait_for(lambda: "a" in read_evidence(out), timeout=60, what="a started")
            # When PostgreSQL goes away and the operator stops the run meanwhile
            private_pg.stop("fast")
            wait_for(lambda: [e["event"] for e in journal_events(sd)] == ["journal_lost"], timeout=30,
                     what="the journal lost")
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            _stdout, stderr = proc.communicate(timeout=30)
            took = time.monotonic() - t0
        finally:
            stop_proc(proc, group=True)
        # Then it stops within seconds (it waited the whole 300 s for the server, deaf to the signal), says so once
        # and how to go on
        assert took < 15 and proc.returncode == 3, (took, stderr)
        lines = stderr.splitlines()
        assert len([x for x in lines if "reconnecting for up to" in x]) == 1, stderr
        assert "(stopped while waiting for it)" in lines[-1] and "the run is resumable once PostgreSQL is back" \
            in lines[-1], stderr
        # And once the server is back, a resume finishes the run, every job once
        private_pg.start()
        p = cli("resume", "--state-dir", str(sd), "--journal", url, "--json", timeout=120)
        assert p.returncode == 0, p.stderr
        summary = json.loads(p.stdout)
        reap_orphans(summary["run"])
        assert set(summary["jobs"].values()) == {"SUCCEEDED"}, summary
        ev = read_evidence(out)
        assert sorted(ev) == ["a", "b", "c"]
        assert all([k for k, _t in marks].count("end") <= 1 for marks in ev.values()), ev
        assert not ipc_names(summary["run"])


def test_status_while_the_postgresql_journal_is_away_shows_the_live_schedulers_counts(
        tmp_path: Path, private_pg: PrivateServer) -> None:
    # Given a run journaling to a private server, a job running
    out = tmp_path / "evidence"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {"a": {}, "b": {"depends_on": ["a"]}}, name="pgstatus",
                         sleep=3)
    sd = tmp_path / "sd"
    with scratch_database(private_pg.url, "wl_test") as url:
        proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd),
                                 "--journal", url, "--json", "--executors", "1", "--slots", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                                start_new_session=True)
        try:
            wait_for(lambda: "a" in read_evidence(out) and (sd / "pipeline.json").exists(), timeout=60,
                     what="a started")
            # When PostgreSQL goes away and the operator asks for the run's status
            private_pg.stop("fast")
            p = cli("status", "--state-dir", str(sd))
            # Then it shows what the live scheduler's boards say (it said only that the journal cannot be reached),
            # and still fails: the journal could not be read
            assert p.returncode == 3 and p.stderr.startswith("wloadctl: cannot reach the journal"), p.stderr
            lines = p.stdout.splitlines()
            assert "JOURNAL UNREACHABLE: nothing is dispatched until it is back" in lines[0], p.stdout
            assert lines[1].startswith("2 jobs: ") and "WAITING 1" in lines[1], p.stdout
            assert lines[2].startswith("  executor 0: pid "), p.stdout
            j = cli("status", "--state-dir", str(sd), "--json")
            assert j.returncode == 3 and json.loads(j.stdout)["counts"]["WAITING"] == 1, j.stdout
            private_pg.start()
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            stop_proc(proc, group=True)
        assert proc.returncode == 0, stderr
        assert set(json.loads(stdout)["jobs"].values()) == {"SUCCEEDED"}


def _conninfo(url: str) -> dict[str, str]:
    """What a PostgreSQL URL connects to: its parts, an empty password left out."""
    from psycopg.conninfo import conninfo_to_dict

    return {k: str(v) for k, v in conninfo_to_dict(url).items() if not (k == "password" and not v)}


def test_the_hints_of_a_postgresql_journal_run_name_its_journal_and_its_state_directory_says_where_it_is(
        tmp_path: Path, pg_url: str) -> None:
    # Given a run on a PostgreSQL journal whose job `end` an operator holds while `wait` runs
    sd, gate = tmp_path / "sd", tmp_path / "go"
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: hinted\njobs:\n  wait: {{command: 'while [ ! -e {gate} ]; do sleep 0.05; done'}}\n"
                    "  end: {command: 'true', depends_on: [wait]}\n")
    out = tmp_path / "out"
    with open(out, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd),
                                 "--journal", pg_url, "--executors", "1"], stdout=f, stderr=subprocess.STDOUT,
                                env=ENV, text=True)
    try:
        wait_for(lambda: cli("status", "--state-dir", str(sd), "--journal", pg_url, "--json").returncode == 0 and
                 json.loads(cli("status", "--state-dir", str(sd), "--journal", pg_url, "--json").stdout)["live"],
                 timeout=60, what="the run live")
        cli("hold", "end", "--state-dir", str(sd), "--journal", pg_url, check=True)
        gate.touch()
        # When it comes to hold, it names the command that releases the job
        said = wait_for(lambda: next((line for line in out.read_text().splitlines() if "holding:" in line), None),
                        timeout=60, what="the holding line")
        hint = said.split("`")[1]
        head, _, shown = hint.partition(" --journal ")
        assert head == f"wloadctl release JOB --state-dir {sd}", said
        # (the journal as shown: an empty password, as the embedded server's URL has, is not written out)
        assert _conninfo(shown) == _conninfo(pg_url), said
        # Then the state directory given alone is read in the journal its journal.url names
        for reader in ("status", "history"):
            p = cli(reader, *(["end"] if reader == "history" else []), "--state-dir", str(sd), "--json")
            assert p.stdout.startswith("{") and "end" in p.stdout, (reader, p.stderr)
        # And the hint, as printed, releases it and the run ends
        p = cli(*hint.replace("JOB", "end").split()[1:])
        assert p.returncode == 0, p.stderr
        assert proc.wait(60) == 0, out.read_text()
    finally:
        gate.touch()
        stop_proc(proc, grace=30)


def test_a_new_run_over_a_lost_postgresql_journal_refuses_with_advice_for_that_journal(
        tmp_path: Path, pg_server_url: str, pg_url: str) -> None:
    # (it told the operator to restore journal.db and journal.db-wal, which a run journaled in PostgreSQL has not)
    # Given a run that ran its jobs with its journal in PostgreSQL
    sd = tmp_path / "sd"
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "out", {"a": {}, "b": {"depends_on": ["a"]}})
    assert cli("run", str(plan), "--state-dir", str(sd), "--journal", pg_url, timeout=120).returncode == 0
    # And its database then dropped and made anew, empty
    name = pg_url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    before = (tmp_path / "out").read_text()
    # When a new run is started there on that journal
    p = cli("run", str(plan), "--state-dir", str(sd), "--journal", pg_url, timeout=120)
    # Then it refuses, running nothing, in one line whose advice is that journal's, not a SQLite file's
    assert p.returncode == 3, p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert f"{sd} holds what the executors of run " in p.stderr and "but its journal postgresql://" in p.stderr
    assert "its database dropped and made anew, restored from an older backup" in p.stderr
    assert "restore the database postgresql://" in p.stderr and "from its backup" in p.stderr
    assert "journal.db" not in p.stderr, p.stderr
    assert (tmp_path / "out").read_text() == before
    # And given another database than the one its runs went to, it names that one
    with scratch_database(pg_server_url, "wl_test") as other:
        p = cli("run", str(plan), "--state-dir", str(sd), "--journal", other, timeout=120)
    assert p.returncode == 3, p.stdout + p.stderr
    note = (sd / "journal.url").read_text().strip()
    assert f"its runs were journaled in {note}: give --journal {note}" in p.stderr, p.stderr
    assert "journal.db" not in p.stderr and (tmp_path / "out").read_text() == before


def test_a_second_run_of_a_business_date_another_directory_left_unfinished_is_refused_naming_it(
        tmp_path: Path, pg_url: str) -> None:
    out, go = tmp_path / "ev", tmp_path / "go"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {"post": {"gate": str(go)}})
    a, b = tmp_path / "a", tmp_path / "b"
    # Given the run of 2026-12-07 started from directory a, stopped while it ran
    first = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(a), "--journal",
                              pg_url, "--business-date", "2026-12-07"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)
    try:
        wait_for(lambda: "post" in read_evidence(out), timeout=60, what="post started")
        first.send_signal(signal.SIGTERM)
        first.wait(60)
    finally:
        stop_proc(first, group=True)
    # When the same plan and date are run, or resumed, from directory b on the same journal
    again = cli("run", str(plan), "--state-dir", str(b), "--journal", pg_url, "--business-date", "2026-12-07")
    resumed = cli("resume", "--state-dir", str(b), "--journal", pg_url)
    # Then both are refused in one line naming the unfinished run and the directory it was started in: its jobs
    # do not run a second time
    for p in (again, resumed):
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert "unfinished run" in p.stderr and f":{a.resolve()}" in p.stderr and "interrupted" in p.stderr, p.stderr
    assert [k for k, _t in read_evidence(out)["post"]] == ["start"]
    # and the resume from directory a goes on with it
    go.touch()
    assert cli("resume", "--state-dir", str(a), "--journal", pg_url, timeout=120).returncode == 0


def test_a_run_in_a_plans_own_directory_whose_runs_are_in_postgresql_is_journaled_there_too(
        tmp_path: Path, pg_url: str) -> None:
    # Given a plan run once with --journal in its own state directory (none named: the state root's)
    plan = tmp_path / "p.yaml"
    plan.write_text("name: nightly\njobs:\n  a: {command: 'true'}\n")
    env = {"WLOADCTL_HOME": str(tmp_path / "root"), "WLOADCTL_STATE_DIR": "", "WLOADCTL_JOURNAL": ""}
    first = cli("run", str(plan), "--journal", pg_url, "--json", env=env)
    assert first.returncode == 0, first.stderr
    sd = tmp_path / "root" / "nightly"
    assert (sd / "journal.url").exists() and not (sd / "journal.db").exists()
    # When it is run again without --journal
    second = cli("run", str(plan), "--json", env=env)
    # Then that run goes to the same journal, not to a SQLite journal started beside it
    assert second.returncode == 0, second.stderr
    assert not (sd / "journal.db").exists()
    st = json.loads(cli("status", "--journal", pg_url, "--json", env=env).stdout)
    assert st["run"] == json.loads(second.stdout)["run"] != json.loads(first.stdout)["run"]
    # And a read of the directory, named alone, reads that journal
    named = json.loads(cli("status", "--state-dir", str(sd), "--json", env=env).stdout)
    assert named["run"] == st["run"]
