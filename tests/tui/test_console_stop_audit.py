"""A stop from the console is journaled as the console user's, with its reason (a real run)."""

from __future__ import annotations

import os

from console_helpers import LiveRun, loaded, wait_for

from tests.integration.helpers import wait_for as wait_until
from tui.screens.quit import QuitScreen
from wloadctl.client import RunClient
from wloadctl.core.states import JobState
from wloadctl.ipc.ctlsock import user_name


def _stops(live_run: LiveRun) -> list[tuple[str, str]]:
    """(user, reason) of each stop journaled for the run."""
    with RunClient(live_run.state_dir) as client:
        return [(a["user"], a["reason"]) for a in client.actions() if a["verb"] == "stop"]


def _running(live_run: LiveRun) -> bool:
    with RunClient(live_run.state_dir) as client:
        return bool(client.status(with_jobs=False)["counts"].get(JobState.RUNNING.name))


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
    # The reason is the console's, not the scheduler's own "stopped by a signal" (the test below shows that is
    # what a stop without the console's note journals): so the note reached the scheduler. The user is the
    # note's owner; here it is also the user the scheduler runs as, so that half does not tell them apart.
    assert _stops(live_run) == [(user_name(os.getuid()), "stopped from the console (q, s)")]
    assert not list(live_run.state_dir.glob("stop*.json"))  # the note for the scheduler was taken


def test_a_stop_with_no_note_left_is_audited_as_a_signals(live_run: LiveRun) -> None:
    """The same stop (the console's supervisor, SIGTERM) with no reason given leaves no note: the scheduler
    journals its fallback, which the test above must not see."""
    sup = live_run.supervisor(live_run.plan())
    sup.attach_or_start()
    wait_until(lambda: _running(live_run), what="the gated job running")
    assert sup.stop(timeout=30)
    assert _stops(live_run) == [(user_name(os.getuid()), "stopped by a signal")]
