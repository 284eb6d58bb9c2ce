"""Textual-free parts: jobs model, filters, sorting, figures, legend, DAG, SLA."""

from __future__ import annotations

import datetime as dt

import pytest
from console_fakes import NOW, PLAN_TEXT, T0, FakeClient

from tui.commands import CommandError, parse_command, resolve
from tui.dag_layout import layout, render
from tui.feed import last_seq, load_model
from tui.filters import FilterError, JobFilter, parse_filter
from tui.impact import impact
from tui.labels import abbrev_id, clip, fmt_duration, legend, progress_bar
from tui.run_figures import path_ahead, summarize, work_ahead
from tui.sla import deadline_at, sla_view
from tui.view_model import JobsModel, job_row, value_of, view_order
from wloadctl.core.dag import Dag
from wloadctl.core.planfile import load_plan_text
from wloadctl.core.sla import RISK_WINDOW, risk_window
from wloadctl.core.states import TRANSITIONS, JobState, SlaTier
from wloadctl.core.verbs import VERB_FROM

S = JobState


@pytest.fixture
def loaded() -> tuple[JobsModel, Dag]:
    """The canned run, as the feed loads it."""
    _info, model, dag = load_model(FakeClient())
    return model, dag


def test_filter_words_become_pattern_states_and_tiers() -> None:
    f = parse_filter("LOAD_* state:failed,held t:critical")
    assert f.pattern == "LOAD_*"
    assert f.states == {S.FAILED, S.HELD}
    assert f.tiers == {SlaTier.CRITICAL}
    assert f.describe() == "LOAD_* state:failed,held t:critical"
    assert f.matcher()("load_gl") and not f.matcher()("post_load")
    assert parse_filter("gl").matcher()("load_gl_close")


def test_filter_groups_and_short_labels() -> None:
    assert parse_filter("s:bad").states == {
        S.FAILED,
        S.TIMED_OUT,
        S.UPSTREAM_FAILED,
        S.CANCELLED,
    }
    assert parse_filter("state:upfail,RUN").states == {S.UPSTREAM_FAILED, S.RUNNING}
    assert parse_filter("").active is False


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("state:broken", "'broken' is not a state; use one of waiting"),
        ("tier:urgent", "'urgent' is not an SLA tier; use one of critical"),
        ("state:", "has no value"),
        ("a* b*", "one id pattern at a time"),
        ("state:broken,gone tier:urgent sla:", "'broken', 'gone' are not states; .* [|] 'urgent' is not an SLA tier; "
         ".* [|] 'sla:' has no value"),
    ],
)
def test_bad_filters_say_what_would_be_accepted(text: str, fragment: str) -> None:
    with pytest.raises(FilterError, match=fragment):
        parse_filter(text)


def test_apply_mirrors_the_journal_row_updates(loaded: tuple[JobsModel, Dag]) -> None:
    model, _dag = loaded
    i = model.index["load_fx_rates"]
    before = list(model.counts)
    v = model.version
    # Given a retry: FAILED -> WAITING -> READY -> QUEUED -> RUNNING -> SUCCEEDED
    ts = NOW
    touched = model.apply(
        [
            (100, i, S.FAILED, S.WAITING, 2, ts, -1, None, "retry by ops"),
            (101, i, S.WAITING, S.READY, 2, ts, -1, None, ""),
            (102, i, S.READY, S.QUEUED, 3, ts + 1, -1, None, ""),
            (103, i, S.QUEUED, S.RUNNING, 3, ts + 2, 1, None, ""),
        ]
    )
    assert touched == {i}
    assert (
        model.state[i] == S.RUNNING and model.attempt[i] == 3 and model.executor[i] == 1
    )
    assert model.started[i] == ts + 2 and model.ended[i] is None
    assert model.exit_code[i] == 3  # kept until a new exit status arrives
    assert model.counts[S.FAILED] == before[S.FAILED] - 1
    assert model.counts[S.RUNNING] == before[S.RUNNING] + 1
    assert model.tier_counts[SlaTier.HIGH][S.RUNNING] >= 1
    assert (
        model.version == v + 1
        and model.touched_at[i] == model.version
        and model.seq == 103
    )
    model.apply([(104, i, S.RUNNING, S.SUCCEEDED, 3, ts + 5, 1, 0, "")])
    assert model.ended[i] == ts + 5 and model.exit_code[i] == 0
    assert model.duration(i, NOW + 100) == pytest.approx(3.0)


