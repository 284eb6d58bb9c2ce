"""The journal: turns of packed transitions, the job rows they add up to, journals of older versions."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from wloadctl.core.plan import JobSpec
from wloadctl.errors import NoJournalYet, StoreError
from wloadctl.store import Store
from wloadctl.store import base as store_base
from wloadctl.store.facts import run_facts
from wloadctl.store.sqlschema import SCHEMA_VERSION
from wloadctl.turns import JobColumns, pack_turn, unpack_jobs, unpack_turn

W, R, Q, RUN, OK, FAIL, RW, HELD = 0, 1, 2, 3, 4, 5, 7, 8


def new_run(st: Store, ids: list[str], run_id: str = "r1"):  # type: ignore[no-untyped-def]
    return st.create_run(run_id, "p", "p.yaml", "d", "text", ids, "2026-11-30", 100.0)


def test_a_turn_packs_and_unpacks_every_field() -> None:
    tx = [(0, W, R, 0, 1.5, -1, None, "", "start"), (7, RUN, FAIL, 2, 2.25, 1, -9, "killed by signal 9", "turn-3"),
          (70000, Q, OK, 65536, 3.0, 3, 0, "", "turn-3")]
    recs, causes, reasons = pack_turn(tx)
    assert len(recs) == 3 * 26
    back = list(unpack_turn(10, recs, causes, reasons))
    assert back == [(10 + k, *t[:4], t[4], t[5], t[6], t[7], t[8]) for k, t in enumerate(tx)]


REASONS = ["", "why", 'exit "7": "x"', 'a, "12": b', "{\"3\": }", "\u00e9t\u00e9 \\", '", "9": "']
"""Reasons of random turns, some holding text that looks like the keys of a turn's reasons."""


def test_some_jobs_records_of_a_turn_by_search_and_by_scan_agree_with_unpacking_it_all() -> None:
    rng = random.Random(3)
    # Job indexes whose bytes also appear inside other records' fields (attempts, executors, times)
    tx = [(rng.choice([1, 2, 258, 65536, 70000, 5]), W, R, rng.choice([1, 2, 258]), rng.random() * 1e9,
           rng.choice([1, 2, 258]), rng.choice([None, 0, 2]), rng.choice(REASONS), "c") for _ in range(400)]
    # A job of a few records among them: its reasons are decoded alone
    for k, reason in zip((3, 7, 9, 12, 200), REASONS[2:], strict=True):
        tx.insert(k, (4242, W, R, 1, 1.0, -1, None, reason, "c"))
    recs, causes, reasons = pack_turn(tx)
    every = list(unpack_turn(10, recs, causes, reasons))
    for jobs in ([2], [258, 5], [1, 2, 258, 65536, 70000, 5, 11, 12, 13, 14], [99], [4242], [4242, 99]):
        want = [r for r in every if r[1] in jobs]
        assert unpack_jobs(10, recs, causes, reasons, jobs) == want


