"""Failure governance with real processes: retries and their delays, timeouts, dead and stuck executors, tiers."""

from __future__ import annotations

import itertools
import json
import os
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
    evidence_plan,
    read_evidence,
    start,
    status,
    stop_proc,
    wait_for,
)
from wloadctl.store import Store

pytestmark = pytest.mark.ipc


def test_a_job_failing_twice_then_succeeding_ends_succeeded_after_3_attempts_with_policy_delays(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    counter = tmp_path / "count"
    out = tmp_path / "ev"
    plan = tmp_path / "plan.yaml"
    cmd = (f'n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; '
           f'echo "flaky start $(date +%s.%N)" >> {out}; [ $n -ge 3 ]')
    plan.write_text(yaml.safe_dump({"name": "retry", "jobs": {"flaky": {
        "command": cmd, "retries": {"count": 3, "delay": "1s", "backoff": 2, "jitter": 0}}}}))
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"flaky": "SUCCEEDED"}
    starts = [t for _, t in read_evidence(out)["flaky"]]
    assert len(starts) == 3
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert 1.0 <= gaps[0] < 1.8, gaps  # delay 1s
    assert 2.0 <= gaps[1] < 2.8, gaps  # delay 1s x backoff 2
    h = json.loads(cli("history", "flaky", "--state-dir", str(tmp_path / "sd"), "--json").stdout)
    assert h["attempts"] == 3
    assert [t["to"] for t in h["transitions"]].count("RETRY_WAIT") == 2


def test_a_timed_out_job_leaves_no_process_of_its_tree(tmp_path: Path, no_ipc_leaks: None) -> None:
    marker = f"wloadctl-timeout-{os.getpid()}-{time.time_ns()}"
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "to", "jobs": {"stuck": {
        "command": f"sh -c 'sleep 300; echo {marker}' & sh -c 'sleep 301; echo {marker}' & wait",
        "timeout": "1s"}}}))
    t0 = time.time()
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--json")
    assert p.returncode == 1
    assert json.loads(p.stdout)["jobs"] == {"stuck": "TIMED_OUT"}
    assert time.time() - t0 < 30
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes of the timed-out job survive: {left}"


def test_kill_9_of_one_executor_its_jobs_finish_on_others_and_the_run_succeeds(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    jobs = {f"j{i}": {} for i in range(12)}
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs, sleep=0.6)
    sd = tmp_path / "sd"
    err = tmp_path / "run.err"
    with open(err, "wb") as said:
        proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd),
                                 "--executors", "3", "--slots", "2"], stdout=subprocess.DEVNULL, stderr=said,
                                env=ENV, start_new_session=True)
    try:
        def busy_executor() -> int | None:
            if not (sd / "journal.db").exists():
                return None
            for e in status(sd).get("executors", []):
                if e["running"] >= 1:
                    return int(e["pid"])
            return None

        victim = wait_for(busy_executor, timeout=30, what="an executor running jobs")
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
        assert proc.wait(60) == 0
    finally:
        stop_proc(proc)
    ev = read_evidence(out)
    assert sorted(ev) == sorted(jobs)
    for jid, lines in ev.items():
        # every job ended once; the victim's were stopped and run again elsewhere. (One that ended in the very
        # moment of the kill, its end not yet reported, runs again: its report died with its executor.)
        ends = [t for k, t in lines if k == "end"]
        assert len(ends) == 1 or (len(ends) == 2 and abs(ends[0] - killed_at) < 0.1), (jid, lines, killed_at)
    events = [json.loads(x) for x in (sd / "events.jsonl").read_text().splitlines()]
    lost = [e for e in events if e["event"] == "executor_lost"]
    assert len(lost) == 1
    # and the operator's terminal says so (only the event log did)
    assert f"wloadctl: executor {lost[0]['executor']} lost (killed by signal 9): what ran on it runs again, or is " \
           "held when it may not run twice\n" in err.read_text()


def test_a_stuck_executor_is_declared_dead_and_replaced(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {f"j{i}": {} for i in range(6)}, sleep=0.5)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "1",
                 "--executor-timeout", "2")
    stopped = None
    try:
        def first_executor() -> int | None:
            if not (sd / "journal.db").exists():
                return None
            ex = status(sd).get("executors", [])
            return int(ex[0]["pid"]) if len(ex) == 2 and ex[0]["running"] else None

        stopped = wait_for(first_executor, timeout=30, what="executors")
        os.kill(stopped, signal.SIGSTOP)  # alive but silent
        assert proc.wait(60) == 0
    finally:
        if stopped:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
        stop_proc(proc)
    events = [json.loads(x) for x in (sd / "events.jsonl").read_text().splitlines()]
    lost = [e for e in events if e["event"] == "executor_lost"]
    assert lost and "no heartbeat" in lost[0]["reason"]
    assert sorted(read_evidence(out)) == [f"j{i}" for i in range(6)]


