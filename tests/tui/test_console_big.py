"""The console on big runs: attaching from the run's shape, ids kept as bytes, orders over flat columns."""

from __future__ import annotations

import random
import subprocess
import sys
from array import array
from itertools import accumulate
from pathlib import Path

import pytest
from console_helpers import loaded

from tui import view_model
from tui.app import ConsoleApp
from tui.columns import NOT_YET, Times
from tui.feed import _load_from_plan, load_model
from tui.filters import JobFilter, parse_filter
from tui.idlist import IdIndex, IdList
from tui.order import _value_groups
from tui.view_model import SORT_KEYS, JobsModel, view_order
from tui.widgets.job_table import JobTable
from wloadctl.client import RunClient
from wloadctl.core.states import JobState, SlaTier
from wloadctl.runshape import read_shape, shape_path
from wloadctl.turns import FlatRows

ROOT = Path(__file__).resolve().parents[2]


def id_list(ids: list[str]) -> IdList:
    """An IdList over ids written as an id list file is."""
    starts = array("i", [0])
    starts.extend(accumulate(len(j.encode()) + 1 for j in ids))
    return IdList("".join(j + "\n" for j in ids).encode(), starts)


IDS = ["open_day", "load_EU_1", "load_us_2", "calc.rate", "load_eu_10", "close_day"]


def test_id_list_reads_like_the_list_it_was_written_from() -> None:
    # Given an id list over a file's bytes
    ids = id_list(IDS)
    index = IdIndex(ids)
    # Then it reads as the list, and its index as the dict, would
    assert list(ids) == IDS and len(ids) == len(IDS) and ids[-1] == "close_day" and ids[1:3] == IDS[1:3]
    assert all(index[j] == i for i, j in enumerate(IDS))
    assert "load_eu" not in index and "day" not in ids and ids.find("open") is None
    with pytest.raises(KeyError):
        index["nope"]
    # And a job the run adds is found after the file's
    ids.append("load@x")
    index["load@x"] = 6
    assert ids[6] == "load@x" and ids.index("load@x") == 6 and index["load@x"] == 6 and len(ids) == 7
    # And a copy (the timeline's) shares the file's ids, not those added later
    past = ids.copy()
    ids.append("load@y")
    assert list(past) == [*IDS, "load@x"] and len(ids) == 8 and past.find("load@y") is None


@pytest.mark.parametrize("pattern", ["load", "LOAD_eu", "load_*", "*_1?", "*[12]", "calc.rate", "calc?rate",
                                     "*[!0-9]", "x", "*"])
def test_id_list_matching_agrees_with_the_filter_on_strings(pattern: str) -> None:
    # Given the ids as bytes and as strings
    ids = id_list(IDS)
    ids.append("load_eu@3")
    match = JobFilter(pattern).matcher()
    # Then the pattern picks the same jobs both ways, as the filter does (case folded)
    assert ids.matching(pattern) == [i for i, j in enumerate([*IDS, "load_eu@3"]) if match(j)]


def big_model(n: int, seed: int = 7) -> JobsModel:
    """A model of n jobs in every state and tier, some started, ended, on executors, retried."""
    rnd = random.Random(seed)
    ids = [f"job_{i:06d}_{rnd.choice('abc')}" for i in range(n)]
    model = JobsModel(id_list(ids), bytearray(rnd.randrange(4) for _ in range(n)))
    rows = []
    for i in range(0, n, 3):
        st = rnd.choice(list(JobState))
        att = rnd.randrange(3)
        started = 1000.0 + rnd.randrange(500) if att else None
        ended = started + rnd.randrange(60) if started and st in (JobState.SUCCEEDED, JobState.FAILED) else None
        rows.append((i, ids[i], int(st), att, rnd.randrange(-1, 4) if att else -1, None, started, ended, ""))
    model.load_rows(rows)
    return model


