"""The PostgreSQL journal: its schema version and migrations, shared databases, URLs, and a lost connection."""

from __future__ import annotations

import hashlib
from pathlib import Path

import psycopg
import pytest

from tests.integration.helpers import cli
from wloadctl.core.plan import JobSpec
from wloadctl.errors import StoreError, UsageError
from wloadctl.store import Store
from wloadctl.store.facts import run_facts
from wloadctl.store.pgschema import SCHEMA_VERSION, VERSION_TABLE
from wloadctl.store.postgres import PostgresStore, parse_journal_url


def _version(url: str) -> int:
    with psycopg.connect(url) as c:
        return int(c.execute(f"SELECT version FROM {VERSION_TABLE}").fetchone()[0])  # type: ignore[index]


def test_a_new_database_gets_the_schema_once(pg_url: str, tmp_path: Path) -> None:
    with Store.open(tmp_path, journal=pg_url) as st:
        st.create_run("r1", "p", "p.yaml", "d", "t", ["a"], "2026-11-30", 1.0)
    assert _version(pg_url) == SCHEMA_VERSION
    # Opening again migrates nothing and loses nothing.
    with Store.open(tmp_path, journal=pg_url) as st:
        assert st.get_run("r1") is not None
    assert _version(pg_url) == SCHEMA_VERSION


