"""A run gone down: a crash of the whole run, then a resume, is no loss of the job's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import cli, executor_pids, kill_all, start, stop_proc, wait_for

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
