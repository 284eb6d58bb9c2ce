"""The numbering of a run's remote agents in its journal: the same index for the same name to every scheduler of the
run, on SQLite and on PostgreSQL, two schedulers at once included, and a journal from before it migrated."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest

from tests.conftest import Opener
from tests.integration.helpers import wait_for
from wloadctl.remote import AGENT_BASE
from wloadctl.store import StaleEpoch, Store
from wloadctl.store.sqlschema import SCHEMA_VERSION


def new_run(st: Store, run_id: str = "r1") -> int:
    return st.create_run(run_id, "p", "p.yaml", "digest", "name: p", ["a", "b"], "2026-12-06", 100.0).id


def test_agents_are_numbered_from_the_first_index_on_and_keep_their_numbers(opener: Opener) -> None:
    st = opener()
    run = new_run(st)
    st.begin_epoch(run, 1, 1e12)
    # Given agents numbered in the order they were first heard of
    assert [st.agent_index(run, n, AGENT_BASE) for n in ("n2", "n1", "n2", "n3")] == [1000, 1001, 1000, 1002]
    # Then another run numbers its own from the first index, and a later first index is kept to
    second = opener()
    other = new_run(second, "r2")
    assert second.agent_index(other, "n1", AGENT_BASE) == 1000
    assert second.agent_index(other, "n9", 1005) == 1005 and second.agent_index(other, "n8", AGENT_BASE) == 1006
    # And every reader (another connection, read-only) reads the same numbers
    again = opener(readonly=True)
    assert again.agent_names(run) == {1000: "n2", 1001: "n1", 1002: "n3"}
    assert again.agent_names(other) == {1000: "n1", 1005: "n9", 1006: "n8"}
    assert again.agent_names(999) == {}


def test_a_successor_reads_the_numbers_of_the_scheduler_before_it_and_a_fenced_one_numbers_nothing(
        opener: Opener) -> None:
    old, new = opener(), opener()
    run = new_run(old)
    old.begin_epoch(run, 111, 1e12)
    assert old.agent_index(run, "n2", AGENT_BASE) == 1000
    # When a successor (another host: its own connection, no file of the first) takes the run over
    new.begin_epoch(run, 222, 1e12)
    # Then it gives the first's agent the same number, and a new agent the next one
    assert new.agent_index(run, "n2", AGENT_BASE) == 1000
    assert new.agent_index(run, "n1", AGENT_BASE) == 1001
    # And the fenced first still reads numbers given, but gives none
    assert old.agent_index(run, "n1", AGENT_BASE) == 1001
    with pytest.raises(StaleEpoch, match="fenced"):
        old.agent_index(run, "n3", AGENT_BASE)
    assert new.agent_names(run) == {1000: "n2", 1001: "n1"}


def test_two_writers_numbering_at_once_never_give_one_index_two_names(opener: Opener) -> None:
    first, second = opener(), opener()
    run = new_run(first)
    got: dict[str, list[int]] = {}

    def number(st: Store, names: list[str]) -> None:
        got[names[0]] = [st.agent_index(run, n, AGENT_BASE) for n in names]

    names = [f"n{k}" for k in range(20)]
    threads = [threading.Thread(target=number, args=(st, ns)) for st, ns in ((first, names), (second, names[::-1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mine = dict(zip(names, got["n0"], strict=True))
    assert dict(zip(names[::-1], got["n19"], strict=True)) == mine
    assert sorted(mine.values()) == list(range(AGENT_BASE, AGENT_BASE + 20))
    assert first.agent_names(run) == {i: n for n, i in mine.items()}


@pytest.mark.parametrize("theirs", ["n2", "n1"])
def test_postgresql_a_number_given_by_another_writer_during_the_insert_is_read_not_refused(
        pg_url: str, tmp_path: Path, theirs: str) -> None:
    with Store.open(tmp_path, journal=pg_url) as st:
        run = new_run(st)
        st.begin_epoch(run, 1, 1e12)
        # Given another writer that has inserted index 1000 (for n2, or for n1 itself) and not yet committed
        with psycopg.connect(pg_url, autocommit=True) as other:
            tx = other.transaction()
            tx.__enter__()
            other.execute("INSERT INTO agents (run, idx, name) VALUES (%s, 1000, %s)", (run, theirs))
            # When this store numbers n1 meanwhile (it reads no number yet, and its insert waits on the other's)
            got: list[object] = []
            t = threading.Thread(target=lambda: got.append(_index_or_error(st, run, "n1")))
            t.start()
            wait_for(lambda: other.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = 'wloadctl' AND wait_event_type = 'Lock'").fetchone()[0] == 1,  # type: ignore[index]
                timeout=10, what="the store's insert waiting")
            tx.__exit__(None, None, None)
            t.join(10)
    # Then it reads the other's row and numbers n1 after it, or as it did
    assert got == [1001 if theirs == "n2" else 1000]


def _index_or_error(st: Store, run: int, name: str) -> object:
    try:
        return st.agent_index(run, name, AGENT_BASE)
    except Exception as e:  # the test shows what the store raised
        return e


def test_a_version_9_journal_is_read_without_numbers_and_numbers_agents_once_migrated(tmp_path: Path) -> None:
    with Store.open(tmp_path) as st:
        run = new_run(st)
    # Given a journal of schema 9, from before the agents' numbering
    con = sqlite3.connect(tmp_path / "journal.db", isolation_level=None)
    con.execute("DROP TABLE agents")
    con.execute("PRAGMA user_version = 9")
    con.close()
    # Then a reader finds no numbers there, and a writer migrates it and numbers agents
    with Store.open(tmp_path, readonly=True) as ro:
        assert ro.agent_names(run) == {}
    with Store.open(tmp_path) as st:
        assert st.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION  # type: ignore[attr-defined]
        assert st.agent_index(run, "n1", AGENT_BASE) == 1000
    with Store.open(tmp_path, readonly=True) as ro:
        assert ro.agent_names(run) == {1000: "n1"}


def test_a_version_10_journal_gets_the_index_of_a_jobs_actions_and_history_uses_it(tmp_path: Path) -> None:
    with Store.open(tmp_path) as st:
        run = new_run(st)
        st.record_action(run, "ana", "hold", "a", "", "job 'a' held", True)
    # Given a journal of schema 10, whose actions are found by run alone
    con = sqlite3.connect(tmp_path / "journal.db", isolation_level=None)
    con.execute("DROP INDEX actions_job")
    con.execute("ALTER TABLE now_runs DROP COLUMN states_seq")
    con.execute("PRAGMA user_version = 10")
    con.close()
    # When a writer opens it, then a job's actions are read through their own index
    with Store.open(tmp_path) as st:
        assert st.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 12  # type: ignore[attr-defined]
        plan = st.conn.execute(  # type: ignore[attr-defined]
            "EXPLAIN QUERY PLAN SELECT ts, user, verb, job, reason, outcome, applied FROM actions"
            " WHERE run = ? AND job = ? ORDER BY seq", (run, "a")).fetchall()
        assert any("actions_job" in str(row[-1]) for row in plan), plan
        assert [a[2] for a in st.actions(run, "a")] == ["hold"]
