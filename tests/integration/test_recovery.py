"""Durable runs: kill -9 of the scheduler (and of the whole tree), resume, exactly-once side effects, bad journals."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import (
    ENV,
    cli,
    evidence_plan,
    executor_pids,
    ipc_names,
    job_states,
    kill_all,
    read_evidence,
    reap_orphans,
    start,
    status,
    stop_proc,
    wait_for,
)
from wloadctl.core.durations import parse_duration
from wloadctl.errors import NoJournalYet
from wloadctl.ipc.cleanup import remove_run_objects, run_is_alive
from wloadctl.ipc.naming import ROLE_EXECUTORS, object_name
from wloadctl.ipc.shm import ExecutorBoard
from wloadctl.store import Store

pytestmark = pytest.mark.ipc

PR_SET_CHILD_SUBREAPER = 36
"""prctl option: orphaned descendants are reparented to this process (which then reaps them)."""


def layered(n_layers: int = 4, width: int = 5) -> dict[str, dict]:
    jobs: dict[str, dict] = {}
    for layer in range(n_layers):
        for k in range(width):
            jid = f"l{layer}_{k}"
            jobs[jid] = {"depends_on": [f"l{layer - 1}_{k}", f"l{layer - 1}_{(k + 1) % width}"]} if layer else {}
    return jobs


def run_until_some_running(tmp_path: Path, jobs: dict[str, dict], sleep: float = 0.4):
    out = tmp_path / "evidence"
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs, sleep=sleep)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "2")

    def mid_run() -> bool:
        if not (sd / "journal.db").exists():
            return False
        try:
            st = job_states(sd)
        except (json.JSONDecodeError, ValueError):
            return False
        vals = list(st.values())
        return vals.count("SUCCEEDED") >= 4 and vals.count("RUNNING") >= 2

    wait_for(mid_run, timeout=30, what="a run in the middle")
    return proc, plan, sd, out


def test_kill_9_of_the_scheduler_then_resume_runs_every_job_exactly_once(tmp_path: Path) -> None:
    # Given a run in the middle, with jobs running on live executors
    proc, _plan, sd, out = run_until_some_running(tmp_path, layered())
    run_id = status(sd)["run"]
    # When the scheduler alone is killed (its executors keep running their jobs)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert executor_pids(run_id), "executors must outlive a crashed scheduler"
    # Then status says so at once, though the dead scheduler's lease in the journal still runs
    st = status(sd)
    assert (st["status"], st["live"]) == ("interrupted", False), (st["status"], st["live"])
    # and lists the executors that run on the jobs they had, with no scheduler
    # (their running counts are as of their last beat: the layer's jobs may have ended since)
    assert sorted(e["pid"] for e in st["executors"]) == sorted(executor_pids(run_id)), st["executors"]
    assert "with no scheduler, beat" in cli("status", "--state-dir", str(sd)).stdout
    # and the run is resumed
    p = cli("resume", "--state-dir", str(sd), "--json")
    # Then it completes, and every job's side effect happened exactly once
    assert p.returncode == 0, p.stderr
    assert set(json.loads(p.stdout)["jobs"].values()) == {"SUCCEEDED"}
    ev = read_evidence(out)
    assert len(ev) == 20
    for jid, lines in ev.items():
        assert [k for k, _ in lines] == ["start", "end"], f"{jid}: {lines}"
    assert "reattached to 2 executor(s)" in p.stderr
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def _executors_idle(run_id: str) -> bool:
    """Whether every executor on the run's board has beaten with no job running."""
    board = ExecutorBoard.open(object_name(run_id, ROLE_EXECUTORS))
    try:
        slots = [s for s in board.read_all() if s.pid]
    finally:
        board.close()
    return bool(slots) and all(s.running == 0 for s in slots)


