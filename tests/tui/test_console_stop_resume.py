"""What a stop from the console says becomes of the jobs it kills, checked against the journal (a real run)."""

from __future__ import annotations

import threading

from console_helpers import LiveRun, loaded, wait_for
from textual.widgets import Static

from tui.screens.quit import QuitScreen, StoppingScreen, stopped_line
from wloadctl.client import RunClient
from wloadctl.core.states import JobState


def _said(app: object) -> str:
    screen = app.screen  # type: ignore[attr-defined]
    return " ".join(str(screen.query_one("#question", Static).content).split())


async def test_a_stop_says_the_jobs_that_may_not_run_twice_are_held_not_run_again(live_run: LiveRun) -> None:
    # Given a live run with two jobs running, one of them `idempotent: false`
    sup = live_run.supervisor(live_run.plan("stop_once.yaml"))
    sup.attach_or_start()
    let_go = threading.Event()
    stop = sup.stop

    def held_stop(timeout: float = 30.0, reason: str = "") -> bool:
        let_go.wait(10)  # (the stopping dialog stays up until the test has read it)
        return stop(timeout, reason)

    sup.stop = held_stop  # type: ignore[method-assign]
    app = live_run.app(sup)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await wait_for(
            pilot,
            lambda: app.model is not None and app.model.counts[JobState.RUNNING] == 2,
            what="both jobs running",
        )

        # When the operator asks to quit, the question says which a resume runs again and which it holds
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitScreen), what="the quit question")
        said = _said(app)
        assert ("KILLS the 2 running job(s); a resume runs 1 of them again from the start "
                "(once_only idempotent: false, held until released)") in said, said

        # And so does the wait for the stop
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, StoppingScreen), what="the stop")
        said = _said(app)
        assert ("It kills 2 job(s) running: rerunnable, once_only; a resume runs 1 of them again from the start "
                "(once_only idempotent: false, held until released).") in said, said
        let_go.set()
        await wait_for(pilot, lambda: app.return_value is not None, timeout=30, what="the console to exit")
    assert app.return_value == "stopped"
    assert stopped_line(app.stopped_running, app.stopped_held, "--state-dir D") == (
        "run stopped; it killed 2 job(s) running: rerunnable, once_only; a resume runs 1 of them again from the "
        "start (once_only idempotent: false, held until released); resume it with `wloadctl console --state-dir D`"
    )

    # Then the journal has it so: the job that may not run twice is held, the other waits to run again
    with RunClient(live_run.state_dir) as client:
        jobs = {j["job"]: j for j in client.status()["jobs"]}
    assert jobs["once_only"]["state"] == "HELD", jobs["once_only"]
    assert "idempotent: false" in jobs["once_only"]["reason"]
    assert jobs["rerunnable"]["state"] != "HELD", jobs["rerunnable"]
