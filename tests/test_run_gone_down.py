"""A run gone down: a crash of the whole run, then a resume, is no loss of the job's; and `cancel` of a run whose
scheduler is gone, on its journal (SQLite or PostgreSQL), settles what it had in flight as a resume would, starts
nothing, and ends it cancelled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import cli, executor_pids, ipc_names, kill_all, start, stop_proc, wait_for
from wloadctl.procs.health import pid_alive

pytestmark = pytest.mark.ipc


class Night:
    """A run of plan `night` in `sd`: `load` runs until `gate` exists (its shell's pid in `pid_file`, one line
    per start in `starts`), `post` follows it; every command is given `journal` (--journal URL) when set."""

    def __init__(self, tmp_path: Path, journal: str | None = None) -> None:
        self.sd, self.gate, self.pid_file = tmp_path / "sd", tmp_path / "gate", tmp_path / "load.pid"
        self.starts = tmp_path / "starts"
        self.journal = ["--journal", journal] if journal else []
        self.plan = tmp_path / "night.yaml"
        load = (f"echo $$ > {self.pid_file}; echo $WLOADCTL_ATTEMPT >> {self.starts}; "
                f"while [ ! -e {self.gate} ]; do sleep 0.05; done")
        self.plan.write_text(yaml.safe_dump({"name": "night", "jobs": {
            "load": {"command": load}, "post": {"command": "true", "depends_on": ["load"]}}}, sort_keys=False))
        self.run_id = ""
        self.procs: list[subprocess.Popen[bytes]] = []

    def wl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`wloadctl ARGS --state-dir SD [--journal URL]`."""
        return cli(*args, "--state-dir", str(self.sd), *self.journal, timeout=60)

    def status(self) -> dict:
        return json.loads(self.wl("status", "--json", "--all").stdout)

    def start(self, *verb: str) -> subprocess.Popen[bytes]:
        """`run` (or `resume`) in the background, until `load` has started once more."""
        seen = self.started()
        proc = start(*(verb or ("run", str(self.plan))), "--state-dir", str(self.sd), *self.journal,
                     "--executors", "1", "--slots", "1")
        self.procs.append(proc)
        wait_for(lambda: self.started() > seen or proc.poll() is not None, timeout=60, what="load started")
        self.run_id = self.run_id or self.status()["run"]
        assert self.started() > seen, f"{' '.join(verb)} ended ({proc.returncode}) without starting load: " \
            f"{self.wl('status').stdout}"
        return proc

    def started(self) -> int:
        return len(self.starts.read_text().splitlines()) if self.starts.exists() else 0

    def crash(self, proc: subprocess.Popen[bytes], executors: bool = True) -> None:
        """Kill -9 the run's scheduler (and, with `executors`, its executors with it: a host's power lost)."""
        kill_all([proc.pid, *(executor_pids(self.run_id) if executors else [])])
        proc.wait()

    def end(self) -> None:
        """Whatever became of the test: the gate opened, every process it started gone."""
        self.gate.touch()
        for proc in self.procs:
            stop_proc(proc)
        if self.run_id:
            kill_all(executor_pids(self.run_id))