def test_executors_left_with_reports_no_one_read_exit_by_themselves_when_a_resume_finds_the_run_done(
        tmp_path: Path) -> None:
    # Given a run whose 16 jobs all run (2 executors of 8 slots) until a gate file appears; this process
    # adopts the executors once their scheduler is gone (a subreaper), to learn how each one ends
    out, gate = tmp_path / "evidence", tmp_path / "gate"
    plan = evidence_plan(tmp_path / "plan.yaml", out,
                         {f"j{k:02d}": {"gate": str(gate), "sleep": round(0.1 * k, 1)} for k in range(16)})
    sd = tmp_path / "sd"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "8", "--prefetch", "0")
    pids: list[int] = []
    try:
        wait_for(lambda: sum(1 for line in out.read_text().splitlines() if " start " in line) == 16
                 if out.exists() else False, timeout=60, what="16 jobs running")
        run_id = status(sd)["run"]
        pids = executor_pids(run_id)
        assert len(pids) == 2
        # When the scheduler is killed, and the jobs end one by one after it: each exit report goes
        # alone into the response queue, more of them than it holds, so the executors keep some back
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        gate.touch()
        wait_for(lambda: sum(1 for line in out.read_text().splitlines() if " end " in line) == 16,
                 timeout=60, what="16 jobs ended")
        wait_for(lambda: _executors_idle(run_id), timeout=60, what="idle executors")
        # and a resume finds every job finished (by the executors' results journals)
        p = cli("resume", "--state-dir", str(sd))
        assert p.returncode == 0, p.stderr
        assert "16 finished while the scheduler was down" in p.stderr, p.stderr
        # Then the executors ended by themselves when the run was done: none had to be killed
        ends = {pid: os.waitpid(pid, 0)[1] for pid in pids}
        assert all(os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0 for st in ends.values()), ends
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        gate.touch()
        stop_proc(proc)
        kill_all(pids)
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def test_kill_9_of_the_whole_tree_then_resume(tmp_path: Path) -> None:
    # Given a run in the middle
    jobs = layered()
    jobs["l1_0"]["idempotent"] = False
    # (the third layer's jobs run until a gate opens after the kill: the run is still under way when the
    # kill lands, however busy the machine)
    gate = tmp_path / "gate"
    for k in range(5):
        jobs[f"l2_{k}"]["gate"] = str(gate)
    proc, plan, sd, out = run_until_some_running(tmp_path, jobs, sleep=0.3)
    run_id = status(sd)["run"]
    # When the scheduler and every executor are killed at once
    kill_all([proc.pid, *executor_pids(run_id)])
    proc.wait()
    gate.touch()
    # (a job the journal has as QUEUED may have been taken and started by its executor just before
    # the kill: it was interrupted with its executor as much as a RUNNING one)
    running_at_kill = {j for j, s in job_states(sd).items() if s in ("RUNNING", "QUEUED")}
    # Then `run` on the same state dir resumes the run (and ends if only an interrupted job is held)
    p = cli("run", str(plan), "--state-dir", str(sd), "--json", "--exit-on-hold")
    assert "resuming run" in p.stderr
    jobs_after = json.loads(p.stdout)["jobs"]
    ev = read_evidence(out)
    for jid, lines in ev.items():
        starts = [k for k, _ in lines].count("start")
        if jid in running_at_kill:
            # interrupted with its executor: retried at most once more, and only when idempotent
            assert starts <= (2 if jobs[jid].get("idempotent", True) else 1), jid
        else:
            assert starts == 1, f"{jid} ran {starts} times"
    if "l1_0" in running_at_kill:
        assert jobs_after["l1_0"] == "HELD"
        why = json.loads(cli("why", "l1_0", "--state-dir", str(sd), "--json").stdout)
        assert "its executor was lost while it ran and it may not run twice" in " ".join(why["reasons"])
    else:
        assert p.returncode == 0, p.stderr
    assert ipc_names(run_id) == []


def test_resume_refuses_a_changed_plan_unless_accepted(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {"a": {}, "b": {"depends_on": ["a"], "exit": 1}})
    sd = str(tmp_path / "sd")
    cli("run", str(plan), "--state-dir", sd)
    cli("retry", "b", "--state-dir", sd)  # the run is unfinished again
    evidence_plan(plan, out, {"a": {}, "b": {"depends_on": ["a"]}, "c": {"depends_on": ["b"]}})
    p = cli("run", str(plan), "--state-dir", sd)
    assert p.returncode == 2 and "plan changed" in p.stderr and "Traceback" not in p.stderr
    p = cli("run", str(plan), "--state-dir", sd, "--accept-plan-change", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"a": "SUCCEEDED", "b": "SUCCEEDED", "c": "SUCCEEDED"}
    assert [k for k, _ in read_evidence(out)["a"]] == ["start", "end"]