@pytest.mark.parametrize("sort_key", SORT_KEYS)
@pytest.mark.parametrize("text", ["", "running,failed", "tier:critical,high", "waiting tier:low", "_a", "job_00*b"])
@pytest.mark.parametrize("reverse", [False, True])
def test_orders_over_flat_columns_are_the_plain_ones(monkeypatch: pytest.MonkeyPatch, sort_key: str, text: str,
                                                      reverse: bool) -> None:
    # Given a model large enough for the flat-column path
    model = big_model(3000)
    flt = parse_filter(text) if text else JobFilter()
    monkeypatch.setattr(view_model, "FAST_FROM", 1 << 30)
    plain = list(view_order(model, flt, sort_key, reverse, now=1200.0))
    monkeypatch.setattr(view_model, "FAST_FROM", 1000)
    # Then filtering and sorting it over its columns shows the same rows in the same order
    order = view_order(model, flt, sort_key, reverse, now=1200.0)
    assert list(order) == plain and len(order) == len(plain)
    # And the rows are found by position, and a job's row by the job, as in the list
    for k in range(0, len(plain), 97):
        assert order[k] == plain[k] and order.index(plain[k]) == k and plain[k] in order
    if plain:
        assert order[-1] == plain[-1] and list(order[-3:]) == plain[-3:]


def flat_of(model: JobsModel) -> FlatRows:
    """The journal's flat rows of a model's jobs."""
    flat = FlatRows(len(model))
    for i in range(len(model)):
        flat.attempt[i], flat.executor[i] = model.attempt[i], model.executor[i]
        flat.started[i] = model.started.get(i, NOT_YET)
        flat.ended[i] = model.ended.get(i, NOT_YET)
    return flat


@pytest.mark.parametrize("sort_key", ["start", "duration", "attempt", "executor"])
@pytest.mark.parametrize("text", ["", "running,failed", "waiting tier:low", "job_00*b"])
@pytest.mark.parametrize("reverse", [False, True])
def test_orders_over_the_journals_flat_rows_are_the_plain_ones(monkeypatch: pytest.MonkeyPatch, sort_key: str,
                                                               text: str, reverse: bool) -> None:
    # Given a big model whose rows are read as the journal's flat rows (some jobs queued and running)
    model = big_model(3000)
    model.apply([(1, i, 0, s, 1, 1100.0 + i % 7, i % 3, None, "") for i, s in ((4, 2), (5, 3), (8, 3))])
    flt = parse_filter(text) if text else JobFilter()
    monkeypatch.setattr(view_model, "FAST_FROM", 1 << 30)
    plain = list(view_order(model, flt, sort_key, reverse, now=1200.0))
    monkeypatch.setattr(view_model, "FAST_FROM", 1000)
    model.known, model.fetch_flat = bytearray(len(model)), lambda: flat_of(model)
    # When a sort reads them
    order = view_order(model, flt, sort_key, reverse, now=1200.0)
    # Then the rows show in the same order, found by position and by job
    assert isinstance(model.started, Times) and list(order) == plain
    for k in range(0, len(plain), 97):
        assert order[k] == plain[k] and order.index(plain[k]) == k


def test_jobs_that_never_ran_sort_by_duration_in_plan_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(view_model, "FAST_FROM", 1000)
    model = JobsModel(id_list([f"j{i}" for i in range(2000)]), bytearray(2000))
    model.known, model.fetch_flat = bytearray(2000), lambda: FlatRows(2000)
    for reverse in (False, True):
        assert list(view_order(model, JobFilter(), "duration", reverse)) == list(range(2000))


def test_counts_per_tier_and_state_match_a_count_by_hand() -> None:
    model = big_model(2000)
    by_hand = [[0] * len(JobState) for _ in SlaTier]
    for st, t in zip(model.state, model.tier, strict=True):
        by_hand[t][st] += 1
    assert model.tier_counts == by_hand
    assert model.counts == [sum(row[s] for row in by_hand) for s in range(len(JobState))]
    assert model.running == {i for i, s in enumerate(model.state) if s == JobState.RUNNING}


