"""The console's pipeline pane and timeline on real runs: scheduler and executor processes, POSIX IPC, journal."""

from __future__ import annotations

from pathlib import Path

import pytest
from console_helpers import LiveRun, loaded, paste, screen_text, wait_for

from tui.screens.main import MainScreen
from tui.screens.pipeline import PipelineScreen
from tui.screens.timeline import TimelineScreen
from tui.scrub import Scrub
from tui.widgets.dag_view import DagView
from tui.widgets.job_table import JobTable
from tui.widgets.sla_panel import SlaPanel
from wloadctl.core.states import JobState

pytestmark = pytest.mark.ipc
S = JobState


async def test_the_pipeline_pane_shows_the_live_figures_per_executor(live_run: LiveRun) -> None:
    # Given a live run whose first job waits for the test
    sup = live_run.supervisor(live_run.plan("flow.yaml"))
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        # When the operator opens the pipeline pane
        await pilot.press("P")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, PipelineScreen) and app.screen,
                                what="the pipeline pane")
        # Then it fills with the scheduler's figures, one line per executor
        view = await wait_for(pilot, lambda: (v := screen.view) and v["live"] and v["age"] is not None
                              and len(v["executors"]) == 2 and v, timeout=30, what="live figures")
        assert view["queues"]["request"]["max"] >= 1 and view["arena"]["capacity"] > 0
        await pilot.pause(0.1)
        text = screen_text(app)
        assert "request queue" in text and "journal commit" in text and "EX  PID" in text
        # And Escape returns to the jobs
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), what="the main screen")
        live_run.open_gate()


async def test_the_timeline_scrubs_by_event_and_minute_with_the_panes_following_and_returns_live(
    live_run: LiveRun,
) -> None:
    # Given a run that finished
    sup = live_run.supervisor(live_run.plan("flow.yaml"))
    sup.attach_or_start()
    live_run.open_gate()
    app = live_run.app(sup)
    async with app.run_test(size=(140, 40)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: app.model is not None and app.model.counts[S.SUCCEEDED] == 4, timeout=30,
                       what="the run done")
        app.screen.query_one(JobTable).select_job("load")
        # When the operator opens the timeline
        await pilot.press("T")
        tl = await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen) and app.screen.model is not None
                            and app.screen, what="the timeline")
        # Then it starts at the run's last event, as the run stands
        assert tl.scrub.index() == len(tl.scrub.moments) >= 4
        assert tl.model.counts[S.SUCCEEDED] == 4

        async def shown(pred: object, what: str) -> None:
            await wait_for(pilot, lambda: tl.model is not None and pred(tl.model), what=what)  # type: ignore[operator]

        # Back to the start: nothing had happened
        await pilot.press("home")
        await shown(lambda m: m.counts[S.WAITING] == 4, "all WAITING")
        assert tl.scrub.index() == 0
        # One event on: the jobs without upstreams became ready (or went further in the same moment)
        await pilot.press("right")
        await shown(lambda m: m.counts[S.WAITING] < 4, "the first event")
        assert tl.scrub.index() == 1 and tl.model.counts[S.SUCCEEDED] < 4
        first = tl.scrub.at
        # The keys the footer shows, < and >, step too
        await pilot.press("less_than_sign")
        await shown(lambda m: m.counts[S.WAITING] == 4, "an event back with <")
        await pilot.press("greater_than_sign")
        await shown(lambda m: m.counts[S.WAITING] < 4, "an event on with >")
        assert tl.scrub.index() == 1
        # The DAG and SLA panes show the past model at that moment
        assert tl.query_one(DagView).model is tl.model and tl.query_one(SlaPanel).now == first
        assert "TIMELINE (read-only)" in screen_text(app)
        # A verb key does nothing here: the timeline is read-only
        await pilot.press("h")
        await pilot.pause(0.2)
        assert isinstance(app.screen, TimelineScreen)
        # A minute on reaches the end of this short run
        await pilot.press("right_square_bracket")
        await shown(lambda m: m.counts[S.SUCCEEDED] == 4, "the end")
        assert tl.scrub.at == tl.scrub.moments[-1]
        # And Escape returns to the live console, whose model the timeline never touched
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), what="the main screen")
        assert app.model.counts[S.SUCCEEDED] == 4