def test_a_loop_that_a_changed_plan_gives_a_new_item_holds_its_dependents_until_it_has_run(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out, opened = tmp_path / "ev", tmp_path / "open"

    def loop_plan(items: list[str]) -> Path:
        stamp = (f'echo "per@{{item}} start $(date +%s.%N)" >> {out}; while [ ! -e {opened} ]; do sleep 0.05; done; '
                 f'sleep 0.3; echo "per@{{item}} end $(date +%s.%N)" >> {out}')
        spec = {"name": "grown", "jobs": {
            "per": {"command": stamp, "for_each": items},
            "t": {"command": f'echo "t start $(date +%s.%N)" >> {out}', "depends_on": ["per"]}}}
        (tmp_path / "plan.yaml").write_text(json.dumps(spec))
        return tmp_path / "plan.yaml"

    # Given a run whose loop over [x, y] ended while its dependent t was held, stopped with SIGTERM
    plan = loop_plan(["x", "y"])
    sd = str(tmp_path / "sd")
    proc = start("run", str(plan), "--state-dir", sd)
    try:
        wait_for(lambda: job_states(Path(sd)).get("t") == "WAITING", what="the run to start")
        assert cli("hold", "t", "--state-dir", sd).returncode == 0
        opened.touch()
        wait_for(lambda: job_states(Path(sd)).get("per") == "SUCCEEDED", what="the loop to end")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
    finally:
        stop_proc(proc, grace=60)
    # When the plan lists [x, y, z], t is released, and the run resumes with the changed plan
    loop_plan(["x", "y", "z"])
    assert cli("release", "t", "--state-dir", sd).returncode == 0
    p = cli("resume", str(plan), "--state-dir", sd, "--accept-plan-change", "--json")
    # Then t waits for the loop's new instance, as a loop's dependents wait for the whole loop
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == dict.fromkeys(("per@x", "per@y", "per", "t", "per@z"), "SUCCEEDED")
    ev = read_evidence(out)
    assert ev["t"][0][1] >= ev["per@z"][-1][1], "t ran before the loop's new instance had ended"


def test_resume_refuses_removing_jobs_that_ran(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {"a": {}, "b": {"exit": 1}})
    sd = str(tmp_path / "sd")
    cli("run", str(plan), "--state-dir", sd)
    cli("retry", "b", "--state-dir", sd)
    evidence_plan(plan, out, {"b": {}})
    p = cli("run", str(plan), "--state-dir", sd, "--accept-plan-change")
    assert p.returncode == 2 and "removes job(s) that already ran: a" in p.stderr


@pytest.mark.parametrize("cmd", ["resume", "scheduler"])
def test_a_resume_of_a_directory_with_no_run_is_refused_and_creates_nothing(tmp_path: Path, cmd: str) -> None:
    # Given a mistyped state directory that does not exist, and an empty one
    for sd in (tmp_path / "typo_dir", tmp_path / "empty"):
        if sd.name == "empty":
            sd.mkdir()
        # When the run there is resumed
        p = cli(cmd, "--state-dir", str(sd))
        # Then it is refused in one line, and nothing is made there
        assert p.returncode == 2 and p.stderr.strip() == (f"wloadctl: no unfinished run to resume in {sd}"
                                                          f" (start one with `wloadctl run PLAN --state-dir {sd}`)")
        assert (not sd.exists()) if sd.name == "typo_dir" else list(sd.iterdir()) == []


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_journal_is_a_clear_error_never_a_fresh_start(tmp_path: Path, damage: str) -> None:
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {"a": {}})
    sd = tmp_path / "sd"
    cli("run", str(plan), "--state-dir", str(sd))
    db = sd / "journal.db"
    for extra in ("journal.db-wal", "journal.db-shm"):
        (sd / extra).unlink(missing_ok=True)
    data = db.read_bytes()
    db.write_bytes(b"this is not a database" * 50 if damage == "garbage" else data[: len(data) // 3])
    before = db.read_bytes()
    p = cli("run", str(plan), "--state-dir", str(sd))
    assert p.returncode == 3
    assert "journal" in p.stderr and ("corrupt" in p.stderr or "truncated" in p.stderr)
    assert "Traceback" not in p.stderr
    assert db.read_bytes() == before
    p = cli("status", "--state-dir", str(sd))
    assert p.returncode == 3 and "Traceback" not in p.stderr


def test_journal_records_every_transition_before_its_effect(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {"a": {}, "b": {"depends_on": ["a"]}})
    sd = tmp_path / "sd"
    cli("run", str(plan), "--state-dir", str(sd))
    con = sqlite3.connect(sd / "journal.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()
    with Store.open(sd, readonly=True) as st:
        run = st.latest_run()
        assert run is not None
        rows = st.transitions_since(run.id, 0)
    a_done = next(ts for _seq, idx, _f, to, _a, ts, *_ in rows if idx == 0 and to == 4)
    b_ready = next(ts for _seq, idx, _f, to, _a, ts, *_ in rows if idx == 1 and to == 1)
    assert a_done <= b_ready
    seqs = [r[0] for r in rows if r[1] == 1]
    assert seqs == sorted(seqs)
    assert len(seqs) == 4


def test_a_one_line_plan_keeps_no_encoded_copy_and_resumes_from_its_text(tmp_path: Path) -> None:
    plan = tmp_path / "gen.yaml"
    cli("gen", "--jobs", "60", "--shape", "bank", "--command", "sleep 0.15", "-o", str(plan), check=True)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "2")

    def some_done() -> bool:
        if not (sd / "journal.db").exists():
            return False
        try:
            return list(job_states(sd).values()).count("SUCCEEDED") >= 10
        except (json.JSONDecodeError, ValueError):
            return False

    wait_for(some_done, timeout=30, what="a run in the middle")
    run_id = status(sd)["run"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Store.open(sd, readonly=True) as st:
        run = st.latest_run()
        assert run is not None and st.plan_blob(run.id) is None
    p = cli("resume", "--state-dir", str(sd), "--json")
    assert p.returncode == 0, p.stderr
    assert set(json.loads(p.stdout)["jobs"].values()) == {"SUCCEEDED"}
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def test_a_result_written_while_the_scheduler_was_down_reaches_if_and_for_each(tmp_path: Path) -> None:
    # Given a job that writes its result (a branch to take and items to loop over) after a while
    gate = tmp_path / "go"
    out = tmp_path / "evidence"
    script = tmp_path / "decide.sh"
    script.write_text(f'while [ ! -e {gate} ]; do sleep 0.05; done\n'
                      'echo \'{"route": "b", "items": ["x", "y"]}\' > "$WLOADCTL_RESULT_FILE"\n')
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"""
name: results-across-a-crash
jobs:
  decide:
    command: [/bin/sh, {script}]
  branch_a:
    command: echo a >> {out}
    depends_on: [decide]
    if: 'jobs["decide"].result.route == "a"'
  branch_b:
    command: echo b >> {out}
    depends_on: [decide]
    if: 'jobs["decide"].result.route == "b"'
  fan:
    command: echo "fan {{item}}" >> {out}
    depends_on: [decide]
    for_each: jobs.decide.result.items
""")
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "2")
    wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("decide") == "RUNNING", timeout=30,
             what="decide running")
    run_id = status(sd)["run"]
    # When the scheduler is killed, and the job writes its result and ends while no scheduler runs
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gate.touch()
    wait_for(lambda: any(b'"route"' in p.read_bytes() for p in (sd / "results").rglob("*") if p.is_file()),
             timeout=30, what="the result file")
    p = cli("resume", "--state-dir", str(sd), "--json")
    # Then the resumed run reads that result: the branch it names runs, the other is skipped,
    # and the loop makes one instance per item
    assert p.returncode == 0, p.stderr
    jobs = json.loads(p.stdout)["jobs"]
    assert jobs["branch_a"] == "SKIPPED" and jobs["branch_b"] == "SUCCEEDED", jobs
    assert jobs["fan@x"] == "SUCCEEDED" and jobs["fan@y"] == "SUCCEEDED", jobs
    assert sorted(out.read_text().split("\n")) == ["", "b", "fan x", "fan y"]
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def _has_plan_copy(sd: Path) -> bool:
    try:
        with Store.open(sd, readonly=True) as st:
            run = st.latest_run()
            return run is not None and st.has_plan_copy(run.id)
    except NoJournalYet:  # the run is making its journal
        return False