def test_a_critical_job_queued_behind_1000_low_jobs_on_one_slot_starts_next(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    spec: dict = {"name": "tiers", "jobs": {"gate": {"command": "sleep 0.3"}}}
    for i in range(1000):
        spec["jobs"][f"bulk{i:04d}"] = {"type": "noop", "sla": "low"}
    spec["jobs"]["urgent"] = {"type": "noop", "sla": "critical", "depends_on": ["gate"]}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(spec, sort_keys=False))
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1", "--json")
    assert p.returncode == 0, p.stderr
    with Store.open(sd, readonly=True) as st:
        run = st.latest_run()
        assert run is not None
        ids = dict(enumerate(st.job_ids(run.id)))
        rows = st.transitions_since(run.id, 0)
    queued = [ids[r[1]] for r in rows if r[3] == 2]
    gate_done = [ids[r[1]] for r in rows if r[3] in (2, 4)]
    after_gate = gate_done[gate_done.index("gate", gate_done.index("gate") + 1) + 1:]
    assert after_gate[0] == "urgent", after_gate[:3]
    assert queued[0] == "gate"


def test_final_failure_raises_an_alert_and_runs_the_on_failure_hook(tmp_path: Path, no_ipc_leaks: None) -> None:
    hook_out = tmp_path / "hook.txt"
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "name": "alerts",
        "on_failure": f'echo "$WLOADCTL_JOB $WLOADCTL_TIER $WLOADCTL_ATTEMPTS $WLOADCTL_EXIT_CODE" >> {hook_out}',
        "jobs": {"recon": {"command": "echo no balance >&2; exit 4", "sla": "critical",
                           "retries": {"count": 1, "delay": "0s"}},
                 "quiet": {"command": "exit 5", "depends_on": {"recon": "done"}}}}))
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd))
    assert p.returncode == 1
    wait_for(lambda: len(hook_out.read_text().splitlines()) == 2 if hook_out.exists() else False, timeout=10,
             what="the hooks")
    assert hook_out.read_text().splitlines() == ["recon critical 2 4", "quiet standard 1 5"]
    alerts = [json.loads(line) for line in (sd / "alerts.log").read_text().splitlines()]
    assert alerts[0]["job"] == "recon" and alerts[0]["tier"] == "critical" and alerts[0]["attempts"] == 2
    assert alerts[0]["log"].endswith("recon.2.log") and Path(alerts[0]["log"]).read_text() == "no balance\n"
    # A job that printed nothing has no log: the alert names none (it named a file that does not exist)
    assert alerts[1]["job"] == "quiet" and alerts[1]["log"] is None
    wait_for(lambda: "exited" in (sd / "hooks.log").read_text(), timeout=10, what="the hook's end told")
    assert (sd / "hooks.log").read_text().endswith(" exited with status 0\n")


def test_an_on_failure_hook_outliving_the_run_is_waited_for_and_its_failure_said(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given a plan whose alert hook takes longer than its failed job's run and then fails
    hook_out = tmp_path / "hook.txt"
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "slowhook",
                                    "on_failure": f"sleep 6; echo hook done >> {hook_out}; exit 5",
                                    "jobs": {"bad": {"command": "exit 3"}}}))
    sd = tmp_path / "sd"
    # When the run ends
    p = cli("run", str(plan), "--state-dir", str(sd))
    # Then it waited for the hook, said so, and said the hook's failure naming hooks.log
    assert p.returncode == 1, p.stderr
    assert hook_out.read_text() == "hook done\n"
    assert ("wloadctl: waiting up to 60s for 1 on_failure alert hook(s) still running (for job(s) bad); "
            "Ctrl-C or SIGTERM stops them") in p.stderr, p.stderr
    assert (f"wloadctl: on_failure hook for job bad exited with status 5: its output is in {sd}/hooks.log"
            in p.stderr), p.stderr
    assert (sd / "hooks.log").read_text().endswith(" exited with status 5\n")


