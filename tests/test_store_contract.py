"""The journal's contract, held by both stores: the same tests on SQLite in a state directory and on PostgreSQL."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Opener
from wloadctl.errors import Fenced, StoreError
from wloadctl.store import StaleEpoch, Store, current
from wloadctl.turns import INDEX_BLOCK, STATE_BLOCK, JobColumns, states_of

W, R, Q, RUN, OK, FAIL = 0, 1, 2, 3, 4, 5


def new_run(st: Store, ids: list[str], run_id: str = "r1"):  # type: ignore[no-untyped-def]
    return st.create_run(run_id, "p", "p.yaml", "digest", "name: p", ids, "2026-11-30", 100.0,
                         '{"executors": 2}')


def test_a_run_is_recorded_with_its_plan_and_jobs(opener: Opener) -> None:
    st = opener()
    run = new_run(st, ["a", "b", "c"])
    assert (run.run_id, run.plan_name, run.status, run.epoch) == ("r1", "p", "running", 0)
    assert st.get_run("r1") == run and st.latest_run() == run and st.get_run("nope") is None
    assert st.plan_text(run.id) == "name: p" and st.plan_blob(run.id) is None
    st.set_plan_blob(run.id, "blob")
    assert st.plan_blob(run.id) == "blob"
    assert st.job_ids(run.id) == ["a", "b", "c"]
    assert st.job_rows(run.id)[1] == (1, "b", W, 0, -1, None, None, None, "")
    second = new_run(st, ["x"], "r2")
    assert st.latest_run() == second


def test_turns_make_the_job_rows_and_the_history(opener: Opener) -> None:
    st = opener()
    run = new_run(st, ["a", "b", "c"])
    st.write_turn(run.id, [(0, W, R, 0, 1.0, -1, None, "", "start"), (0, R, Q, 1, 1.0, -1, None, "", "start")])
    st.write_turn(run.id, [(0, Q, RUN, 1, 2.0, 1, None, "", "t1"), (1, W, R, 0, 2.0, -1, None, "why", "t1")])
    st.write_turn(run.id, [(0, RUN, OK, 1, 3.0, 1, 0, "", "t2")], durable=False)
    reader = opener(readonly=True)
    for s in (st, reader):
        rows = {r[1]: r for r in s.job_rows(run.id)}
        assert rows["a"] == (0, "a", OK, 1, 1, 0, 2.0, 3.0, "")
        assert rows["b"][2] == R and rows["b"][8] == "why"
        assert s.job_row(run.id, "a") == rows["a"] and s.job_row(run.id, "zz") is None
        assert dict(s.state_counts(run.id)) == {W: 1, R: 1, OK: 1}
        assert s.job_states(run.id) == [(0, OK, 1), (1, R, 0)]
        assert s.last_seq(run.id) == 5
        assert [t[1] for t in s.transitions_of(run.id, 0)] == [R, Q, RUN, OK]
        assert [(t[0], t[1], t[3]) for t in s.transitions_since(run.id, 3)] == [(4, 1, R), (5, 0, OK)]
    # A reader following the run sees turns written after its first look.
    st.write_turn(run.id, [(2, W, R, 0, 4.0, -1, None, "", "t3")])
    assert reader.job_row(run.id, "c")[2] == R  # type: ignore[index]


def test_the_rows_at_a_moment_replay_the_turns_up_to_it(opener: Opener) -> None:
    st = opener()
    run = new_run(st, ["a", "b"])
    st.write_turn(run.id, [(0, W, R, 0, 1.0, -1, None, "", "start"), (0, R, Q, 1, 1.0, -1, None, "", "start")])
    st.write_turn(run.id, [(0, Q, RUN, 1, 2.0, 1, None, "", "t1")])
    st.write_turn(run.id, [(0, RUN, FAIL, 1, 3.0, 1, 7, "exit status 7", "t2"), (1, W, R, 0, 3.5, -1, None, "", "t2")])
    reader = opener(readonly=True)
    for s in (st, reader):
        assert bytes(s.columns_at(run.id, 0.5).state) == bytes([W, W])
        assert bytes(s.columns_at(run.id, 1.0).state) == bytes([Q, W])
        mid = s.columns_at(run.id, 2.5)
        assert mid.row(0, "a") == (0, "a", RUN, 1, 1, None, 2.0, None, "")
        # A turn is replayed in part when its records straddle the moment
        late = s.columns_at(run.id, 3.2)
        assert late.row(0, "a") == (0, "a", FAIL, 1, 1, 7, 2.0, 3.0, "exit status 7") and late.state[1] == W
        assert bytes(s.columns_at(run.id, 9.0).state) == bytes([FAIL, R])


def test_loop_instances_added_by_a_turn_get_job_rows(opener: Opener) -> None:
    st = opener()
    run = new_run(st, ["list", "each"])
    st.write_turn(run.id, [(2, W, R, 0, 1.0, -1, None, "", "t1")],
                  added=[("each", 2, ["x", "y"], ["each@x", "each@y"])])
    assert st.job_ids(run.id) == ["list", "each", "each@x", "each@y"]
    assert st.expansions(run.id) == [("each", ("x", "y"))]
    assert st.job_row(run.id, "each@x")[2] == R  # type: ignore[index]


def test_a_loop_made_again_journals_its_lists_in_order_and_rows_for_its_new_instances_only(opener: Opener) -> None:
    st = opener()
    run = new_run(st, ["list", "each"])
    st.write_turn(run.id, [(2, W, R, 0, 1.0, -1, None, "", "t1")],
                  added=[("each", 2, ["x", "y"], ["each@x", "each@y"])])
    # The loop forgets its list (no items, no rows), then lists y again and z anew (a row for z alone)
    st.write_turn(run.id, [(1, OK, W, 0, 2.0, -1, None, "upstream rerun", "op")], added=[("each", 4, [], [])])
    st.write_turn(run.id, [(4, W, R, 0, 3.0, -1, None, "", "t2")], added=[("each", 4, ["y", "z"], ["each@z"])])
    assert st.job_ids(run.id) == ["list", "each", "each@x", "each@y", "each@z"]
    assert st.expansions(run.id) == [("each", ("x", "y")), ("each", ()), ("each", ("y", "z"))]


def test_a_changed_plan_adds_jobs(opener: Opener) -> None:
    st = opener()
    run = new_run(st, ["a"])
    st.replace_plan(run.id, "digest2", "name: p2", "p2.yaml", [(1, "b")])
    assert st.job_ids(run.id) == ["a", "b"] and st.plan_text(run.id) == "name: p2"
    assert st.get_run("r1").plan_digest == "digest2"  # type: ignore[union-attr]


def test_actions_and_alerts_are_kept_in_order(opener: Opener) -> None:
    st = opener()
    run = new_run(st, ["a"])
    st.record_action(run.id, "ann", "hold", "a", "why", "held", True, ts=5.0)
    st.record_action(run.id, "bob", "kill", "b", "", "unknown", False, ts=6.0)
    assert st.actions(run.id) == [(5.0, "ann", "hold", "a", "why", "held", 1),
                                  (6.0, "bob", "kill", "b", "", "unknown", 0)]
    assert st.actions(run.id, "b") == [(6.0, "bob", "kill", "b", "", "unknown", 0)]
    st.record_alert(run.id, 7.0, "a", "critical", "FAILED", 3, "exit 1", "/logs/a.3.log")
    assert st.alerts(run.id) == [(7.0, "a", "critical", "FAILED", 3, "exit 1", "/logs/a.3.log")]


def test_a_verbs_audit_rows_are_written_with_its_transitions_in_one_chain(opener: Opener) -> None:
    st = opener()
    ids = [f"x{i:04d}" for i in range(3000)]
    run = new_run(st, ids)
    st.record_action(run.id, "ann", "hold", "x0000", "", "held", True, ts=1.0)
    # A glob's verb: one turn of transitions and one audit row per job, in one transaction
    st.write_turn(run.id, [(i, W, 8, 0, 2.0, -1, None, "", "op-1") for i in range(1, 3000)],
                  actions=[(2.0, "bob", "hold", j, "night", f"held {j}", True) for j in ids[1:]])
    # Rows of refusals alone (no transition) go in one transaction too
    st.record_actions(run.id, [(3.0, "bob", "release", j, "", f"refused: {j}", False) for j in ids[:2]])
    st.write_turn(run.id, [], actions=[(4.0, "bob", "kill", "*", "", "nothing to kill", False)])
    reader = opener(readonly=True)
    for s in (st, reader):
        rows = s.actions(run.id)
        assert len(rows) == 3003 and [r[3] for r in rows[:3000]] == ids
        assert rows[1] == (2.0, "bob", "hold", "x0001", "night", "held x0001", 1)
        assert s.actions(run.id, "x0001") == [rows[1], rows[3001]]
        assert s.job_row(run.id, "x2999")[2] == 8  # type: ignore[index]
        report = s.verify_audit(run.id)
        assert report.ok and report.checked == 3003


def test_the_lease_is_taken_by_compare_and_set(opener: Opener) -> None:
    st = opener()
    run = new_run(st, ["a"])
    assert st.begin_epoch(run.id, 111, 50.0, expect_epoch=0) == 1
    row = st.get_run("r1")
    assert row is not None and (row.epoch, row.scheduler_pid, row.lease_until) == (1, 111, 50.0)
    assert st.renew_lease(run.id, 1, 60.0) and st.get_run("r1").lease_until == 60.0  # type: ignore[union-attr]
    other = opener()
    with pytest.raises(StoreError, match="another scheduler took the run first"):
        other.begin_epoch(run.id, 222, 70.0, expect_epoch=0)
    assert other.begin_epoch(run.id, 222, 70.0, expect_epoch=1) == 2
    assert not st.renew_lease(run.id, 1, 80.0)


def test_every_write_of_an_older_epoch_is_refused(opener: Opener) -> None:
    # Given an active scheduler at epoch 1, and a newer one that took the run over
    old = opener()
    run = new_run(old, ["a", "b"])
    old.begin_epoch(run.id, 111, 50.0)
    old.write_turn(run.id, [(0, W, R, 0, 1.0, -1, None, "", "t1")])
    new = opener()
    new.begin_epoch(run.id, 222, 60.0)
    # When the old one wakes and writes, Then not a single row is written
    for write in (
        lambda: old.write_turn(run.id, [(1, W, R, 0, 2.0, -1, None, "", "t2")]),
        lambda: old.write_turn(run.id, [(1, W, R, 0, 2.0, -1, None, "", "t2")], epoch=1),
        lambda: old.write_turn(run.id, [], added=[("b", 2, ["x"], ["b@x"])]),
        lambda: old.set_status(run.id, "failed", 3.0),
        lambda: old.record_action(run.id, "ann", "hold", "a", "", "held", True),
        lambda: old.record_actions(run.id, [(2.0, "ann", "hold", "a", "", "held", True)] * 3),
        lambda: old.write_turn(run.id, [(1, W, R, 0, 2.0, -1, None, "", "op-1")], epoch=1,
                               actions=[(2.0, "ann", "release", "b", "", "released", True)]),
        lambda: old.record_alert(run.id, 3.0, "a", "critical", "FAILED", 1, "", ""),
    ):
        with pytest.raises(StaleEpoch, match=r"fenced: .* is at epoch 2, this writer holds 1") as e:
            write()
        # (a scheduler that meets it exits as fenced, not as crashed)
        assert isinstance(e.value, Fenced) and e.value.exit_code == Fenced.exit_code == 4
    row = new.get_run("r1")
    assert row is not None and row.status == "running" and row.epoch == 2
    assert new.last_seq(run.id) == 1 and new.job_ids(run.id) == ["a", "b"]
    assert new.actions(run.id) == [] and new.alerts(run.id) == []
    # The new epoch writes on
    new.write_turn(run.id, [(1, W, R, 0, 4.0, -1, None, "", "t3")])
    new.set_status(run.id, "succeeded", 5.0)
    assert new.get_run("r1").status == "succeeded"  # type: ignore[union-attr]


def test_a_missing_journal_is_not_created_when_asked_not_to(opener: Opener) -> None:
    with pytest.raises(StoreError, match="no run journal"):
        opener(create=False)


def _random_run(st: Store, n: int, turns: int, seed: int = 7) -> int:
    """A run of n jobs moved by random turns (states, attempts, exit codes, reasons)."""
    rng = random.Random(seed)
    run = new_run(st, [f"j{i}" for i in range(n)])
    state = [W] * n
    for t in range(turns):
        batch = []
        for i in rng.sample(range(n), rng.randint(1, 200)):
            to = rng.choice([R, Q, RUN, OK, FAIL])
            code = 1 if to == FAIL else 0 if to == OK else None
            batch.append((i, state[i], to, t, float(t), t % 4 - 1, code, f"r{t}" if to == FAIL else "", f"c{t}"))
            state[i] = to
        st.write_turn(run.id, batch, durable=t % 2 == 0)
    return run.id


def test_reads_of_one_job_and_of_the_counts_answer_as_a_replay_does(opener: Opener,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    n = 2 * STATE_BLOCK + 37
    monkeypatch.setattr(current, "FLAT_EVERY", 500)  # flat rows saved every few turns
    monkeypatch.setattr(current, "STATES_EVERY", 300)  # and current states a little more often
    st = opener()
    run = _random_run(st, n, 60)
    reader = opener(readonly=True)
    replay = reader.columns(run)  # the old way: every turn applied in order
    ids = reader.job_ids(run)
    # The current states as saved are behind the turns (each turn saved a share of them): a reader applies the rest
    assert 0 < reader._states_saved(run) < reader.last_seq(run)  # type: ignore[operator]
    saved = states_of(reader._state_rows(run), n)
    assert saved != replay.state[:n]
    states = reader.current_states(run)
    assert states is not None and states == replay.state[:n]
    assert dict(reader.state_counts(run)) == {s: replay.state.count(s) for s in set(replay.state)}
    behind = [i for i in range(n) if saved[i] != states[i]]
    some = [0, 5, STATE_BLOCK - 1, STATE_BLOCK, 2 * STATE_BLOCK + 36, *behind][:40]
    assert reader.states_at(run, some) == {i: replay.state[i] for i in some}
    assert reader.states_at(run, some[:2]) == {i: replay.state[i] for i in some[:2]}
    for i in (0, 1, INDEX_BLOCK - 1, INDEX_BLOCK, STATE_BLOCK + 5, n - 1):
        assert reader.job_row(run, ids[i]) == replay.row(i, ids[i])
        mine = [r[2:] for turn in reader._turns(run, 0) for r in turn if r[1] == i]
        assert reader.transitions_of(run, i) == mine
    listed = reader.job_rows(run, exclude_states=(W, OK), limit=25)
    expect = [replay.row(i, ids[i]) for i in range(n) if replay.state[i] not in (W, OK)][:25]
    assert listed == expect
    # Rows of a page of jobs at once, as a console reads those it shows
    page = [0, 3, INDEX_BLOCK + 1, STATE_BLOCK, n - 2]
    assert reader.rows_of(run, page) == {i: replay.row(i, ids[i])[2:] for i in page}
    # Every job's start, end, attempt and executor at once, as a console sorts by them: saved, and the
    # turns after the last save applied
    assert 0 < reader._flat_saved(run) < reader.last_seq(run)  # type: ignore[operator]
    assert _flat(reader, run) == _replayed(replay, n)
    # And the run's end saves them all
    st.set_status(run, "succeeded", 99.0)
    assert reader._flat_saved(run) == reader.last_seq(run) and _flat(reader, run) == _replayed(replay, n)
    assert reader._states_saved(run) == reader.last_seq(run)
    assert states_of(reader._state_rows(run), n) == replay.state[:n]


def _flat(st: Store, run: int) -> list[tuple]:
    rows = st.flat_rows(run)
    assert rows is not None
    return [rows.row(i) for i in range(len(rows))]


def _replayed(cols: JobColumns, n: int) -> list[tuple]:
    cols.grow(n)
    return [(cols.attempt[i], cols.executor[i], cols.started.get(i), cols.ended.get(i)) for i in range(n)]


def test_a_run_journaled_before_its_current_states_were_kept_is_brought_in_at_its_next_write(
        opener: Opener) -> None:
    st = opener()
    run = _random_run(st, 300, 10)
    # As a journal of an older schema version has it: turns only.
    for table in ("turn_jobs", "now_states", "now_runs", "now_rows"):
        sql = f"DELETE FROM {table} WHERE run = {run}"
        conn = getattr(st, "conn", None) or st._conn  # type: ignore[attr-defined]
        conn.execute(sql)
    reader = opener(readonly=True)
    assert reader.current_states(run) is None and reader.flat_rows(run) is None
    replay = [reader.job_row(run, f"j{i}") for i in range(300)]
    assert reader.rows_of(run, [1, 7]) == {1: replay[1][2:], 7: replay[7][2:]}  # type: ignore[index]
    writer = opener()
    writer.write_turn(run, [(5, replay[5][2], OK, 9, 99.0, 1, 0, "", "late")])  # type: ignore[index]
    again = opener(readonly=True)
    assert again.current_states(run) is not None
    assert [again.job_row(run, f"j{i}") for i in range(300) if i != 5] == [r for k, r in enumerate(replay) if k != 5]
    assert again.job_row(run, "j5")[2:4] == (OK, 9)  # type: ignore[index]
    assert [t[1] for t in again.transitions_of(run, 5)][-1] == OK
    assert _flat(again, run) == _replayed(again.columns(run), 300)


def test_successful_attempts_make_the_history_of_the_next_runs_of_the_plan(opener: Opener) -> None:
    st = opener()
    for k, took in enumerate((4.0, 6.0, 20.0)):
        run = new_run(st, ["a", "b"], f"r{k}")
        st.write_turn(run.id, [(0, W, R, 0, 0.0, -1, None, "", "s"), (0, R, Q, 1, 0.0, -1, None, "", "s"),
                               (1, W, R, 0, 0.0, -1, None, "", "s"), (1, R, Q, 1, 0.0, -1, None, "", "s")])
        st.write_turn(run.id, [(0, Q, RUN, 1, 10.0, 0, None, "", "t"), (1, Q, RUN, 1, 10.0, 0, None, "", "t")])
        # a succeeds after `took` seconds; b fails: a failed attempt is no history.
        st.write_turn(run.id, [(0, RUN, OK, 1, 10.0 + took, 0, 0, "", "u"), (1, RUN, FAIL, 1, 11.0, 0, 1, "x", "u")])
    other = new_run(st, ["a"], "other")
    latest = new_run(st, ["a", "b"], "now")
    reader = opener(readonly=True)
    assert reader.expected_history("p", latest.id, ["a", "b"], "digest") == {"a": 6.0}
    assert reader.expected_history("p", latest.id, ["a", "b"], "digest", runs=2) == {"a": 20.0}, "other has none"
    assert reader.expected_history("p", other.id - 2, ["a", "b"], "digest") == {"a": 4.0}
    assert reader.expected_history("elsewhere", latest.id, ["a"], "digest") == {}
def _raw(st: Store, tmp_path: Path, sql: str) -> None:
    """Run SQL on the journal behind the store's back (as someone editing the file or the database would)."""
    if st.__class__.__name__ == "SqliteStore":
        import sqlite3

        con = sqlite3.connect(tmp_path / "state" / "journal.db", isolation_level=None)
        try:
            con.execute(sql.replace("username", "user"))
        finally:
            con.close()
    else:
        st._do(lambda c: c.execute(sql))  # type: ignore[attr-defined]


