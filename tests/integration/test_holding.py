"""A headless run with only held jobs left stays up and finishes once they are released."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli, evidence_plan, status, stop_proc, wait_for

pytestmark = pytest.mark.ipc


def _run(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "wloadctl", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)


def _status(sd: Path) -> dict:
    try:
        return status(sd)
    except (json.JSONDecodeError, ValueError):
        return {}  # no journal yet


def _holding(sd: Path) -> dict | None:
    st = _status(sd)
    return st if st.get("status") == "holding" else None


def test_held_run_waits_for_release_from_another_process_then_exits_0(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given a run whose `post` is held while `extract` runs
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {
        "extract": {"gate": str(tmp_path / "go")}, "post": {"depends_on": ["extract"]}})
    sd = tmp_path / "sd"
    proc = _run(str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: _status(sd).get("live"), what="the scheduler up")
        assert cli("hold", "post", "--state-dir", str(sd)).returncode == 0
        (tmp_path / "go").touch()
        # When everything else is done, the run holds (it does not exit) and says what it waits for
        st = wait_for(lambda: _holding(sd), what="status holding")
        assert st["held"] == ["post"] and st["live"]
        text = cli("status", "--state-dir", str(sd)).stdout
        assert "HOLDING" in text and "held (1)" in text and "post" in text
        time.sleep(1.0)  # (a run that exits on hold does so at once, as --exit-on-hold shows below)
        assert proc.poll() is None
        # Then a release from another process lets it finish with exit 0
        assert cli("release", "post", "--state-dir", str(sd)).returncode == 0
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        (tmp_path / "go").touch()
        stop_proc(proc)
    assert "holding: 1 held job(s) wait for release: post" in err
    assert status(sd)["status"] == "succeeded"


def test_exit_on_hold_ends_the_run_held_with_exit_1(tmp_path: Path, no_ipc_leaks: None) -> None:
    posts = [f"post{k:02d}" for k in range(12)]
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {
        "extract": {"gate": str(tmp_path / "go")}, **{p: {"depends_on": ["extract"]} for p in posts}})
    sd = tmp_path / "sd"
    proc = _run(str(plan), "--state-dir", str(sd), "--exit-on-hold")
    try:
        wait_for(lambda: _status(sd).get("live"), what="the scheduler up")
        assert cli("hold", "post*", "--state-dir", str(sd)).returncode == 0
        (tmp_path / "go").touch()
        _out, err = proc.communicate(timeout=30)
    finally:
        (tmp_path / "go").touch()
        stop_proc(proc)
    assert proc.returncode == 1, err
    st = status(sd)
    assert st["status"] == "held" and st["held"] == posts
    # And the text names the first ten held and counts the rest, in one line however many are held
    text = cli("status", "--state-dir", str(sd)).stdout
    assert f"held (12), released with `wloadctl release JOB`: {', '.join(posts[:10])} and 2 more\n" in text


def test_ctrl_c_stops_a_holding_run_and_says_how_to_resume(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {
        "extract": {"gate": str(tmp_path / "go")}, "post": {"depends_on": ["extract"]}})
    sd = tmp_path / "sd"
    proc = _run(str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: _status(sd).get("live"), what="the scheduler up")
        assert cli("hold", "post", "--state-dir", str(sd)).returncode == 0
        (tmp_path / "go").touch()
        wait_for(lambda: _holding(sd), what="status holding")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        (tmp_path / "go").touch()
        stop_proc(proc)
    assert proc.returncode == 130
    assert f"`wloadctl resume --state-dir {sd}`" in err
    assert status(sd)["status"] == "interrupted"