def test_attach_from_the_shape_reads_the_run_as_the_plan_does(tmp_path: Path) -> None:
    # Given a finished run of the bank sample (its scheduler wrote the run's shape)
    state = tmp_path / "bank"
    subprocess.run([sys.executable, "-m", "wloadctl", "run", str(ROOT / "samples" / "eod_bank.yaml"),
                    "--state-dir", str(state), "--quiet"], check=False, timeout=300, capture_output=True)
    with RunClient(state) as client:
        assert read_shape(client.state_dir, client.run.run_id) is not None
        # When the console attaches from the shape, and from the plan
        _info, fast, dag = load_model(client)
        _info, slow, slow_dag = _load_from_plan(client, list(client.ids()), lambda _s: None)
    # Then both hold the same jobs, tiers, deadlines and rows, and the same graph
    assert isinstance(fast.ids, IdList) and list(fast.ids) == list(slow.ids)
    assert fast.tier == slow.tier and fast.deadline == slow.deadline and fast.deadline_text == slow.deadline_text
    assert fast.state == slow.state and fast.attempt == slow.attempt and fast.executor == slow.executor
    assert (fast.exit_code, fast.started, fast.ended, fast.reason) == \
        (slow.exit_code, slow.started, slow.ended, slow.reason)
    assert fast.counts == slow.counts and fast.tier_counts == slow.tier_counts
    for j in slow.ids:
        assert set(dag.upstream_of(j)) == set(slow_dag.upstream_of(j))
        assert set(dag.downstream_of(j)) == set(slow_dag.downstream_of(j))
    assert list(fast.expected) == list(slow.expected) and list(fast.remaining) == list(slow.remaining)
    assert [fast.rank[i] for i in range(len(fast))] == list(slow.rank)
    # And the critical path is a chain of dependents from a job without upstream to one without dependents
    chain = sorted(fast.critical)
    assert chain and not dag.upstream_of(fast.ids[chain[0]]) and not dag.downstream_of(fast.ids[chain[-1]])


def test_the_shape_carries_the_at_risk_windows_a_timeout_widens(tmp_path: Path) -> None:
    # Given a finished run with deadlines, one job's timeout longer than the scheduler's RISK_WINDOW
    plan = tmp_path / "windows.yaml"
    plan.write_text("name: windows\njobs:\n"
                    "  slow: {command: 'true', deadline: '+1h', timeout: 20m}\n"
                    "  quick: {command: 'true', deadline: '+1h', timeout: 1m}\n"
                    "  free: {command: 'true', timeout: 30m}\n")
    state = tmp_path / "state"
    subprocess.run([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(state), "--quiet"],
                   check=False, timeout=120, capture_output=True)
    with RunClient(state) as client:
        assert read_shape(client.state_dir, client.run.run_id) is not None
        # When the console attaches from the shape, and from the plan
        _info, fast, _dag = load_model(client)
        _info, slow, _dag = _load_from_plan(client, list(client.ids()), lambda _s: None)
    # Then both know the one window the timeout widens, as the scheduler does
    assert fast.risk_window == slow.risk_window == {fast.index["slow"]: 1200.0}


def test_a_big_run_is_attached_with_its_states_and_rows_are_read_when_shown(tmp_path: Path) -> None:
    # Given a finished run of the bank sample
    state = tmp_path / "bank"
    subprocess.run([sys.executable, "-m", "wloadctl", "run", str(ROOT / "samples" / "eod_bank.yaml"),
                    "--state-dir", str(state), "--quiet"], check=False, timeout=300, capture_output=True)
    with RunClient(state) as client:
        _info, full, _dag = load_model(client)
        # When the console attaches with a client to read rows with later
        _info, lazy, _dag = load_model(client, open_client=lambda: RunClient(state))
    try:
        # Then it holds every state, and the rows of no job but those the panes need
        assert lazy.known is not None and lazy.state == full.state and lazy.counts == full.counts
        assert lazy.tier_counts == full.tier_counts
        assert not any(lazy.known[i] for i in range(len(lazy)) if i not in lazy.deadline and i not in lazy.running)
        # And a row read when shown is the row the journal has
        lazy.ensure(range(0, len(lazy), 2))
        for i in range(0, len(lazy), 2):
            assert (lazy.attempt[i], lazy.executor[i], lazy.exit_code[i], lazy.started[i], lazy.ended[i],
                    lazy.reason[i]) == (full.attempt[i], full.executor[i], full.exit_code[i], full.started[i],
                                        full.ended[i], full.reason[i])
        # And a sort by start reads every start, end, attempt and executor from the journal's flat rows
        for key in ("start", "duration", "attempt", "executor"):
            order = view_order(lazy, JobFilter(), key, now=2e9)
            assert list(order) == list(view_order(full, JobFilter(), key, now=2e9)), key
        assert isinstance(lazy.started, Times)
        assert [(lazy.attempt[i], lazy.executor[i], lazy.started[i], lazy.ended[i]) for i in range(len(lazy))] == \
            [(full.attempt[i], full.executor[i], full.started[i], full.ended[i]) for i in range(len(full))]
    finally:
        assert lazy.release is not None
        lazy.release()