def test_job_rows_follow_the_turns(tmp_path: Path) -> None:
    with Store.open(tmp_path) as st:
        run = new_run(st, ["a", "b", "c"])
        st.write_turn(run.id, [(0, W, R, 0, 1.0, -1, None, "", "start"),
                               (0, R, Q, 1, 1.0, -1, None, "", "start")])
        st.write_turn(run.id, [(0, Q, RUN, 1, 2.0, 1, None, "", "t1"),
                               (1, W, HELD, 0, 2.0, -1, None, "held: op", "op")])
        st.write_turn(run.id, [(0, RUN, RW, 1, 3.0, 1, 2, "exit status 2; retry 1/1 in 1.0s", "t2")])
        rows = {r[1]: r for r in st.job_rows(run.id)}
        assert rows["a"] == (0, "a", RW, 1, 1, 2, 2.0, None, "exit status 2; retry 1/1 in 1.0s")
        assert rows["b"][2] == HELD and rows["b"][8] == "held: op"
        assert rows["c"] == (2, "c", W, 0, -1, None, None, None, "")
        st.write_turn(run.id, [(0, RW, R, 1, 4.0, -1, None, "", "timer"), (0, R, Q, 2, 4.0, -1, None, "", "timer"),
                               (0, Q, RUN, 2, 4.5, 0, None, "", "t3"), (0, RUN, OK, 2, 5.0, 0, 0, "", "t3")])
        # the reason of a turn without one is cleared; started is the last start, ended the end
        assert st.job_row(run.id, "a") == (0, "a", OK, 2, 0, 0, 4.5, 5.0, "")
        assert dict(st.state_counts(run.id)) == {W: 1, OK: 1, HELD: 1}
        assert st.job_states(run.id) == [(0, OK, 2), (1, HELD, 0)]
        assert st.job_rows(run.id, exclude_states=(OK,), limit=1) == [st.job_row(run.id, "b")]
        hist = st.transitions_of(run.id, 0)
        assert [h[1] for h in hist] == [R, Q, RUN, RW, R, Q, RUN, OK]
        assert hist[3][5:] == (2, "exit status 2; retry 1/1 in 1.0s", "t2")
        since = st.transitions_since(run.id, 3, limit=3)
        assert [s[0] for s in since] == [4, 5, 6] and since[0][1:4] == (1, W, HELD)
        assert st.last_seq(run.id) == 9
    # a reader in another process sees the same rows
    with Store.open(tmp_path, readonly=True) as ro:
        assert ro.job_row(run.id, "a") == (0, "a", OK, 2, 0, 0, 4.5, 5.0, "")


def test_runs_share_one_numbering_and_keep_their_own_rows(tmp_path: Path) -> None:
    with Store.open(tmp_path) as st:
        r1 = new_run(st, ["x"], "r1")
        st.write_turn(r1.id, [(0, W, R, 0, 1.0, -1, None, "", "s")])
        r2 = new_run(st, ["y", "z"], "r2")
        st.write_turn(r2.id, [(1, W, R, 0, 2.0, -1, None, "", "s"), (1, R, Q, 1, 2.0, -1, None, "", "s")])
        st.write_turn(r1.id, [(0, R, Q, 1, 3.0, -1, None, "", "s")])
        assert st.last_seq(r1.id) == 4 and st.last_seq(r2.id) == 3
        assert st.job_states(r1.id) == [(0, Q, 1)]
        assert st.job_states(r2.id) == [(1, Q, 1)]
        assert [s[0] for s in st.transitions_since(r1.id, 0)] == [1, 4]


def test_loop_instances_get_rows_in_the_turn_that_made_them(tmp_path: Path) -> None:
    with Store.open(tmp_path) as st:
        run = new_run(st, ["list", "load"])
        st.write_turn(run.id, [(2, W, R, 0, 1.0, -1, None, "", "t"), (3, W, R, 0, 1.0, -1, None, "", "t")],
                      added=[("load", 2, ("a", "b"), ["load@a", "load@b"])])
        assert st.job_ids(run.id) == ["list", "load", "load@a", "load@b"]
        assert st.expansions(run.id) == [("load", ("a", "b"))]
        assert [r[2] for r in st.job_rows(run.id)] == [W, W, R, R]
        st.write_turn(run.id, [(3, R, Q, 1, 2.0, 1, None, "", "u")])
        st.set_status(run.id, "running", None)  # saves the flat rows
        flat = st.flat_rows(run.id)
        assert flat is not None and [flat.row(i) for i in range(4)] == \
            [(0, -1, None, None)] * 3 + [(1, 1, None, None)]


def test_a_fenced_writer_writes_nothing(tmp_path: Path) -> None:
    with Store.open(tmp_path) as st:
        run = new_run(st, ["a"])
        epoch = st.begin_epoch(run.id, 1, 0.0)
        st.begin_epoch(run.id, 2, 0.0)
        with pytest.raises(StoreError, match="fenced"):
            st.write_turn(run.id, [(0, W, R, 0, 1.0, -1, None, "", "s")], epoch=epoch)
        assert st.last_seq(run.id) == 0 and st.job_states(run.id) == []