def test_the_audit_trail_is_hash_chained_and_refuses_changes(opener: Opener, tmp_path: Path) -> None:
    # Given actions of two runs, interleaved
    st = opener()
    one, two = new_run(st, ["a"]), new_run(st, ["x"], "r2")
    for k in range(3):
        st.record_action(one.id, "ana", "hold", "a", f"reason {k}", "held", True, 10.0 + k)
        st.record_action(two.id, "bob", "skip", "x", "", "refused: x is RUNNING", False, 20.0 + k)
    rep = st.verify_audit()
    assert rep.ok and (rep.checked, rep.unchained) == (6, 0)
    rows = st.audit_rows(one.id)
    assert [r[9] for r in rows[1:]] == [r[10] for r in rows[:-1]]
    # When someone updates or deletes an audit row, the journal refuses
    for sql in ("UPDATE actions SET username = 'eve'", "DELETE FROM actions"):
        with pytest.raises(Exception, match="append-only"):
            _raw(st, tmp_path, sql)
    assert st.verify_audit().ok and len(st.audit_rows()) == 6


@pytest.mark.parametrize(("edit", "problem"), [
    ("UPDATE actions SET username = 'eve' WHERE seq = {seq}", "the row was changed after it was written"),
    ("DELETE FROM actions WHERE seq = {seq}", "the previous row of the run is missing or was changed"),
])
def test_audit_verify_reports_the_first_broken_link(opener: Opener, tmp_path: Path, edit: str,
                                                    problem: str) -> None:
    st = opener()
    run = new_run(st, ["a"])
    for k in range(4):
        st.record_action(run.id, "ana", "hold", "a", "", "held", True, 10.0 + k)
    seq = st.audit_rows(run.id)[1][0]
    # Given an editor who got around the triggers
    is_sqlite = st.__class__.__name__ == "SqliteStore"
    off = "DROP TRIGGER actions_no_update" if is_sqlite and "UPDATE" in edit else \
        "DROP TRIGGER actions_no_delete" if is_sqlite else "ALTER TABLE actions DISABLE TRIGGER actions_append_only"
    _raw(st, tmp_path, off)
    _raw(st, tmp_path, edit.format(seq=seq))
    rep = st.verify_audit()
    # Then verify names the first row that no longer holds
    assert not rep.ok and rep.broken is not None
    broken_seq = seq if "UPDATE" in edit else st.audit_rows(run.id)[1][0]
    assert rep.broken == (run.id, broken_seq, problem) and rep.checked == 1