def test_a_scrub_steps_by_event_and_by_minute_within_the_run() -> None:
    s = Scrub([100.0, 100.5, 170.0, 400.0])
    s.to_end()
    assert (s.at, s.index()) == (400.0, 4)
    assert s.by_event(-1) == 170.0 and s.by_event(-2) == 100.0 and s.by_event(-5) == 99.0
    assert s.index() == 0 and s.by_event(1) == 100.0 and s.by_event(10) == 400.0
    assert s.by_minute(-1) == 340.0 and s.index() == 3
    assert s.by_minute(-10) == 99.0 and s.by_minute(100) == 400.0
    assert Scrub().by_event(1) == 0.0


async def test_the_approvals_screen_on_a_live_run_lists_requests_and_approving_a_confirmation_job_runs_it(
    live_run: LiveRun,
) -> None:
    from textual.widgets import DataTable

    from tui.screens.pending import PendingScreen
    from wloadctl.client import RunClient

    # Given a live run with a job waiting for confirmation and a skip waiting for a second person
    sup = live_run.supervisor(live_run.plan("confirm.yaml"))
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(130, 40)) as pilot:
        await loaded(pilot)
        with RunClient(live_run.state_dir) as c:
            rep = c.control("skip", ["gate"])
        assert rep["pending"]["id"] == "R1"
        # When the operator opens the approvals screen
        await pilot.press("A")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, PendingScreen) and len(app.screen.keys) == 2
                                and app.screen, timeout=30, what="the approvals screen")
        # Then both are listed; the asker's own approve of R1 is refused
        assert screen.keys == ["R1", "transfer"]
        await pilot.press("a", "y")
        await wait_for(pilot, lambda: any("another person must approve it" in n.text for n in app.notes),
                       timeout=30, what="the refusal")
        # And approving the confirmation job lets it and its dependent run
        screen.query_one(DataTable).move_cursor(row=1)
        await pilot.press("a", "y")
        await wait_for(pilot, lambda: screen.keys == ["R1"], timeout=30, what="transfer confirmed")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.model is not None and app.model.counts[S.SUCCEEDED] == 2, timeout=30,
                       what="transfer and report done")
        live_run.open_gate()
        await wait_for(pilot, lambda: app.model is not None and app.model.counts[S.SUCCEEDED] == 3, timeout=30,
                       what="the run done")


async def test_a_verb_that_needs_four_eyes_says_which_request_waits_for_approve(live_run: LiveRun) -> None:
    from tui.screens.confirm import ConfirmScreen

    # Given a live run whose plan makes skip need a second person
    sup = live_run.supervisor(live_run.plan("confirm.yaml"))
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: app.screen.query_one(JobTable).select_job("transfer"), what="transfer")
        # When the operator skips a job and confirms
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        await pilot.press("y")
        # Then the note names the request and the approve it waits for, not "nothing to do"
        note = await wait_for(pilot, lambda: next((n for n in app.notes if n.text.startswith("skip")), None),
                              timeout=30, what="the reply")
        assert "request R1 needs another admin's approve" in note.text and "transfer" in note.text
        assert "nothing to do" not in note.text
        live_run.open_gate()


async def test_the_sla_pane_counts_down_and_says_late_while_nothing_runs(live_run: LiveRun) -> None:
    import time

    from tui.app import ConsoleApp

    # Given a live run whose only job with a deadline waits for an operator's approve: nothing runs
    plan = live_run.root / "waits.yaml"
    plan.write_text('name: tui-waits\njobs:\n  transfer: {command: "true", confirm: true, deadline: "+1h"}\n'
                    '  report: {command: "true", depends_on: [transfer]}\n')
    sup = live_run.supervisor(plan)
    sup.attach_or_start()
    shift = [0.0]
    app = ConsoleApp(live_run.state_dir, supervisor=sup, poll=0.05, clock=lambda: time.time() + shift[0])
    async with app.run_test(size=(160, 40)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: app.model is not None and app.model.counts[S.HELD] == 1, what="transfer HELD")
        sla = app.screen.query_one(SlaPanel)
        await wait_for(pilot, lambda: sla.view is not None and not sla.view.late, what="the deadline ahead")
        assert app.model is not None and not (app.model.counts[S.RUNNING] or app.model.counts[S.QUEUED])
        # When its deadline passes with no transition at all
        shift[0] = 2 * 3600.0
        # Then the pane says it is late
        await wait_for(pilot, lambda: sla.view is not None and [d.job for d in sla.view.late] == ["transfer"],
                       what="transfer LATE in the SLA pane")
        await wait_for(pilot, lambda: "late: transfer was due" in screen_text(app), what="the late job on screen")


