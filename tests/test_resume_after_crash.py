"""A resume after the scheduler died carries on what the dead one had journaled: a stop under way, a retry's delay,
a cancel."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import (
    ENV,
    cli,
    job_states,
    reap_orphans,
    start,
    status,
    stop_proc,
    wait_for,
)
from wloadctl.client import journal_core
from wloadctl.store import Store

pytestmark = pytest.mark.ipc


def _lines(out: Path) -> list[str]:
    return out.read_text().splitlines() if out.exists() else []


def _stop_plan(path: Path, out: Path, go: Path) -> Path:
    """Jobs that run until stopped; a stop's SIGTERM is trapped and held until `go` exists, then the job ends by
    signal 15 (as a job the stop kills does). A copy started once `go` exists succeeds at once."""
    def cmd(j: str) -> str:
        return (f'echo "{j} start $WLOADCTL_ATTEMPT" >> {out}; [ -e {go} ] && exit 0; '
                f'trap \'echo "{j} term" >> {out}; while [ ! -e {go} ]; do sleep 0.05; done; echo "{j} end" >> {out}; '
                f'trap - TERM; kill -TERM $$\' TERM; sleep 60 & wait $!')

    jobs = {"j1": {"command": cmd("j1"), "idempotent": False},
            "j2": {"command": cmd("j2"), "idempotent": False},
            "j4": {"command": cmd("j4")}}
    path.write_text(yaml.safe_dump({"name": "stopcrash", "jobs": jobs}, sort_keys=False))
    return path


def test_a_scheduler_killed_during_its_stop_leaves_the_jobs_stopped_with_the_run_not_failed(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out, go, sd = tmp_path / "ev", tmp_path / "go", tmp_path / "sd"
    plan = _stop_plan(tmp_path / "p.yaml", out, go)
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "3")
    run_id = ""
    try:
        # Given three running jobs, two of which may not run twice
        wait_for(lambda: set(job_states(sd).values()) == {"RUNNING"} and len(job_states(sd)) == 3,
                 what="every job running")
        run_id = status(sd)["run"]
        # When the scheduler is stopped (SIGTERM) and, while its stop waits for the jobs, killed -9
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: sum(line.endswith(" term") for line in _lines(out)) == 3, what="every job signalled")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # (the jobs now end by the stop's signal; their executor, whose last reports nobody reads, stays)
        go.touch()
        wait_for(lambda: sum(line.endswith(" end") for line in _lines(out)) == 3, what="every job ended")
        p = cli("resume", "--state-dir", str(sd), "--exit-on-hold")
        # Then the resume ends them as a clean stop would have: the idempotent job ran again, the others are held
        jobs = {j["job"]: j for j in status(sd)["jobs"]}
        assert {j: v["state"] for j, v in jobs.items()} == {"j1": "HELD", "j2": "HELD", "j4": "SUCCEEDED"}, jobs
        assert "idempotent: false" in jobs["j1"]["reason"], jobs["j1"]
        assert [line for line in _lines(out) if line.startswith("j4 start")] == ["j4 start 1", "j4 start 2"]
        assert status(sd)["status"] == "held"
        said = p.stdout + p.stderr
        assert p.returncode == 1 and "failed" not in said, said
        assert "3 of them were being stopped with the run" in said, said
        # and the stop is in the audit trail, before the signals it sent
        with Store.open(sd, create=False) as st:
            run = st.latest_run()
            assert run is not None
            assert [a[2] for a in st.actions(run.id)] == ["stop"]
    finally:
        go.touch()
        stop_proc(proc, run_id=run_id)


def _retry_plan(path: Path, out: Path) -> Path:
    """`r` fails its first attempt and waits 20 s for its retry, which succeeds; `after` follows it."""
    jobs = {"r": {"command": f"echo r >> {out}; [ $(wc -l < {out}) -ge 2 ]", "retries": {"count": 3, "delay": "20s"}},
            "after": {"command": "true", "depends_on": ["r"]}}
    path.write_text(yaml.safe_dump({"name": "retrydelay", "jobs": jobs}, sort_keys=False))
    return path


def _ready_in(text: str) -> float:
    """The seconds a `why` answer says a job in retry delay still waits."""
    m = re.search(r"becomes READY in (\d+(?:\.\d+)?)s", text)
    assert m, text
    return float(m.group(1))


def test_a_retry_delay_runs_on_across_a_stop_and_a_resume(tmp_path: Path) -> None:
    out, sd = tmp_path / "ev", tmp_path / "sd"
    plan = _retry_plan(tmp_path / "p.yaml", out)
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    second = None
    run_id = ""
    try:
        # Given a job waiting 20 s for its retry
        wait_for(lambda: job_states(sd).get("r") == "RETRY_WAIT", what="r in its retry delay")
        run_id = status(sd)["run"]
        # When the run is stopped
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
        # Then `why` of the stopped run tells the delay still to wait, and so does a core rebuilt from the journal
        assert _ready_in(cli("why", "r", "--state-dir", str(sd)).stdout) > 10
        with Store.open(sd, create=False) as st:
            run = st.latest_run()
            assert run is not None
            core = journal_core(st, run)
            assert core.timers.retry_due[core.index["r"]] > time.time() + 10
        # And a resume waits it out rather than retrying at once
        second = start("resume", "--state-dir", str(sd))
        wait_for(lambda: status(sd)["live"], what="the resumed scheduler live")
        assert job_states(sd)["r"] == "RETRY_WAIT"
        assert _ready_in(cli("why", "r", "--state-dir", str(sd)).stdout) > 10
        assert _lines(out) == ["r"]
    finally:
        stop_proc(proc, grace=30)
        if second is not None:
            stop_proc(second, grace=30)
        if run_id:
            reap_orphans(run_id)


def _cancel_once_a_runs(sd: Path) -> str:
    """Cancel the run of `sd` once its job `a` runs; the run's id."""
    wait_for(lambda: job_states(sd).get("a") == "RUNNING", what="a running")
    run_id = str(status(sd)["run"])
    assert cli("cancel", "--state-dir", str(sd)).returncode == 0
    return run_id