def test_an_on_failure_hook_still_running_when_the_run_is_stopped_is_stopped_and_said(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    pid_file = tmp_path / "hook.pid"
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "hang", "on_failure": f"echo $$ > {pid_file}; sleep 300",
                                    "jobs": {"bad": {"command": "exit 2"}}}))
    sd = tmp_path / "sd"
    # Given a failed run waiting for its alert hook
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        assert proc.stderr is not None
        said = []
        for line in proc.stderr:
            said.append(line)
            if "on_failure alert hook(s) still running" in line:
                break
        assert said and "Ctrl-C or SIGTERM stops them" in said[-1], said
        # When the operator sends SIGTERM
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(60) == 1
    finally:
        stop_proc(proc, run_id=None)
    # Then the hook was stopped, not left behind, and that is said on stderr and in hooks.log
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    assert (f"wloadctl: on_failure hook for job bad on Ctrl-C or SIGTERM: stopped (killed by signal 15): its "
            f"output is in {sd}/hooks.log") in rest, rest
    told = (sd / "hooks.log").read_text()
    assert told.startswith("--- wloadctl: on_failure hook for job bad (pid ") and told.endswith(
        " on Ctrl-C or SIGTERM: stopped (killed by signal 15)\n"), told


def test_a_job_past_its_deadline_is_flagged_late_in_status_and_events(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "late", "jobs": {
        "slow_report": {"command": "sleep 1.5", "deadline": "+1s", "sla": "high"},
        "on_time": {"command": "true", "deadline": "+1h"}}}))
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd))
    assert p.returncode == 0, p.stderr
    st = status(sd)
    assert st["flags"] == {"slow_report": "LATE"}
    assert "LATE (1): slow_report" in cli("status", "--state-dir", str(sd)).stdout
    events = [json.loads(x) for x in (sd / "events.jsonl").read_text().splitlines()]
    flagged = [(e["job"], e["level"]) for e in events if e["event"] == "deadline"]
    assert ("slow_report", "LATE") in flagged and all(j != "on_time" for j, _ in flagged)


def test_a_failed_job_at_risk_reads_late_once_its_deadline_passes_after_the_run_ended(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    import time

    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "gone", "jobs": {
        "failing": {"command": "exit 1", "deadline": "+4s", "retries": 0},
        "on_time": {"command": "true", "deadline": "+1h"}}}))
    sd = tmp_path / "sd"
    # Given a run that ended with a job failed while at risk of its deadline
    started = time.time()
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 1
    assert status(sd)["flags"] == {"failing": "AT_RISK"}
    # When its deadline passes, no scheduler running the run any more
    time.sleep(max(0.0, started + 5.0 - time.time()))
    # Then status and runs read it LATE, as its scheduler would have flagged it
    assert status(sd)["flags"] == {"failing": "LATE"}
    [entry] = json.loads(cli("runs", "--root", str(tmp_path), "--json").stdout)
    assert (entry["late"], entry["at_risk"]) == (1, 0)


def test_a_critical_shell_job_starts_before_low_jobs_already_sent_to_the_executor(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    jobs: dict = {"gate": {"sleep": 0.5}}
    for i in range(6):
        jobs[f"low{i}"] = {"sla": "low", "sleep": 0.2}
    jobs["urgent"] = {"sla": "critical", "depends_on": ["gate"], "sleep": 0}
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs)
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--executors", "1", "--slots", "1")
    assert p.returncode == 0, p.stderr
    ev = read_evidence(out)
    gate_end = ev["gate"][1][1]
    started_after_gate = sorted((v[0][1], j) for j, v in ev.items() if v[0][1] >= gate_end)
    assert started_after_gate[0][1] == "urgent", started_after_gate[:3]


def test_history_shows_an_operators_retry_among_the_attempts_in_time_order(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given a run that failed, a retry of the failed job by an operator, and the run resumed
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "h", "jobs": {"c": {"command": "exit 3", "retries": 0}}}))
    sd = str(tmp_path / "sd")
    assert cli("run", str(plan), "--state-dir", sd).returncode == 1
    assert cli("retry", "c", "--state-dir", sd).returncode == 0
    assert cli("resume", "--state-dir", sd).returncode == 1
    # Then the history lists the retry after the first attempt's end and before the second attempt
    lines = cli("history", "c", "--state-dir", sd).stdout.splitlines()[1:]
    action = next(k for k, line in enumerate(lines) if " retry (no reason): " in line)
    assert any("#1 RUNNING -> FAILED" in line for line in lines[:action]), lines
    assert any("#2 READY -> QUEUED" in line for line in lines[action + 1:]), lines
    data = json.loads(cli("history", "c", "--state-dir", sd, "--json").stdout)
    stamps = sorted([t["ts"] for t in data["transitions"]] + [x["ts"] for x in data["actions"]])
    assert [line.split()[0] for line in lines] == [time.strftime("%H:%M:%S", time.localtime(s)) for s in stamps]


