"""Console defects found at a terminal: typed-ahead keys, at-risk jobs, long ids, previews, approvals."""

from __future__ import annotations

from typing import Any

from console_fakes import NOW, FakeClient
from console_helpers import fake_app, loaded, screen_text, wait_for
from textual import events
from textual.pilot import Pilot

from tui.app import ConsoleApp
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