@pytest.mark.parametrize("style", ["block", "flow"])
def test_a_resume_from_another_directory_runs_relative_cwd_jobs_in_the_plans_folder(tmp_path: Path,
                                                                                     style: str) -> None:
    """`run plan.yaml` in the plan's folder, a kill -9, `resume` from elsewhere: a job's `cwd: sub` still leads from
    the plan's folder, whether the resume reads the plan's encoded copy (block style) or its text (one-line jobs)."""
    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    (proj / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    # `a` runs until the test lets it end (after the kill): a loaded machine cannot end it before it is seen running.
    gate = f"until [ -e {proj / 'go'} ]; do sleep 0.05; done"
    if style == "block":
        text = (f"name: rel\njobs:\n  a:\n    command: '{gate}'\n  b:\n    command: 'pwd > where.txt'\n"
                "    depends_on: [a]\n    cwd: sub\n")
    else:
        text = (f"name: rel\njobs:\n  a: {{command: '{gate}'}}\n"
                "  b: {command: 'pwd > where.txt', depends_on: [a], cwd: sub}\n")
    (proj / "plan.yaml").write_text(text)
    sd = proj / "sd"
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", "plan.yaml", "--state-dir", "sd"], cwd=proj,
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: (sd / "journal.db").exists() and _has_plan_copy(sd), what="the plan's copy journaled")
        run_id = status(sd)["run"]
        assert job_states(sd)["a"] == "RUNNING"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        (proj / "go").touch()
    p = subprocess.run([sys.executable, "-m", "wloadctl", "resume", "--state-dir", str(sd), "--json"], cwd=elsewhere,
                       env=ENV, capture_output=True, text=True, timeout=120)
    reap_orphans(run_id)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"a": "SUCCEEDED", "b": "SUCCEEDED"}
    assert (proj / "sub" / "where.txt").read_text().strip() == str(proj / "sub")
    assert ipc_names(run_id) == []