def test_a_nul_byte_in_a_jobs_environment_fails_that_job_and_no_executor(tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given a job whose checkpoint holds a NUL byte when its retry starts, and a loop whose item from an
    # upstream's result holds one (no process can have a NUL in its environment)
    found = tmp_path / "found.json"
    found.write_text('{"i": ["ok", "a\\u0000b"]}')
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "nul", "jobs": {
        "a": {"command": "printf 'step1\\000x' > \"$WLOADCTL_CHECKPOINT_FILE\"; exit 1",
              "retries": {"count": 1, "delay": "100ms"}},
        "up": {"command": f'cp {found} "$WLOADCTL_RESULT_FILE"'},
        "each": {"depends_on": ["up"], "for_each": "jobs.up.result.i", "command": 'echo "$WLOADCTL_ITEM"'},
        "b": {"command": "sleep 1; echo innocent"}}}))
    sd = tmp_path / "sd"
    # When it runs on one executor
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1")
    try:
        # Then the run ends: those jobs fail for good saying why, the others succeed, no executor is lost
        assert proc.wait(60) == 1
    finally:
        stop_proc(proc, grace=30)
    jobs = {j["job"]: j for j in status(sd)["jobs"]}
    assert {j: v["state"] for j, v in jobs.items()} == {
        "a": "FAILED", "up": "SUCCEEDED", "each": "FAILED", "each@ok": "SUCCEEDED", "each@a_b": "FAILED",
        "b": "SUCCEEDED"}
    assert jobs["a"]["reason"] == "could not start: its environment holds a NUL byte (in WLOADCTL_CHECKPOINT)"
    assert jobs["each@a_b"]["reason"] == "could not start: its environment holds a NUL byte (in WLOADCTL_ITEM)"
    events = [json.loads(x) for x in (sd / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["event"] == "executor_lost"]
    assert "Traceback" not in (sd / "executor-0.log").read_text()


def test_a_loop_over_file_names_that_are_not_utf8_runs_each_on_its_own_file(tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given an inbox with a Latin-1 file name, listed by a Python job (json.dump writes its byte as "\udce9"),
    # an item no program can be given (a lone surrogate that stands for no byte), and a job whose result file
    # holds bytes that are not UTF-8
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "ok.csv").write_text("ok\n")
    latin = os.fsdecode(b"r\xe9sum\xe9.csv")
    (inbox / latin).write_text("latin\n")
    odd = tmp_path / "odd.json"
    odd.write_text('{"i": ["fine", "a\\ud800b"]}')
    plan = tmp_path / "plan.yaml"
    lister = (f"import json, os; json.dump({{'files': sorted(os.listdir({str(inbox)!r}))}}, "
              "open(os.environ['WLOADCTL_RESULT_FILE'], 'w'))")
    plan.write_text(yaml.safe_dump({"name": "names", "jobs": {
        "list": {"command": [sys.executable, "-c", lister]},
        "load": {"depends_on": ["list"], "for_each": "jobs.list.result.files", "command": f'cat "{inbox}/{{item}}"'},
        "odd": {"command": f'cp {odd} "$WLOADCTL_RESULT_FILE"'},
        "each": {"depends_on": ["odd"], "for_each": "jobs.odd.result.i", "command": 'echo "$WLOADCTL_ITEM"'},
        "latin1": {"command": "printf '{\"n\": \"r\\351sum\\351\"}' > \"$WLOADCTL_RESULT_FILE\""},
        "reads": {"depends_on": ["latin1"], "if": "jobs.latin1.result.n == 'x'", "command": "true"},
        "unread": {"command": "printf 'n=r\\351sum\\351' > \"$WLOADCTL_RESULT_FILE\""}}}))
    sd = tmp_path / "sd"
    # When it runs (the scheduler stopped at the first such item, and every resume again: the run was wedged)
    p = cli("run", str(plan), "--state-dir", str(sd), timeout=90)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "cannot be encoded" not in p.stderr, p.stderr
    jobs = {j["job"]: j for j in status(sd)["jobs"]}
    # Then each file name reaches its job as the bytes it is: both files were read
    assert {j: v["state"] for j, v in jobs.items() if j.startswith("load")} == {
        "load": "SUCCEEDED", "load@ok.csv": "SUCCEEDED", "load@r_sum_.csv": "SUCCEEDED"}
    log = cli("logs", "load@r_sum_.csv", "--state-dir", str(sd), check=True).stdout
    assert log.strip() == "latin"
    # An item that is no text fails its own instance alone, saying why
    assert (jobs["each@fine"]["state"], jobs["each@a_b"]["state"]) == ("SUCCEEDED", "FAILED")
    assert jobs["each@a_b"]["reason"] == ("could not start: its command, environment or working directory holds a "
                                          "lone surrogate (U+D800), which is not text: no program can be given it")
    # A result file that is not UTF-8 is not guessed at (a replaced byte names no file): what reads it fails
    assert jobs["latin1"]["state"] == "FAILED"
    assert "its result file is not UTF-8 text (byte 0xE9 at offset 8)" in jobs["latin1"]["reason"]
    assert jobs["reads"]["state"] == "UPSTREAM_FAILED"
    assert jobs["unread"]["state"] == "SUCCEEDED"  # nothing reads it: nothing to judge


@pytest.mark.parametrize("mode", ["auto", "subreaper"])
def test_a_program_not_on_path_could_not_start_in_every_mode_alike(tmp_path: Path, mode: str,
                                                                   no_ipc_leaks: None) -> None:
    # (in a cgroup the shell that moves a job into its group said it: exit 127, retried, its message named after
    # the group's cgroup.procs file; without one, it could not start)
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "np", "jobs": {
        "missing": {"command": ["frobnicate-nothing", "--x"], "retries": {"count": 1, "delay": "100ms"}},
        "in_dir": {"command": ["frobnicate-nothing"], "cwd": str(tmp_path)},
        "words": {"command": ["echo hi there"]},
        "found": {"command": ["echo", "fine"], "cwd": str(tmp_path)}}}))
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), env={"WLOADCTL_JOB_TREE": mode})
    assert p.returncode == 1, p.stderr
    jobs = {j["job"]: j for j in status(sd)["jobs"]}
    assert {j: (v["state"], v["reason"], v["attempt"]) for j, v in jobs.items()} == {
        "missing": ("FAILED", "could not start: cannot start frobnicate-nothing: No such file or directory", 1),
        "in_dir": ("FAILED", "could not start: cannot start frobnicate-nothing: No such file or directory", 1),
        "words": ("FAILED", "could not start: cannot start echo hi there: No such file or directory", 1),
        "found": ("SUCCEEDED", "", 1)}
    assert cli("logs", "found", "--state-dir", str(sd), check=True).stdout == "fine\n"


