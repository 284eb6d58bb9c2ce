"""Console behaviour on canned data: keys, dialogs, filter, marks, commands, ASCII."""

from __future__ import annotations

import time
from typing import Any

import pytest
from console_fakes import NOW, FakeClient
from console_helpers import fake_app, loaded, paste, screen_text, wait_for
from textual.widgets import Static

from tui.screens.confirm import ConfirmScreen
from tui.screens.help import HelpScreen
from tui.screens.job_detail import JobDetailScreen
from tui.screens.main import MainScreen
from tui.screens.prompt import PromptScreen
from tui.screens.quit import QuitScreen
from tui.widgets.dag_view import DagView
from tui.widgets.job_table import JobTable


def ascii_only(text: str) -> bool:
    """Whether a plain SSH terminal can draw it."""
    return all(ord(c) < 128 for c in text)


async def test_vim_keys_move_and_the_dag_follows_the_cursor() -> None:
    app = fake_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        table = app.screen.query_one(JobTable)
        await pilot.press("j", "j", "j")
        assert table.current_job == "load_gl"
        await pilot.press("G")
        assert table.current_job == "cleanup_tmp"
        await pilot.press("g", "k")
        assert table.current_job == "extract_core"
        await pilot.press("j", "j", "j")
        await pilot.pause()
        assert app.screen.query_one(DagView).job == "load_gl"
        assert "[RUN load_gl*]" in screen_text(app)


async def test_filter_by_state_shows_an_error_for_a_bad_one_and_esc_clears_it() -> None:
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        table = app.screen.query_one(JobTable)
        await pilot.press("slash")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, PromptScreen),
            what="the filter prompt",
        )
        await pilot.press(*"state:broken", "enter")
        await pilot.pause()
        assert isinstance(app.screen, PromptScreen)
        assert "'broken' is not a state" in screen_text(app)
        await pilot.press(*["backspace"] * 6, *"bad", "enter")
        await wait_for(
            pilot, lambda: isinstance(app.screen, MainScreen), what="the main screen"
        )
        assert table.selection() == ["load_fx_rates"]
        assert [table.current_job, len(table.order)] == ["load_fx_rates", 2]
        assert table.model is not None
        assert [table.model.ids[i] for i in table.order] == [
            "load_fx_rates",
            "revalue_fx",
        ]  # type: ignore[union-attr]
        assert "filter: state:bad" in screen_text(app)
        await pilot.press("escape")
        assert len(table.order) == 14


async def test_a_filter_with_several_bad_words_names_them_all_in_one_line() -> None:
    # (only the first bad word was reported: the operator fixed one, to be told of the next)
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("slash")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), what="the filter prompt")
        await paste(pilot, "state:broken,gone tier:urgent sla:soon")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, PromptScreen)
        said = str(app.screen.query_one("#hint", Static).content)
        assert "\n" not in said
        for fragment in ("'broken', 'gone' are not states", "'urgent' is not an SLA tier",
                         "'soon' is not an SLA flag"):
            assert fragment in said, said
        words = lambda text: " ".join(text.replace("|", " ").split())  # noqa: E731  (the box's sides too)
        assert words(said) in words(screen_text(app))  # shown whole, wrapped in the prompt


async def test_marked_jobs_go_to_one_verb_and_refused_ones_are_not_sent() -> None:
    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        table = app.screen.query_one(JobTable)
        assert table.select_job("post_interest")
        await pilot.press("space")  # marks post_interest, moves to revalue_fx
        await pilot.press(
            "space"
        )  # marks revalue_fx (UPSTREAM_FAILED: hold does not apply)
        await pilot.press("j", "space")  # skips limits_check, marks gl_close
        assert table.selection() == ["post_interest", "revalue_fx", "gl_close"]
        await pilot.press("h")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen),
            what="the confirmation",
        )
        text = screen_text(app)
        assert "hold 2 job(s): post_interest, gl_close" in text
        assert "not applied: 'revalue_fx' is UPSTREAM_FAILED" in text
        await pilot.press("tab", *"ops asked", "enter")
        await wait_for(pilot, lambda: fake.sent, what="the verb")
        await wait_for(pilot, lambda: not table.marks, what="the marks to be spent")
    assert fake.sent == [("hold", ["post_interest", "gl_close"], "ops asked", False)]


async def test_destructive_verbs_do_not_confirm_on_enter() -> None:
    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        app.screen.query_one(JobTable).select_job("load_gl")
        await pilot.press("x")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen),
            what="the confirmation",
        )
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and not fake.sent
        await pilot.press("y")
        await wait_for(pilot, lambda: fake.sent, what="the kill")
    assert fake.sent == [("kill", ["load_gl"], "", False)]


