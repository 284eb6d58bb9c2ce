"""A crash in the instant a job starts: after its process exists, before its executor records the start.

The executor's failpoint (WLOADCTL_FAILPOINT=after-spawn:JOB:WHO) SIGKILLs the executor, the scheduler or both
right there, so each test meets that instant every time. A job that may not run twice (idempotent: false)
is then held for an operator, never run again as if it had not started; one that may is run again once,
its first copy stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli, ipc_names, job_states, reap_orphans, status, wait_for
from wloadctl.ipc import protocol as P
from wloadctl.procs.localpool import read_results, result_journals
from wloadctl.procs.recovery import STOP_VERB
from wloadctl.store import Store

pytestmark = pytest.mark.ipc


def gated_plan(tmp: Path, idempotent: bool) -> tuple[Path, Path, Path]:
    """Job `a` writes `S <pid>` to marks, waits for the file `go`, then writes `E <pid>`; `b` follows it."""
    marks, gate = tmp / "marks", tmp / "go"
    cmd = f"echo S $$ >> {marks}; until [ -e {gate} ]; do sleep 0.05; done; echo E $$ >> {marks}"
    plan = tmp / "plan.yaml"
    plan.write_text(f"name: window\njobs:\n  a:\n    command: '{cmd}'\n    idempotent: {str(idempotent).lower()}\n"
                    "  b:\n    command: 'true'\n    depends_on: [a]\n")
    return plan, marks, gate


def lines(marks: Path, kind: str) -> list[str]:
    return [ln for ln in marks.read_text().splitlines() if ln.startswith(kind)] if marks.exists() else []


def run(plan: Path, sd: Path, failpoint: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd),
                             "--executors", "1", "--slots", "1", *extra],
                            env={**ENV, "WLOADCTL_FAILPOINT": failpoint}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def struck(tmp: Path, idempotent: bool, who: str, *extra: str) -> tuple[Path, Path, Path, subprocess.Popen[str]]:
    """A run of the gated plan whose executor's failpoint strikes `who` as `a` starts: state dir, marks, gate, run."""
    plan, marks, gate = gated_plan(tmp, idempotent)
    sd = tmp / "sd"
    return sd, marks, gate, run(plan, sd, f"after-spawn:a:{who}", *extra)


def assert_held_after_one_start(sd: Path, marks: Path) -> None:
    """`a` is held for an operator, `b` waits for it, and `a` started once, its copy stopped before its end."""
    assert job_states(sd) == {"a": "HELD", "b": "WAITING"}
    assert len(lines(marks, "S")) == 1, marks.read_text()
    assert lines(marks, "E") == []


def history(sd: Path, job: str) -> str:
    return cli("history", job, "--state-dir", str(sd), timeout=30).stdout


@contextlib.contextmanager
def tidy(sd: Path, gate: Path, proc: subprocess.Popen[str] | None = None) -> Iterator[None]:
    """Whatever the test finds: its job lets go, its command and the run's executors end (nothing left running)."""
    try:
        yield
    finally:
        gate.touch()
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(Exception):
            reap_orphans(status(sd)["run"])


def test_a_job_that_may_not_run_twice_whose_executor_died_starting_it_is_held_not_run_again(tmp_path: Path) -> None:
    sd, marks, gate, proc = struck(tmp_path, False, "executor", "--exit-on-hold")
    with tidy(sd, gate, proc):
        _out, err = proc.communicate(timeout=90)
        run_id = status(sd)["run"]
        reap_orphans(run_id)
    assert proc.returncode == 1, err
    assert (sd / "failpoint-struck").exists()
    assert_held_after_one_start(sd, marks)  # started once (and stopped with its executor), never again
    assert "its executor was lost while it ran" in history(sd, "a")
    assert ipc_names(run_id) == []