def test_a_journal_of_the_previous_version_is_upgraded_and_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store.open(tmp_path) as st:
        run = new_run(st, ["a", "b"])
    # Make it look like a version 3 journal: transitions as rows, job rows kept up to date.
    con = sqlite3.connect(tmp_path / "journal.db", isolation_level=None)
    con.execute("DROP TABLE turns")
    con.execute("UPDATE runs SET plan_text = (SELECT text FROM plans WHERE run = runs.id)")
    con.execute("DROP TABLE plans")
    for table in ("now_runs", "now_states", "turn_jobs"):
        con.execute(f"DROP TABLE {table}")
    con.executemany("INSERT INTO transitions (run, idx, from_state, to_state, attempt, ts, executor, exit_code,"
                    " reason, cause) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(run.id, 0, W, R, 0, 1.0, -1, None, "", "s"), (run.id, 0, R, Q, 1, 1.0, -1, None, "", "s"),
                     (run.id, 0, Q, RUN, 1, 2.0, 0, None, "", "t")])
    con.execute("UPDATE jobs SET state = ?, attempt = 1, executor = 0, started = 2.0 WHERE idx = 0", (RUN,))
    con.execute("PRAGMA user_version = 3")
    con.close()
    with Store.open(tmp_path, readonly=True) as ro:
        assert ro.job_row(run.id, "a") == (0, "a", RUN, 1, 0, None, 2.0, None, "")
        assert ro.plan_text(run.id) == "text"
        assert ro.last_seq(run.id) == 3
    with Store.open(tmp_path) as st:
        assert st.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert st.plan_text(run.id) == "text"
        assert st.current_states(run.id) is None, "kept from the run's next write on"
        st.write_turn(run.id, [(0, RUN, OK, 1, 3.0, 0, 0, "", "t2")])
        assert st.current_states(run.id) == bytearray([OK, W])
        assert st.job_row(run.id, "a") == (0, "a", OK, 1, 0, 0, 2.0, 3.0, "")
        assert [t[1] for t in st.transitions_of(run.id, 0)] == [R, Q, RUN, OK]
        assert [s[0] for s in st.transitions_since(run.id, 2)] == [3, 4]
        # Many jobs' transitions read at once (a resume's) take the old rows in one read, in order
        for lookups in (64, 0):
            monkeypatch.setattr(store_base, "_LOOKUPS", lookups)
            assert st.transitions_of_jobs(run.id, [1, 0]) == {0: st.transitions_of(run.id, 0), 1: []}