async def test_enter_in_the_reason_field_does_not_confirm_a_destructive_verb() -> None:
    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        app.screen.query_one(JobTable).select_job("load_gl")
        # Given the kill dialog, the operator in its reason field
        await pilot.press("x")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen),
            what="the confirmation",
        )
        # When Enter is pressed there, empty or after a reason
        await pilot.press("tab", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and not fake.sent
        await pilot.press("tab", *"stuck", "enter")
        await pilot.pause()
        # Then nothing is sent; the reason is kept and y (no longer text) confirms
        assert isinstance(app.screen, ConfirmScreen) and not fake.sent
        assert any("press y to kill" in n.message for n in app._notifications)
        await pilot.press("y")
        await wait_for(pilot, lambda: fake.sent, what="the kill")
    assert fake.sent == [("kill", ["load_gl"], "stuck", False)]



async def test_going_back_into_the_reason_field_adds_to_the_reason_rather_than_replacing_it() -> None:
    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        app.screen.query_one(JobTable).select_job("load_gl")
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        # Given a reason typed and kept (enter leaves the field)
        await pilot.press("tab", *"stuck", "enter")
        await pilot.pause()
        # When the operator goes back into the field to add to it
        await pilot.press("tab", *" on a lock", "enter")
        await pilot.pause()
        # Then the first key did not replace what was there
        await pilot.press("y")
        await wait_for(pilot, lambda: fake.sent, what="the kill")
    assert fake.sent == [("kill", ["load_gl"], "stuck on a lock", False)]

async def test_rerun_with_downstream_is_a_choice_in_the_dialog() -> None:
    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        app.screen.query_one(JobTable).select_job("extract_fx")
        await pilot.press("R")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen),
            what="the confirmation",
        )
        assert "[ ] with everything downstream" in screen_text(app)
        await pilot.press("d")
        assert "[x] with everything downstream" in screen_text(app)
        await pilot.press("y")
        await wait_for(pilot, lambda: fake.sent, what="the rerun")
    assert fake.sent == [("rerun", ["extract_fx"], "", True)]


async def test_command_line_runs_verbs_on_globs_and_sorts() -> None:
    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        screen = app.screen
        await pilot.press("colon")
        await paste(pilot, "sort start desc")
        await pilot.press("enter")
        await pilot.pause()
        table = screen.query_one(JobTable)
        assert (table.sort_key, table.reverse) == ("start", True)
        assert "START" in screen_text(app) and "sort: start desc" in screen_text(app)
        await pilot.press("colon", *"launch", "enter")
        await pilot.pause()
        assert isinstance(
            app.screen, PromptScreen
        )  # still open: the command is invalid
        assert "unknown command 'launch'" in screen_text(app)
        await pilot.press("escape", "colon")
        await paste(pilot, "hold nope_*")
        await pilot.press("enter")
        await wait_for(pilot, lambda: any(n.message == "no job matches nope_*" for n in app._notifications),
                       what="the glob matching nothing")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("colon")
        await paste(pilot, "hold post_* gl_close")
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen),
            what="the confirmation",
        )
        assert "hold 2 job(s): post_interest, gl_close" in screen_text(app)
        await pilot.press("y")
        await wait_for(pilot, lambda: fake.sent, what="the hold")
    # The names go as typed, as the CLI sends them: the scheduler matches the glob again.
    assert fake.sent == [("hold", ["post_*", "gl_close"], "", False)]


@pytest.mark.parametrize(
    ("typed", "key", "title"),
    [("sort dur", "duration", "DUR^"), ("sort JOB desc", "id", "JOBv"), ("sort Ex", "executor", "E^"),
     ("sort ATT", "attempt", "AT^"), ("sort duration DESC", "duration", "DURv")],
)
async def test_sort_takes_a_columns_heading_as_its_name(typed: str, key: str, title: str) -> None:
    # (`:sort dur` was refused under a column headed DUR: only `duration` was accepted)
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("colon")
        await paste(pilot, typed)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), 5, "the command to be taken")
        table = app.screen.query_one(JobTable)
        assert (table.sort_key, table.reverse) == (key, typed.lower().endswith("desc"))
        assert f"sort: {key}" in screen_text(app) and title in screen_text(app)


