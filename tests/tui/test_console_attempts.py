"""A job's new attempt on a real run: its row and its detail do not show the exit status of the one before."""

from __future__ import annotations

from typing import Any

from console_helpers import LiveRun, loaded, screen_text, wait_for
from textual.pilot import Pilot
from textual.widgets import Static

from tui.app import ConsoleApp
from tui.screens.job_detail import JobDetailScreen
from tui.view_model import job_row
from tui.widgets.job_table import JobTable
from wloadctl.client import RunClient
from wloadctl.core.states import JobState


def _second_attempt_running(app: ConsoleApp) -> bool:
    model = app.model
    if model is None:
        return False
    i = model.index["ticker"]
    return model.state[i] == JobState.RUNNING and model.attempt[i] == 2


async def _shows_no_earlier_exit(app: ConsoleApp, pilot: Pilot[Any]) -> None:
    """The row and the detail of `ticker`, running its second attempt, name no exit status."""
    model = app.model
    assert model is not None
    row = job_row(model, model.index["ticker"], app.clock())
    assert "exit" not in row.info, row
    line = next(t for t in screen_text(app).splitlines() if "ticker" in t)
    assert "exit" not in line, line
    table = app.screen.query_one(JobTable)
    assert table.select_job("ticker")
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), what="the job detail")
    await pilot.pause(0.2)
    title = str(app.screen.query_one("#title", Static).content)
    assert "RUNNING" in title and "attempt 2" in title, title
    assert "exit" not in title, title


async def test_a_retry_running_shows_no_exit_status_of_the_attempt_before(live_run: LiveRun) -> None:
    # Given a run whose job failed with exit status 4 and runs its retry now
    sup = live_run.supervisor(live_run.plan("retry_gate.yaml"))
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: _second_attempt_running(app), timeout=30, what="ticker's second attempt")
        await pilot.pause(0.2)
        # Then the console following its transitions shows no exit status for it
        await _shows_no_earlier_exit(app, pilot)
        app.exit("detach")
    # (the journal's row still holds the first attempt's exit status, which a console attaching reads)
    with RunClient(live_run.state_dir) as client:
        row = client.job_row("ticker")
    assert row is not None and row[5] == 4, row  # (idx, job, state, attempt, executor, exit_code, ...)

    # And neither does a console attaching while the retry runs, which reads the jobs' rows
    again = live_run.app(None, readonly=True)
    async with again.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        assert _second_attempt_running(again)
        await _shows_no_earlier_exit(again, pilot)