def test_a_version_8_journal_keeps_its_current_states_and_turn_index(tmp_path: Path) -> None:
    ids = [f"j{k}" for k in range(3000)]
    with Store.open(tmp_path) as st:
        run = new_run(st, ids)
        st.write_turn(run.id, [(i, W, R, 0, 1.0, -1, None, "", "s") for i in range(0, 3000, 7)])
        st.write_turn(run.id, [(i, R, Q, 1, 2.0, -1, None, "", "t") for i in range(0, 3000, 7)])
        states = st.current_states(run.id)
        story = st.transitions_of(run.id, 2996)
    assert states is not None and states[2996] == Q and len(story) == 2
    # Version 8 kept the current states in a WITHOUT ROWID table and keyed the turn index by block.
    con = sqlite3.connect(tmp_path / "journal.db", isolation_level=None)
    con.execute("CREATE TABLE s7 (run INTEGER NOT NULL, block INTEGER NOT NULL, states BLOB NOT NULL,"
                " PRIMARY KEY (run, block)) WITHOUT ROWID")
    con.execute("INSERT INTO s7 SELECT run, block, states FROM now_states")
    con.execute("CREATE TABLE t7 (run INTEGER NOT NULL, block INTEGER NOT NULL, seq INTEGER NOT NULL,"
                " PRIMARY KEY (run, block, seq)) WITHOUT ROWID")
    con.execute("INSERT INTO t7 SELECT run, block, seq FROM turn_jobs")
    for old, new in (("now_states", "s7"), ("turn_jobs", "t7")):
        con.execute(f"DROP TABLE {old}")
        con.execute(f"ALTER TABLE {new} RENAME TO {old}")
    con.execute("PRAGMA user_version = 8")
    con.close()
    with Store.open(tmp_path, readonly=True) as ro:  # a reader leaves it as it is
        assert ro.current_states(run.id) == states
        assert ro.transitions_of(run.id, 2996) == story
    with Store.open(tmp_path) as st:
        assert st.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert st.current_states(run.id) == states
        assert st.transitions_of(run.id, 2996) == story
        st.write_turn(run.id, [(2996, Q, OK, 1, 3.0, 0, 0, "", "u")])
        assert [t[1] for t in st.transitions_of(run.id, 2996)] == [R, Q, OK]
        assert st.current_states(run.id)[2996] == OK  # type: ignore[index]
    with Store.open(tmp_path, readonly=True) as ro:
        assert ro.job_row(run.id, "j2996")[2] == OK  # type: ignore[index]


def test_a_version_11_journal_whose_turns_saved_their_states_reads_them_and_saves_them_late_once_written(
        tmp_path: Path) -> None:
    ids = [f"j{k}" for k in range(3000)]
    with Store.open(tmp_path) as st:
        run = new_run(st, ids)
        st.write_turn(run.id, [(i, W, R, 0, 1.0, -1, None, "", "s") for i in range(0, 3000, 7)])
        st.set_status(run.id, "running", None)  # saves them all, as each turn of version 11 did
        states = st.current_states(run.id)
    # Version 11 had no states_seq: a turn saved each block of states it changed.
    con = sqlite3.connect(tmp_path / "journal.db", isolation_level=None)
    con.execute("ALTER TABLE now_runs DROP COLUMN states_seq")
    con.execute("PRAGMA user_version = 11")
    con.close()
    with Store.open(tmp_path, readonly=True) as ro:  # a reader leaves it as it is
        assert ro.current_states(run.id) == states and ro.states_at(run.id, [2996, 2997]) == {2996: R, 2997: W}
    with Store.open(tmp_path) as st:
        assert st.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert st._states_saved(run.id) is None
        st.write_turn(run.id, [(2996, R, Q, 1, 3.0, 0, None, "", "u")])
        assert st._states_saved(run.id) is not None
    with Store.open(tmp_path, readonly=True) as ro:
        assert ro.states_at(run.id, [2996, 2989]) == {2996: Q, 2989: R}
        assert ro.current_states(run.id) == states[:2996] + bytes([Q]) + states[2997:]  # type: ignore[index]


def test_columns_grow_for_jobs_added_later() -> None:
    cols = JobColumns(1)
    cols.apply([(1, 4, W, R, 0, 1.0, -1, None, "", "s")])
    assert len(cols.state) == 5 and cols.state[4] == R and cols.executor[3] == -1


def test_auto_sync_relaxes_only_turns_that_allow_it(tmp_path: Path) -> None:
    def level(st: Store) -> int:
        return int(st.conn.execute("PRAGMA synchronous").fetchone()[0])

    with Store.open(tmp_path, sync="AUTO") as st:
        assert level(st) == 2  # FULL
        run = new_run(st, ["a"])
        st.write_turn(run.id, [(0, W, R, 0, 1.0, -1, None, "", "s")], durable=False)
        assert level(st) == 1  # NORMAL: survives a crash of the process
        st.write_turn(run.id, [(0, R, Q, 1, 1.0, -1, None, "", "s")], durable=True)
        assert level(st) == 2
        st.write_turn(run.id, [(0, Q, RUN, 1, 2.0, 0, None, "", "s")], durable=False)
        st.record_action(run.id, "op", "hold", "a", "", "refused", False)
        assert level(st) == 2, "operator actions are always durable"
    with Store.open(tmp_path, sync="FULL") as st:
        st.write_turn(run.id, [(0, RUN, OK, 1, 3.0, 0, 0, "", "s")], durable=False)
        assert level(st) == 2, "full means every turn"
        assert st.job_states(run.id) == [(0, OK, 1)]


