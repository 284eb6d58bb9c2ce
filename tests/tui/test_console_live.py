"""The console on real runs: scheduler and executor processes, POSIX IPC, journal."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from console_helpers import LiveRun, loaded, screen_text, wait_for

from tui.app import ConsoleApp
from tui.messages import LiveStatus
from tui.screens.confirm import ConfirmScreen
from tui.screens.main import MainScreen
from tui.screens.quit import QuitScreen
from tui.widgets.job_table import JobTable
from tui.widgets.node_panel import NodePanel
from wloadctl.client import RunClient
from wloadctl.core.states import JobState

pytestmark = pytest.mark.ipc
S = JobState


def state_of(app: ConsoleApp, job: str) -> JobState:
    """A job's state as the console shows it."""
    assert app.model is not None
    return JobState(app.model.state[app.model.index[job]])


def attempt_of(app: ConsoleApp, job: str) -> int:
    """A job's attempts as the console shows them."""
    assert app.model is not None
    return app.model.attempt[app.model.index[job]]


def live_status(app: ConsoleApp) -> LiveStatus:
    """The console's latest reading of the live side."""
    assert app.status is not None
    return app.status


def journal_states(run: LiveRun) -> dict[str, str]:
    """Every job's state as the client reports it (the scheduler's board when live)."""
    with RunClient(run.state_dir) as client:
        return {j["job"]: j["state"] for j in client.status()["jobs"]}


async def test_hold_release_and_rerun_with_downstream_by_keys(
    live_run: LiveRun,
) -> None:
    # Given a live run whose first job waits for the test
    sup = live_run.supervisor(live_run.plan("flow.yaml"))
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        await wait_for(
            pilot, lambda: state_of(app, "gate") == S.RUNNING, what="gate RUNNING"
        )
        table = app.screen.query_one(JobTable)

        # When the operator holds `load` and confirms
        assert table.select_job("load")
        await pilot.press("h")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen),
            what="the confirmation",
        )
        assert "hold 1 job(s): load" in screen_text(app)
        await pilot.press("y")

        # Then screen and scheduler have it HELD, also after its upstream finished
        await wait_for(
            pilot, lambda: state_of(app, "load") == S.HELD, what="load HELD on screen"
        )
        assert journal_states(live_run)["load"] == "HELD"
        live_run.open_gate()
        await wait_for(
            pilot, lambda: state_of(app, "gate") == S.SUCCEEDED, what="gate SUCCEEDED"
        )
        await pilot.pause(0.3)
        assert state_of(app, "load") == S.HELD
        assert "HELD" in screen_text(app)

        # When it is released, the rest of the run goes through and the run ends
        await pilot.press("r")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen),
            what="the confirmation",
        )
        await pilot.press("enter")  # release is harmless: enter confirms it
        await wait_for(
            pilot,
            lambda: state_of(app, "report") == S.SUCCEEDED,
            what="report SUCCEEDED",
        )
        await wait_for(
            pilot,
            lambda: app.status is not None and not app.status.live,
            what="the run to end",
        )

        # When `load` is rerun with its downstream on the finished run
        assert table.select_job("load")
        await pilot.press("R")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, ConfirmScreen),
            what="the confirmation",
        )
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.impact.downstream and app.screen.impact.affected == ["report"]
        assert "downstream: 1 job(s) run again" in screen_text(app)
        await pilot.press("y")

        # Then the console resumes the run, and both run a second time
        await wait_for(
            pilot,
            lambda: (
                attempt_of(app, "report") == 2
                and state_of(app, "report") == S.SUCCEEDED
            ),
            timeout=30,
            what="report's second run",
        )
        assert any("resume" in n.text for n in app.notes)
        with RunClient(live_run.state_dir) as client:
            assert client.history("load")["attempts"] == 2
            acts = [(a["verb"], a["job"], a["applied"]) for a in client.actions()]
            rows = client.job_rows()
        # The console followed transitions only, and agrees with the journal's rows
        assert app.model is not None
        for idx, _job, state, attempt, _ex, code, _s, _e, _r in rows:
            assert (app.model.state[idx], app.model.attempt[idx]) == (state, attempt)
            assert app.model.exit_code[idx] == code
        assert ("hold", "load", True) in acts
        assert ("release", "load", True) in acts
        assert ("rerun", "load", True) in acts
        await wait_for(
            pilot,
            lambda: app.status is not None and not app.status.live,
            what="the run to end again",
        )
        await pilot.press("q")  # the run is over: no question
    assert app.return_value == "quit"