_WRITER = """
import random, sys
from pathlib import Path
from wloadctl.store import Store, current
current.FLAT_EVERY = 100  # flat rows saved every third turn
current.STATES_EVERY = 70  # current states about every other turn
st = Store.open(Path(sys.argv[1]), journal=sys.argv[2] or None)
run = st.create_run("r1", "p", "p.yaml", "digest", "name: p", [f"j{i}" for i in range(300)], "2026-11-30", 1.0)
rng, t = random.Random(3), 0
while True:
    t += 1
    batch = [(i, 0, rng.choice([1, 2, 3, 4, 5]), t, float(t), t % 3, None, "", "c") for i in rng.sample(range(300), 40)]
    st.write_turn(run.id, batch)
    if t == 20:
        Path(sys.argv[3]).touch()
"""


def test_flat_rows_and_states_match_a_replay_after_a_writer_is_killed_and_another_resumes(
        opener: Opener, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # Given a writer killed -9 while it writes turns
    url = request.getfixturevalue("pg_url") if "postgres" in request.node.name else ""
    gate = tmp_path / "twenty-turns"
    with subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path / "state"), url, str(gate)]) as child:
        deadline = time.monotonic() + 60
        while not gate.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        child.kill()
    assert gate.exists(), "the writer never got to its twentieth turn"
    # Then its flat rows are those of its committed turns (saved, and the turns after them)
    reader = opener(readonly=True)
    run = reader.latest_run()
    assert run is not None and reader._flat_saved(run.id)
    assert _flat(reader, run.id) == _replayed(reader.columns(run.id), 300)
    assert reader.current_states(run.id) == reader.columns(run.id).state[:300]
    assert reader.states_at(run.id, [7, 299]) == {i: reader.columns(run.id).state[i] for i in (7, 299)}
    # And a writer resuming the run keeps them so
    writer = opener()
    writer.write_turn(run.id, [(7, 0, RUN, 9, 999.0, 2, None, "", "resumed"), (8, 0, OK, 9, 999.5, 1, 0, "", "r")])
    again = opener(readonly=True)
    assert _flat(again, run.id) == _replayed(again.columns(run.id), 300)
    assert again.flat_rows(run.id).row(7)[:3] == (9, 2, 999.0)  # type: ignore[union-attr]
    assert again.current_states(run.id) == again.columns(run.id).state[:300]
    assert again.states_at(run.id, [7, 8]) == {7: RUN, 8: OK}