def test_a_cancelled_run_whose_scheduler_crashed_ends_cancelled_on_resume(tmp_path: Path, no_ipc_leaks: None) -> None:
    out, go, sd = tmp_path / "ev", tmp_path / "go", tmp_path / "sd"
    first = f"echo a >> {out}; while [ ! -e {go} ]; do sleep 0.05; done"
    jobs = {"a": {"command": first}, "b": {"command": "true", "depends_on": ["a"]},
            "c": {"command": "true", "depends_on": ["b"]}}
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "cancelcrash", "jobs": jobs}, sort_keys=False))
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    run_id = ""
    try:
        # Given a run cancelled while its first job runs
        run_id = _cancel_once_a_runs(sd)
        wait_for(lambda: job_states(sd).get("c") == "CANCELLED", what="the cancel applied")
        # When its scheduler is killed -9, and the run resumed once the job has ended
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        go.touch()
        p = cli("resume", "--state-dir", str(sd))
        # Then the run ends cancelled, as it would have without the crash
        assert p.returncode == 1, p.stderr
        said = p.stdout + p.stderr
        assert "cancelled" in said and "failed" not in said, said
        assert status(sd)["status"] == "cancelled"
        assert job_states(sd) == {"a": "SUCCEEDED", "b": "CANCELLED", "c": "CANCELLED"}
        # And status exits as the run did (it said 0 for a cancelled run without failures)
        assert [cli("status", "--state-dir", str(sd), *form).returncode for form in ([], ["--json"])] == [1, 1]
    finally:
        go.touch()
        stop_proc(proc, run_id=run_id)


