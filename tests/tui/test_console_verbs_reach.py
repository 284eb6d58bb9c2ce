"""The console's verbs on a real run: a rerun whose downstream reaches a job under four eyes is only a request, and a
skip of a job whose upstream runs waits for it (the console says so) and never runs it."""

from __future__ import annotations

import pytest
from console_helpers import LiveRun, loaded, wait_for
from textual.widgets import Static

from tui.screens.confirm import ConfirmScreen
from tui.widgets.job_table import JobTable
from wloadctl.client import RunClient
from wloadctl.core.states import JobState

pytestmark = pytest.mark.ipc
S = JobState


async def test_a_rerun_with_its_downstream_reaching_a_four_eyes_job_files_a_request(live_run: LiveRun) -> None:
    # Given a live run whose load and post_ledger have run (post_ledger's reruns need a second person)
    sup = live_run.supervisor(live_run.plan("ledger.yaml"))
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        post = await wait_for(pilot, lambda: app.model is not None and app.model.index.get("post_ledger"),
                              what="post_ledger")
        await wait_for(pilot, lambda: app.model.state[post] == S.SUCCEEDED and app.four_eyes_jobs, timeout=30,
                       what="post_ledger done, the four eyes known")
        # When the operator reruns load: alone it is applied at once ...
        app.screen.query_one(JobTable).select_job("load")
        await pilot.press("R")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen,
                                what="the confirmation")
        assert "FOUR EYES" not in str(screen.query_one("#impact", Static).content)
        # ... but the dialog says a second person is needed once the downstream is switched on
        await pilot.press("d")
        said = await wait_for(pilot, lambda: "FOUR EYES" in (t := " ".join(str(screen.query_one(
            "#impact", Static).content).split())) and t, what="the four eyes said")
        assert "four eyes of post_ledger: rerun of them needs a second person" in said
        await pilot.press("y")
        # Then the scheduler files a request, and nothing is rerun
        note = await wait_for(pilot, lambda: next((n for n in app.notes if n.text.startswith("rerun")), None),
                              timeout=30, what="the reply")
        assert "request R1 needs another admin's approve" in note.text
        with RunClient(live_run.state_dir) as c:
            pend = c.pending()["requests"]
        assert [(r["id"], r["jobs"], r["downstream"], r["four_eyes_of"]) for r in pend] == [
            ("R1", ["load"], True, ["post_ledger"])]
        assert app.model.state[post] == S.SUCCEEDED and app.model.attempt[post] == 1
        live_run.open_gate()


async def test_a_skip_of_a_job_whose_upstream_runs_waits_for_it_and_the_console_says_so(live_run: LiveRun) -> None:
    from tui.screens.job_detail import JobDetailScreen

    sup = live_run.supervisor(live_run.plan("ledger.yaml"))
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(140, 40)) as pilot:
        await loaded(pilot)
        gate = await wait_for(pilot, lambda: app.model is not None and (g := app.model.index.get("gate")) is not None
                              and app.model.state[g] == S.RUNNING and g + 1, timeout=30, what="the gate running")
        assert gate
        # When the operator skips validate while its upstream runs
        app.screen.query_one(JobTable).select_job("validate")
        await pilot.press("s")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen,
                                what="the confirmation")
        said = " ".join(str(screen.query_one("#impact", Static).content).split())
        assert "1 of them (validate) wait for their upstreams to end first: skipped then, never run; their " \
               "downstream waits with them" in said
        await pilot.press("y")
        note = await wait_for(pilot, lambda: next((n for n in app.notes if n.text.startswith("skip")), None),
                              timeout=30, what="the reply")
        assert "will be skipped once its upstreams have ended ('gate' (RUNNING) not yet)" in note.text
        # Then its row and its detail say it waits, and what for
        v = app.model.index["validate"]
        await wait_for(pilot, lambda: app.model.reason[v].startswith("will be skipped when its upstreams end, by "),
                       what="the row's reason")
        assert app.model.state[v] == S.WAITING
        await pilot.press("enter")
        detail = await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen) and app.screen,
                                what="the job's detail")
        assert detail.job == "validate"
        await wait_for(pilot, lambda: "will be skipped when its upstreams end" in " ".join(
            str(w.content) for w in detail.query(Static)), timeout=30, what="its why")
        await pilot.press("escape")
        # When the gate opens: validate is skipped, never run, and report runs after it
        live_run.open_gate()
        await wait_for(pilot, lambda: app.model.counts[S.SUCCEEDED] + app.model.counts[S.SKIPPED] == 5, timeout=30,
                       what="the run done")
        assert app.model.state[v] == S.SKIPPED and app.model.attempt[v] == 0
