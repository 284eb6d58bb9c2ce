"""Quitting a live run: the question says what a stop does to the jobs running now."""

from __future__ import annotations

import threading

from console_helpers import fake_app, loaded, screen_text, wait_for
from textual.widgets import Static

from tui.screens.quit import QuitScreen, StoppingScreen


async def test_the_quit_question_names_the_running_jobs_a_stop_kills() -> None:
    app = fake_app(supervised=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitScreen), what="the question")
        said = " ".join(str(app.screen.query_one("#question", Static).content).split())
        assert "2 job(s) running: load_gl, archive_logs" in said
        assert "KILLS the 2 running job(s); a resume runs them again from the start" in said
        assert "leave the run going, running jobs too" in said
        text = " ".join(screen_text(app).split())
        assert "KILLS the 2 running job(s)" in text


async def test_a_stop_says_again_which_jobs_it_kills() -> None:
    app = fake_app(supervised=True)
    let_go = threading.Event()
    stop = app.supervisor.stop  # type: ignore[union-attr]

    def slow_stop(timeout: float = 30.0, reason: str = "") -> bool:
        let_go.wait(10)
        return stop(timeout, reason)

    app.supervisor.stop = slow_stop  # type: ignore[union-attr, method-assign]
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitScreen), what="the question")
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, StoppingScreen), what="the stop")
        said = " ".join(str(app.screen.query_one("#question", Static).content).split())
        assert "It kills 2 job(s) running: load_gl, archive_logs" in said
        assert "a resume runs them again from the start" in said
        let_go.set()
        await wait_for(pilot, lambda: app.return_value is not None, what="the end of the stop")
    assert app.return_value == "stopped"
    assert app.stopped_running == ["load_gl", "archive_logs"]


async def test_on_a_small_terminal_the_quit_question_still_shows_its_three_keys() -> None:
    app = fake_app(supervised=True)
    async with app.run_test(size=(36, 10)) as pilot:
        await loaded(pilot)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitScreen), what="the question")
        text = screen_text(app)
        assert "d  detach" in text and "s  stop the run" in text, text
