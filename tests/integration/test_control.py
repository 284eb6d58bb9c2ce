"""Operator verbs against live runs (through the control socket) and finished ones (on the journal), with audit."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import (
    ENV,
    cli,
    evidence_plan,
    job_states,
    read_evidence,
    start,
    stop_proc,
    wait_for,
)

pytestmark = pytest.mark.ipc


def states_of(sd: Path) -> dict[str, str]:
    try:
        return job_states(sd)
    except (json.JSONDecodeError, ValueError):
        return {}


def test_hold_before_start_stays_held_while_others_run_then_release_runs_it(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    first, second = tmp_path / "extract.go", tmp_path / "batch.go"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {
        "extract": {"gate": str(first)}, "post": {"depends_on": ["extract"], "sleep": 0},
        "long_batch": {"gate": str(second)}})
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: states_of(sd).get("extract") == "RUNNING", what="extract running")
        p = cli("hold", "post", "--state-dir", str(sd), "--reason", "waiting for the GL team")
        assert p.returncode == 0, p.stderr
        assert "held" in p.stdout
        first.touch()
        wait_for(lambda: states_of(sd).get("extract") == "SUCCEEDED", what="extract done")
        time.sleep(0.5)
        st = states_of(sd)
        assert st["post"] == "HELD" and st["long_batch"] == "RUNNING"
        why = json.loads(cli("why", "post", "--state-dir", str(sd), "--json").stdout)
        assert why["reasons"][0].startswith("held: held by") and "GL team" in why["reasons"][0]
        second.touch()
        assert cli("release", "post", "--state-dir", str(sd)).returncode == 0
        assert proc.wait(30) == 0
    finally:
        first.touch()
        second.touch()
        stop_proc(proc)
    ev = read_evidence(out)
    assert ev["post"][0][1] > ev["extract"][1][1]
    audit = json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout)
    assert [(a["verb"], a["job"], a["applied"]) for a in audit] == [("hold", "post", True), ("release", "post", True)]
    assert audit[0]["reason"] == "waiting for the GL team" and audit[0]["user"]


def test_kill_a_sleeping_job_ends_it_failed_as_killed(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {"sleeper": {"sleep": 60}})
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: states_of(sd).get("sleeper") == "RUNNING", what="sleeper running")
        p = cli("kill", "sleeper", "--state-dir", str(sd), "--reason", "runaway")
        assert p.returncode == 0, p.stderr
        assert proc.wait(20) == 1
    finally:
        stop_proc(proc)
    why = json.loads(cli("why", "sleeper", "--state-dir", str(sd), "--json").stdout)
    assert why["state"] == "FAILED" and "killed by" in why["reasons"][0] and "runaway" in why["reasons"][0]


def test_refused_verbs_name_the_job_its_state_and_what_would_apply(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {"a": {}, "b": {"exit": 1}})
    sd = str(tmp_path / "sd")
    cli("run", str(plan), "--state-dir", sd)
    p = cli("release", "a", "--state-dir", sd)
    assert p.returncode == 1
    assert "refused: job 'a' is SUCCEEDED: release does not apply; rerun would apply" in p.stderr
    # (a resume of the ended run would be refused: the kill does not send the operator there)
    p = cli("kill", "b", "--state-dir", sd)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert "kill needs a live scheduler and run " in p.stderr and " has ended (failed): none of its jobs runs" \
        in p.stderr, p.stderr
    assert f"`wloadctl rerun JOB --state-dir {sd}`, then `wloadctl resume --state-dir {sd}`, runs a job again" \
        in p.stderr, p.stderr
    p = cli("hold", "nosuchjob", "--state-dir", sd)
    assert p.returncode == 1 and "unknown job(s): nosuchjob" in p.stderr
    p = cli("hold", "zz*", "nosuchjob", "--state-dir", sd)
    assert p.returncode == 1 and p.stderr == "wloadctl: unknown job(s): nosuchjob; no job matches 'zz*'\n"
    p = cli("frobnicate", "a", "--state-dir", sd)
    assert p.returncode == 2 and "unknown command 'frobnicate' (choose from validate," in p.stderr
    assert "Traceback" not in p.stderr and "_complete" not in p.stderr and len(p.stderr.splitlines()) == 1
    p = cli("reelase", "a", "--state-dir", sd)
    assert p.returncode == 2 and "unknown command 'reelase' (did you mean 'release'?" in p.stderr
    audit = json.loads(cli("audit", "--state-dir", sd, "--json").stdout)
    assert [(a["verb"], a["applied"]) for a in audit] == [("release", False), ("hold", False), ("hold", False)]
    assert audit[-1]["outcome"] == "unknown job(s): nosuchjob; no job matches 'zz*'"


def test_rerun_downstream_on_a_finished_run_reruns_exactly_the_descendants(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {
        "open": {}, "load": {"depends_on": ["open"]}, "post": {"depends_on": ["load"]},
        "report": {"depends_on": ["post"]}, "fx": {"depends_on": ["open"]}})
    sd = str(tmp_path / "sd")
    assert cli("run", str(plan), "--state-dir", sd).returncode == 0
    p = cli("rerun", "load", "--downstream", "--state-dir", sd, "--reason", "bad input file")
    assert p.returncode == 0, p.stderr
    assert "will run again with 2 downstream job(s)" in p.stdout and "wloadctl resume" in p.stdout
    assert cli("resume", "--state-dir", sd).returncode == 0
    runs = {j: [k for k, _ in v].count("start") for j, v in read_evidence(out).items()}
    assert runs == {"open": 1, "load": 2, "post": 2, "report": 2, "fx": 1}


def test_set_ok_unblocks_dependents_of_a_failed_job(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {"feed": {"exit": 1}, "post": {"depends_on": ["feed"]}})
    sd = str(tmp_path / "sd")
    assert cli("run", str(plan), "--state-dir", sd).returncode == 1
    assert job_states(Path(sd))["post"] == "UPSTREAM_FAILED"
    assert cli("set-ok", "feed", "--state-dir", sd, "--reason", "loaded by hand").returncode == 0
    assert job_states(Path(sd)) == {"feed": "SUCCEEDED", "post": "WAITING"} or \
        job_states(Path(sd))["post"] in ("READY", "WAITING")
    assert cli("resume", "--state-dir", sd).returncode == 0
    assert job_states(Path(sd)) == {"feed": "SUCCEEDED", "post": "SUCCEEDED"}
    assert [k for k, _ in read_evidence(out)["feed"]].count("start") == 1


def test_two_operators_at_once_one_wins_the_other_is_refused(tmp_path: Path, no_ipc_leaks: None) -> None:
    gate = tmp_path / "a.go"
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {
        "a": {"gate": str(gate)}, "b": {"depends_on": ["a"]}})
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: states_of(sd).get("a") == "RUNNING", what="a running")
        ops = [subprocess.Popen([sys.executable, "-m", "wloadctl", "hold", "b", "--state-dir", str(sd)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
               for _ in range(2)]
        results = [(o.wait(30), o.stdout.read(), o.stderr.read()) for o in ops]  # type: ignore[union-attr]
        for o in ops:
            o.stdout.close()  # type: ignore[union-attr]
            o.stderr.close()  # type: ignore[union-attr]
        codes = sorted(r[0] for r in results)
        assert codes == [0, 1], results
        loser = next(r for r in results if r[0] == 1)
        assert "job 'b' is HELD: hold does not apply" in loser[2]
        gate.touch()
        cli("release", "b", "--state-dir", str(sd))
        assert proc.wait(30) == 0
    finally:
        gate.touch()
        stop_proc(proc)


def test_why_explains_unmet_dependencies_and_lineage(tmp_path: Path, no_ipc_leaks: None) -> None:
    gate = tmp_path / "a.go"
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {
        "a": {"gate": str(gate)}, "b": {}, "c": {"depends_on": ["a", "b"]}, "d": {"depends_on": ["c"]}})
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: states_of(sd).get("b") == "SUCCEEDED" and states_of(sd).get("a") == "RUNNING",
                 what="b done, a running")
        why = json.loads(cli("why", "c", "--state-dir", str(sd), "--json").stdout)
        assert why["state"] == "WAITING"
        assert why["blocking"] == [{"job": "a", "state": "RUNNING", "needs": "success"}]
        assert "waiting for 1 of 2 dependencies: a (RUNNING)" in why["reasons"][0]
        gate.touch()
        assert proc.wait(30) == 0
    finally:
        gate.touch()
        stop_proc(proc)
    lin = json.loads(cli("lineage", "c", "--state-dir", str(sd), "--json").stdout)
    assert lin == {"job": "c", "upstream": ["a", "b"], "downstream": ["d"]}
    events = [json.loads(x) for x in (sd / "events.jsonl").read_text().splitlines()]
    c_events = [e for e in events if e["job"] == "c" and e["event"] == "transition"]
    assert {e["trace"] for e in c_events if e["attempt"] == 1} == {f"{e['run']}.2.1" for e in c_events[:1]}


def test_logs_follow_streams_a_running_job_until_it_ends(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = tmp_path / "plan.yaml"
    gate = tmp_path / "more.go"
    plan.write_text("name: logs\njobs:\n  talker:\n    command: 'echo line1; "
                    f"while [ ! -e {gate} ]; do sleep 0.05; done; echo line2; sleep 0.3; echo line3'\n")
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: states_of(sd).get("talker") == "RUNNING", what="talker running")
        follow = subprocess.Popen([sys.executable, "-m", "wloadctl", "logs", "talker", "--follow", "--state-dir",
                                   str(sd)], stdout=subprocess.PIPE, text=True, env=ENV)
        time.sleep(0.5)
        gate.touch()
        out, _ = follow.communicate(timeout=30)
        assert out.split() == ["line1", "line2", "line3"]
        assert proc.wait(30) == 0
    finally:
        gate.touch()
        stop_proc(proc)
    p = cli("logs", "talker", "--attempt", "2", "--state-dir", str(sd))
    assert p.returncode == 1 and "there is no attempt 2" in p.stderr
    for bad in ("0", "-1"):
        p = cli("logs", "talker", "--attempt", bad, "--state-dir", str(sd))
        assert p.returncode == 2 and f"argument --attempt: '{bad}': attempts are numbered from 1" in p.stderr


def test_audit_of_a_run_without_operator_actions_says_so(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: quiet\njobs:\n  a: {command: 'true'}\n")
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 0
    p = cli("audit", "--state-dir", str(sd))
    run_id = json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["run"]
    assert (p.returncode, p.stdout) == (0, f"no operator actions in run {run_id}\n"), p
    assert json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout) == []


def test_a_verb_meant_for_a_finished_run_reaches_neither_it_nor_the_run_started_in_its_directory_since(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    from wloadctl.client import RunClient
    from wloadctl.errors import ControlError
    from wloadctl.ipc import ctlsock

    # Given a finished run of plan alpha, and a client opened on it (a console left open on it)
    sd, gate = tmp_path / "sd", tmp_path / "beta.go"
    alpha = evidence_plan(tmp_path / "alpha.yaml", tmp_path / "ev-alpha", {"common": {}}, name="alpha")
    assert cli("run", str(alpha), "--state-dir", str(sd)).returncode == 0
    client = RunClient(sd)
    first = client.run.run_id
    # and a run of plan beta, with a job of the same id, started live in the same directory since
    beta = evidence_plan(tmp_path / "beta.yaml", tmp_path / "ev-beta",
                         {"common": {"gate": str(gate)}, "other": {"depends_on": ["common"]}}, name="beta")
    proc = start("run", str(beta), "--state-dir", str(sd))
    try:
        wait_for(lambda: states_of(sd).get("common") == "RUNNING", what="beta's common running")
        # When a verb is given for the finished run's job
        with pytest.raises(ControlError) as refused:
            client.control("kill", ["common"])
        # Then it is refused, naming both runs, and beta's job runs on
        assert f"run {first} is no longer the latest run" in refused.value.message
        latest = RunClient(sd)
        second = latest.run.run_id
        latest.close()
        assert second != first and f"run {second} of plan 'beta' started there since" in refused.value.message
        # and beta's scheduler, asked directly for the earlier run, does nothing either
        rep = ctlsock.request(sd, {"verb": "kill", "jobs": ["common"], "user": "op", "run": first, "id": "t1"}, 10.0)
        assert not rep["ok"] and rep["error"] == f"this scheduler drives run {second}, not run {first}: nothing done"
        assert states_of(sd)["common"] == "RUNNING"
        gate.touch()
        assert proc.wait(30) == 0
    finally:
        gate.touch()
        stop_proc(proc)
        client.close()
    # and neither run's journal holds an action
    assert json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout) == []
    earlier = RunClient(sd, run_id=first)
    try:
        assert earlier.actions() == []
    finally:
        earlier.close()
    assert len(read_evidence(tmp_path / "ev-alpha")["common"]) == 2  # (its start and end, once)


def test_why_of_a_run_whose_scheduler_does_not_answer_is_read_from_the_journal_and_says_so(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    import os
    import signal

    gate = tmp_path / "go"
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev",
                         {"a": {"gate": str(gate)}, "b": {"depends_on": ["a"]}})
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: states_of(sd).get("a") == "RUNNING", what="a running")
        os.kill(proc.pid, signal.SIGSTOP)  # a frozen scheduler: its board is there, nothing answers
        try:
            p = cli("why", "b", "--state-dir", str(sd))
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        # (it waited 10 s, then failed with exit 3 where the journal knew the answer)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0] == "b is WAITING (tier standard, attempt 0)"
        assert lines[1].startswith("  - read from the journal, which may be behind: no answer from the scheduler "
                                   "within 3s"), lines
        assert "  - waiting for 1 of 1 dependencies: a (RUNNING)" in lines
        gate.touch()
        assert proc.wait(30) == 0
    finally:
        gate.touch()
        stop_proc(proc)


def test_a_verb_on_a_glob_counts_its_refusals_past_a_few(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: many\njobs:\n" + "".join(f"  j{i}: {{command: 'true'}}\n" for i in range(12)))
    sd = str(tmp_path / "sd")
    assert cli("run", str(plan), "--state-dir", sd).returncode == 0
    p = cli("release", "j*", "--state-dir", sd)
    # (one line for each job the glob names: hundreds for a loop's instances)
    assert p.returncode == 1
    assert p.stderr.splitlines() == [
        *(f"refused: job 'j{i}' is SUCCEEDED: release does not apply; rerun would apply" for i in range(4)),
        "refused: 8 more job(s) it does not apply to (see `wloadctl audit`)"]


def test_a_glob_verb_past_the_lines_of_its_answer_says_how_many_it_applied_to_and_refused(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    gate = tmp_path / "gate.go"
    plan = tmp_path / "plan.yaml"
    # Given a live run whose first 60 jobs have run, and 40 more wait behind a gate
    plan.write_text("name: glob\njobs:\n" + f"  gate: {{command: 'while [ ! -e {gate} ]; do sleep 0.05; done'}}\n"
                    + "".join(f"  j{i:03d}: {{command: 'true'}}\n" for i in range(60))
                    + "".join(f"  j{i:03d}: {{command: 'true', depends_on: [gate]}}\n" for i in range(60, 100)))
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: sum(st == "SUCCEEDED" for st in states_of(sd).values()) == 60, what="60 jobs run")
        # When an operator holds them all by a glob
        p = cli("hold", "j*", "--state-dir", str(sd))
        # Then the answer counts the 60 refused and the 40 held, though its lines name only some of them
        assert p.returncode == 1
        named = [line for line in p.stderr.splitlines() if line.startswith("refused: job ")]
        assert f"refused: {60 - len(named)} more job(s) it does not apply to (see `wloadctl audit`)" in p.stderr, \
            p.stderr
        held = [line for line in p.stdout.splitlines() if line.endswith("is now HELD")]
        assert f"... and {40 - len(held)} more job(s) it applied to (see `wloadctl audit`)" in p.stdout, p.stdout
        assert sum(st == "HELD" for st in states_of(sd).values()) == 40
    finally:
        gate.touch()
        stop_proc(proc, grace=30)


def test_a_verb_while_a_scheduler_of_this_host_starts_says_to_try_again_not_to_use_a_broker(tmp_path: Path) -> None:
    """(a hold sent while a resume started said the run was held by a scheduler no socket of which is reachable
    here, to be reached with --broker URL or from its host: this host)"""
    import sqlite3

    plan = tmp_path / "plan.yaml"
    plan.write_text("name: starting\njobs:\n  a: {command: 'true'}\n  b: {command: 'true', depends_on: [a]}\n")
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 0
    starting = subprocess.Popen(["sleep", "60"])  # a live process of this host holding the lease, no socket yet
    try:
        with contextlib.closing(sqlite3.connect(sd / "journal.db")) as db, db:
            db.execute("UPDATE runs SET status = 'running', scheduler_pid = ?, lease_until = ?",
                       (starting.pid, time.time() + 60))
        p = cli("hold", "b", "--state-dir", str(sd))
        assert p.returncode == 2, p.stderr
        said = f"held by scheduler pid {starting.pid} of this host, whose control socket does not answer yet"
        assert said in p.stderr and "try again in a moment" in p.stderr and "--broker" not in p.stderr, p.stderr
    finally:
        starting.kill()
        starting.wait()