def test_order_by_state_puts_trouble_first_and_filters_compose(
    loaded: tuple[JobsModel, Dag],
) -> None:
    model, _dag = loaded
    order = view_order(model, JobFilter(), "state")
    assert [model.ids[i] for i in order[:3]] == [
        "load_fx_rates",
        "revalue_fx",
        "limits_check",
    ]
    crit = view_order(model, parse_filter("state:waiting tier:critical"))
    assert [model.ids[i] for i in crit] == ["post_interest", "gl_close", "reg_report"]
    assert view_order(model, JobFilter(), "plan", reverse=True)[0] == len(model) - 1
    longest = view_order(model, JobFilter(), "duration", reverse=True, now=NOW)
    assert model.ids[longest[0]] == "load_gl"  # running for 9m24s


@pytest.mark.parametrize("sort_key", ["start", "duration", "attempt", "executor"])
def test_a_sort_ascends_or_descends_by_the_value_with_jobs_without_one_last(
    loaded: tuple[JobsModel, Dag], sort_key: str
) -> None:
    model, _dag = loaded
    value = value_of(model, sort_key, NOW)
    for reverse in (False, True):
        order = list(view_order(model, JobFilter(), sort_key, reverse, now=NOW))
        values = [value(i) for i in order]
        some = [v for v in values if v is not None]
        assert some and len(set(some)) > 1, "the canned run has several values"
        assert some == sorted(some, reverse=reverse), (sort_key, reverse)
        assert values[: len(some)] == some  # and the jobs without one after them
        rest = order[len(some):]
        assert rest == sorted(rest)  # in plan order


def test_row_cells_and_formatting(loaded: tuple[JobsModel, Dag]) -> None:
    model, _dag = loaded
    row = job_row(model, model.index["revalue_fx"], NOW)
    assert (row.state, row.tier, row.attempt, row.start) == (
        S.UPSTREAM_FAILED,
        "high",
        "",
        "",
    )
    assert row.info == "due +20m; upstream load_fx_rates FAILED"
    assert [fmt_duration(x) for x in (0.42, 12.4, 245, 3720, 90000)] == [
        "0.4s",
        "12s",
        "4m05s",
        "1h02m",
        "1d01h",
    ]
    assert clip("load_accounts_emea", 8) == "load_ac~"
    assert progress_bar(0.5, 12) == "[#####.....]"


def test_summary_gives_no_forecast_without_history_or_expected(loaded: tuple[JobsModel, Dag]) -> None:
    model, _dag = loaded
    s = summarize(model, T0, NOW, finished=False)
    assert (s.total, s.done, s.ok, s.bad, s.active) == (14, 5, 3, 2, 2)
    assert s.elapsed == 754.0
    assert s.forecast is None  # the pace of the first jobs is no basis


def test_the_forecast_is_never_shorter_than_the_expected_work_still_ahead() -> None:
    class LongGl(FakeClient):
        def expected_history(self) -> dict[str, float]:
            return {"load_gl": 7200.0}  # last nights' load_gl took two hours

    _info, model, _dag = load_model(LongGl())
    gl = model.index["load_gl"]
    ran = NOW - (T0 + 190.0)  # it has run 564 s of its two hours
    after = model.remaining[gl] - 7200.0  # its downstream's expected work
    s = summarize(model, T0, NOW, finished=False)
    assert s.forecast == pytest.approx(7200.0 - ran + after)
    assert summarize(model, T0, NOW + 60, finished=False).forecast == pytest.approx(7200.0 - ran - 60 + after)

    # Once it overran its history, its own part is unknown: what follows it still is not, nor the
    # expected work left over the two jobs in flight.
    late = T0 + 190.0 + 9000.0
    spread = work_ahead(model, late) / 2
    assert spread == pytest.approx((7200.0 + 8 * 1.0 - 7200.0 - 1.0) / 2)  # 9 not finished, 2 running
    assert summarize(model, T0, late, finished=False).forecast == pytest.approx(spread)
    assert path_ahead(model, late) == pytest.approx(after)


def test_the_legend_is_generated_from_the_transition_table() -> None:
    entries = legend()
    assert [e.state for e in entries] == list(JobState)
    for e in entries:
        assert e.meaning, f"{e.state.name} has no documentation"
        assert set(e.leads_to) == {b.name for a, b in TRANSITIONS if a == e.state and b != a}
        assert set(e.verbs) == {
            v for v, st in VERB_FROM.items() if e.state in st and v != "cancel"
        }


