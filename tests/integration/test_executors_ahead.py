"""Executors started with `wloadctl run` itself, ahead of the run's objects: they are the run's executors, and
none outlives a bad plan, a resume or a scheduler killed while they wait."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.helpers import ENV, cli, executor_pids, job_states, kill_all, start, status, wait_for
from wloadctl.procs.prestart import AWAIT_FLAG


def argv_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def naming(text: str) -> list[int]:
    """Live processes (not zombies) with `text` as a word of their command line."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and text in argv_of(int(d)):
            try:
                if Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(int(d))
            except OSError:
                pass
    return out


def plan(path: Path, seconds: float) -> Path:
    path.write_text(f"name: ahead\njobs:\n  a: {{command: 'sleep {seconds}'}}\n  b: {{command: 'sleep {seconds}'}}\n")
    return path


def test_the_executors_started_with_the_command_run_the_new_run(tmp_path: Path, no_ipc_leaks: None) -> None:
    sd = tmp_path / "sd"
    proc = start("run", str(plan(tmp_path / "p.yaml", 2)), "--state-dir", str(sd), "--executors", "2",
                 "--slots", "1")
    try:
        wait_for(lambda: (sd / "journal.db").exists() and set(job_states(sd).values()) == {"RUNNING"},
                 what="both jobs running")
        run_id = status(sd)["run"]
        pids = executor_pids(run_id)
        # Given the run's two executors: each was started by the command, with the run's id, ahead of it
        assert len(pids) == 2
        for pid in pids:
            argv = argv_of(pid)
            assert AWAIT_FLAG in argv and argv[argv.index("--run") + 1] == run_id
            assert parent_of(pid) == proc.pid
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            kill_all(naming(str(sd)))  # a failed test leaves no executor behind
    # their output went to their logs once taken, and none is left
    assert {p.name for p in sd.glob("executor-*.log")} == {"executor-0.log", "executor-1.log"}
    wait_for(lambda: not naming(str(sd)), timeout=10, what="the executors gone")


def test_a_bad_plan_or_a_resume_leaves_no_executor_started_ahead(tmp_path: Path, no_ipc_leaks: None) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\njobs:\n  a: {command: 'true', depends_on: [nowhere]}\n")
    sd = tmp_path / "sd"
    p = cli("run", str(bad), "--state-dir", str(sd), "--executors", "3")
    assert p.returncode == 2 and "unknown job 'nowhere'" in p.stderr
    assert not naming(str(sd)) and not sd.exists()
    # A run killed -9 while its jobs run; its executors keep them
    good = plan(tmp_path / "p.yaml", 1)
    proc = start("run", str(good), "--state-dir", str(sd), "--executors", "1", "--slots", "2")
    wait_for(lambda: (sd / "journal.db").exists() and "RUNNING" in job_states(sd).values(), what="a job running")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # `run` again resumes it: the executor started ahead for a new run is not taken, and ends
    p = cli("run", str(good), "--state-dir", str(sd), "--executors", "1", "--slots", "2")
    assert p.returncode == 0, p.stderr
    assert set(job_states(sd).values()) == {"SUCCEEDED"}
    wait_for(lambda: not naming(str(sd)), timeout=15, what="every executor gone")


def test_an_executor_waiting_to_be_taken_ends_with_its_scheduler(tmp_path: Path) -> None:
    sd = tmp_path / "sd"
    sd.mkdir()
    argv = [sys.executable, "-m", "wloadctl.procs.executor", "--run", "20000101-000000-abcdef", "--index", "0",
            "--state-dir", str(sd), AWAIT_FLAG]
    waiting = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=ENV)
    time.sleep(0.3)
    assert waiting.poll() is None  # it waits to be taken
    assert waiting.stdin is not None
    waiting.stdin.close()  # its scheduler is gone
    assert waiting.wait(timeout=10) == 0
    assert waiting.stdout is not None
    with waiting.stdout:
        assert waiting.stdout.read() == b""
    assert list(sd.iterdir()) == []  # nothing made
