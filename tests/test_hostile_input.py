"""Hostile input gets one line: control characters in a plan or a reason, a request too large for the control
socket, a journal damaged where its job indices are, a state directory this user may not read, and `gen` asked
for more than it writes or stopped halfway."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli, ipc_names, reap_orphans, status, stop_proc, wait_for


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_control_characters_of_a_plan_are_escaped_in_its_one_line_error(tmp_path: Path) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text('name: x\njobs:\n  a: {command: echo hi, depends_on: ["x\\ny\\e[2J"]}\n')
    p = cli("validate", str(plan))
    assert p.returncode == 2
    line = _one_line(p.stderr)
    assert "\x1b" not in line and "\r" not in line
    assert "depends on unknown job 'x\\ny\\x1b[2J'" in line


def _damaged_journal(tmp_path: Path) -> Path:
    plan = tmp_path / "ok.yaml"
    plan.write_text("name: ok\njobs:\n  a: {command: 'true'}\n  b: {command: 'true', depends_on: [a]}\n")
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 0
    with sqlite3.connect(sd / "journal.db") as db:
        # A first record naming job 2,147,483,647 in a run of two jobs.
        db.execute("UPDATE turns SET recs = CAST(X'FFFFFF7F' || substr(recs, 5) AS BLOB) "
                   "WHERE seq = (SELECT min(seq) FROM turns)")
    return sd


def test_a_journal_damaged_in_a_job_index_is_reported_corrupt_without_filling_memory(tmp_path: Path) -> None:
    sd = _damaged_journal(tmp_path)

    def under_a_gigabyte() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    p = subprocess.run([sys.executable, "-m", "wloadctl", "status", "--state-dir", str(sd), "--at", "-0s"],
                       capture_output=True, text=True, timeout=60, env=ENV, preexec_fn=under_a_gigabyte)
    assert p.returncode == 3, p.stderr
    assert "the run journal is corrupt: a turn names job 2147483647, the run has 2 jobs" in _one_line(p.stderr)


def test_a_state_directory_this_user_may_not_read_is_said_in_one_line(tmp_path: Path) -> None:
    capsh = shutil.which("capsh")
    if capsh is None:
        pytest.skip("capsh (libcap2-bin) is not installed: root cannot be made to lack read access without it")
    plan = tmp_path / "ok.yaml"
    plan.write_text("name: ok\njobs:\n  a: {command: 'true'}\n")
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 0
    sd.chmod(0)
    try:
        for verb in (["status"], ["history", "a"], ["hold", "a"], ["resume"]):
            words = " ".join([sys.executable, "-m", "wloadctl", *verb, "--state-dir", str(sd)])
            # Root without the capabilities that pass over file permissions: as another user would be.
            p = subprocess.run([capsh, "--drop=cap_dac_override,cap_dac_read_search", "--", "-c", words],
                               capture_output=True, text=True, timeout=60, env=ENV)
            assert p.returncode == 2, (verb, p.stderr)
            assert "permission denied" in _one_line(p.stderr), verb
    finally:
        sd.chmod(0o755)


def _gated_run(tmp_path: Path, name: str) -> tuple[Path, Path, Path, subprocess.Popen[bytes], str]:
    """A run of plan `name` whose job `a` runs until the file `go` is made: plan, state dir, go, process, run id."""
    plan, go, sd = tmp_path / "p.yaml", tmp_path / "go", tmp_path / "sd"
    plan.write_text(f"name: {name}\njobs:\n  a: {{command: 'until [ -e {go} ]; do sleep 0.05; done'}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)
    try:
        wait_for(lambda: status(sd)["jobs"][0]["state"] == "RUNNING", what="the job running")
        return plan, sd, go, proc, status(sd)["run"]
    except BaseException:
        go.touch()
        stop_proc(proc, grace=30, term=False)
        raise


def test_a_verb_too_large_for_the_control_socket_says_so_and_a_reason_is_kept_on_one_line(tmp_path: Path) -> None:
    _plan, sd, go, proc, run_id = _gated_run(tmp_path, "sl")
    try:
        p = cli("hold", "a", "--reason", "r" * 70_000, "--state-dir", str(sd))
        assert p.returncode == 3
        assert "control message of" in _one_line(p.stderr) and "no control socket" not in p.stderr
        p = cli("release", "a", "--reason", "multi\nline\x1b[31m", "--state-dir", str(sd))
        audit = cli("audit", "--state-dir", str(sd)).stdout
        assert "multi\\nline\\x1b[31m" in audit and "\x1b" not in audit
    finally:
        go.touch()
        stop_proc(proc, grace=30, run_id=run_id, term=False)
    assert proc.returncode == 0
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def test_gen_refuses_more_jobs_than_it_writes_and_leaves_no_half_plan_when_stopped(tmp_path: Path) -> None:
    out = tmp_path / "big.yaml"
    p = cli("gen", "--jobs", "999999999999", "--shape", "bank", "-o", str(out))
    assert p.returncode == 2 and "more than gen writes" in _one_line(p.stderr)
    # Ctrl-C as an operator's terminal sends it (a test runner's worker may ignore SIGINT, and its children with it).
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "gen", "--jobs", "50000000", "--shape", "bank",
                             "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for(lambda: any(tmp_path.glob("big.yaml.part-*")), timeout=30, every=0.02, what="the plan being written")
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert list(tmp_path.iterdir()) == []


def test_runs_lists_the_good_state_directories_beside_one_whose_journal_schema_is_mangled(tmp_path: Path) -> None:
    plan = tmp_path / "ok.yaml"
    plan.write_text("name: ok\njobs:\n  a: {command: 'true'}\n")
    root = tmp_path / "root"
    assert cli("run", str(plan), "--state-dir", str(root / "good")).returncode == 0
    shutil.copytree(root / "good", root / "bad")
    with sqlite3.connect(root / "bad" / "journal.db") as db:
        db.execute("PRAGMA writable_schema=ON")
        db.execute("UPDATE sqlite_master SET name=CAST(X'C8C8' AS TEXT), sql='CREATE INDEX %' WHERE name='turns_run'")
    p = cli("runs", "--root", str(root))
    assert p.returncode == 0, p.stderr
    assert "good" in p.stdout and "bad" not in p.stdout
    assert f"run journal {root / 'bad' / 'journal.db'} is unreadable or corrupt" in _one_line(p.stderr)


def test_a_damaged_copy_of_the_plan_in_the_journal_is_blamed_on_the_journal_not_on_the_plan_file(
        tmp_path: Path) -> None:
    plan = tmp_path / "ok.yaml"
    plan.write_text("name: ok\njobs:\n  alpha:\n    command: 'true'\n  beta:\n    command: 'true'\n")
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 0
    with sqlite3.connect(sd / "journal.db") as db:
        db.execute("UPDATE plans SET text = replace(text, 'alpha:', 'al' || char(5) || 'pha:'), blob = NULL")
    p = cli("hold", "beta", "--state-dir", str(sd))
    assert p.returncode == 3
    line = _one_line(p.stderr)
    assert f"in the journal {sd / 'journal.db'} does not load" in line and "restore the journal" in line
    assert plan.read_text().count("\x05") == 0


def test_an_empty_journal_left_long_ago_is_not_taken_for_a_run_starting(tmp_path: Path) -> None:
    sd = tmp_path / "sd"
    sd.mkdir()
    journal = sd / "journal.db"
    journal.touch()
    assert "try again in a moment" in _one_line(cli("status", "--state-dir", str(sd)).stderr)
    old = time.time() - 120
    os.utime(journal, (old, old))
    p = cli("status", "--state-dir", str(sd))
    assert p.returncode == 3
    assert "is empty and has been for over 60s" in _one_line(p.stderr)


def test_an_empty_journal_whose_scheduler_died_making_it_is_not_taken_for_a_run_starting(tmp_path: Path) -> None:
    # Given the empty journal and the lock of a scheduler killed -9 as it started (its pid names the lock)
    sd = tmp_path / "sd"
    sd.mkdir()
    (sd / "journal.db").touch()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (sd / "scheduler.lock").write_text(str(dead.pid))
    # Then a read says at once that no run is starting there, and how to start one
    p = cli("status", "--state-dir", str(sd))
    assert p.returncode == 3
    line = _one_line(p.stderr)
    assert f"is empty: the scheduler that was making it (pid {dead.pid}) is gone" in line, line
    # And a run there starts afresh
    plan = tmp_path / "p.yaml"
    plan.write_text("name: p\njobs:\n  a: {command: 'true'}\n")
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 0


@pytest.mark.parametrize("verb", [["status"], ["history", "a"], ["hold", "a"], ["resume"], ["logs", "a"]])
def test_a_file_given_as_the_state_directory_is_said_to_be_no_directory(tmp_path: Path, verb: list[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a state directory\n")
    p = cli(*verb, "--state-dir", str(afile))
    assert p.returncode == 2
    assert f"cannot use {afile} as a state directory: it is not a directory" in _one_line(p.stderr)
    assert afile.read_text() == "not a state directory\n"


def test_resuming_with_a_plan_of_another_name_names_both_plans(tmp_path: Path) -> None:
    plan, sd, go, proc, run_id = _gated_run(tmp_path, "first")
    try:
        stop_proc(proc, grace=30, run_id=run_id)  # SIGTERM: the run stops, resumable
    finally:
        go.touch()
        stop_proc(proc)
    plan.write_text(plan.read_text().replace("name: first", "name: second"))
    p = cli("resume", str(plan), "--state-dir", str(sd), "--accept-plan-change")
    assert p.returncode == 2
    assert f"plan 'second' is not the plan of unfinished run {run_id}" in _one_line(p.stderr)
    assert "('first')" in p.stderr
    p = cli("resume", "--state-dir", str(sd))
    reap_orphans(run_id)
    assert p.returncode == 0, p.stderr
    assert ipc_names(run_id) == []


def test_an_operators_reason_on_a_stopped_run_is_kept_and_shown_on_one_line_without_terminal_escapes(
        tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: p\njobs:\n  a: {command: 'true'}\n  b: {command: 'true', depends_on: [a]}\n")
    sd = str(tmp_path / "sd")
    assert cli("run", str(plan), "--state-dir", sd).returncode == 0
    # A reason that would fake an audit line of its own and colour the operator's terminal
    forged = "late feed\n02:00:00 root     approve  everything\x1b[31m"
    p = cli("rerun", "b", "--state-dir", sd, "--reason", forged)
    assert p.returncode == 0, p.stderr
    kept = "late feed\\n02:00:00 root     approve  everything\\x1b[31m"
    audit = cli("audit", "--state-dir", sd).stdout
    assert audit.count("\n") == 1 and "\x1b" not in audit and audit.rstrip().endswith(f"reason: {kept}"), audit
    history = cli("history", "b", "--state-dir", sd).stdout
    assert "\x1b" not in history and f"rerun ({kept}): job 'b' will run again" in history, history
    assert history.count("\n") == len([ln for ln in history.splitlines() if ln.strip()])


def test_a_full_disk_when_the_run_writes_its_job_list_is_said_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """(a resume on a disk still full stopped with `internal error: OSError: [Errno 28] No space left on
    device`, naming no file)"""
    import errno

    from wloadctl import cli as cli_module
    from wloadctl.procs import runner

    def full(*_a: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(runner, "write_ids", full)
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: full\njobs:\n  a: {command: 'true'}\n")
    code = cli_module.main(["run", str(plan), "--state-dir", str(tmp_path / "sd")])
    err = capsys.readouterr().err
    assert code == 3, err
    lines = [line for line in err.splitlines() if line.startswith("wloadctl:")]
    assert lines[-1].startswith(f"wloadctl: cannot write the run's job list {tmp_path / 'sd'}/")
    assert "No space left on device (free space on the state directory's disk" in lines[-1]
    assert "internal error" not in err and "Traceback" not in err