def test_a_resume_from_another_directory_runs_jobs_without_a_cwd_where_the_run_started(tmp_path: Path) -> None:
    """A job without `cwd:` runs in the directory the run was started from, whatever directory a resume comes from
    and whether the run's executors are still there: one run's jobs do not run in two places."""
    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    proj.mkdir()
    elsewhere.mkdir()
    (proj / "plan.yaml").write_text("name: here\njobs:\n  a: {command: 'pwd > a.txt; sleep 1'}\n"
                                    "  b: {command: 'pwd > b.txt', depends_on: [a]}\n")
    sd = proj / "sd"
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", "plan.yaml", "--state-dir", "sd"], cwd=proj,
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: (proj / "a.txt").exists(), what="a started")
        run_id = status(sd)["run"]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    kill_all(executor_pids(run_id))  # the resume starts executors of its own
    reap_orphans(run_id)
    p = subprocess.run([sys.executable, "-m", "wloadctl", "resume", "--state-dir", str(sd), "--json"], cwd=elsewhere,
                       env=ENV, capture_output=True, text=True, timeout=120)
    reap_orphans(run_id)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"a": "SUCCEEDED", "b": "SUCCEEDED"}
    assert (proj / "b.txt").read_text().strip() == str(proj) and not (elsewhere / "b.txt").exists()
    assert ipc_names(run_id) == []


def test_a_resume_says_so_when_the_directory_the_run_started_from_is_gone(tmp_path: Path) -> None:
    start_dir, elsewhere, sd = tmp_path / "start", tmp_path / "elsewhere", tmp_path / "sd"
    start_dir.mkdir()
    elsewhere.mkdir()
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: gone\njobs:\n  a: {command: 'sleep 2'}\n  b: {command: 'pwd', depends_on: [a]}\n")
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                            cwd=start_dir, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("a") == "RUNNING", what="a running")
        run_id = status(sd)["run"]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    kill_all(executor_pids(run_id))
    reap_orphans(run_id)
    start_dir.rmdir()
    p = subprocess.run([sys.executable, "-m", "wloadctl", "resume", "--state-dir", str(sd)], cwd=elsewhere, env=ENV,
                       capture_output=True, text=True, timeout=120)
    reap_orphans(run_id)
    assert p.returncode == 0, p.stderr
    assert f"wloadctl: the run's directory {start_dir} is gone: its jobs without a cwd: run in {elsewhere}" \
        in p.stderr.splitlines(), p.stderr
    assert cli("logs", "b", "--state-dir", str(sd)).stdout.strip() == str(elsewhere)
    assert ipc_names(run_id) == []


def _starts_in(reasons: list[str]) -> float:
    """The seconds `why` says a job held by its not-before time may start in."""
    head = "not before 23:59+1d: it may start in "
    said = [r.removeprefix(head) for r in reasons if r.startswith(head)]
    assert len(said) == 1, reasons
    return parse_duration(said[0])


