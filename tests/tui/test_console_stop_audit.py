"""A stop from the console is journaled as the console user's, with its reason (a real run)."""

from __future__ import annotations

import os

from console_helpers import LiveRun, loaded, wait_for

from tui.screens.quit import QuitScreen
from wloadctl.client import RunClient
from wloadctl.core.states import JobState
from wloadctl.ipc.ctlsock import user_name


async def test_a_stop_from_the_console_is_audited_as_the_users_not_a_signals(live_run: LiveRun) -> None:
    sup = live_run.supervisor(live_run.plan())
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await wait_for(
            pilot,
            lambda: app.model is not None and app.model.counts[JobState.RUNNING] >= 1,
            what="the gated job running",
        )
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitScreen), what="the quit question")
        await pilot.press("s")
        await wait_for(pilot, lambda: app.return_value is not None, timeout=30, what="the console to exit")
    assert app.return_value == "stopped"
    with RunClient(live_run.state_dir) as client:
        stops = [a for a in client.actions() if a["verb"] == "stop"]
    assert [(a["user"], a["reason"]) for a in stops] == [(user_name(os.getuid()), "stopped from the console (q, s)")]
    assert not list(live_run.state_dir.glob("stop*.json"))  # the note for the scheduler was taken