async def test_the_sort_arrow_and_title_say_the_order_the_rows_are_in() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        table = app.screen.query_one(JobTable)
        assert app.model is not None
        durations = lambda: [  # noqa: E731
            d for i in table.order if (d := app.model.duration(i, NOW)) is not None
        ]
        # Descending: the longest first
        await pilot.press("colon")
        await paste(pilot, "sort duration desc")
        await pilot.press("enter")
        await pilot.pause()
        assert "DURv" in screen_text(app) and "sort: duration desc" in screen_text(app)
        assert app.model.ids[table.order[0]] == "load_gl"
        assert durations() == sorted(durations(), reverse=True)
        # Ascending: the shortest first
        await pilot.press("colon")
        await paste(pilot, "sort duration")
        await pilot.press("enter")
        await pilot.pause()
        assert "DUR^" in screen_text(app) and durations() == sorted(durations())
        # S reaches attempt descending, the retried job on top; I turns it
        await pilot.press("S")
        await pilot.pause()
        assert "ATv" in screen_text(app) and "sort: attempt desc" in screen_text(app)
        assert app.model.ids[table.order[0]] == "load_fx_rates"  # its attempt 2
        await pilot.press("I")
        await pilot.pause()
        attempts = [app.model.attempt[i] for i in table.order]
        assert "AT^" in screen_text(app) and attempts[0] == 1 and attempts[-1] == 0
        assert app.model.ids[table.order[attempts.index(2)]] == "load_fx_rates"