def test_why_of_a_job_of_an_interrupted_run_says_no_scheduler_dispatches_it(tmp_path: Path) -> None:
    """READY with every slot free is no reason of its own when the run's scheduler is gone: `why` says the run is
    interrupted and how it goes on, not that the job waits for a slot."""
    plan = tmp_path / "plan.yaml"
    # (a zone far from this host's: its not-before is read in the plan's zone, live and from the journal alike)
    plan.write_text("name: later\ntimezone: Pacific/Kiritimati\njobs:\n  first: {command: 'true'}\n"
                    "  late: {command: 'true', depends_on: [first], not_before: '23:59+1d'}\n")
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("late") == "READY", what="late READY")
        run_id = status(sd)["run"]
        live = json.loads(cli("why", "late", "--state-dir", str(sd), "--json").stdout)
        live_left = _starts_in(live["reasons"])
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    kill_all(executor_pids(run_id))
    why = json.loads(cli("why", "late", "--state-dir", str(sd), "--json").stdout)
    assert why["state"] == "READY"
    assert why["reasons"][0] == (f"the run is interrupted: no scheduler dispatches its jobs now (`wloadctl resume "
                                 f"--state-dir {sd}` goes on)"), why
    assert not any("free slot" in r for r in why["reasons"]), why
    # and says when the job may start, as the scheduler did (a few seconds later)
    assert 0 <= live_left - _starts_in(why["reasons"]) < 30, (live_left, why)
    # a pattern is answered by the core rebuilt from the journal, the same way
    globbed = json.loads(cli("why", "la*", "--state-dir", str(sd), "--json").stdout)
    # (the countdown a second later may read a second less)
    assert [r for r in globbed["reasons"] if not r.startswith("not before")] == \
        [r for r in why["reasons"] if not r.startswith("not before")], (globbed, why)
    assert 0 <= _starts_in(why["reasons"]) - _starts_in(globbed["reasons"]) < 30, (globbed, why)
    # and that resume goes on: the job skipped meanwhile, the run ends and leaves nothing
    assert cli("skip", "late", "--state-dir", str(sd)).returncode == 0
    p = cli("resume", "--state-dir", str(sd), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"first": "SUCCEEDED", "late": "SKIPPED"}
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def test_a_predecessors_late_hand_back_of_a_job_sent_again_since_does_not_run_it_twice(tmp_path: Path) -> None:
    """A report of the killed scheduler's epoch that reaches its successor after the successor sent the same job
    (same attempt number: a hand-back or a loss before start costs none) is of the earlier copy: it must not put
    the running copy back in the queue."""
    from wloadctl.ipc import protocol as P
    from wloadctl.ipc.mq import MessageQueue
    from wloadctl.ipc.naming import ROLE_RESPONSE

    out, gate = tmp_path / "evidence", tmp_path / "go"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {"first": {"sleep": 0.1, "gate": gate},
                                                       "x": {"depends_on": ["first"], "sleep": 1.5}})
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    wait_for(lambda: job_states(sd).get("first") == "RUNNING", what="first running")
    run_id, old_epoch = status(sd)["run"], status(sd)["epoch"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = start("resume", "--state-dir", str(sd))
    try:
        wait_for(lambda: status(sd)["epoch"] > old_epoch and status(sd)["live"], what="the resume live")
        gate.touch()
        wait_for(lambda: job_states(sd).get("x") == "RUNNING", what="x sent again and running")
        with Store.open(sd, readonly=True) as st:
            index = st.job_ids(st.latest_run().id).index("x")
        # When the predecessor's hand-back of x, attempt 1, arrives late on the response queue
        q = MessageQueue.open(object_name(run_id, ROLE_RESPONSE))
        now = time.time()
        q.send(P.encode_results([P.ResultRecord(P.RES_EXITED, P.FLAG_LOST | P.FLAG_RETURNED, 0, index, 1, 0, 0,
                                                old_epoch, 0, now, now, 0, 0)]), 5.0)
        q.close()
        assert resumed.wait(timeout=60) == 0
    finally:
        gate.touch()
        stop_proc(resumed)
    # Then x ran once, and its history says nothing of a hand-back
    ev = read_evidence(out)
    assert [k for k, _ in ev["x"]] == ["start", "end"], ev["x"]
    assert job_states(sd) == {"first": "SUCCEEDED", "x": "SUCCEEDED"}
    hist = cli("history", "x", "--state-dir", str(sd)).stdout
    assert "handed back" not in hist and "lost" not in hist, hist
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def test_a_job_stopped_with_the_run_resumed_then_the_scheduler_killed_takes_its_real_end(tmp_path: Path) -> None:
    """Stop (SIGTERM) while a job runs, resume (the job is sent again under the same attempt), kill -9 of that
    scheduler, resume again: the end the first copy journaled when the stop killed it is not the second copy's."""
    out, gate = tmp_path / "evidence", tmp_path / "go"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {"first": {"sleep": 0.1},
                                                       "long": {"depends_on": ["first"], "sleep": 0.2, "gate": gate}})
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    wait_for(lambda: job_states(sd).get("long") == "RUNNING", what="long running")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    assert job_states(sd)["long"] == "READY"
    second = start("resume", "--state-dir", str(sd))
    wait_for(lambda: job_states(sd).get("long") == "RUNNING" and status(sd)["live"], what="long running again")
    run_id = status(sd)["run"]
    os.kill(second.pid, signal.SIGKILL)
    second.wait()
    third = start("resume", "--state-dir", str(sd))
    try:
        wait_for(lambda: status(sd)["live"] and job_states(sd).get("long") == "RUNNING", what="the third live")
        gate.touch()
        assert third.wait(timeout=60) == 0
    finally:
        gate.touch()  # a copy left running on a failure ends too
        stop_proc(third)
    assert job_states(sd) == {"first": "SUCCEEDED", "long": "SUCCEEDED"}
    hist = cli("history", "long", "--state-dir", str(sd)).stdout
    assert "FAILED" not in hist and "signal 15" not in hist.split("interrupted: run stopped")[-1], hist
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_job_a_resume_left_running_on_its_executor_is_lost_with_that_executor(
        tmp_path: Path, idempotent: bool) -> None:
    # Given a run whose scheduler was killed while a job ran, resumed with that job left to its live executor
    gate, out, sd = tmp_path / "go", tmp_path / "evidence", tmp_path / "sd"
    jobs = {"long": {"gate": str(gate), **({} if idempotent else {"idempotent": False})},
            "next": {"depends_on": ["long"]}}
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs)
    first = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    resumed = None
    try:
        wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("long") == "RUNNING", what="long")
        run_id = status(sd)["run"]
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        resumed = start("resume", "--state-dir", str(sd))
        # (the resumed scheduler knows the executor running it: a restored job's executor was unknown, -1)
        # (`why` of the stopped run reads the executor from the journal too: the scheduler must be live)
        wait_for(lambda: status(sd)["live"] and "on executor 0" in cli("why", "long", "--state-dir", str(sd)).stdout,
                 timeout=30, what="the resumed scheduler to take long as its executor's")
        # When that executor dies
        kill_all(executor_pids(run_id))
        if idempotent:
            # Then the job is lost with it and runs again (its first copy stopped first: the gate opens only once
            # the second runs, so a first copy left alive would write its end), and the run ends
            wait_for(lambda: any(j["job"] == "long" and j["attempt"] == 2 and j["state"] == "RUNNING"
                                 for j in status(sd)["jobs"]), timeout=30, what="long running again")
            gate.touch()
            assert resumed.wait(60) == 0
            assert [k for k, _ in read_evidence(out)["long"]] == ["start", "start", "end"]
        else:
            # Then the job, which may not run twice, is held for an operator, not left RUNNING for good
            wait_for(lambda: job_states(sd).get("long") == "HELD", timeout=30, what="long held")
            assert [k for k, _ in read_evidence(out)["long"]] == ["start"]
            # and the operator who skips it has the run end
            assert cli("skip", "long", "--state-dir", str(sd)).returncode == 0
            assert resumed.wait(60) == 0
    finally:
        gate.touch()
        stop_proc(first)
        if resumed is not None:
            stop_proc(resumed)
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def test_why_of_a_job_waiting_for_its_retry_names_the_failure_after_a_resume(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: rw\njobs:\n  rw: {command: 'exit 1', retries: {count: 2, delay: 1m, backoff: 1, "
                    "jitter: 0}}\n")
    sd = tmp_path / "sd"
    first = start("run", str(plan), "--state-dir", str(sd))
    resumed = None
    try:
        wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("rw") == "RETRY_WAIT", what="the retry")
        run_id = status(sd)["run"]
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 130
        resumed = start("resume", "--state-dir", str(sd))
        wait_for(lambda: status(sd).get("live"), what="the resumed scheduler")
        said = json.loads(cli("why", "rw", "--state-dir", str(sd), "--json").stdout)["reasons"][0]
        # (the resumed scheduler said "in retry delay after attempt 1: ; becomes READY in ...")
        assert said.startswith("in retry delay after attempt 1: exit status 1; retry 1/2 in 60.0s; becomes READY"), said
    finally:
        stop_proc(first)
        if resumed is not None:
            resumed.send_signal(signal.SIGTERM)
            resumed.wait(30)
            stop_proc(resumed)
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def _crash_with_an_old_journal(tmp_path: Path, idempotent: bool) -> tuple[Path, Path, str]:
    """A run whose journal lost its last committed turns (a write-ahead log damaged or removed): its journal as
    it stood before `pay` was dispatched, put back after `pay` ran and the run (scheduler and executors) was
    killed while `wait` ran. Returns (state dir, evidence file, run id)."""
    gate0, gate1, out, sd = tmp_path / "go0", tmp_path / "go1", tmp_path / "evidence", tmp_path / "sd"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {
        "open": {"gate": str(gate0)},
        "also": {},
        # (two upstreams: not sent ahead to follow `open` on its executor, so not dispatched before open ends)
        "pay": {"depends_on": ["open", "also"], **({} if idempotent else {"idempotent": False})},
        "wait": {"depends_on": ["pay"], "gate": str(gate1)}})
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1")
    run_id = ""
    try:
        wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("open") == "RUNNING", what="open")
        run_id = status(sd)["run"]
        old = tmp_path / "old.db"
        with contextlib.closing(sqlite3.connect(sd / "journal.db")) as src, \
                contextlib.closing(sqlite3.connect(old)) as dst:
            src.backup(dst)  # the journal as it stands: pay not dispatched yet
        gate0.touch()
        wait_for(lambda: job_states(sd).get("wait") == "RUNNING", what="wait running, pay done")
        kill_all([proc.pid, *executor_pids(run_id)])
        proc.wait()
    finally:
        gate1.touch()  # the copy of `wait` left running by the kill ends
        stop_proc(proc, run_id=run_id)
    wait_for(lambda: read_evidence(out).get("wait", [("", 0.0)])[-1][0] == "end", what="the old wait ended")
    for name in ("journal.db-wal", "journal.db-shm"):
        (sd / name).unlink(missing_ok=True)
    os.replace(tmp_path / "old.db", sd / "journal.db")
    gate1.unlink()
    return sd, out, run_id


