"""The console's run list on canned runs: enter opens a run, esc goes back, `:` switches, risk in the header."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from console_fakes import NOW, T0, FakeClient, Run
from console_helpers import loaded, paste, screen_text, wait_for

from tui.app import ConsoleApp
from tui.runs_view import find_run, host_risk
from tui.screens.main import MainScreen
from tui.screens.prompt import PromptScreen
from tui.screens.runs import RunsScreen
from wloadctl.runlist import RunEntry


def entry(plan: str, status: str, done: int, total: int, at_risk: int = 0, late: int = 0,
          started: float = T0) -> RunEntry:
    return RunEntry(f"r-{plan}", plan, "2023-11-14", status, done, total, at_risk, late, started,
                    f"/nonexistent/{plan}", {})


RUNS = [
    entry("eod_mini", "running", 5, 14, at_risk=2, late=1, started=T0),
    entry("statements", "holding", 3, 9, started=T0 + 60),
    entry("ledger", "succeeded", 4, 4, started=T0 - 3600),
]


def runs_app(opened: list[Path]) -> ConsoleApp:
    """A console over the canned runs; each run opened gets a fake client of its own."""

    def client_for(state_dir: Path, run_id: str | None) -> FakeClient:
        opened.append(state_dir)
        plan = state_dir.name
        return FakeClient(state_dir=state_dir, run=Run(run_id=run_id or f"r-{plan}", plan_name=plan))

    return ConsoleApp(None, runs_source=lambda: RUNS, runs_root="/srv/wloadctl", client_for=client_for,
                      clock=lambda: NOW, poll=0.02)  # type: ignore[arg-type]


async def listed(pilot: object) -> RunsScreen:
    app = pilot.app  # type: ignore[attr-defined]
    await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.loaded,  # type: ignore[arg-type]
                   what="the run list")
    return app.screen  # type: ignore[no-any-return]


def test_host_risk_counts_live_runs_only_and_find_run_takes_ids_plans_and_prefixes() -> None:
    risk = host_risk([*RUNS, entry("old", "failed", 1, 2, at_risk=5, late=5)])
    assert (risk.runs, risk.live, risk.at_risk_runs, risk.at_risk_jobs, risk.late_jobs) == (4, 2, 1, 2, 1)
    assert find_run(RUNS, "r-ledger").plan == "ledger"  # type: ignore[union-attr]
    assert find_run(RUNS, "statements").plan == "statements"  # type: ignore[union-attr]
    assert find_run(RUNS, "stat").plan == "statements"  # type: ignore[union-attr]
    assert find_run(RUNS, "payroll") is None


async def test_the_list_comes_first_with_the_hosts_risk_and_live_runs_on_top() -> None:
    app = runs_app([])
    async with app.run_test(size=(120, 30)) as pilot:
        screen = await listed(pilot)
        text = screen_text(app)
        assert "3 runs, 2 live, 1 at risk (2 jobs AT_RISK, 1 LATE)" in text
        assert "/srv/wloadctl" in text
        assert [r.plan for r in screen.runs] == ["statements", "eod_mini", "ledger"]
        assert "5/14" in text and "2 risk/1 late" in text


async def test_enter_opens_a_run_esc_goes_back_and_colon_switches() -> None:
    opened: list[Path] = []
    app = runs_app(opened)
    async with app.run_test(size=(120, 40)) as pilot:
        await listed(pilot)
        # Given the cursor on the second run, when enter is pressed, then that run opens
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), what="the run")
        await loaded(pilot)
        assert app.state_dir == Path("/nonexistent/eod_mini") and app.info is not None
        assert "eod_mini" in screen_text(app)
        # When esc is pressed with nothing to clear, then the list is back
        await pilot.press("escape")
        await listed(pilot)
        # When `:run ledger` is typed there, then that run opens with its own client
        await pilot.press("colon")
        await paste(pilot, "run ledger")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen) and app.state_dir.name == "ledger",
                       what="ledger")
        await loaded(pilot)
        assert app.info is not None and app.info.plan_name == "ledger"
        # And `:runs` in a run goes back to the list, `:run` from a run opens another
        await pilot.press("colon", *"runs", "enter")
        await listed(pilot)
        await pilot.press("escape")  # nothing to leave on the list: it stays
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("colon")
        await paste(pilot, "run r-statements")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen) and app.state_dir.name == "statements",
                       what="statements")
        await loaded(pilot)
        # An unknown run changes nothing
        await pilot.press("colon")
        await paste(pilot, "run payroll")
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert isinstance(app.screen, MainScreen) and app.state_dir.name == "statements"
    # (a run opened gets the feed's client and the one that learns the user's role in it)
    assert list(dict.fromkeys(opened)) == [Path("/nonexistent/eod_mini"), Path("/nonexistent/ledger"),
                                           Path("/nonexistent/statements")]


async def test_an_earlier_run_of_a_directory_opens_as_itself_read_only(tmp_path: Path) -> None:
    import subprocess
    import sys

    from wloadctl.core.states import JobState
    from wloadctl.runlist import list_runs

    # Given two runs of a plan in one state directory: the first failed, the second succeeded
    flag, plan, root = tmp_path / "flag", tmp_path / "flagged.yaml", tmp_path / "home"
    plan.write_text(f'name: flagged\njobs:\n  check: {{command: "test -e {flag}"}}\n')
    for _ in range(2):
        subprocess.run([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(root / "flagged"),
                        "--quiet"], timeout=120, capture_output=True)
        flag.touch()
    newer, older = (r.run for r in list_runs(root)[0])
    app = ConsoleApp(None, runs_source=lambda: list_runs(root)[0], runs_root=str(root), poll=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        # Then an 80-column list shows both run ids whole
        await listed(pilot)
        text = screen_text(app)
        assert newer in text and older in text
        # When the earlier run is opened from the list
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), what="the run")
        await loaded(pilot)
        # Then it is that run, with its own states, and it is only read
        assert app.info is not None and app.info.run_id == older
        assert app.model is not None and app.model.state[0] == JobState.FAILED
        assert app.readonly and "[read-only]" in screen_text(app)
        assert f"run {older}" in screen_text(app).splitlines()[0]  # the header names it, even at 80 columns
        await pilot.press("escape")
        await listed(pilot)
        # When the later one is asked for by its id, it opens as itself, with its verbs
        await pilot.press("colon")
        await paste(pilot, f"run {newer}")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen) and app.info is not None
                       and app.info.run_id == newer, what="the later run")
        await loaded(pilot)
        assert app.model is not None and app.model.state[0] == JobState.SUCCEEDED and not app.readonly
        # And `:run` of the earlier id from a run opens that one again
        await pilot.press("colon")
        await paste(pilot, f"run {older}")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.info is not None and app.info.run_id == older, what="the earlier run")
        assert app.readonly


async def test_a_bad_command_on_the_list_keeps_the_prompt_open_and_q_quits() -> None:
    app = runs_app([])
    async with app.run_test(size=(80, 24)) as pilot:
        await listed(pilot)
        await pilot.press("colon", *"launch", "enter")
        await pilot.pause(0.1)
        assert isinstance(app.screen, PromptScreen)
        assert "commands here: run NAME, runs, quit" in screen_text(app)
        text = screen_text(app)
        assert all(ord(c) < 128 for c in text)
        await pilot.press("escape", "q")
        await pilot.pause(0.1)
    assert app.return_value == "quit"


def test_a_console_on_a_directory_without_a_run_names_it_in_the_hint(tmp_path: Path) -> None:
    import subprocess
    import sys

    empty = tmp_path / "empty"
    empty.mkdir()
    p = subprocess.run([sys.executable, "-m", "wloadctl", "console", "--state-dir", str(empty), "--readonly"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert f"`wloadctl run PLAN --state-dir {empty}`" in p.stderr and "DIR" not in p.stderr


def test_the_console_help_says_what_opens_without_a_state_directory(capsys: pytest.CaptureFixture[str]) -> None:
    from wloadctl.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["console", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "latest run" not in text
    assert "with neither, the console opens the list of runs" in text


async def test_the_list_moves_with_the_job_tables_keys_and_its_help_names_them() -> None:
    from textual.widgets import DataTable

    app = runs_app([])
    async with app.run_test(size=(120, 30)) as pilot:
        screen = await listed(pilot)
        table = screen.query_one(DataTable)
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("g")
        assert table.cursor_row == 0
        await pilot.press("G")
        assert table.cursor_row == len(RUNS) - 1
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert "Runs list" in screen_text(app)


@pytest.mark.parametrize("where", [[], ["--readonly", "--state-dir", "SD"], ["PLAN", "--state-dir", "SD"]])
def test_the_console_without_a_terminal_is_refused_in_one_line_and_starts_nothing(
        tmp_path: Path, where: list[str]) -> None:
    import sys

    plan = tmp_path / "plan.yaml"
    plan.write_text("name: p\njobs:\n  a: {command: 'true'}\n")
    sd = tmp_path / "sd"
    if "--readonly" in where:
        assert subprocess.run([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                              capture_output=True, timeout=60).returncode == 0
    args = [str(plan) if w == "PLAN" else str(sd) if w == "SD" else w for w in where]
    # (without a terminal it read its input's end over and over, at full CPU, for ever)
    p = subprocess.run([sys.executable, "-m", "wloadctl", "console", *args], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60, env={**os.environ, "WLOADCTL_HOME": str(tmp_path)})
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("wloadctl: the console needs a terminal, and its input is not one") \
        and p.stderr.count("\n") == 1, p.stderr
    if "PLAN" in where:
        assert not sd.exists()  # no scheduler was started for it


async def test_an_empty_list_says_how_a_run_comes_to_be_in_it() -> None:
    app = ConsoleApp(None, runs_source=lambda: [], runs_root="/srv/wloadctl", clock=lambda: NOW, poll=0.02)
    async with app.run_test(size=(80, 24)) as pilot:
        await listed(pilot)
        await pilot.pause()
        assert "no runs here yet: `wloadctl console PLAN` starts one" in screen_text(app)