async def test_enter_opens_the_job_with_why_and_history_and_esc_goes_back() -> None:
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        app.screen.query_one(JobTable).select_job("load_fx_rates")
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: isinstance(app.screen, JobDetailScreen), what="the job"
        )
        await wait_for(
            pilot,
            lambda: "canned reason for load_fx_rates" in screen_text(app),
            what="why",
        )
        text = screen_text(app)
        assert "load_fx_rates  FAILED  tier high  attempt 2" in text
        assert "depends on (1): extract_fx OK" in text
        assert "#2 22:21:52 RUNNING -> FAILED exit 3  exit status 3" in text
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_a_readonly_console_has_no_verbs() -> None:
    fake = FakeClient()
    app = fake_app(fake, readonly=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("h", "x", "o")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        footer = screen_text(app).splitlines()[-1]
        assert "Hold" not in footer and "Filter" in footer
        # (a verb's key says why it does nothing)
        assert any(n.message == "read-only console: no actions" for n in app._notifications)
        assert "[read-only]" in screen_text(app)
        await pilot.press("colon", *"kill load_gl", "enter")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        await pilot.press("q")
    assert fake.sent == [] and app.return_value == "quit"


async def test_quitting_a_live_supervised_run_asks_detach_or_stop() -> None:
    app = fake_app(supervised=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("q")
        await wait_for(
            pilot, lambda: isinstance(app.screen, QuitScreen), what="the question"
        )
        assert "scheduler pid 4242" in screen_text(app)
        # The way back names the run's own state directory
        said = str(app.screen.query_one("#question", Static).content)
        assert "`wloadctl console --state-dir /nonexistent/eod_mini` attaches again" in said
        assert "DIR" not in said
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        await pilot.press("q", "s")
        await wait_for(pilot, lambda: app.return_value is not None, what="the stop")
    assert app.return_value == "stopped" and app.supervisor.stopped  # type: ignore[union-attr]


async def test_help_lists_every_verb_key_and_the_state_legend() -> None:
    app = fake_app()
    async with app.run_test(size=(120, 60)) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        text = screen_text(app)
        for line in (
            "h                hold:",
            "R                rerun:",
            "x                kill:",
            "o                set-ok:",
            "s                skip:",
            "/                Filter",
        ):
            assert line in text
        await pilot.press(
            "G"
        )  # not bound here: the help keeps scrolling with j/k/space
        await pilot.press(*["space"] * 6)
        assert "UPFAIL  UPSTREAM_FAILED" in screen_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_help_lists_mark_once() -> None:
    # (it was listed twice: `space Mark` under the job table, `spc Mark` under the main screen)
    app = fake_app()
    async with app.run_test(size=(120, 60)) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        marks = [line.strip(" |").split() for line in screen_text(app).splitlines()
                 if line.rstrip(" |").endswith(" Mark")]
        assert marks == [["space", "Mark"]], marks


async def test_every_screen_is_ascii_at_80x24() -> None:
    app = fake_app(supervised=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        seen = [screen_text(app)]
        for keys in (
            ["2"],
            ["3"],
            ["1", "R"],
            ["escape", "question_mark"],
            ["escape", "ctrl+p"],
            ["escape", "slash"],
            ["escape", "enter"],
            ["escape", "q"],
        ):
            await pilot.press(*keys)
            await pilot.pause(0.1)
            seen.append(screen_text(app))
        assert isinstance(app.screen, QuitScreen)
    bad = {c for text in seen for c in text if ord(c) >= 128}
    assert not bad, f"characters a plain terminal may lack: {bad}"


async def test_tab_walks_the_panes_and_shows_hidden_ones_on_a_narrow_terminal() -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        seen = []
        for _ in range(4):
            await pilot.press("tab")
            await pilot.pause()
            focused = app.screen.focused
            seen.append((focused.id if focused else None, app.screen.active_pane))  # type: ignore[attr-defined]
        assert seen == [
            ("dag", "dag"),
            ("nodes", "nodes"),
            ("sla", "sla"),
            ("jobs", "sla"),
        ]
        assert "TIER" in screen_text(app)


async def test_the_node_panel_lists_agents_beside_local_executors() -> None:
    fake = FakeClient()
    fake.agent_rows = [
        {"agent": "etl-node-1", "index": 1000, "state": "ALIVE", "pools": ["etl"], "slots_used": 3, "slots": 8,
         "load1": 1.5, "jobs_held": 4, "age": 0.4},
        {"agent": "etl-node-2", "index": 1001, "state": "LOST", "pools": ["etl"], "slots_used": 0, "slots": 8,
         "load1": 0.0, "jobs_held": 2, "age": 14.0},
    ]
    app = fake_app(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        from tui.widgets.node_panel import NodePanel

        panel = app.screen.query_one(NodePanel)
        await wait_for(pilot, lambda: panel.status is not None and bool(panel.status.agents), 10, "agent rows")
        text = panel.render().plain
        assert "AGENT" in text
        line1 = next(ln for ln in text.splitlines() if ln.startswith("a0 etl-node-1"))
        line2 = next(ln for ln in text.splitlines() if ln.startswith("a1 etl-node-2"))
        assert "ALIVE" in line1 and "3/8" in line1
        assert "LOST" in line2 and line2.rstrip().endswith("14s")
        assert "EX PID" in text, "local executors are still listed"
        assert "BROKER LOST" not in text


async def test_the_node_panel_says_when_the_scheduler_has_lost_its_broker() -> None:
    # Given a run whose scheduler has lost its broker (its agents' rows are as last heard)
    fake = FakeClient()
    fake.agent_rows = [{"agent": "etl-node-1", "index": 1000, "state": "ALIVE", "pools": ["etl"], "slots_used": 3,
                        "slots": 8, "load1": 1.5, "jobs_held": 4, "age": 31.0}]
    fake.lost_broker = {"broker": "nats://nats1:4222", "since": time.time() - 30}
    app = fake_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        from tui.widgets.node_panel import NodePanel

        panel = app.screen.query_one(NodePanel)
        await wait_for(pilot, lambda: panel.status is not None and bool(panel.status.agents), 10, "agent rows")
        # Then the node pane says so above the agents (it showed them ALIVE, their beats ever older)
        text = " ".join(panel.render().plain.split())
        since = time.strftime("%H:%M:%S", time.localtime(fake.lost_broker["since"]))
        assert f"BROKER LOST: nats://nats1:4222 does not answer since {since}: agents as last heard" in text, text
        assert text.index("BROKER LOST") < text.index("etl-node-1")


async def test_a_viewer_sees_the_verbs_greyed_and_cannot_send_one() -> None:
    fake = FakeClient(role="viewer")
    app = fake_app(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: app.allowed is not None, what="the role")
        # Then every verb's binding is greyed (shown, not enabled)
        assert app.screen.check_action("verb", ("kill",)) is None
        assert app.screen.check_action("verb", ("hold",)) is None
        # When the viewer presses kill anyway
        app.screen.query_one(JobTable).select_job("load_gl")
        await pilot.press("x")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and not fake.sent


async def test_an_operator_may_hold_but_kill_is_greyed() -> None:
    fake = FakeClient(role="operator")
    app = fake_app(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: app.allowed is not None, what="the role")
        assert app.screen.check_action("verb", ("hold",)) is True
        assert app.screen.check_action("verb", ("kill",)) is None
        app.screen.ask_verb("kill", ["load_gl"])
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)


async def test_a_drill_journaled_while_the_console_watches_shows_as_a_note() -> None:
    # Given a console on a run
    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        # When a drill's report lands in the run's journal
        fake.drill = {"ts": NOW + 5, "user": "ops", "ok": True,
                      "summary": "failover drill (kill) of run r1: PASSED; takeover 1.62s"}
        # Then the console shows it once, in the notes the node panel keeps
        await wait_for(pilot, lambda: any("failover drill" in n.text for n in app.notes), what="the note")
        await pilot.pause(1.2)
        assert sum("failover drill" in n.text for n in app.notes) == 1


async def test_the_header_says_why_a_live_scheduler_dispatches_nothing() -> None:
    fake = FakeClient(paused="no space left on device in /srv/eod")
    app = fake_app(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        from tui.widgets.run_header import RunHeader

        header = app.screen.query_one(RunHeader)
        await wait_for(pilot, lambda: header.status is not None and bool(header.status.paused), 10, "a paused feed")
        assert "PAUSED: no space left on device in /srv/eod" in header.render().plain


@pytest.mark.parametrize("width", [80, 200])
async def test_the_progress_line_keeps_the_succeeded_and_failed_counts_when_narrow(width: int) -> None:
    from textual.app import App

    from tui.messages import LiveStatus, RunInfo
    from tui.run_figures import RunSummary
    from tui.widgets.run_header import RunHeader
    from wloadctl.core.states import JobState as S

    class HeaderApp(App[None]):
        def compose(self) -> Any:
            yield RunHeader()

    counts = [0] * len(S)
    for st, n in ((S.SUCCEEDED, 40), (S.FAILED, 3), (S.UPSTREAM_FAILED, 2), (S.HELD, 1), (S.RETRY_WAIT, 1),
                  (S.RUNNING, 8), (S.READY, 11), (S.WAITING, 236)):
        counts[st] = n
    app = HeaderApp()
    async with app.run_test(size=(width, 24)) as pilot:
        header = app.query_one(RunHeader)
        header.show(RunInfo("r1", "eod", "2023-11-14", NOW - 60, "/nonexistent"),
                    RunSummary(302, 45, 40, 5, 8, 60.0, 300.0), counts,
                    LiveStatus(True, 4242, 1, 0.1), NOW)
        await pilot.pause()
        line = header.render().plain.split("\n")[1]
    # The line fits, and keeps what an operator reads first: done, failed, blocked
    assert len(line) <= width - 2 and "45/302" in line
    for part in ("OK 40", "FAIL 3", "UPFAIL 2", "HELD 1"):
        assert part in line, (part, line)
    if width == 200:
        assert "WAIT 236" in line and "READY 11" in line


async def test_the_title_counts_every_mark_and_those_the_filter_hides() -> None:
    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        table = app.screen.query_one(JobTable)
        # Given two marks by the table's own space key
        await pilot.press("g", "space", "space")
        await pilot.pause()
        assert table.marks and str(table.border_title).endswith("2 marked"), table.border_title
        await pilot.press("escape")
        await pilot.pause()
        assert "marked" not in str(table.border_title), table.border_title

        # When the last job is marked and a filter hides it, then three shown jobs are marked
        await pilot.press("G", "space", "slash")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptScreen), what="the filter prompt")
        await pilot.press(*"extract", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), what="the main screen")
        assert "1 marked, 1 hidden by the filter" in str(table.border_title), table.border_title
        await pilot.press("g", "space", "space", "space")
        await pilot.pause()

        # Then the title counts all four and says one is hidden, as the verb's question names it
        assert "filter: extract  4 marked, 1 hidden by the filter" in str(table.border_title), table.border_title
        assert "4 marked, 1 hidden by the filter" in screen_text(app)
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        said = screen_text(app)
        assert "hold 1 job(s): cleanup_tmp" in said, said  # (the one hidden: the others have ended)
        for job in ("extract_core", "extract_cards", "extract_fx"):
            assert f"not applied: '{job}' is SUCCEEDED" in said, said


async def test_the_confirm_keys_line_says_what_keys_do_in_the_reason_field() -> None:
    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        app.screen.query_one(JobTable).select_job("post_interest")
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        keys = app.screen.query_one("#keys", Static)
        assert str(keys.content).startswith("y: hold 1 job(s)"), keys.content
        # In the reason field, y is a letter of the reason: the line says enter goes on
        await pilot.press("tab")
        await wait_for(pilot, lambda: str(keys.content).startswith("enter: hold 1 job(s)"), what="enter's hint")
        assert "y:" not in str(keys.content)
        await pilot.press(*"try again tonight")
        assert isinstance(app.screen, ConfirmScreen) and not fake.sent
        await pilot.press("enter")
        await wait_for(pilot, lambda: fake.sent, what="the hold")
    assert fake.sent == [("hold", ["post_interest"], "try again tonight", False)]


async def test_the_footer_of_an_80_column_terminal_shows_how_to_quit() -> None:
    app = fake_app(FakeClient())
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: "? Help" in screen_text(app).splitlines()[-1], what="the footer")
        footer = screen_text(app).splitlines()[-1]
        assert "q Quit" in footer, footer