def test_a_resume_over_a_journal_that_lost_a_not_idempotent_jobs_run_refuses_and_runs_nothing(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    # (the resume ran `pay`, which may not run twice, a second time, and said nothing: its journal had lost it)
    sd, out, run_id = _crash_with_an_old_journal(tmp_path, idempotent=False)
    before = out.read_text()
    p = cli("resume", "--state-dir", str(sd), timeout=60)
    assert p.returncode == 3, p.stdout + p.stderr
    assert ("the run's journal is behind what its executors recorded: 1 job(s) that may not run twice ran "
            "attempts it does not hold (pay)") in p.stderr
    assert "nothing was dispatched" in p.stderr and "Traceback" not in p.stderr
    assert out.read_text() == before  # nothing ran
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def test_a_resume_over_a_journal_that_lost_idempotent_runs_says_so_and_runs_them_again(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    sd, out, run_id = _crash_with_an_old_journal(tmp_path, idempotent=True)
    (tmp_path / "go1").touch()
    p = cli("resume", "--state-dir", str(sd), timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ("2 job(s) ran attempts the journal does not hold (its last turns were lost: a power failure, or a "
            "damaged journal.db-wal?): they run again") in p.stderr
    assert [k for k, _ in read_evidence(out)["pay"]] == ["start", "end", "start", "end"]
    # (its last line gave the resume's time alone, read as the run's)
    assert re.search(r"in [0-9.]+s \([0-9.]+s since the run started; state dir ", p.stdout), p.stdout
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def test_a_quiet_resume_over_a_journal_that_lost_idempotent_runs_still_says_they_run_again(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    # (under --quiet the jobs ran a second time with nothing said, on the terminal or in the run's events, and
    # their history shows one attempt)
    sd, _out, run_id = _crash_with_an_old_journal(tmp_path, idempotent=True)
    (tmp_path / "go1").touch()
    p = cli("resume", "--state-dir", str(sd), "--quiet", timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    note = ("2 job(s) ran attempts the journal does not hold (its last turns were lost: a power failure, or a "
            "damaged journal.db-wal?): they run again")
    assert note in p.stderr and "Traceback" not in p.stderr
    events = [json.loads(line) for line in (sd / "events.jsonl").read_text().splitlines()]
    assert [e["note"] for e in events if e["event"] == "journal_behind"] == [note]
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def test_a_new_run_or_a_resume_over_a_journal_that_lost_its_runs_refuses(tmp_path: Path, no_ipc_leaks: None) -> None:
    # (with journal.db-wal removed before any checkpoint the journal held no run, and `run` did every job again)
    sd, out, run_id = _crash_with_an_old_journal(tmp_path, idempotent=False)
    try:
        for name in ("journal.db-wal", "journal.db-shm"):
            (sd / name).unlink(missing_ok=True)
        (sd / "journal.db").write_bytes(b"")  # as a write-ahead log removed before the first checkpoint leaves it
        before = out.read_text()
        # (status said the journal was empty because the scheduler making it was gone, and to start a run afresh)
        p = cli("status", "--state-dir", str(sd), timeout=60)
        assert p.returncode == 3, p.stdout + p.stderr
        assert f"{sd} holds what the executors of run {run_id} recorded" in p.stderr
        assert "journal.db-wal removed or damaged?" in p.stderr and "afresh" in p.stderr and "Traceback" not in p.stderr
        # (resume said there was no unfinished run there, and to start one with `run`)
        p = cli("resume", "--state-dir", str(sd), timeout=60)
        assert p.returncode == 3, p.stdout + p.stderr
        assert f"{sd} holds what the executors of run {run_id} recorded" in p.stderr
        assert "journal.db-wal removed or damaged?" in p.stderr and "no unfinished run" not in p.stderr
        p = cli("run", str(tmp_path / "plan.yaml"), "--state-dir", str(sd), timeout=60)
        assert p.returncode == 3, p.stdout + p.stderr
        assert (f"{sd} holds what the executors of run {run_id} recorded, but its journal {sd / 'journal.db'} has "
                "no such run") in p.stderr
        assert "journal.db-wal removed or damaged?" in p.stderr and "restore journal.db and journal.db-wal" in p.stderr
        assert out.read_text() == before
        # Moved away on purpose, a new run starts there
        os.rename(sd / "executors", tmp_path / "old-executors")
        (tmp_path / "go0").touch()
        (tmp_path / "go1").touch()
        assert cli("run", str(tmp_path / "plan.yaml"), "--state-dir", str(sd), timeout=60).returncode == 0
    finally:
        # The crashed run's queues and segments: no journal names it any more (no_ipc_leaks cannot see it), and a
        # start within seconds of its crash keeps them, as those of a run that may be starting (DEFAULT_GRACE).
        assert not run_is_alive(run_id)
        remove_run_objects(run_id)