def test_a_run_cancelled_with_only_running_jobs_stays_cancelled_across_a_crash(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    """The journaled cancel, not only the jobs it cancelled, says the run was cancelled: a failure that ends after
    the crash is not retried."""
    go, sd = tmp_path / "go", tmp_path / "sd"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "cancelonly", "jobs": {"a": {
        "command": f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3", "retries": {"count": 2, "delay": "0s"}}}},
        sort_keys=False))
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    run_id = ""
    try:
        # Given a run cancelled while its one job runs (nothing left to mark cancelled)
        run_id = _cancel_once_a_runs(sd)
        # When its scheduler is killed -9, the job fails, and the run is resumed
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        go.touch()
        p = cli("resume", "--state-dir", str(sd))
        # Then the failure is not retried, and the run ends cancelled
        assert p.returncode == 1, p.stderr
        jobs = {j["job"]: j for j in status(sd)["jobs"]}
        assert (jobs["a"]["state"], jobs["a"]["attempt"]) == ("FAILED", 1), jobs
        assert status(sd)["status"] == "cancelled"
    finally:
        go.touch()
        stop_proc(proc, run_id=run_id)


def test_a_cancelled_run_that_ended_runs_what_is_rerun_offline_when_resumed(tmp_path: Path, no_ipc_leaks: None) -> None:
    """The cancel holds for the run's life, not for ever: `rerun X` once it has ended, then `resume`, runs X (the
    refusal given while it runs says so)."""
    go, sd, out = tmp_path / "go", tmp_path / "sd", tmp_path / "ran"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "cancelrerun", "jobs": {
        "a": {"command": f"while [ ! -e {go} ]; do sleep 0.05; done"},
        "b": {"command": f"echo b >> {out}", "depends_on": ["a"]},
        "c": {"command": f"echo c >> {out}", "depends_on": ["b"]}}}, sort_keys=False))
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    run_id = ""
    try:
        # Given a run cancelled while `a` runs, that then ended cancelled: b and c never started
        run_id = _cancel_once_a_runs(sd)
        go.touch()
        assert proc.wait(timeout=60) == 1
        assert status(sd)["status"] == "cancelled" and job_states(sd)["b"] == "CANCELLED"
        # When the operator reruns b alone, then resumes the run
        p = cli("rerun", "b", "--state-dir", str(sd))
        assert p.returncode == 0, p.stdout + p.stderr
        p = cli("resume", "--state-dir", str(sd), timeout=60)
        # Then b runs, c (cancelled, not rerun) stays so, and the run still says it was cancelled, not failed
        assert _lines(out) == ["b"], p.stdout + p.stderr
        assert job_states(sd) == {"a": "SUCCEEDED", "b": "SUCCEEDED", "c": "CANCELLED"}
        assert status(sd)["status"] == "cancelled"
        # And a rerun of c with what follows it, then a resume, ends the run succeeded
        assert cli("rerun", "c", "--downstream", "--state-dir", str(sd)).returncode == 0
        p = cli("resume", "--state-dir", str(sd), timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        assert _lines(out) == ["b", "c"] and status(sd)["status"] == "succeeded"
    finally:
        go.touch()
        stop_proc(proc, run_id=run_id)


def test_a_resume_tells_only_the_jobs_that_end_after_it(tmp_path: Path) -> None:
    sd, go = tmp_path / "sd", tmp_path / "go"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "told", "jobs": {
        "a": {"command": "echo a"},
        "never": {"command": "echo never", "if": "False"},
        "b": {"command": f"while [ ! -e {go} ]; do sleep 0.05; done", "depends_on": ["a"]},
        "late": {"command": "echo late", "depends_on": ["b"], "if": "False"},
    }}, sort_keys=False))
    log = tmp_path / "first.out"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                                stdout=out, stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)
    run_id = ""
    try:
        # Given a run stopped once `never` was skipped and `a` succeeded, `b` running
        wait_for(lambda: job_states(sd).get("b") == "RUNNING", what="b running")
        run_id = status(sd)["run"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
        first = log.read_text()
        assert "SKIPPED         never" in first and "SUCCEEDED       a" in first
        # When it is resumed and ends
        go.touch()
        again = cli("resume", "--state-dir", str(sd), timeout=60)
        assert again.returncode == 0, again.stderr
        # Then its lines tell what ended in the resume, not again what ended before it
        told = [line.split(None, 1)[1] for line in again.stdout.splitlines() if line[:2].isdigit()]
        assert [t.split()[1] for t in told] == ["b", "late"], again.stdout
        assert "never" not in again.stdout and "SUCCEEDED       a" not in again.stdout
    finally:
        stop_proc(proc, grace=30)
        if run_id:
            reap_orphans(run_id)


def test_retry_of_a_job_waiting_for_its_retry_cuts_the_delay_short(tmp_path: Path) -> None:
    out, sd = tmp_path / "ev", tmp_path / "sd"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "retrynow", "jobs": {
        "r": {"command": f"echo r >> {out}; [ $(wc -l < {out}) -ge 2 ]", "retries": {"count": 3, "delay": "10m"}},
        "after": {"command": "true", "depends_on": ["r"]}}}, sort_keys=False))
    proc = start("run", str(plan), "--state-dir", str(sd))
    run_id = ""
    try:
        # Given a job that failed and waits ten minutes for its retry
        wait_for(lambda: job_states(sd).get("r") == "RETRY_WAIT", what="r in its retry delay")
        run_id = status(sd)["run"]
        assert "retry" in cli("why", "r", "--state-dir", str(sd)).stdout.split("verbs that apply:")[-1]
        # When the operator, the cause fixed, retries it
        got = cli("retry", "r", "--state-dir", str(sd), "--reason", "feed fixed")
        assert got.returncode == 0, got.stderr
        assert "job 'r' retries now" in got.stdout and "of its delay cut" in got.stdout, got.stdout
        # Then its policy's next attempt runs at once, and the run ends
        assert proc.wait(timeout=60) == 0
        assert job_states(sd) == {"r": "SUCCEEDED", "after": "SUCCEEDED"}
        hist = cli("history", "r", "--state-dir", str(sd)).stdout
        assert "RETRY_WAIT -> READY  retry now by" in hist and "feed fixed" in hist, hist
        assert _lines(out) == ["r", "r"]
    finally:
        stop_proc(proc, grace=30)
        if run_id:
            reap_orphans(run_id)