def many_loads_plan(run: LiveRun, loads: int) -> Path:
    """A plan of `loads` jobs waiting behind the gate, each with a job after it: their ids alone
    make more than one control request can carry."""
    lines = ["name: tui-many", "jobs:",
             f'  gate: {{command: "while [ ! -e {run.gate} ]; do sleep 0.05; done"}}']
    for k in range(loads):
        load = f"load_ledger_partition_{k:05d}"
        lines.append(f'  {load}: {{command: "true", depends_on: [gate]}}')
        lines.append(f'  post_ledger_partition_{k:05d}: {{command: "true", depends_on: [{load}]}}')
    path = run.root / "many.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_a_verb_on_a_glob_of_thousands_of_jobs_is_sent_as_the_glob(live_run: LiveRun) -> None:
    # Given a live run with 2,500 jobs waiting behind a running gate (their ids: about 75 KB)
    sup = live_run.supervisor(many_loads_plan(live_run, 2500))
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await wait_for(pilot, lambda: state_of(app, "gate") == S.RUNNING, what="gate RUNNING")
        # When the operator holds them by a glob on the command line
        await pilot.press("colon", *"hold load_*", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=30, what="the confirmation")
        impact = app.screen.impact
        assert len(impact.applies) == 2500 and len(impact.affected) == 2500
        assert "hold 2500 job(s): load_ledger_partition_00000" in screen_text(app)
        await pilot.press("y")
        # Then the scheduler holds every one of them, and the note counts them all
        note = await wait_for(pilot, lambda: next((n for n in app.notes if n.text.startswith("hold")), None),
                              timeout=30, what="the reply")
        assert note.text.startswith("hold: 2500 job(s) - job 'load_ledger_partition_00000' held"), note.text
        with RunClient(live_run.state_dir) as client:
            assert client.status(with_jobs=False)["counts"]["HELD"] == 2500
        await wait_for(pilot, lambda: app.model is not None and app.model.counts[S.HELD] == 2500,
                       what="the holds on screen")
        live_run.open_gate()


async def test_the_header_times_a_resumed_run_to_its_new_end(live_run: LiveRun) -> None:
    import subprocess
    import sys

    from tui.labels import fmt_duration
    from tui.widgets.run_header import RunHeader

    def run_times() -> tuple[str, float | None]:
        with RunClient(live_run.state_dir) as client:
            run = client.run
            return run.status, (run.ended - run.started if run.ended else None)

    # Given a run that ended with a failed job, and a console on it
    plan = live_run.root / "quick.yaml"
    plan.write_text('name: tui-quick\njobs:\n  a: {command: "true"}\n  b: {command: "exit 3", depends_on: [a]}\n')
    subprocess.run([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(live_run.state_dir),
                    "--quiet"], timeout=120, capture_output=True)
    status, first = run_times()
    assert status == "failed" and first is not None
    sup = live_run.supervisor(None)
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(100, 24)) as pilot:
        await loaded(pilot)
        header = app.screen.query_one(RunHeader)
        await wait_for(pilot, lambda: header.summary is not None and header.summary.elapsed == first,
                       what="the first end")
        # When the failed job is retried: the console resumes the run, which ends again
        await pilot.press("colon", *"retry b", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: attempt_of(app, "b") == 2 and state_of(app, "b") == S.FAILED, timeout=30,
                       what="b's second attempt")
        status, second = await wait_for(pilot, lambda: (t := run_times())[0] == "failed" and t[1] and t,
                                        timeout=30, what="the run's second end")
        assert second > first
        # Then the header's elapsed time runs to that end, as `wloadctl status` has it
        await wait_for(pilot, lambda: header.summary is not None and header.summary.elapsed == second,
                       what="the second end in the header")
        await wait_for(pilot, lambda: f"{fmt_duration(second)} elapsed" in screen_text(app), what="it on screen")


async def test_a_killed_executor_is_replaced_and_the_node_panel_shows_it(
    live_run: LiveRun,
) -> None:
    sup = live_run.supervisor(live_run.plan("slow.yaml"))
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(160, 40)) as pilot:
        await loaded(pilot)
        await wait_for(
            pilot,
            lambda: app.status is not None and len(app.status.executors) == 2,
            what="two executors on the board",
        )
        victim = live_status(app).executors[0]
        os.kill(victim.pid, signal.SIGKILL)

        await wait_for(
            pilot,
            lambda: app.screen.query_one(NodePanel).restarted().get(victim.index),
            timeout=20,
            what="the node panel to count a restart",
        )
        new = {e.index: e.pid for e in live_status(app).executors}
        assert new[victim.index] != victim.pid
        assert any(f"executor {victim.index} restarted" in n.text for n in app.notes)
        await wait_for(
            pilot,
            lambda: f"executor {victim.index} restarted" in screen_text(app),
            what="the restart on screen",
        )

        # Quitting a live run asks; stopping it leaves it resumable
        await pilot.press("q")
        await wait_for(
            pilot, lambda: isinstance(app.screen, QuitScreen), what="the quit question"
        )
        await pilot.press("s")
        await wait_for(
            pilot,
            lambda: app.return_value is not None,
            timeout=30,
            what="the console to exit",
        )
    assert app.return_value == "stopped"
    with RunClient(live_run.state_dir) as client:
        assert client.run.status == "interrupted"
        assert not client.is_live()