def test_dag_layout_puts_levels_in_columns_in_ascii(
    loaded: tuple[JobsModel, Dag],
) -> None:
    model, dag = loaded
    lay = layout(dag, "load_gl", 2, 2, 10)
    assert lay.columns == [-1, 0, 1, 2]
    col = {c.job: c.column for c in lay.cells}
    assert (
        col["extract_core"] == -1 and col["gl_close"] == 2 and col["post_interest"] == 1
    )
    assert ("load_gl", "post_interest") in lay.edges and (
        "post_interest",
        "gl_close",
    ) in lay.edges

    def state(j: str) -> JobState:
        return JobState(model.state[model.index[j]])

    lines = [
        "".join(s.text for s in spans)
        for spans in render(lay, 100, state, lambda j: j == "load_gl")
    ]
    text = "\n".join(lines)
    assert "[RUN load_gl*]" in text and "UPFAIL revalue_fx" in text
    assert all(ord(c) < 128 for c in text)
    assert any("-->" in line for line in lines)


def test_a_tall_column_keeps_broken_jobs_and_says_how_many_more() -> None:
    text = "name: fan\njobs:\n  root: {command: 'true'}\n" + "".join(
        f"  leaf{k:02d}: {{command: 'true', depends_on: [root]}}\n" for k in range(20)
    )
    dag = Dag(load_plan_text(text))
    lay = layout(dag, "root", 1, 1, 5, important=lambda j: j == "leaf17")
    shown = [c.job for c in lay.cells if c.column == 1 and c.job]
    more = [c.more for c in lay.cells if not c.job]
    assert "leaf17" in shown and len(shown) == 4 and more == [16]


def at(model: JobsModel, *jobs: str) -> list[int]:
    """The jobs' indices in the model."""
    return [model.index[j] for j in jobs]


def test_rerun_impact_counts_downstream_critical_and_deadlines(
    loaded: tuple[JobsModel, Dag],
) -> None:
    model, dag = loaded
    alone = impact("rerun", at(model, "extract_fx"), model, dag)
    assert alone.applies == ["extract_fx"] and alone.affected == [
        "revalue_fx"
    ]  # only what it blocked
    assert alone.destructive
    everything = impact("retry", at(model, "load_fx_rates"), model, dag)
    assert everything.affected == ["revalue_fx"]
    assert [d.job for d in everything.deadlines] == ["revalue_fx"]
    held = impact("hold", at(model, "load_gl", "extract_core"), model, dag)
    assert held.applies == []  # RUNNING and SUCCEEDED cannot be held
    assert (
        "'load_gl' is RUNNING: hold does not apply; kill would apply"
        in held.refused[0][1]
    )
    # An `until` loop is held between iterations, QUEUED or RUNNING as it is (the scheduler takes it)
    model.loops = frozenset(at(model, "load_gl"))
    held = impact("hold", at(model, "load_gl", "extract_core"), model, dag)
    assert held.applies == ["load_gl"] and [j for j, _w in held.refused] == ["extract_core"]
    model.loops = frozenset()
    kill = impact("kill", at(model, "load_gl"), model, dag)
    assert "gl_close" in kill.affected and kill.critical_tier >= 3
    assert [d.job for d in kill.deadlines][:2] == ["load_gl", "gl_close"]
    assert any(
        line.startswith("deadlines at stake: load_gl +30m") for line in kill.lines()
    )


def test_deadlines_are_absolute_and_overnight_ones_fall_next_morning() -> None:
    started = dt.datetime(2024, 3, 29, 20, 0, tzinfo=dt.UTC).timestamp()
    assert deadline_at("+2h", "2024-03-29", started, "UTC") == started + 7200
    morning = deadline_at("06:00", "2024-03-29", started, "UTC")
    assert morning == dt.datetime(2024, 3, 30, 6, 0, tzinfo=dt.UTC).timestamp()
    evening = deadline_at("22:30", "2024-03-29", started, "Europe/London")
    assert evening == dt.datetime(2024, 3, 29, 22, 30, tzinfo=dt.UTC).timestamp()
    assert deadline_at("25:00", "2024-03-29", started, None) is None


