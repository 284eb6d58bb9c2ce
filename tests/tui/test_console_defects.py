"""Console defects found at a terminal: typed-ahead keys, at-risk jobs, long ids, previews, approvals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import console_fakes
import pytest
from console_fakes import NOW, FakeClient
from console_helpers import fake_app, loaded, screen_text, wait_for
from textual import events
from textual.pilot import Pilot

from tui.app import ConsoleApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.job_detail import JobDetailScreen
from tui.screens.main import MainScreen
from tui.widgets.job_table import JobTable

NAMED = {"colon": ":", "slash": "/", "enter": "\r", "space": " ", "backspace": "\x7f"}


def burst(pilot: Pilot[Any], *keys: str) -> None:
    """Send keys as a paste or a fast typist over SSH does: all at once, no wait between them."""
    app = pilot.app
    driver = app._driver
    assert driver is not None
    for key in keys:
        name = {" ": "space", ":": "colon", "/": "slash"}.get(key, key)
        event = events.Key(name, NAMED.get(name, key if len(key) == 1 else None))
        event.set_sender(app)
        driver.send_message(event)


async def test_keys_typed_straight_after_slash_make_the_filter() -> None:
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        burst(pilot, "/", *"state:bad", "enter")
        screen = await wait_for(
            pilot,
            lambda: isinstance(app.screen, MainScreen)
            and app.screen.filter.active
            and app.screen,
            timeout=5,
            what="the filter typed ahead",
        )
        assert screen.filter.describe() == "state:bad"
        assert screen.query_one(JobTable).selection() == ["load_fx_rates"]


async def test_keys_typed_straight_after_colon_run_the_command() -> None:
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        # a typo fixed with backspace, and a `q` that must not quit: all go to the line, in order
        burst(pilot, ":", *"goto revalue_fxq", "backspace", "enter")
        table = app.screen.query_one(JobTable)
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, MainScreen)
            and table.current_job == "revalue_fx",
            timeout=5,
            what="the command typed ahead",
        )
        assert app.is_running
        assert "Quit" not in screen_text(app).split("\n")[0]


async def test_a_paste_straight_after_colon_goes_into_the_command_line() -> None:
    app = fake_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        burst(pilot, ":")
        pilot.app._driver.send_message(events.Paste("goto revalue_fx"))  # type: ignore[union-attr]
        burst(pilot, "enter")
        table = app.screen.query_one(JobTable)
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, MainScreen) and table.current_job == "revalue_fx",
            timeout=5,
            what="the pasted command",
        )


def late_app(minutes: float) -> ConsoleApp:
    """The canned run seen `minutes` later: load_gl (running, due 22:43) comes close to its deadline."""
    fake = FakeClient()
    return ConsoleApp(
        fake.state_dir,
        open_client=lambda: fake,
        clock=lambda: NOW + minutes * 60,
        poll=0.02,
    )  # type: ignore[arg-type]


async def test_the_sla_pane_names_an_at_risk_job_first_at_80x24() -> None:
    app = late_app(14)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("3")
        await pilot.pause()
        lines = screen_text(app).splitlines()
        top = next(n for n, line in enumerate(lines) if "3 sla" in line)
        # the pane's first lines name the jobs, their deadline and what is left
        assert "late: revalue_fx was due 22:33 UPFAIL" in lines[top + 1]
        assert "at risk: load_gl due 22:43 (3m26s) RUN close" in lines[top + 2]


async def test_trouble_only_includes_jobs_at_risk_of_their_deadline() -> None:
    app = late_app(14)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("exclamation_mark")
        table = app.screen.query_one(JobTable)
        assert table.model is not None
        shown = {table.model.ids[i] for i in table.order}
        assert "load_gl" in shown  # running, but due in 3m26s: at risk
        assert {"load_fx_rates", "limits_check"} <= shown  # failed, held
        assert "extract_core" not in shown
        await pilot.press("slash", *["backspace"] * 40, *"sla:risk,late", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), 5)
        shown = {table.model.ids[i] for i in table.order}
        assert shown == {"load_gl", "revalue_fx"}


EMEA = "load_general_ledger_postings_for_the_emea_nightly"
APAC = "load_general_ledger_postings_for_the_apac_nightly"


@pytest.fixture
def long_ids(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The canned run with two long ids that differ only at their end (load_gl, post_interest)."""
    rename = {"load_gl": EMEA, "post_interest": APAC}
    text = console_fakes.PLAN_TEXT
    for old, new in rename.items():
        text = text.replace(old, new)
    rows = {rename.get(k, k): v for k, v in console_fakes.ROWS.items()}
    monkeypatch.setattr(console_fakes, "PLAN_TEXT", text)
    monkeypatch.setattr(console_fakes, "ROWS", rows)
    yield