def test_a_damaged_shape_file_is_passed_over_for_the_plan(tmp_path: Path) -> None:
    state = tmp_path / "bank"
    subprocess.run([sys.executable, "-m", "wloadctl", "run", str(ROOT / "samples" / "eod_bank.yaml"),
                    "--state-dir", str(state), "--quiet"], check=False, timeout=300, capture_output=True)
    with RunClient(state) as client:
        path = shape_path(client.state_dir, client.run.run_id)
        path.write_bytes(path.read_bytes()[:-3])
        assert client.shape() is None
        _info, model, dag = load_model(client)
    assert isinstance(model.ids, list) and len(dag) == len(model) == 154


def test_attempts_and_executors_are_grouped_by_value_in_order() -> None:
    col = array("i", [3, -1, 1000, 0, 1000, 256, -1, 3])
    groups = _value_groups(col)
    assert groups is not None
    assert [(v, [i for i, b in enumerate(m) if b]) for v, m in groups] == \
        [(-1, [1, 6]), (0, [3]), (3, [0, 7]), (256, [5]), (1000, [2, 4])]
    assert _value_groups(array("i", [1, 70000])) is None and _value_groups(array("i", [-2, 0])) is None


async def test_the_console_sorts_a_finished_run_by_start_duration_attempt_and_executor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a finished run whose jobs start and take various times on two executors, a third retried
    jobs = "".join(f"  j{k}:\n    command: \"sleep 0.0{k % 7}; test -e m{k} || {{ touch m{k}; exit {k % 3}; }}\"\n"
                   f"    cwd: {tmp_path}\n    retries: {{count: 1, delay: 10ms}}\n" for k in range(16))
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: sorts\njobs:\n{jobs}")
    state = tmp_path / "state"
    subprocess.run([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(state), "--quiet",
                    "--executors", "2", "--slots", "2"], check=True, timeout=120, capture_output=True)
    with RunClient(state) as client:
        rows = {r[0]: r for r in client.job_rows()}  # (idx, id, state, attempt, executor, exit, started, ended, ..)
    expect = {"start": sorted(rows, key=lambda i: rows[i][6]),
              "duration": sorted(rows, key=lambda i: rows[i][6] - rows[i][7]),
              "attempt": sorted(rows, key=lambda i: -rows[i][3]),
              "executor": sorted(rows, key=lambda i: rows[i][4])}
    assert {rows[i][3] for i in rows} == {1, 2} and {rows[i][4] for i in rows} == {0, 1}
    monkeypatch.setattr(view_model, "FAST_FROM", 10)  # the path of big runs
    app = ConsoleApp(state, readonly=True)
    async with app.run_test(size=(160, 50)) as pilot:
        await loaded(pilot)
        table = app.screen.query_one(JobTable)
        for key in ("start", "duration", "attempt", "executor"):
            # When the operator sorts by each key in turn
            while table.sort_key != key:
                await pilot.press("S")
            await pilot.pause()
            # Then the table shows the jobs in the order the journal's rows give
            assert list(table.order) == expect[key], key
        assert app.model is not None and isinstance(app.model.started, Times), "read from the flat rows"