async def test_detach_then_attach_again_and_a_crashed_scheduler_is_restarted(
    live_run: LiveRun,
) -> None:
    # Given a console that started the run and detached from it
    plan = live_run.plan("slow.yaml")
    first = live_run.supervisor(plan)
    first.attach_or_start()
    pid = first.pid
    assert pid is not None
    app1 = live_run.app(first)
    async with app1.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await wait_for(
            pilot, lambda: app1.status is not None and app1.status.live, what="live"
        )
        await pilot.press("q")
        await wait_for(
            pilot, lambda: isinstance(app1.screen, QuitScreen), what="the quit question"
        )
        await pilot.press("d")
    assert app1.return_value == "detach"
    with RunClient(live_run.state_dir) as client:
        assert client.is_live()

    # When a second console attaches with the state directory only
    second = live_run.supervisor(None)
    second.attach_or_start()
    assert second.pid == pid and second.proc is None
    app2 = live_run.app(second)
    async with app2.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        await wait_for(
            pilot,
            lambda: app2.status is not None and app2.status.scheduler_pid == pid,
            what="attached",
        )

        # and the scheduler is killed
        os.kill(pid, signal.SIGKILL)
        first.reap()

        # Then the console starts another that resumes from the journal, and says so
        await wait_for(
            pilot,
            lambda: any("restarted as pid" in n.text for n in app2.notes),
            what="the restart note",
        )
        await wait_for(
            pilot,
            lambda: (
                app2.status is not None
                and app2.status.live
                and app2.status.scheduler_pid not in (None, pid)
            ),
            timeout=20,
            what="a new live scheduler",
        )
        assert (
            "restarted 1x" in screen_text(app2)
            or app2.screen.query_one(NodePanel).status is not None
        )
        live_run.open_gate()
        await wait_for(
            pilot,
            lambda: state_of(app2, "after_b") == S.SUCCEEDED,
            timeout=20,
            what="the run to finish",
        )
        await pilot.press("q")
    assert app2.return_value in ("quit", None) or isinstance(app2.screen, MainScreen)


async def test_a_readonly_console_offers_no_action(live_run: LiveRun) -> None:
    sup = live_run.supervisor(live_run.plan("slow.yaml"))
    sup.attach_or_start()
    app = live_run.app(None, readonly=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("h", "x", "R")
        await pilot.pause(0.2)
        assert isinstance(app.screen, MainScreen)
        assert "Hold" not in screen_text(app).splitlines()[-1]
        await pilot.press("q")
    assert app.return_value == "quit"
    with RunClient(live_run.state_dir) as client:
        assert client.actions() == []
        assert client.is_live()  # a read-only console leaves the run alone


def test_a_restart_and_a_resume_at_once_start_one_scheduler(live_run: LiveRun) -> None:
    # Given a console's scheduler killed mid-run
    sup = live_run.supervisor(live_run.plan("slow.yaml"))
    sup.attach_or_start()
    pid = sup.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while sup.children()[0].poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)

    # When the feed thread's check and an operator's resume race to start its successor
    barrier = threading.Barrier(2)
    said: list[str] = []

    def restart() -> None:
        barrier.wait()
        said.extend(e.text for e in sup.check())

    def resume() -> None:
        barrier.wait()
        said.append(sup.resume().text)

    threads = [threading.Thread(target=restart), threading.Thread(target=resume)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    # Then one scheduler was started, and the console still holds every one it started
    started = [s for s in said if "restarted as pid" in s or "started the scheduler" in s]
    assert len(started) == 1, said
    running = [p for p in sup.children() if p.poll() is None]
    assert [p.pid for p in running] == [sup.pid], said
    sup.reap()
    assert pid in [p.pid for p in sup._reaped]
    sup.wait_up(20)  # the successor resumes the run


def test_a_failed_start_shows_its_own_log_lines_not_an_earlier_starts(live_run: LiveRun) -> None:
    from wloadctl.errors import UsageError

    # Given a state directory whose log holds an earlier failed start
    first = live_run.supervisor(live_run.root / "first.yaml")
    with pytest.raises(UsageError):
        first.attach_or_start(timeout=30)
    # When another start fails there
    second = live_run.supervisor(live_run.root / "second.yaml")
    with pytest.raises(UsageError) as failed:
        second.attach_or_start(timeout=30)
    # Then its message carries its own scheduler's lines only
    text = str(failed.value)
    assert "exited with status" in text and "second.yaml: plan file not found" in text
    assert "first.yaml" not in text and "console starts" not in text


async def test_the_job_detail_says_what_the_job_is_from_the_runs_plan(live_run: LiveRun) -> None:
    from tui.screens.job_detail import JobDetailScreen

    # Given a live run whose `load` waits for its upstream
    plan = live_run.plan("flow.yaml")
    sup = live_run.supervisor(plan)
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        # When the operator opens it
        assert app.screen.query_one(JobTable).select_job("load")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), what="the job")
        # Then its description, its whole command and where the plan writes it show, after why it waits
        await wait_for(pilot, lambda: "description: Load the day's ledger entries" in screen_text(app),
                       what="the description")
        text = screen_text(app)
        assert "command:     echo loading the ledger; sleep 0.2; echo loaded  (/bin/sh -c)" in text, text
        assert f"defined at:  {plan}:7" in text, text
        assert text.index("waiting for 1 of 1 dependencies") < text.index("what it is:") < text.index("command:")
    live_run.open_gate()