def test_sla_view_per_tier_and_at_risk(loaded: tuple[JobsModel, Dag]) -> None:
    model, _dag = loaded
    view = sla_view(model, NOW)
    crit = next(t for t in view.tiers if t.tier == SlaTier.CRITICAL)
    assert (crit.total, crit.done, crit.running, crit.failed) == (5, 1, 1, 0)
    assert crit.next_due is not None and crit.next_due.job == "load_gl"
    assert [d.job for d in view.at_risk] == ["revalue_fx"]  # blocked by its failed upstream
    later = sla_view(model, T0 + 3600)  # past +20m and +30m
    assert {d.job for d in later.late} == {"revalue_fx", "load_gl"}


def test_sla_view_flags_at_risk_by_the_schedulers_window(loaded: tuple[JobsModel, Dag]) -> None:
    # load_gl runs with its deadline at +30m; the scheduler flags it RISK_WINDOW before
    model, _dag = loaded
    due = model.deadline[model.index["load_gl"]]
    assert "load_gl" not in [d.job for d in sla_view(model, due - RISK_WINDOW - 1).at_risk]
    assert "load_gl" in [d.job for d in sla_view(model, due - RISK_WINDOW).at_risk]
    # A timeout longer than the window widens it, as the scheduler's timers do
    client = FakeClient()
    client._plan = load_plan_text(
        PLAN_TEXT.replace('deadline: "+30m"}', 'deadline: "+30m", timeout: 20m}'), "eod_mini.yaml"
    )
    _info, timed, _dag = load_model(client)
    i = timed.index["load_gl"]
    assert timed.risk_window == {i: risk_window(1200.0)} == {i: 1200.0}
    assert "load_gl" not in [d.job for d in sla_view(timed, due - 1201).at_risk]
    assert "load_gl" in [d.job for d in sla_view(timed, due - 1200).at_risk]


def test_commands_parse_with_helpful_errors() -> None:
    cmd = parse_command("rerun load_gl --downstream")
    assert (cmd.name, cmd.args, cmd.downstream, cmd.is_verb) == (
        "rerun",
        ("load_gl",),
        True,
        True,
    )
    assert parse_command("ok a").name == "set-ok" and parse_command("q").name == "quit"
    assert parse_command("sort duration desc").args == ("duration", "desc")
    assert parse_command("sort DUR").args == ("duration",)
    for bad, fragment in (
        ("", "type a command"),
        ("launch", "unknown command 'launch'"),
        ("hold x --downstream", "applies to rerun only"),
        ("sort colour", "sort KEY"),
        ("dag 9", "dag N"),
    ):
        with pytest.raises(CommandError, match=fragment):
            parse_command(bad)
    ids = ["load_a", "load_b", "post"]
    assert resolve(
        ("load_*", "post", "nope"), ids, {j: k for k, j in enumerate(ids)}
    ) == ([0, 1, 2], ["nope"])


def test_last_seq_is_the_journals_latest_transition() -> None:
    client = FakeClient()
    assert last_seq(client) == max(t[0] for t in client.transitions)
    empty = FakeClient()
    empty.transitions.clear()
    assert last_seq(empty) == 0


def test_jobs_a_run_makes_join_the_model_in_their_parents_tier() -> None:
    model = JobsModel(["list", "load"], bytearray([int(SlaTier.CRITICAL), int(SlaTier.HIGH)]))
    assert model.grow(["load@a", "load@b", "load@a"])
    assert model.ids == ["list", "load", "load@a", "load@b"]
    assert model.tier[2] == int(SlaTier.HIGH) and model.state[3] == JobState.WAITING
    assert model.counts[JobState.WAITING] == 4
    touched = model.apply([(7, 3, int(JobState.WAITING), int(JobState.RUNNING), 1, 5.0, 0, None, "")])
    assert touched == {3} and model.running == {3}
    assert not model.grow([])