def test_a_job_that_may_run_twice_whose_executor_died_starting_it_runs_again_its_first_copy_stopped(
        tmp_path: Path) -> None:
    sd, marks, gate, proc = struck(tmp_path, True, "executor")
    with tidy(sd, gate, proc):
        # The second copy has started: the first, stopped with its executor, never writes its end.
        wait_for(lambda: len(lines(marks, "S")) == 2, timeout=60, what="the job started again")
        first = int(lines(marks, "S")[0].split()[1])
        wait_for(lambda: not os.path.exists(f"/proc/{first}"), timeout=10, what="the first copy stopped")
        gate.touch()
        _out, err = proc.communicate(timeout=90)
        run_id = status(sd)["run"]
        reap_orphans(run_id)
    assert proc.returncode == 0, err
    assert job_states(sd) == {"a": "SUCCEEDED", "b": "SUCCEEDED"}
    assert [ln.split()[1] for ln in lines(marks, "E")] == [lines(marks, "S")[1].split()[1]]
    assert "it may have started" in history(sd, "a")
    assert ipc_names(run_id) == []


def test_after_the_scheduler_and_executor_died_as_it_started_a_job_that_may_not_run_twice_the_resume_holds_it(
        tmp_path: Path) -> None:
    sd, marks, gate, proc = struck(tmp_path, False, "both")
    with tidy(sd, gate, proc):
        proc.communicate(timeout=90)
        assert proc.returncode == -signal.SIGKILL
        run_id = status(sd)["run"]
        assert job_states(sd)["a"] == "QUEUED"  # the journal's last word: sent, its start never heard
        p = cli("resume", "--state-dir", str(sd), "--exit-on-hold", timeout=90)
        reap_orphans(run_id)
    assert p.returncode == 1, p.stderr
    assert_held_after_one_start(sd, marks)
    assert ipc_names(run_id) == []


def _ended_in_journal(sd: Path, run_id: str) -> bool:
    return any(r.kind == P.RES_EXITED and r.task == 0 for _ex, _pid, path in result_journals(sd, run_id)
               for r in read_results(path))


def test_a_job_that_ran_while_the_scheduler_was_down_has_its_run_in_its_history(tmp_path: Path) -> None:
    sd, marks, gate, proc = struck(tmp_path, False, "scheduler")
    with tidy(sd, gate, proc):
        proc.communicate(timeout=90)
        run_id = status(sd)["run"]
        assert job_states(sd)["a"] == "QUEUED"
        gate.touch()  # it ends while no scheduler runs: its executor journals its start and its end
        wait_for(lambda: _ended_in_journal(sd, run_id), timeout=30, what="the end journaled by the executor")
        p = cli("resume", "--state-dir", str(sd), "--json", timeout=90)
        reap_orphans(run_id)
    assert p.returncode == 0, p.stderr
    assert job_states(sd) == {"a": "SUCCEEDED", "b": "SUCCEEDED"}
    job = next(j for j in status(sd)["jobs"] if j["job"] == "a")
    assert job["started"], job  # when it started, from its executor's journal
    assert "RUNNING" in history(sd, "a")
    assert len(lines(marks, "S")) == 1 and len(lines(marks, "E")) == 1
    assert ipc_names(run_id) == []


def test_a_job_that_may_not_run_twice_stopped_with_the_run_while_no_scheduler_had_heard_it_start_is_held(
        tmp_path: Path) -> None:
    """The stop of a run is journaled before any job is signalled: a crash after it, before the scheduler heard the
    job start, leaves the job QUEUED in the journal while its executor journaled its start and its end."""
    sd, marks, gate, proc = struck(tmp_path, False, "scheduler")
    with tidy(sd, gate, proc):
        proc.communicate(timeout=90)
        run_id = status(sd)["run"]
        wait_for(lambda: lines(marks, "S"), timeout=30, what="the job started")
        with Store.open(sd) as st:
            row = st.latest_run()
            assert row is not None
            # What the scheduler writes as it stops the run, before it signals anything (Scheduler._journal_stop).
            st.record_action(row.id, "op", STOP_VERB, "*", "stopped by a signal", "run stopping", True)
        os.killpg(int(lines(marks, "S")[0].split()[1]), signal.SIGTERM)  # as the stop does, through the executor
        wait_for(lambda: _ended_in_journal(sd, run_id), timeout=30, what="the end journaled by the executor")
        p = cli("resume", "--state-dir", str(sd), "--exit-on-hold", timeout=90)
        reap_orphans(run_id)
    assert p.returncode == 1, p.stderr
    assert_held_after_one_start(sd, marks)
    assert ipc_names(run_id) == []
