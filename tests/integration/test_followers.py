"""Chains of short jobs sent a chain at a time (followers), with real executors: order, failures, kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.integration.helpers import (
    cli,
    evidence_plan,
    executor_pids,
    read_evidence,
    start,
    status,
    stop_proc,
    wait_for,
)

pytestmark = pytest.mark.ipc


def _chain(n: int, **extra: dict) -> dict[str, dict]:
    jobs: dict[str, dict] = {"c000": {}}
    for k in range(1, n):
        jobs[f"c{k:03d}"] = {"depends_on": [f"c{k - 1:03d}"]}
    for jid, keys in extra.items():
        jobs[jid].update(keys)
    return jobs


def _in_order(ev: dict[str, list[tuple[str, float]]], names: list[str]) -> None:
    """Every job ended once, and its last start came after the end of the job before it."""
    for k, jid in enumerate(names):
        kinds = [what for what, _ in ev[jid]]
        assert kinds.count("end") == 1, (jid, ev[jid])
        if k:
            last_start = max(t for what, t in ev[jid] if what == "start")
            assert last_start >= ev[names[k - 1]][-1][1], f"{jid} started before {names[k - 1]} ended"


def test_a_chain_runs_in_order_through_followers_and_a_failure_stops_the_rest(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    jobs = _chain(60, c040={"exit": 3})
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs)
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "1", "--json")
    assert p.returncode == 1, p.stderr
    states = json.loads(p.stdout)["jobs"]
    names = list(jobs)
    assert [states[j] for j in names[:40]] == ["SUCCEEDED"] * 40
    assert states["c040"] == "FAILED"
    assert {states[j] for j in names[41:]} == {"UPSTREAM_FAILED"}
    ev = read_evidence(out)
    assert sorted(ev) == names[:41], "nothing after the failed job started"
    _in_order(ev, names[:41])
    # Most of the chain went out behind the job before it: the event log says so, job by job.
    events = [json.loads(x) for x in (sd / "events.jsonl").read_text().splitlines()]
    followed = {e["job"] for e in events if e.get("reason", "").startswith("follows c0")}
    assert len(followed & set(names[1:40])) >= 20, sorted(followed)
    # The jobs the executor held behind the failed one came back unstarted and were never run.
    h = cli("history", "c041", "--state-dir", str(sd)).stdout
    assert "handed back unstarted behind c040" in h and "-> UPSTREAM_FAILED" in h and "-> RUNNING" not in h, h
    # And it reads as never run, not as a failed attempt: its attempt number counted the dispatch only
    assert h.splitlines()[0] == "c041: UPSTREAM_FAILED, never ran; 1 dispatch(es) handed back unstarted", h
    told = json.loads(cli("history", "c041", "--state-dir", str(sd), "--json").stdout)
    assert (told["attempts"], told["attempt"], told["unstarted"]) == (0, 1, 1)
    logs = cli("logs", "c041", "--attempt", "1", "--state-dir", str(sd))
    assert logs.returncode == 0 and "c041 attempt 1 never started (no process ran)" in logs.stderr, logs.stderr


def test_a_follower_handed_back_then_run_once_reads_as_one_attempt(tmp_path: Path, no_ipc_leaks: None) -> None:
    import yaml

    # Given a chain whose c040 fails once, then succeeds on its retry
    out, once = tmp_path / "ev", tmp_path / "failed-once"
    plan = evidence_plan(tmp_path / "plan.yaml", out, _chain(60, c040={"retries": {"count": 1, "delay": "0s"}}))
    spec = yaml.safe_load(plan.read_text())
    spec["jobs"]["c040"]["command"] = f"[ -e {once} ] || {{ touch {once}; exit 3; }}"
    plan.write_text(yaml.safe_dump(spec, sort_keys=False))
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "1")
    assert p.returncode == 0, p.stderr
    # When the job held behind its first attempt came back unstarted and ran once after the retry
    h = cli("history", "c041", "--state-dir", str(sd)).stdout
    assert "handed back unstarted behind c040" in h and h.count("-> RUNNING") == 1, h
    # Then it reads as run once, on attempt 2, with the dispatch that came back said as such
    assert h.splitlines()[0] == ("c041: SUCCEEDED after 1 attempt(s) (attempt 2); "
                                 "1 dispatch(es) handed back unstarted"), h
    why = cli("why", "c041", "--state-dir", str(sd)).stdout
    assert "  - succeeded on attempt 2\n" in why, why
    logs = cli("logs", "c041", "--attempt", "1", "--state-dir", str(sd))
    assert "c041 attempt 1 never started (no process ran)" in logs.stderr, logs.stderr


def test_kill_9_of_the_executor_running_a_chain_every_job_still_ends_once_in_order(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    proc, out, sd, jobs = _started_chain(tmp_path, 100, 40)
    try:
        run_id = str(status(sd)["run"])
        # The executor running the chain now (the one with a job process) dies.
        victims = [pid for pid in executor_pids(run_id) if _descendants(pid)]
        victim = victims[0] if victims else executor_pids(run_id)[0]
        os.kill(victim, signal.SIGKILL)
        assert proc.wait(120) == 0
    finally:
        stop_proc(proc)
    ev = read_evidence(out)
    assert sorted(ev) == list(jobs)
    # Only the job running on the victim when it died may have run twice (its end was not on record yet).
    twice = [jid for jid, lines in ev.items() if [k for k, _ in lines].count("start") > 1]
    assert len(twice) <= 1, twice
    for jid in twice:
        ev[jid] = [x for x in ev[jid] if x[1] >= max(t for k, t in ev[jid] if k == "start")]
    _in_order(ev, list(jobs))
    assert json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["status"] == "succeeded"


def test_kill_9_of_the_scheduler_mid_chain_then_resume_every_job_ends_once_in_order(tmp_path: Path) -> None:
    proc, out, sd, jobs = _started_chain(tmp_path, 90, 30)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        stop_proc(proc)
    # The executors carry on with what they hold; the resumed scheduler takes them over.
    p = cli("resume", "--state-dir", str(sd), "--json", timeout=120)
    assert p.returncode == 0, p.stderr
    assert set(json.loads(p.stdout)["jobs"].values()) == {"SUCCEEDED"}
    ev = read_evidence(out)
    assert sorted(ev) == list(jobs)
    _in_order(ev, list(jobs))
    run_id = json.loads(p.stdout)["run"]
    wait_for(lambda: not executor_pids(run_id), timeout=15, what="the executors to exit")


def _started_chain(tmp_path: Path, n: int, started: int) -> tuple[subprocess.Popen[bytes], Path, Path, dict]:
    """A chain of n jobs of 10 ms run on 2 executors of one slot, once `started` of them have started."""
    out = tmp_path / "ev"
    jobs = _chain(n)
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs, sleep=0.01)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "1")
    try:
        wait_for(lambda: len(read_evidence(out)) >= started, timeout=60, what=f"{started} jobs of the chain started")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, out, sd, jobs


def _descendants(pid: int) -> list[int]:
    """Child processes of pid (and theirs)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            continue
        found += kids
        todo += kids
    return found


def test_followers_behind_a_long_job_come_back_unstarted_and_run_after_it(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    jobs = _chain(12, c003={"sleep": 0.6})
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs)
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "1", "--json")
    assert p.returncode == 0, p.stderr
    ev = read_evidence(out)
    _in_order(ev, list(jobs))
    # The jobs sent behind c003 waited 50 ms there, went back to waiting at the scheduler, and ran once after it.
    h = cli("history", "c004", "--state-dir", str(sd)).stdout
    assert "handed back unstarted behind c003" in h and h.count("-> RUNNING") == 1, h