async def test_a_scheduler_that_stops_beating_is_shown_not_responding_then_live_again(
    live_run: LiveRun,
) -> None:
    from tui.widgets.run_header import RunHeader

    # Given a live run on the console
    sup = live_run.supervisor(live_run.plan("slow.yaml"))
    sup.attach_or_start()
    assert sup.pid is not None
    app = live_run.app(sup)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        header = app.screen.query_one(RunHeader)
        nodes = app.screen.query_one(NodePanel)

        def first_lines() -> tuple[str, str]:
            return header.render().plain.split("\n")[0], nodes.render().plain.split("\n")[0]

        await wait_for(pilot, lambda: f"LIVE pid {sup.pid}" in first_lines()[0], what="the run live")
        # When its scheduler is stopped (SIGSTOP): its boards stay, their beat gets old
        os.kill(sup.pid, signal.SIGSTOP)
        try:
            await wait_for(pilot, lambda: "NOT RESPONDING" in first_lines()[0], timeout=60,
                           what="the header to say the scheduler does not respond")
            await pilot.pause(0.2)
            assert not live_status(app).responding
            # Then header and nodes pane say it does not respond, with its last beat's age, as `status` does
            top, sched = first_lines()
            assert f"NOT RESPONDING pid {sup.pid}, last beat " in top and "LIVE" not in top, top
            assert f"scheduler NOT RESPONDING pid {sup.pid} epoch " in sched, sched
            assert "(stopped or hung; counts are as of then)" in sched and "LIVE" not in sched, sched
            assert "NOT RESPONDING" in screen_text(app)
        finally:
            os.kill(sup.pid, signal.SIGCONT)
        # And once it goes on, it is live again
        await wait_for(pilot, lambda: f"LIVE pid {sup.pid}" in first_lines()[0], timeout=30, what="the run live again")
        assert "scheduler LIVE" in first_lines()[1]


async def test_the_job_detail_says_again_what_its_job_waits_for_as_its_upstreams_end(live_run: LiveRun) -> None:
    from tui.screens.job_detail import JobDetailScreen

    # Given the detail of a job waiting for two upstreams, open before either ended
    sup = live_run.supervisor(live_run.plan("two_ups.yaml"))
    sup.attach_or_start()
    app = live_run.app(sup)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot)
        assert app.screen.query_one(JobTable).select_job("final")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), what="the job")
        await wait_for(pilot, lambda: "waiting for 2 of 2 dependencies" in screen_text(app), what="its first why")
        # When one of them ends (the job itself does not move)
        Path(f"{live_run.gate}.slow").touch()
        await wait_for(pilot, lambda: state_of(app, "slow") == JobState.SUCCEEDED, timeout=15, what="slow's end")
        # Then the detail says, with no key pressed, that it waits for the other one only
        await wait_for(pilot, lambda: "waiting for 1 of 2 dependencies" in screen_text(app), timeout=10,
                       what="its why asked again")
        assert state_of(app, "final") == JobState.WAITING
    live_run.open_gate()