def test_an_older_wloadctl_refuses_a_newer_schema_naming_both_versions(pg_url: str, tmp_path: Path) -> None:
    Store.open(tmp_path, journal=pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(f"UPDATE {VERSION_TABLE} SET version = %s", (SCHEMA_VERSION + 5,))
    for readonly in (False, True):
        with pytest.raises(StoreError) as e:
            Store.open(tmp_path, journal=pg_url, readonly=readonly)
        line = e.value.one_line()
        assert f"has schema {SCHEMA_VERSION + 5}, newer than this wloadctl ({SCHEMA_VERSION})" in line
        assert "\n" not in line


def test_a_reader_does_not_create_the_schema(pg_url: str) -> None:
    with pytest.raises(StoreError, match="no run journal in postgresql://postgres@"):
        Store.open(None, journal=pg_url, readonly=True)
    with psycopg.connect(pg_url) as c:
        assert c.execute("SELECT to_regclass(%s)", (VERSION_TABLE,)).fetchone()[0] is None  # type: ignore[index]


def test_state_directories_and_installations_share_one_database(pg_url: str, tmp_path: Path) -> None:
    ns = f"{pg_url}{'&' if '?' in pg_url else '?'}namespace=other"
    with Store.open(tmp_path / "a", journal=pg_url) as a, Store.open(tmp_path / "b", journal=pg_url) as b, \
            Store.open(tmp_path / "a", journal=ns) as c:
        ra = a.create_run("ra", "p", "p.yaml", "d", "t", ["x"], "2026-11-30", 1.0)
        rb = b.create_run("rb", "q", "q.yaml", "d", "t", ["y"], "2026-11-30", 2.0)
        rc = c.create_run("rc", "p", "p.yaml", "d", "t", ["z"], "2026-11-30", 3.0)
        # Each state directory sees its own latest run; turns number per run.
        assert a.latest_run() == ra and b.latest_run() == rb and c.latest_run() == rc
        a.write_turn(ra.id, [(0, 0, 1, 0, 1.0, -1, None, "", "t")])
        b.write_turn(rb.id, [(0, 0, 1, 0, 1.0, -1, None, "", "t")])
        assert a.last_seq(ra.id) == b.last_seq(rb.id) == 1
    # A reader without a state directory sees the latest run of its installation.
    with Store.open(None, journal=pg_url, readonly=True) as r:
        assert r.latest_run() == rb
        assert r.job_ids(ra.id) == ["x"]
    with Store.open(None, journal=ns, readonly=True) as r:
        assert r.latest_run() == rc


@pytest.mark.parametrize(("url", "fragment"), [
    ("mysql://u@h/db", "is not a postgresql:// URL"),
    ("postgresql://u@h", "names no database"),
    ("postgresql:///db", "names no host"),
])
def test_a_bad_journal_url_is_one_line(url: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_journal_url(url)


@pytest.mark.parametrize(("url", "fragment"), [
    ("postgresql://postgres@127.0.0.1:99999/x", "port '99999' is not a number from 0 to 65535"),
    ("postgresql://postgres@127.0.0.1:abc/x", "port 'abc' is not a number from 0 to 65535"),
    ("postgresql://postgres:pw@[::1/x", "its host has an unclosed '[' or ']'"),
])
@pytest.mark.parametrize("verb", [("status",), ("runs",), ("run", "PLAN"), ("resume",), ("hold", "a"), ("console",)])
def test_a_malformed_journal_url_is_bad_input_naming_it(tmp_path: Path, url: str, fragment: str,
                                                        verb: tuple[str, ...]) -> None:
    # Given a journal URL that cannot be read as a URL (no server need be asked)
    plan = tmp_path / "p.yaml"
    plan.write_text("name: p\njobs:\n  a: {command: 'true'}\n")
    state = tmp_path / "state"
    argv = [str(plan) if v == "PLAN" else v for v in verb]
    if verb[0] not in ("status", "runs"):
        argv += ["--state-dir", str(state)]
    # When a command is given it
    p = cli(*argv, "--journal", url, timeout=60)
    # Then it says so in one line naming the URL (without its password), as bad input, having made nothing
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "internal error" not in p.stderr, p.stderr
    assert f"journal URL '{url.replace(':pw@', '@')}': {fragment}" in p.stderr
    assert "pw" not in p.stderr and not state.exists()


def test_a_malformed_journal_url_in_the_environment_is_bad_input_too() -> None:
    p = cli("status", env={"WLOADCTL_JOURNAL": "postgresql://postgres@127.0.0.1:99999/x"}, timeout=60)
    assert p.returncode == 2 and "port '99999' is not a number" in p.stderr, p.stderr


def test_an_ipv6_journal_host_is_shown_bracketed() -> None:
    assert parse_journal_url("postgresql://u:pw@[::1]:5433/db")[2] == "postgresql://u@[::1]:5433/db"


def test_a_journal_url_of_another_scheme_is_quoted_as_given_without_its_password() -> None:
    with pytest.raises(UsageError) as e:
        parse_journal_url("mysql://x:pw@y/z")
    assert e.value.message.startswith("journal 'mysql://x@y/z' is not a postgresql:// URL")


def test_an_unknown_journal_url_parameter_is_bad_input_naming_it_and_the_allowed_ones() -> None:
    # Given a URL with a parameter neither wloadctl nor the driver knows
    url = "postgresql://postgres@127.0.0.1/db?foo=bar"
    # When a command is given it
    p = cli("status", "--journal", url, timeout=60)
    # Then it says so in one line, with what is allowed, as bad input
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    assert "unknown parameter 'foo'; allowed: " in p.stderr
    assert "namespace" in p.stderr and "sslmode" in p.stderr and "internal error" not in p.stderr
    parse_journal_url("postgresql://postgres@127.0.0.1/db?sslmode=disable&namespace=n1")  # known ones pass


def test_the_password_never_shows(pg_url: str) -> None:
    secret = pg_url.replace("postgres@", "postgres:s3cret@").replace("postgres:@", "postgres:s3cret@")
    _conninfo, ns, where = parse_journal_url(f"{secret}{'&' if '?' in secret else '?'}namespace=n1")
    assert ns == "n1" and "s3cret" not in where
    # and messages name the namespace (another installation's runs are not this one's)
    assert where.endswith("?namespace=n1")


def test_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"cannot reach the journal postgresql://postgres@127\.0\.0\.1:1/x"):
        Store.open(tmp_path, journal="postgresql://postgres@127.0.0.1:1/x")


def test_a_lost_connection_is_found_again_and_the_turn_written_whole(pg_url: str, tmp_path: Path) -> None:
    # Given a scheduler's store whose connection the server drops (as a restart does)
    lines: list[str] = []
    st = Store.open(tmp_path, journal=pg_url, say=lines.append)
    assert isinstance(st, PostgresStore)
    run = st.create_run("r1", "p", "p.yaml", "d", "t", ["a", "b"], "2026-11-30", 1.0)
    st.begin_epoch(run.id, 1, 10.0)
    st.write_turn(run.id, [(0, 0, 1, 0, 1.0, -1, None, "", "t1")])
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    # When it writes the next turn, Then it reconnects, says so, and the turn is there once
    st.write_turn(run.id, [(1, 0, 1, 0, 2.0, -1, None, "", "t2"), (0, 1, 2, 1, 2.0, -1, None, "", "t2")])
    assert any("unreachable" in m for m in lines) and any("is back after" in m for m in lines)
    assert st.last_seq(run.id) == 3
    assert [r[2] for r in st.job_rows(run.id)] == [2, 1]
    st.close()


@pytest.mark.parametrize("version", [1, 2])
def test_a_database_from_before_the_audit_chain_migrates_forward_and_chains_new_actions(
        pg_url: str, tmp_path: Path, version: int) -> None:
    with Store.open(tmp_path, journal=pg_url) as st:
        run = st.create_run("r1", "p", "p.yaml", "d", "t", ["a"], "2026-11-30", 1.0)
    # Given a database at version 2 (current-state tables, no audit chain) or 1 (neither)
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("DROP TABLE job_facts, fact_runs")
        c.execute("DROP TRIGGER actions_append_only ON actions")
        c.execute("DROP FUNCTION wloadctl_audit_append_only()")
        c.execute("ALTER TABLE actions DROP COLUMN prev_hash, DROP COLUMN hash")
        c.execute("DROP TABLE now_rows")
        c.execute("ALTER TABLE now_runs DROP COLUMN flat_seq, DROP COLUMN states_seq")
        if version == 1:
            for table in ("now_runs", "now_states", "turn_jobs", "took"):
                c.execute(f"DROP TABLE {table}")
        c.execute("INSERT INTO actions (run, ts, username, verb, job, reason, outcome, applied)"
                  " VALUES (%s, 1.0, 'old', 'hold', 'a', '', 'held', true)", (run.id,))
        c.execute(f"UPDATE {VERSION_TABLE} SET version = %s", (version,))
    # When it is opened for writing and an action is added
    with Store.open(tmp_path, journal=pg_url) as st:
        st.record_action(run.id, "new", "release", "a", "", "released", True)
        st.write_turn(run.id, [(0, 0, 1, 0, 2.0, -1, None, "", "s")])
        assert st.current_states(run.id) == bytearray([1])
        rep = st.verify_audit()
        assert rep.ok and (rep.checked, rep.unchained) == (1, 1)
    # Then it is at the latest version, and the trail refuses changes
    assert _version(pg_url) == SCHEMA_VERSION == 8
    with psycopg.connect(pg_url, autocommit=True) as c, pytest.raises(psycopg.Error, match="append-only"):
        c.execute("DELETE FROM actions")


def test_a_database_from_before_the_plans_facts_migrates_forward_and_keeps_them(pg_url: str, tmp_path: Path) -> None:
    with Store.open(tmp_path, journal=pg_url) as st:
        run = st.create_run("r1", "p", "p.yaml", "d", "t", ["a", "b"], "2026-11-30", 1.0)
    # Given a database at version 4 (no facts of the plans)
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("DROP TABLE job_facts, fact_runs")
        c.execute("ALTER TABLE now_runs DROP COLUMN states_seq")
        c.execute(f"UPDATE {VERSION_TABLE} SET version = 4")
    # Then a reader asks for a run or resume first, and a writer migrates it and keeps a run's facts
    with pytest.raises(StoreError, match="has schema 4, older than this wloadctl"):
        Store.open(tmp_path, journal=pg_url, create=False, readonly=True)
    specs = [JobSpec("a", None), JobSpec("b", None, ("a",))]
    with Store.open(tmp_path, journal=pg_url) as st:
        assert st.job_facts(run.id, [1]) is None
        st.keep_facts(run.id, run_facts(specs, ["a", "b"], [2, 2], [1.0, 1.0], [2.0, 1.0], "d", {}, False))
        meta, facts = st.job_facts(run.id, [1])  # type: ignore[misc]
        assert (meta.jobs, meta.longest, facts[1].ups, facts[1].path) == (2, 2.0, (0,), 1.0)
    assert _version(pg_url) == SCHEMA_VERSION


@pytest.mark.parametrize("where", ["sqlite", "postgres"])
def test_a_run_created_without_its_plan_copy_says_so_until_it_is_kept(
        where: str, pg_url: str, tmp_path: Path) -> None:
    with Store.open(tmp_path, journal=pg_url if where == "postgres" else None) as st:
        run = st.create_run("r1", "p", "p.yaml", "d", "", ["a"], "2026-11-30", 1.0)
        assert not st.has_plan_copy(run.id)
        plan = tmp_path / "p.yaml"
        text = "name: p\njobs: {}\n" + "# déjà vu\n" * 200_000  # more than one piece, and not only ASCII
        plan.write_text(text, encoding="utf-8")
        digest = hashlib.sha256(plan.read_bytes()).hexdigest()
        assert not st.keep_plan_file(run.id, str(plan), "0" * 64), "a file of another digest is not kept"
        assert not st.has_plan_copy(run.id)
        assert st.keep_plan_file(run.id, str(plan), digest)
        assert st.has_plan_copy(run.id) and st.plan_text(run.id) == text
        other = st.create_run("r2", "p", "p.yaml", "d", "", ["a"], "2026-11-30", 2.0)
        st.set_plan_blob(other.id, "{}")
        assert st.has_plan_copy(other.id)


FROZEN = """
import os, signal, sys, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True, application_name="wloadctl")
conn.execute("SET idle_in_transaction_session_timeout = 5000")
with conn.pipeline(), conn.transaction():
    conn.execute("UPDATE runs SET lease_until = lease_until WHERE id = %s", (int(sys.argv[2]),))
    conn.execute("SELECT 1")
    print("frozen", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
"""
"""A scheduler frozen (SIGSTOP) in the middle of a turn's pipeline: the run's row locked, the rest unsent."""


def test_a_takeover_ends_a_writer_frozen_in_the_middle_of_a_turn_and_takes_the_run(pg_url: str,
                                                                                   tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    from wloadctl.store.postgres import IDLE_IN_TRANSACTION_MS

    with Store.open(tmp_path / "a", journal=pg_url) as st:
        run = st.create_run("r1", "p", "p.yaml", "d", "t", ["a"], "2026-11-30", 1.0)
        st.begin_epoch(run.id, 111, time.time() + 1.5)
    # Given the run's active scheduler frozen inside a turn's pipeline (the server's idle timeout never ends it)
    frozen = subprocess.Popen([sys.executable, "-c", FROZEN, pg_url, str(run.id)], stdout=subprocess.PIPE, text=True)
    try:
        assert frozen.stdout is not None and frozen.stdout.readline().strip() == "frozen"
        # When a standby takes the run over
        t0 = time.time()
        with Store.open(tmp_path / "b", journal=pg_url) as other:
            assert other.begin_epoch(run.id, 222, time.time() + 1.5, expect_epoch=1) == 2
        # Then it took it within a few seconds of the frozen writer's last word, whose session is ended
        assert time.time() - t0 < IDLE_IN_TRANSACTION_MS / 1000 + 5
        with psycopg.connect(pg_url, autocommit=True) as c:
            left = c.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                             " AND application_name = 'wloadctl'").fetchone()
            assert left is not None and left[0] == 0
    finally:
        frozen.kill()
        frozen.communicate()