@pytest.fixture(params=["sqlite", "postgres"])
def journal(request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("pg_url") if request.param == "postgres" else None


def test_cancel_of_a_run_that_crashed_whole_ends_it_cancelled_with_nothing_left_running(
        tmp_path: Path, journal: str | None) -> None:
    night = Night(tmp_path, journal)
    try:
        proc = night.start()
        # Given a run whose scheduler and executors died together while `load` ran (its job shell lives on)
        night.crash(proc)
        shell = int(night.pid_file.read_text())
        assert pid_alive(shell)
        # And a verb on the job it ran is refused naming the resume, not a kill that needs a live scheduler
        p = night.wl("rerun", "load")
        assert p.returncode == 1 and "kill" not in p.stdout + p.stderr, p.stdout + p.stderr
        assert "no verb applies to it while the run has no scheduler: `wloadctl resume` learns whether this " \
               "attempt ended meanwhile" in p.stdout + p.stderr, p.stdout + p.stderr
        # When the operator cancels it, with no scheduler
        p = night.wl("cancel", "--reason", "abandoned tonight")
        # Then the cancel is applied on the journal and says what became of the job that ran
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"run {night.run_id} cancelled (it had no scheduler): 2 job(s) will not start" in p.stdout, p.stdout
        assert "1 were lost with their executors (what was left of them is stopped)" in p.stdout, p.stdout
        # and nothing of the run runs any more: the job's shell is stopped, the run's queues and segments gone
        wait_for(lambda: not pid_alive(shell), what="the lost job's shell stopped")
        assert ipc_names(night.run_id) == []
        # And status shows it cancelled, every job cancelled (exit 1, as for any cancelled run)
        st = night.status()
        assert (st["status"], st["live"]) == ("cancelled", False), st
        assert {j["job"]: j["state"] for j in st["jobs"]} == {"load": "CANCELLED", "post": "CANCELLED"}
        assert night.wl("status").returncode == 1
        history = night.wl("history", "load").stdout
        assert "was running when the run went down (attempt 1)" in history, history
        # And a resume refuses in one line, running nothing
        p = night.wl("resume")
        assert p.returncode == 2 and "no unfinished run to resume" in p.stderr, p.stderr
        assert "ended cancelled at " in p.stderr and p.stderr.count("\n") == 1, p.stderr  # how, in its one line
        assert len(p.stderr.splitlines()) == 1 and night.started() == 1
        # And the audit trail has the cancel, with its user and reason
        audit = json.loads(night.wl("audit", "--json").stdout)
        assert [(a["verb"], a["job"], a["applied"], a["reason"]) for a in audit] == [
            ("rerun", "load", False, ""), ("cancel", "*", True, "abandoned tonight")], audit
        assert audit[1]["user"]
    finally:
        night.end()


def test_cancel_is_refused_while_executors_of_the_run_still_run_its_jobs_then_applied_once_they_are_stopped(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    night = Night(tmp_path)
    try:
        proc = night.start()
        # Given a run whose scheduler alone was killed -9: its executor runs `load` on
        night.crash(proc, executors=False)
        (pid,) = executor_pids(night.run_id)
        # When the operator cancels it
        p = night.wl("cancel")
        # Then the cancel is refused in one line naming the executor and how to stop it, and nothing changed
        assert p.returncode == 1, p.stdout + p.stderr
        assert len(p.stderr.splitlines()) == 1, p.stderr
        assert f"its executor(s) pid {pid} are alive and may still run 1 of its job(s) (load)" in p.stderr, p.stderr
        assert f"stop them with `kill -TERM {pid}`" in p.stderr, p.stderr
        st = night.status()
        assert st["status"] == "interrupted" and {j["job"]: j["state"] for j in st["jobs"]}["load"] == "RUNNING"
        # When the operator stops the executor as told (it stops its job), and cancels again
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not pid_alive(pid), what="the executor stopped")
        p = night.wl("cancel")
        # Then the cancel is applied: the job's end, as its executor journaled it, is taken, and the run is cancelled
        assert p.returncode == 0, p.stdout + p.stderr
        assert "1 had ended (their executors journaled it)" in p.stdout, p.stdout
        st = night.status()
        jobs = {j["job"]: j for j in st["jobs"]}
        assert st["status"] == "cancelled" and jobs["load"]["state"] == "FAILED", st
        assert jobs["load"]["reason"] == "killed by signal 15", jobs["load"]
        audit = json.loads(night.wl("audit", "--json").stdout)
        assert [(a["verb"], a["applied"]) for a in audit] == [("cancel", False), ("cancel", True)], audit
    finally:
        night.end()


def test_an_executor_whose_reports_filled_the_queue_of_a_dead_scheduler_stops_at_sigterm_and_the_cancel_applies(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    """The response queue holds two messages: no one reads it without a scheduler, so reports of jobs that
    ended meanwhile stay unsent; they are in the executor's results journal, which the cancel (or a resume)
    reads, so they must not keep a stopped executor alive until its orphan timeout."""
    sd, gate, starts = tmp_path / "sd", tmp_path / "gate", tmp_path / "starts"
    plan = tmp_path / "ends.yaml"
    jobs = {f"j{k}": {"command": f"echo {k} >> {starts}; while [ ! -e {gate} ]; do sleep 0.05; done; "
                                 f"sleep {k * 0.3}; echo {k} >> {tmp_path / 'ends'}"} for k in range(1, 5)}
    plan.write_text(yaml.safe_dump({"name": "ends", "jobs": jobs}, sort_keys=False))
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "4")
    run_id = ""
    try:
        # Given a run whose scheduler alone was killed -9 while its four jobs ran (their starts journaled)
        wait_for(lambda: all(j["state"] == "RUNNING" for j in json.loads(
            cli("status", "--json", "--state-dir", str(sd)).stdout)["jobs"]), what="the four jobs running")
        run_id = json.loads(cli("status", "--json", "--state-dir", str(sd)).stdout)["run"]
        kill_all([proc.pid])
        proc.wait()
        # and whose jobs then ended one after another, their reports more than the response queue holds
        gate.touch()
        wait_for(lambda: (tmp_path / "ends").exists() and len((tmp_path / "ends").read_text().split()) == 4,
                 what="the four jobs ended")
        (pid,) = executor_pids(run_id)
        wait_for(lambda: "running 0/4" in cli("status", "--state-dir", str(sd)).stdout, what="the executor idle")
        # When the operator stops the executor, as the cancel's refusal says to
        os.kill(pid, signal.SIGTERM)
        # Then it exits (not 120 s after it last heard its scheduler), and the cancel takes the four ends
        wait_for(lambda: not pid_alive(pid), timeout=30, what="the executor stopped")
        p = cli("cancel", "--state-dir", str(sd))
        assert p.returncode == 0 and "4 had ended (their executors journaled it)" in p.stdout, p.stdout + p.stderr
        st = json.loads(cli("status", "--json", "--state-dir", str(sd)).stdout)
        assert st["status"] == "cancelled", st
        assert {j["job"]: j["state"] for j in st["jobs"]} == {f"j{k}": "SUCCEEDED" for k in range(1, 5)}, st
    finally:
        gate.touch()
        stop_proc(proc)
        if run_id:
            kill_all(executor_pids(run_id))


def test_a_job_running_when_the_whole_run_crashed_again_and_again_runs_again_after_each_resume(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    """MAX_LOST (3) stops a job that kills its executor while a scheduler watches; a run that went down whole
    (a host's power lost) says nothing of the job, however many times."""
    night = Night(tmp_path)
    try:
        proc = night.start()
        # Given a job running when its whole run went down, four times over, each time resumed
        for _ in range(4):
            night.crash(proc)
            proc = night.start("resume")
        # When it is let end
        night.gate.touch()
        assert proc.wait(60) == 0
        # Then it ran once after each crash, and succeeded; each loss told as the run's going down
        st = night.status()
        assert {j["job"]: j["state"] for j in st["jobs"]} == {"load": "SUCCEEDED", "post": "SUCCEEDED"}, st
        assert night.started() == 5
        history = night.wl("history", "load").stdout
        assert history.count("was running when the run went down") == 4, history
        assert "executor lost during" not in history and "losses under this job" not in history, history
    finally:
        night.end()