def test_the_last_jobs_lines_are_told_before_the_run_waits_for_its_on_failure_hooks(tmp_path: Path) -> None:
    """A run waits up to 5 s for its hooks as it ends; the lines of the jobs that ended last come before that wait,
    not after it (a SUCCEEDED line five seconds late reads as a job that took five seconds more)."""
    import sys
    import threading

    from tests.integration.helpers import ENV

    gate, ended = tmp_path / "gate", tmp_path / "hook-ended"
    hook = (f"trap 'echo ended >> {ended}; exit 0' TERM; "
            f"while [ ! -e {gate} ]; do sleep 0.05; done; echo ended >> {ended}")
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "hooklines", "on_failure": hook, "jobs": {
        "a": {"command": "exit 3"}, "b": {"command": "sleep 0.5"}}}, sort_keys=False))
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(tmp_path / "sd")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        # Given a failed job whose hook runs until told, and a job that ends after it
        wait_for(lambda: any(line.split()[1:3] == ["SUCCEEDED", "b"] for line in lines if len(line.split()) > 2),
                 timeout=60, what="b's line")
        # Then b's line came while the hook still ran (the run's end waits for it, then stops it)
        assert not ended.exists(), lines
        gate.touch()
        assert proc.wait(timeout=60) == 1
        reader.join(timeout=10)
        assert ended.exists() and any(line.startswith("run ") and "failed" in line for line in lines), lines
    finally:
        gate.touch()
        stop_proc(proc)


def test_a_failed_alert_hook_is_said_under_quiet_too(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "quiethook", "on_failure": "exit 7",
                                    "jobs": {"bad": {"command": "exit 3"}}}))
    sd = tmp_path / "sd"
    # A quiet run tells no progress and no notice
    p = cli("run", str(plan), "--state-dir", str(sd), "--quiet")
    assert p.returncode == 1, p.stderr
    assert "waiting up to" not in p.stderr
    # but an alert that did not go out is never passed over in silence
    assert f"wloadctl: on_failure hook for job bad exited with status 7: its output is in {sd}/hooks.log" in p.stderr