def test_a_writer_can_drop_the_rows_it_replayed(tmp_path: Path) -> None:
    with Store.open(tmp_path) as st:
        run = new_run(st, ["a"])
        st.write_turn(run.id, [(0, W, R, 0, 1.0, -1, None, "", "s")])
        assert st.job_states(run.id) == [(0, R, 0)]
        st.drop_columns()
        st.write_turn(run.id, [(0, R, Q, 1, 2.0, -1, None, "", "s")])
        assert st.job_states(run.id) == [(0, Q, 1)], "replayed again from the start"


@pytest.mark.parametrize("version", [4, 5])
def test_a_journal_from_before_the_audit_chain_keeps_its_actions_and_chains_new_ones(tmp_path: Path,
                                                                                     version: int) -> None:
    with Store.open(tmp_path) as st:
        run = new_run(st, ["a", "b"])
        st.write_turn(run.id, [(0, W, R, 0, 1.0, -1, None, "", "s")])
    # Given a version 4 journal (actions without hashes, no triggers, no current-state tables), or a
    # version 5 one (the current-state tables, and still no audit chain)
    con = sqlite3.connect(tmp_path / "journal.db", isolation_level=None)
    for t in ("actions_no_update", "actions_no_delete"):
        con.execute(f"DROP TRIGGER {t}")
    con.execute("ALTER TABLE actions DROP COLUMN hash")
    con.execute("ALTER TABLE actions DROP COLUMN prev_hash")
    if version == 4:
        for table in ("now_runs", "now_states", "turn_jobs", "took"):
            con.execute(f"DROP TABLE {table}")
    con.execute("INSERT INTO actions (run, ts, user, verb, job, reason, outcome, applied)"
                " VALUES (?, 1.0, 'old', 'hold', 'a', '', 'held', 1)", (run.id,))
    con.execute(f"PRAGMA user_version = {version}")
    con.close()
    # When it is opened for writing, a turn written and an action added
    with Store.open(tmp_path) as st:
        assert st.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        st.write_turn(run.id, [(0, R, Q, 1, 2.0, -1, None, "", "t")])
        assert st.current_states(run.id) == bytearray([Q, W])
        st.record_action(run.id, "new", "release", "a", "", "released", True)
        # Then the old action stays unchained, the new one chains, and the trail refuses changes
        rep = st.verify_audit()
        assert rep.ok and (rep.checked, rep.unchained) == (1, 1)
        assert [a[1] for a in st.actions(run.id)] == ["old", "new"]
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            st.conn.execute("DELETE FROM actions")


def test_job_rows_of_a_new_run_keep_every_id_as_given(tmp_path: Path) -> None:
    ids = ['q"uote', "back\\slash", "caf\u00e9", "tab\tin", "x" * 300, *(f"j{i}" for i in range(2000))]
    with Store.open(tmp_path) as st:
        run = new_run(st, ids)
        assert [(r[0], r[1], r[2]) for r in st.job_rows(run.id)] == [(i, j, W) for i, j in enumerate(ids)]