async def test_long_ids_are_cut_in_the_middle_and_stay_apart_at_80x24(long_ids: None) -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("j", "j", "j")  # the cursor on the emea job: the DAG centres on it
        await pilot.pause()
        assert app.screen.query_one(JobTable).current_job == EMEA
        text = screen_text(app)
        rows = [line for line in text.splitlines() if "load_gen" in line]
        emea = [r for r in rows if "mea_nightly" in r or "emea_nigh" in r]
        apac = [r for r in rows if "pac_nightly" in r or "apac_nigh" in r]
        assert emea and apac, text
        assert all(ord(c) < 128 for c in text), {c for c in text if ord(c) >= 128}
        await pilot.resize_terminal(150, 40)  # the panes side by side: the DAG pane is narrow
        await pilot.pause(0.1)
        text = screen_text(app)
        title = next(line for line in text.splitlines() if "1 dag:" in line)
        assert "1 dag: load_~ghtly -" in title, title  # head and tail kept, in ASCII
        assert all(ord(c) < 128 for c in text), {c for c in text if ord(c) >= 128}


async def test_the_detail_title_keeps_state_attempt_and_exit_at_80_columns(
    long_ids: None,
) -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("j", "j", "j", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), 5)
        await pilot.pause(0.1)
        title = screen_text(app).splitlines()[0]
        assert "RUNNING  tier critical  attempt 1" in title, title
        assert "load_gene" in title and "nightly" in title, title


async def test_the_rerun_preview_shows_the_refusal_of_a_downstream_that_has_started() -> None:
    fake = FakeClient()
    app = fake_app(fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        # extract_core (OK) has load_gl (RUNNING) below it: the scheduler refuses `rerun --downstream`
        assert app.screen.query_one(JobTable).current_job == "extract_core"
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5)
        await pilot.press("d")
        await pilot.pause()
        text = screen_text(app)
        assert "[x] with everything downstream" in text
        assert "not applied: 'extract_core' not rerun: downstream 'load_gl' (RUNNING)" in text
        assert "y: rerun" not in text
        await pilot.press("d")  # without its downstream the rerun applies
        await pilot.pause()
        assert "y: rerun 1 job(s)" in screen_text(app)