async def test_a_failed_job_skipped_or_set_ok_keeps_its_attempts_duration(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tui.app import ConsoleApp
    from tui.labels import fmt_duration
    from tui.screens.confirm import ConfirmScreen
    from tui.view_model import job_row
    from wloadctl.client import RunClient

    # Given a run that ended with two failed jobs and one blocked behind the first
    plan = tmp_path / "fails.yaml"
    plan.write_text('name: tui-fails\njobs:\n  bad: {command: "sleep 0.2; exit 3"}\n  worse: {command: "exit 4"}\n'
                    '  after: {command: "true", depends_on: [bad]}\n')
    state = tmp_path / "state"
    subprocess.run([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(state), "--quiet"],
                   timeout=120, capture_output=True)
    app = ConsoleApp(state, poll=0.05)  # no scheduler: the verbs go to the journal
    async with app.run_test(size=(100, 24)) as pilot:
        await loaded(pilot)
        model = app.model
        assert model is not None
        # When the operator skips the blocked job and the failed one, and sets the other ok
        for command, job, state_after in (("skip after", "after", S.SKIPPED), ("skip bad", "bad", S.SKIPPED),
                                          ("set-ok worse", "worse", S.SUCCEEDED)):
            await pilot.press("colon")
            await paste(pilot, command)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
            await pilot.press("y")
            await wait_for(pilot, lambda: model.state[model.index[job]] == state_after,  # noqa: B023
                           what=f"{job} {state_after.name}")
        # Then each failed job shows how long its attempt ran, not the time until the operator acted
        now = app.clock()
        with RunClient(state) as client:
            for job in ("bad", "worse"):
                moves = client.history(job)["transitions"]
                start = next(t["ts"] for t in moves if t["to"] == "RUNNING")
                end = next(t["ts"] for t in moves if t["from"] == "RUNNING")
                i = model.index[job]
                assert model.ended[i] > end  # (the act came later)
                assert model.duration(i, now) == end - start
                assert job_row(model, i, now).duration == fmt_duration(end - start)
        # And the job skipped before it ever ran has no duration
        assert model.duration(model.index["after"], now) is None
        assert job_row(model, model.index["after"], now).duration == ""


LOOP_PLAN = r"""name: loop
jobs:
  list_files:
    command: "echo '{\"files\": [\"a\", \"b\", \"c\"]}' > $WLOADCTL_RESULT_FILE"
  fan:
    command: "echo item $WLOADCTL_ITEM"
    depends_on: [list_files]
    for_each: jobs.list_files.result.files
  skipped:
    command: "true"
    depends_on: [list_files]
    if: "jobs.list_files.exit_code != 0"
"""


async def test_a_loops_parent_says_its_instances_have_the_logs(tmp_path: Path) -> None:
    import subprocess
    import sys

    from textual.widgets import Log

    from tui.app import ConsoleApp
    from tui.screens.job_detail import JobDetailScreen

    # Given a finished run whose loop over an upstream's output made three instances
    plan = tmp_path / "loop.yaml"
    plan.write_text(LOOP_PLAN)
    state = tmp_path / "state"
    subprocess.run([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(state), "--quiet"],
                   check=True, timeout=120, capture_output=True)
    app = ConsoleApp(state, readonly=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        for job, title in (("fan", "no log of its own: its 3 instance(s) fan@ITEM have theirs"),
                           ("skipped", "no log: SKIPPED without running")):
            # When the operator opens the job
            app.screen.query_one(JobTable).select_job(job)
            await pilot.press("enter")
            screen = await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen) and app.screen,
                                    what="the job")
            # Then its log pane says why it has no log, not that it has not run yet
            log = screen.query_one("#log", Log)
            await wait_for(pilot, lambda: log.border_title == title, what=title)  # noqa: B023
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), what="the main screen")