def test_job_rows_are_bound_one_by_one_without_sqlite_json(tmp_path: Path) -> None:
    from wloadctl.store import sqlite as sq

    class NoJson:
        """A connection whose SQLite lacks the JSON functions."""

        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def execute(self, sql: str, args: tuple[object, ...] = ()) -> sqlite3.Cursor:
            if "json_each" in sql:
                raise sqlite3.OperationalError("no such table: json_each")
            return self.conn.execute(sql, args)

        def executemany(self, sql: str, rows: object) -> sqlite3.Cursor:
            return self.conn.executemany(sql, rows)  # type: ignore[arg-type]

    with Store.open(tmp_path) as st:
        run = new_run(st, ["a"])
        sq._insert_jobs(NoJson(st.conn), run.id + 100, ["x", "y"])  # type: ignore[arg-type]
        rows = st.conn.execute("SELECT idx, job_id FROM jobs WHERE run = ?", (run.id + 100,)).fetchall()
        assert rows == [(0, "x"), (1, "y")]


def test_a_journal_from_before_the_plans_facts_is_read_without_them_and_keeps_them_once_written(
        tmp_path: Path) -> None:
    with Store.open(tmp_path) as st:
        run = st.create_run("r1", "p", "p.yaml", "d", "t", ["a", "b"], "2026-11-30", 1.0)
    # Given a version 7 journal (no facts of the plans)
    con = sqlite3.connect(tmp_path / "journal.db")
    con.execute("DROP TABLE job_facts")
    con.execute("DROP TABLE fact_runs")
    con.execute("PRAGMA user_version = 7")
    con.close()
    # Then a reader finds none, and a writer migrates it and keeps a run's facts
    with Store.open(tmp_path, readonly=True) as ro:
        assert ro.job_facts(run.id, [0]) is None
    specs = [JobSpec("a", None), JobSpec("b", None, ("a",), confirm=True)]
    with Store.open(tmp_path) as st:
        assert st.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        st.keep_facts(run.id, run_facts(specs, ["a", "b"], [2, 1], [1.0, 3.0], [4.0, 3.0], "d", {}, False))
    with Store.open(tmp_path, readonly=True) as ro:
        meta, facts = ro.job_facts(run.id, [1])  # type: ignore[misc]
        assert (meta.longest, facts[1].tier, facts[1].ups, facts[1].expected) == (4.0, 1, (0,), 3.0)
        assert facts[1].spec("b", {0: "a"}).confirm and facts[1].spec("b", {0: "a"}).depends_on == ("a",)