async def test_an_approve_asks_y_first_and_the_approvals_list_marks_its_row() -> None:
    from test_console_pending import ApprovalsClient

    from tui.screens.pending import PendingScreen

    client = ApprovalsClient()
    app = fake_app(client)
    async with app.run_test(size=(130, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("A")
        screen = await wait_for(
            pilot,
            lambda: isinstance(app.screen, PendingScreen) and app.screen.keys and app.screen,
            5,
        )
        rows = [line for line in screen_text(app).splitlines() if "R1" in line or "post_eod" in line]
        assert [r.lstrip("| ")[:1] for r in rows][:1] == [">"] and ">" not in rows[1][:4]
        # the border stands out of the background (it was dark blue on the dark surface)
        table = screen.query_one("#pending")
        _, color = table.styles.border_top
        assert abs(color.brightness - table.background_colors[1].brightness) > 0.3
        await pilot.press("a")
        await wait_for(pilot, lambda: "y: approve R1" in screen_text(app), 5)
        text = screen_text(app)
        assert "approve request R1: kill load_gl, asked by bob (stuck on a lock)" in text
        assert "kill 1 job(s): load_gl" in text and "y: approve R1" in text
        await pilot.press("n")
        await wait_for(pilot, lambda: app.screen is screen, 5)
        assert client.sent == []
        await pilot.press("down")
        await pilot.pause()
        rows = [line for line in screen_text(app).splitlines() if "post_eod" in line and "confirm" in line]
        assert rows[0].lstrip("| ").startswith(">")
        await pilot.press("a", "y")
        await wait_for(pilot, lambda: client.sent, 5)
        assert client.sent[0][:2] == ("approve", ["post_eod"])


async def test_titles_too_long_for_their_border_are_cut_in_ascii_at_80x24(long_ids: None) -> None:
    from console_helpers import paste

    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        seen = []
        await pilot.press("slash")
        await pilot.pause()
        await paste(pilot, "load_general_ledger_postings_* state:ok,running,held,failed tier:critical,high")
        await pilot.press("enter")
        await pilot.pause(0.1)
        seen.append(screen_text(app))
        assert "~ -+" in seen[-1].splitlines()[2], seen[-1]  # the jobs title, cut with ~
        for keys in (["1"], ["escape", "j", "j", "j"], ["enter"]):
            await pilot.press(*keys)
            await pilot.pause(0.1)
            seen.append(screen_text(app))
    bad = {c for text in seen for c in text if ord(c) >= 128}
    assert not bad, f"characters a plain terminal may lack: {bad}"


def dag_facts(app: Any) -> str:
    """The DAG pane's line about its centre job's critical path."""
    return next(line for line in screen_text(app).splitlines() if "to the end" in line).strip("| ")


async def test_the_dag_pane_gives_a_critical_path_place_and_says_when_expected_is_a_guess() -> None:
    app = fake_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await pilot.press("j", "j", "j")  # load_gl: below extract_core and extract_cards (5s paths)
        await pilot.pause()
        assert dag_facts(app) == (
            "critical-path place 4 of 14 (1 starts first), expected 1.0s (no history), 4.0s to the end"
        )


async def test_a_job_with_a_history_has_no_guess_mark() -> None:
    class Measured(FakeClient):
        def expected_history(self) -> dict[str, float]:
            return {"load_gl": 120.0}

    app = fake_app(Measured())
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await pilot.press("j", "j", "j")
        await pilot.pause()
        assert dag_facts(app) == "critical-path place 3 of 14 (1 starts first), expected 2m00s, 2m03s to the end"


@pytest.mark.parametrize("size", [(60, 15), (80, 24), (200, 50)])
async def test_the_timeline_on_a_narrow_terminal_puts_the_sla_pane_below_the_dag(size: tuple[int, int]) -> None:
    from tui.screens.timeline import TimelineScreen

    class Journaled(FakeClient):
        def timeline(self) -> list[float]:
            return [NOW - 60.0, NOW]

        def job_rows_at(self, when: float) -> list[tuple]:
            return self.job_rows()

    app = fake_app(Journaled())
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        await pilot.press("T")
        tl = await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen) and app.screen.model
                            is not None and app.screen, what="the timeline")
        await pilot.pause()
        dag, sla = tl.query_one("#dag").region, tl.query_one("#sla").region
        # Both panes show something of their own: the DAG its jobs, the SLA pane its tiers
        assert dag.width >= 40 and dag.height >= 4, dag
        assert sla.width >= 40 and sla.height >= 3, sla
        text = screen_text(app)
        assert "critical" in text and "dag: extract_core" in text, text