def test_a_job_ended_by_an_operator_keeps_its_last_attempts_duration() -> None:
    S = JobState
    ids = ["retried", "failed", "never", "replayed"]
    model = JobsModel(list(ids), bytearray(len(ids)))
    # The last one was read from the journal after its skip: its row ends at the skip
    model.load_rows([(3, "replayed", int(S.SKIPPED), 1, 0, 3, 10.0, 90.0, "skipped by ana")])
    model.apply([
        # an attempt waiting for a retry, then skipped
        (1, 0, S.QUEUED, S.RUNNING, 1, 10.0, 0, None, ""), (2, 0, S.RUNNING, S.RETRY_WAIT, 1, 12.0, 0, 1, ""),
        (3, 0, S.RETRY_WAIT, S.SKIPPED, 1, 50.0, -1, None, "skipped by ana"),
        # a failed attempt, then set ok
        (4, 1, S.QUEUED, S.RUNNING, 1, 10.0, 1, None, ""), (5, 1, S.RUNNING, S.FAILED, 1, 15.0, 1, 3, ""),
        (6, 1, S.FAILED, S.SUCCEEDED, 1, 60.0, -1, None, "set ok by ana"),
        # skipped before it ever ran
        (7, 2, S.WAITING, S.SKIPPED, 0, 61.0, -1, None, "skipped by ana"),
        # the transitions the row read already had, seen again
        (8, 3, S.RUNNING, S.FAILED, 1, 13.0, 0, 3, ""), (9, 3, S.FAILED, S.SKIPPED, 1, 90.0, -1, None, ""),
    ])
    assert [model.duration(i, 100.0) for i in range(4)] == [2.0, 5.0, None, 3.0]
    assert [job_row(model, i, 100.0).duration for i in range(4)] == ["2.0s", "5.0s", "", "3.0s"]
    # The ends stay where the journal has them (an SLA met or missed is judged by them)
    assert [model.ended[i] for i in range(4)] == [50.0, 60.0, 61.0, 90.0]
    # And a sort by duration agrees
    assert list(view_order(model, JobFilter(), "duration", False, 100.0)) == [0, 3, 1, 2]


def test_dag_ids_lose_letters_word_by_word_so_siblings_stay_apart() -> None:
    family = ["load_accounts_amer", "load_payments_amer", "load_accounts_apac", "load_cards_amer"]
    for width in (12, 9, 7):
        shown = [abbrev_id(j, width) for j in family]
        assert all(len(s) == width for s in shown[:3]) and len(shown[3]) <= width, shown
        assert len(set(shown)) == len(family), shown  # (a cut in the middle showed `loa~mer` for all but one)
    assert abbrev_id("load_accounts_amer", 12) == "loa_acc_amer"
    assert abbrev_id("eod", 5) == "eod"
    # One word, or more words than letters allow: cut in the middle, the cut marked
    assert abbrev_id("reconciliation", 9) == "reco~tion"
    assert abbrev_id("a_b_c_d_e_f_g_h", 7) == "a_b~g_h"


def test_a_job_waiting_for_its_retry_says_when_first(loaded: tuple[JobsModel, Dag]) -> None:
    model, _dag = loaded
    i = model.index["revalue_fx"]
    model.apply([(model.seq + 1, i, int(model.state[i]), int(S.RETRY_WAIT), 1, NOW, 0, 3,
                  "exit status 3; retry 1/3 in 2.2s")])
    # (a narrow INFO column cuts the end: the time to the retry matters most)
    assert job_row(model, i, NOW).info == "due +20m; retry 1/3 in 2.2s; exit status 3"


def test_a_retry_released_after_a_hold_counts_down_from_the_release(loaded: tuple[JobsModel, Dag]) -> None:
    # Given a job that failed at NOW - 20 (its retry in 30 s), held at NOW - 15 and released at NOW - 4 with the
    # rest of its delay, 11 s, journaled
    model, _dag = loaded
    i = model.index["revalue_fx"]
    seq = model.seq
    model.apply([(seq + 1, i, int(model.state[i]), int(S.RUNNING), 1, NOW - 30, 0, None, ""),
                 (seq + 2, i, int(S.RUNNING), int(S.RETRY_WAIT), 1, NOW - 20, 0, 3,
                  "exit status 3; retry 1/3 in 30.0s"),
                 (seq + 3, i, int(S.RETRY_WAIT), int(S.HELD), 1, NOW - 15, 0, None, "held by ana"),
                 (seq + 4, i, int(S.HELD), int(S.RETRY_WAIT), 1, NOW - 4, 0, None,
                  "released by ana; retry 1/3 in 11.0s")])
    # Then its row counts down to the retry the scheduler makes 11 s after the release, not 11 s after the failure
    row = job_row(model, i, NOW)
    assert row.info.startswith("due +20m; retry 1/3 in 7.0s; released by ana"), row