def _in_read_only_mount(src: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`wloadctl ARGS` run in a mount namespace where `src` is seen read-only at src/../ro ({ro} in ARGS)."""
    if shutil.which("unshare") is None:
        pytest.fail("this test mounts a read-only view of a state directory: it needs util-linux unshare")
    ro = src.parent / "ro"
    ro.mkdir(exist_ok=True)
    own = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    script = f'mount --bind "{src}" "{ro}" && mount -o remount,bind,ro "{ro}" && exec "$@"'
    return subprocess.run(["unshare", *own, "--mount", "sh", "-c", script, "ns", sys.executable, "-m", "wloadctl",
                           *(a.format(ro=ro) for a in args)], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[1])


def test_a_finished_runs_journal_on_a_read_only_mount_is_read(tmp_path: Path) -> None:
    # Given a finished run's journal, closed (no -wal beside it), in a directory mounted read-only
    src = tmp_path / "src"
    with Store.open(src) as st:
        run = new_run(st, ["a", "b"])
        st.write_turn(run.id, [(0, W, R, 0, 1.0, -1, None, "", "s"), (1, W, R, 0, 1.0, -1, None, "", "s")])
        st.set_status(run.id, "succeeded", 2.0)
    assert not (src / "journal.db-wal").exists()
    # When status, history and audit read it there
    said = {args[0]: _in_read_only_mount(src, *args, "--state-dir", "{ro}")
            for args in (("status",), ("history", "a"), ("audit",))}
    # Then they read it, and never call it corrupt
    assert all(p.returncode == 0 and p.stderr == "" for p in said.values()), {k: p.stderr for k, p in said.items()}
    assert "(succeeded)" in said["status"].stdout and "2 jobs" in said["status"].stdout, said["status"].stdout
    assert "a: READY" in said["history"].stdout, said["history"].stdout
    # And `why` of a job the run has not is refused as unknown, though the refusal cannot be audited there
    p = _in_read_only_mount(src, "why", "nosuch", "--state-dir", "{ro}")
    assert p.returncode == 1 and p.stderr == "wloadctl: unknown job(s): nosuch\n", p.stderr
    # and a verb that would change it is refused in one line
    p = _in_read_only_mount(src, "skip", "a", "--state-dir", "{ro}")
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "cannot skip in run r1: " in p.stderr and "cannot be written (Read-only file system)" in p.stderr, p.stderr


def test_a_journal_with_a_write_ahead_log_on_a_read_only_mount_is_not_called_corrupt(tmp_path: Path) -> None:
    # Given a journal copied with its write-ahead log (taken while its writer was open), mounted read-only
    live = tmp_path / "live"
    src = tmp_path / "src"
    with Store.open(live) as st:
        new_run(st, ["a"])
        held = sqlite3.connect(live / "journal.db")
        held.execute("PRAGMA wal_autocheckpoint = 0")
        held.execute("CREATE TABLE later (x)")
        held.commit()
        shutil.copytree(live, src)
        held.close()
    (src / "journal.db-shm").unlink(missing_ok=True)
    assert (src / "journal.db-wal").stat().st_size
    # When status reads it there
    p = _in_read_only_mount(src, "status", "--state-dir", "{ro}")
    # Then it says in one line why it cannot be read in place and what to do, and never to restore it
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 3 and len(lines) == 1, p.stderr
    assert "cannot write its directory" in lines[0], lines[0]
    assert "copy the state directory somewhere writable" in lines[0], lines[0]
    assert "corrupt" not in lines[0] and "restore" not in lines[0]


def test_a_journal_in_its_first_moment_is_not_called_corrupt(tmp_path: Path) -> None:
    """A reader that opens the file a run has just made, before its tables, hears there is no run yet; `status` says
    so on one line, and a run then starts there as on an empty directory."""
    sd = tmp_path / "sd"
    sd.mkdir()
    first = sqlite3.connect(sd / "journal.db")
    first.execute("PRAGMA journal_mode = WAL")  # the file exists, with no table and no schema version yet
    first.close()
    with pytest.raises(NoJournalYet) as e:
        Store.open(sd, readonly=True)
    assert "no run recorded in" in str(e.value) and "corrupt" not in str(e.value)
    p = subprocess.run([sys.executable, "-m", "wloadctl", "status", "--state-dir", str(sd)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "no run recorded in" in p.stderr, p.stderr
    with Store.open(sd) as st:
        assert st.latest_run() is None
    # (and once it has its tables and no run, the one line says how to start one in that directory)
    p = subprocess.run([sys.executable, "-m", "wloadctl", "status", "--state-dir", str(sd)],
                       capture_output=True, text=True, timeout=60)
    hint = f"start one with `wloadctl run PLAN --state-dir {sd}`"
    assert p.stderr.strip() == f"wloadctl: no run recorded in {sd} ({hint})"


def test_readers_racing_a_journals_creation_find_it_empty_or_whole(tmp_path: Path) -> None:
    """Readers opening journals while their writers create them: each read finds no journal yet or a whole one
    (its tables made in the same transaction as its schema version), never 'no such table'."""
    import threading

    dirs = [tmp_path / f"sd{i}" for i in range(40)]
    seen: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            for d in dirs:
                if not (d / "journal.db").exists():
                    continue
                try:
                    with Store.open(d, readonly=True) as st:
                        st.latest_run()
                    seen.append("whole")
                except NoJournalYet:
                    seen.append("not yet")
                except StoreError as err:
                    seen.append(str(err))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for d in dirs:
            Store.open(d).close()
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert seen and set(seen) <= {"whole", "not yet"}, sorted(set(seen) - {"whole", "not yet"})[:3]