TOAST_AS_IT_EXPIRES = """
import asyncio, time
import tui.app  # the console's module: its import guards the toasts
from textual.app import App
from textual.notifications import Notification
from textual.widgets._toast import Toast

async def main() -> None:
    app = App()
    async with app.run_test() as pilot:
        # A toast made just after its notification's time ran out (a screen shown as it expires)
        await app.screen.mount(Toast(Notification("gone", timeout=0.001, raised_at=time.time() - 1)))
        await pilot.press("x")
        await pilot.pause(0.3)
        print("answers keys;", len(app.screen.query(Toast)), "toast(s) left")

asyncio.run(main())
"""


def test_a_toast_made_as_its_notification_expires_leaves_and_the_console_answers_keys() -> None:
    # (In a process of its own: on an unguarded Textual such a toast's timer spins without yielding, and the
    # event loop, keys and Ctrl-C with it, never comes back.)
    try:
        p = subprocess.run([sys.executable, "-c", TOAST_AS_IT_EXPIRES], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the app stopped answering with a toast made as its notification expired")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "answers keys; 0 toast(s) left"


@pytest.mark.parametrize("size", [(80, 24), (60, 14)])
async def test_the_keys_of_a_confirmation_stay_in_view_however_long_its_impact(size: tuple[int, int]) -> None:
    from tui.impact import Impact

    app = fake_app()
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        # A hold of many jobs that mostly does not apply: a refusal a line or two, in words as long as the
        # scheduler's
        impact = Impact("hold", False, applies=[f"job_{k}" for k in range(22)], affected=["later"] * 30,
                        refused=[(f"reconcile_{k}", f"'reconcile_ledger_and_positions_{k}' not held: it is "
                                                    "SUCCEEDED (hold applies to WAITING, READY and RETRY_WAIT jobs)")
                                 for k in range(40)])
        app.push_screen(ConfirmScreen(impact))
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5)
        await pilot.pause(0.1)
        text = screen_text(app)
        assert "y: hold 22 job(s)" in text and "n/esc: cancel" in text, text
        assert "reason, for the audit trail" in text, text
        assert "hold 22 job(s): job_0" in text, text  # (the impact starts at its first line)
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen), 5)


async def test_a_finished_runs_header_names_each_bad_ending_and_the_deadlines_missed() -> None:
    from textual.app import App

    from tui.messages import LiveStatus, RunInfo
    from tui.run_figures import RunSummary
    from tui.widgets.run_header import RunHeader
    from wloadctl.core.states import JobState

    class One(App[None]):
        def compose(self) -> Any:
            yield RunHeader(id="header")

    app = One()
    async with app.run_test(size=(100, 4)) as pilot:
        header = app.query_one(RunHeader)
        counts = [0] * len(JobState)
        counts[JobState.SUCCEEDED], counts[JobState.FAILED], counts[JobState.UPSTREAM_FAILED] = 3, 3, 2
        header.late, header.at_risk = 2, 0
        header.show(RunInfo("r1", "eod", "2026-12-07", NOW - 60, "/sd", NOW), RunSummary(8, 8, 3, 5, 0, 60.0, None),
                    counts, LiveStatus(False, None, 1, None), NOW)
        await pilot.pause()
        first = screen_text(app).splitlines()[0]
        # As `status` counts them: 3 FAILED and 2 UPSTREAM_FAILED, not 5 FAILED; and its LATE jobs
        assert "FINISHED, 3 FAILED, 2 UPSTREAM_FAILED  2 LATE" in first, first


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
async def test_a_console_ended_by_a_signal_detaches_and_gives_the_terminal_back(sig: signal.Signals) -> None:
    caught: list[int] = []
    before = signal.signal(sig, lambda s, _f: caught.append(s))  # (were it not caught, not the test process's end)
    try:
        app = fake_app()
        async with app.run_test(size=(100, 30)) as pilot:
            await loaded(pilot)
            os.kill(os.getpid(), sig)
            await wait_for(pilot, lambda: app.return_value is not None, 5, "the console to end")
        # It ended as a detach (the run goes on), through its own exit (the terminal's modes restored), and says why
        assert (app.return_value, app.ended_by, caught) == ("detach", sig.name, [])
    finally:
        signal.signal(sig, before)
