"""Ctrl-C on a headless run: the scheduler stops, running jobs go on under their executors, `resume` takes them."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import ENV, cli, executor_pids, job_states, read_evidence, status, stop_proc, wait_for

pytestmark = pytest.mark.ipc


def _plan(path: Path, out: Path, go: Path, idempotent: bool = True) -> Path:
    # `long` runs until the test lets it end (at most a minute), leaving evidence of each start and end.
    long = (f'echo "long start $(date +%s.%N) $WLOADCTL_ATTEMPT" >> {out}; n=0; '
            f'while [ ! -e {go} ] && [ $n -lt 600 ]; do n=$((n+1)); sleep 0.1; done; '
            f'echo "long end $(date +%s.%N) $WLOADCTL_ATTEMPT" >> {out}')
    after = f'echo "after start $(date +%s.%N) $WLOADCTL_ATTEMPT" >> {out}'
    path.write_text(yaml.safe_dump({"name": "keep", "jobs": {
        "long": {"command": long, "idempotent": idempotent}, "after": {"command": after, "depends_on": ["long"]}}},
        sort_keys=False))
    return path


def test_ctrl_c_keeps_running_jobs_under_their_executors_and_resume_takes_them(tmp_path: Path,
                                                                               no_ipc_leaks: None) -> None:
    out, go, sd = tmp_path / "ev", tmp_path / "go", tmp_path / "sd"
    plan = _plan(tmp_path / "p.yaml", out, go)
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    run_id = ""
    try:
        # Given a headless run whose job is running
        wait_for(lambda: "long" in read_evidence(out), what="long started")
        wait_for(lambda: job_states(sd).get("long") == "RUNNING", what="long RUNNING")
        run_id = status(sd)["run"]
        # When the operator presses Ctrl-C
        proc.send_signal(signal.SIGINT)
        _o, err = proc.communicate(timeout=60)
        # Then the scheduler stops and says in one line that the job runs on and how to pick it up
        assert proc.returncode == 130, err
        lines = [line for line in err.splitlines() if "keep running" in line]
        assert len(lines) == 1, err
        assert "1 job(s) keep running under their executors" in lines[0]
        assert f"`wloadctl resume --state-dir {sd}` picks them up" in lines[0]
        assert status(sd)["status"] == "interrupted" and not status(sd)["live"]
        # And the job goes on under its executor, and ends there
        assert executor_pids(run_id)
        assert [e for e, _t in read_evidence(out)["long"]] == ["start"]
        go.touch()
        wait_for(lambda: len(read_evidence(out).get("long", [])) == 2, what="long ended under its executor")
        # When the run is resumed
        p = cli("resume", "--state-dir", str(sd), timeout=120)
        # Then it takes the job's result instead of running it again, and finishes
        assert p.returncode == 0, p.stderr
        ev = read_evidence(out)
        assert [e for e, _t in ev["long"]] == ["start", "end"] and "after" in ev
        assert status(sd)["status"] == "succeeded"
        wait_for(lambda: not executor_pids(run_id), what="the executors gone")
    finally:
        stop_proc(proc)
        go.touch()
        if run_id and executor_pids(run_id):
            cli("resume", "--state-dir", str(sd), timeout=120)


def _terminated_while_long_runs(proc: subprocess.Popen[str], out: Path, sd: Path) -> tuple[str, str]:
    """SIGTERM to the run once `long` runs; (the run's id, what the run said), its exit checked (130)."""
    wait_for(lambda: "long" in read_evidence(out), what="long started")
    wait_for(lambda: job_states(sd).get("long") == "RUNNING", what="long RUNNING")
    run_id = status(sd)["run"]
    proc.send_signal(signal.SIGTERM)
    _o, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    return run_id, err


def test_sigterm_still_stops_and_requeues_running_jobs(tmp_path: Path, no_ipc_leaks: None) -> None:
    out, go, sd = tmp_path / "ev", tmp_path / "go", tmp_path / "sd"
    plan = _plan(tmp_path / "p.yaml", out, go)
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    try:
        run_id, err = _terminated_while_long_runs(proc, out, sd)
        assert "will run again" in err and "keep running" not in err
        assert not executor_pids(run_id)
        assert job_states(sd)["long"] == "READY"
    finally:
        stop_proc(proc)


def test_sigterm_holds_a_running_job_that_may_not_run_twice(tmp_path: Path, no_ipc_leaks: None) -> None:
    """A job with `idempotent: false` stopped with the run is held for an operator, not run again by the resume."""
    out, go, sd = tmp_path / "ev", tmp_path / "go", tmp_path / "sd"
    plan = _plan(tmp_path / "p.yaml", out, go, idempotent=False)
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    try:
        run_id, err = _terminated_while_long_runs(proc, out, sd)
        assert "(long idempotent: false, held until released)" in err, err
        assert not executor_pids(run_id)
        assert job_states(sd)["long"] == "HELD"
        # the resume holds it still; the operator's release runs it
        go.touch()
        p = cli("resume", "--state-dir", str(sd), "--exit-on-hold")
        assert p.returncode == 1 and job_states(sd)["long"] == "HELD", p.stderr
        assert [e for e, _t in read_evidence(out)["long"]] == ["start"]
        assert cli("release", "long", "--state-dir", str(sd)).returncode == 0
        p = cli("resume", "--state-dir", str(sd))
        assert p.returncode == 0, p.stderr
        assert [e for e, _t in read_evidence(out)["long"]] == ["start", "start", "end"]
    finally:
        go.touch()
        stop_proc(proc)


def test_sigterm_kills_jobs_that_ignore_it_and_leaves_none_behind(tmp_path: Path, no_ipc_leaks: None) -> None:
    """A job that ignores SIGTERM is killed after the executors' grace when the run is stopped: it was left
    running with no executor (the executors were killed first), and the run ended with it not settled."""
    pids = tmp_path / "pids"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "deaf", "jobs": {
        "deaf": {"command": f"echo $$ >> {pids}; trap '' TERM; sleep 100", "idempotent": False},
        "deafidem": {"command": f"echo $$ >> {pids}; trap '' TERM; sleep 100"}}}))
    sd = tmp_path / "sd"
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    try:
        wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, what="both jobs started")
        wait_for(lambda: set(job_states(sd).values()) == {"RUNNING"}, what="both RUNNING")
        proc.send_signal(signal.SIGTERM)
        _o, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
    finally:
        stop_proc(proc)
    for pid in map(int, pids.read_text().split()):
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", pid
    assert job_states(sd) == {"deaf": "HELD", "deafidem": "READY"}
