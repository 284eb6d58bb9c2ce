"""Real runs: real scheduler and executor processes over real POSIX queues and shared memory, a real journal."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import (
    cli,
    evidence_plan,
    executor_pids,
    ipc_names,
    read_evidence,
)

pytestmark = pytest.mark.ipc


def test_every_job_runs_once_after_all_its_dependencies(tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given a layered plan whose jobs record when they start and end
    out = tmp_path / "evidence"
    jobs: dict[str, dict] = {"open": {}}
    for i in range(6):
        jobs[f"load{i}"] = {"depends_on": ["open"]}
    for i in range(3):
        jobs[f"post{i}"] = {"depends_on": [f"load{i}", f"load{i + 3}"]}
    jobs["close"] = {"depends_on": ["post0", "post1", "post2"]}
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs, sleep=0.05)
    # When it runs headless
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--executors", "2", "--slots", "3", "--json")
    # Then it succeeds, every job ran exactly once, and never before its dependencies ended
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["status"] == "succeeded"
    assert set(summary["jobs"].values()) == {"SUCCEEDED"}
    ev = read_evidence(out)
    assert sorted(ev) == sorted(jobs)
    for jid, keys in jobs.items():
        assert [k for k, _ in ev[jid]] == ["start", "end"], jid
        for dep in keys.get("depends_on", []):
            assert ev[dep][1][1] <= ev[jid][0][1], f"{jid} started before {dep} ended"
    # and nothing is left behind
    assert ipc_names(summary["run"]) == []
    assert executor_pids(summary["run"]) == []


def test_a_failing_job_stops_its_dependents_and_the_run_exits_1(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "evidence"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {
        "load": {"exit": 3},
        "post": {"depends_on": ["load"]},
        "report": {"depends_on": ["post"]},
        "page_oncall": {"depends_on": {"load": "failure"}},
        "cleanup": {"depends_on": {"load": "done"}},
        "independent": {},
    })
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--json")
    assert p.returncode == 1, p.stderr
    jobs = json.loads(p.stdout)["jobs"]
    assert jobs == {"load": "FAILED", "post": "UPSTREAM_FAILED", "report": "UPSTREAM_FAILED",
                    "page_oncall": "SUCCEEDED", "cleanup": "SUCCEEDED", "independent": "SUCCEEDED"}
    ev = read_evidence(out)
    assert "post" not in ev and "report" not in ev


def test_plain_line_log_when_not_a_terminal(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {"a": {}, "b": {"depends_on": ["a"]}})
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"))
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert any(line.endswith("SUCCEEDED       a") for line in lines)
    assert "succeeded: 2 succeeded" in lines[-1]


def test_a_refused_run_with_json_says_so_in_json_too(tmp_path: Path) -> None:
    """A script reading `run --json` got nothing to parse when the run was refused."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\njobs:\n  a: {command: 'true', depends_on: [ghost]}\n")
    p = cli("run", str(bad), "--state-dir", str(tmp_path / "sd"), "--json")
    line = f"{bad}:3: job 'a': depends on unknown job 'ghost' (no job 'ghost' in this plan)"
    assert p.returncode == 2 and p.stderr == line + "\n", p.stderr
    assert json.loads(p.stdout) == {"status": "refused", "exit_code": 2, "error": line, "problems": []}
    p = cli("resume", "--state-dir", str(tmp_path / "none"), "--json")
    assert p.returncode == 2 and json.loads(p.stdout)["error"].startswith("no unfinished run to resume in "), p.stdout


def test_bad_plan_exits_2_with_one_line_per_problem_and_creates_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\njobs:\n  a:\n    command: true\n    depends_on: [ghost]\n")
    p = cli("run", str(bad), "--state-dir", str(tmp_path / "sd"))
    assert p.returncode == 2
    assert "ghost" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "sd").exists()


def test_a_business_date_that_is_no_date_is_refused_in_one_line(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: one\njobs:\n  a: {command: 'true'}\n")
    for bad in ("2026-13-45", "20261231", "2026-2-3", "2026-W01-1", "tomorrow"):
        p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--business-date", bad)
        assert p.returncode == 2, p.stderr
        assert p.stderr == (f"wloadctl run: error: argument --business-date: {bad!r} is not a date: write it "
                            "YYYY-MM-DD (2026-12-31) (see `wloadctl run --help`)\n"), p.stderr
    assert not (tmp_path / "sd").exists()


def test_counts_an_executor_cannot_hold_are_refused_in_one_line_by_every_command_that_starts_a_scheduler(
        tmp_path: Path) -> None:
    """An executor's board counts its slots in 16 bits: more used to crash every executor, and every job then
    failed as 'executor lost'."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: one\njobs:\n  a: {command: 'true'}\n")
    for cmd in ("run", "scheduler", "trigger"):
        below = (f"wloadctl {cmd}: error: argument --slots: '-2': give 1 or more, or leave the option out for the "
                 f"default (see `wloadctl {cmd} --help`)")
        for flags, said in ((["--slots", "65536"], "wloadctl: --slots 65536: at most 65535 slots per executor"),
                            (["--executors", "65"], "wloadctl: --executors 65: at most 64 executors per run"),
                            (["--slots", "-2"], below)):
            p = cli(cmd, str(plan), "--state-dir", str(tmp_path / "sd"), *flags)
            assert p.returncode == 2 and p.stderr == f"{said}\n", (cmd, flags, p.stderr)
    assert not (tmp_path / "sd").exists()


def test_a_plan_that_is_not_a_regular_file_is_refused_in_one_line_without_waiting(tmp_path: Path) -> None:
    # A named pipe used to hang validate and run forever: opening it waits for a writer
    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)
    for cmd in ("validate", "run"):
        p = cli(cmd, str(fifo), *(["--state-dir", str(tmp_path / "sd")] if cmd == "run" else []), timeout=60)
        assert p.returncode == 2, p.stderr
        assert p.stderr == f"{fifo}: {fifo} is a named pipe, not a plan file (a plan is a regular YAML file)\n"
    assert not (tmp_path / "sd").exists()


def test_trigger_of_a_schedule_that_never_fires_says_so_in_one_line(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: feb\nschedule: {cron: '0 0 30 2 *'}\njobs:\n  a: {command: 'true'}\n")
    for extra in (["--next", "2"], ["--once"]):
        p = cli("trigger", str(plan), "--state-dir", str(tmp_path / "sd"), *extra, timeout=60)
        assert p.returncode == 2, p.stderr
        assert p.stderr == (f"{plan}:2: cron '0 0 30 2 *' never fires on a business day (mon, tue, wed, thu, fri) "
                            "(check the cron's days and months against business_days)\n"), p.stderr
        assert not (tmp_path / "sd").exists()


def test_trigger_next_below_1_is_refused_in_one_line(tmp_path: Path) -> None:
    # --next 0 used to start the trigger loop, --next -1 to say the schedule never fires
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: daily\nschedule: {cron: '0 6 * * *'}\njobs:\n  a: {command: 'true'}\n")
    for n in ("0", "-1"):
        p = cli("trigger", str(plan), "--state-dir", str(tmp_path / "sd"), "--next", n, timeout=30)
        assert p.returncode == 2, p.stderr
        assert p.stderr == (f"wloadctl trigger: error: argument --next: '{n}': give 1 or more (see `wloadctl trigger "
                            "--help`)\n"), p.stderr
    p = cli("trigger", str(plan), "--state-dir", str(tmp_path / "sd"), "--next", "1", timeout=30)
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 1, p.stderr
    assert not (tmp_path / "sd").exists()


def test_durations_and_amounts_out_of_range_are_refused_in_one_line(tmp_path: Path) -> None:
    """A heartbeat of 0 s or less, a lease no longer than a beat, a negative CPU or memory offer: each used to be
    taken (the last two then failed every job that claims cpu or memory)."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: one\njobs:\n  a: {command: 'true', cpu: 1}\n")
    for flags, said in ((["--heartbeat-interval", "0"], "argument --heartbeat-interval: '0': give a number of "
                                                         "seconds above 0"),
                        (["--executor-timeout", "nan"], "argument --executor-timeout: 'nan': give a number of "
                                                        "seconds above 0"),
                        (["--executor-cpus", "-1"], "argument --executor-cpus: '-1': give 0 or more (0: no limit)"),
                        (["--executor-memory", "1.5"], "argument --executor-memory: '1.5' is not a whole number"),
                        (["--heartbeat-timeout", "0.2"], "--heartbeat-timeout 0.2 must be longer than "
                                                         "--heartbeat-interval 0.25")):
        p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), *flags)
        assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and said in p.stderr, (flags, p.stderr)
    assert not (tmp_path / "sd").exists()


@pytest.mark.parametrize("verb", [["run", "PLAN"], ["status"], ["hold", "a"], ["console", "--readonly"]])
@pytest.mark.parametrize(("sd", "said"), [
    # (an empty one was taken as left out: the run went to the default directory)
    ("", "argument --state-dir: an empty path: give a directory, or leave --state-dir out"),
    # (one a file system cannot hold was an internal error for the readers)
    ("/tmp/" + "d" * 300, "argument --state-dir: a name in the path ('dddddddddddddddddddddddd...', 300 bytes) is "
                          "longer than a file system takes (255 bytes)"),
])
def test_a_state_directory_no_file_system_can_hold_is_refused_in_one_line(
        tmp_path: Path, verb: list[str], sd: str, said: str) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: one\njobs:\n  a: {command: 'true'}\n")
    p = cli(*[str(plan) if v == "PLAN" else v for v in verb], "--state-dir", sd,
            env={"WLOADCTL_HOME": str(tmp_path / "home")})
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and said in p.stderr, p.stderr
    assert not (tmp_path / "home").exists()


def test_a_state_directory_that_cannot_be_used_is_refused_in_one_line(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: one\njobs:\n  a: {command: 'true'}\n")
    (tmp_path / "afile").write_text("")
    for sd, why in ((tmp_path / "afile", "it is not a directory"), (tmp_path / "afile" / "sd", "it is not a directory"),
                    (Path("/proc/wloadctl-none"), "No such file or directory")):
        p = cli("run", str(plan), "--state-dir", str(sd))
        assert p.returncode == 2, p.stderr
        assert p.stderr == f"wloadctl: cannot use {sd} as a state directory: {why} (give --state-dir a directory " \
                           "this user may create and write)\n", p.stderr
    # The console, which starts the scheduler itself, says the same
    p = cli("console", str(plan), "--state-dir", str(tmp_path / "afile"))
    assert p.returncode == 2 and p.stderr.splitlines()[-1] == (
        f"wloadctl: cannot use {tmp_path / 'afile'} as a state directory: it is not a directory (give --state-dir a "
        "directory this user may create and write)"), p.stderr


def test_a_state_directory_too_deep_for_the_journal_is_said_so(tmp_path: Path) -> None:
    """A path the kernel takes but SQLite does not (over about 500 bytes) was called a corrupt journal."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: one\njobs:\n  a: {command: 'true'}\n")
    sd = tmp_path / ("x" * 250) / ("y" * 250)
    size = len(str(sd / "journal.db").encode())
    p = cli("run", str(plan), "--state-dir", str(sd))
    assert p.returncode == 3 and p.stderr == (
        f"wloadctl: state directory {sd} is too deep for its run journal: the journal's path would be {size} bytes, "
        "SQLite takes 504 (give --state-dir a shorter path)\n"), p.stderr
    assert not (sd / "journal.db").exists()
    # Within the limit, the same depth runs.
    sd = tmp_path / ("x" * 250) / ("y" * (250 - (size - 504)))
    p = cli("run", str(plan), "--state-dir", str(sd))
    assert p.returncode == 0 and (sd / "journal.db").exists(), p.stderr


def test_the_console_on_a_bad_plan_says_what_run_says_and_starts_nothing(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: bad\njobs:\n  a: {command: 'true', depends_on: [zz]}\n")
    said = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"))
    p = cli("console", str(plan), "--state-dir", str(tmp_path / "sd"))
    assert (p.returncode, p.stderr) == (2, said.stderr) and said.returncode == 2, (p.stderr, said.stderr)
    assert p.stderr == f"{plan}:3: job 'a': depends on unknown job 'zz' (no job 'zz' in this plan)\n", p.stderr
    assert not (tmp_path / "sd").exists()


def test_status_of_a_finished_run_and_history(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {"a": {}, "b": {"depends_on": ["a"], "exit": 1}})
    sd = str(tmp_path / "sd")
    cli("run", str(plan), "--state-dir", sd)
    st = json.loads(cli("status", "--state-dir", sd, "--json").stdout)
    assert st["counts"] == {"SUCCEEDED": 1, "FAILED": 1}
    assert {j["job"]: j["state"] for j in st["jobs"]} == {"a": "SUCCEEDED", "b": "FAILED"}
    h = json.loads(cli("history", "b", "--state-dir", sd, "--json").stdout)
    assert [t["to"] for t in h["transitions"]] == ["READY", "QUEUED", "RUNNING", "FAILED"]
    assert h["transitions"][-1]["exit_code"] == 1
    log = cli("logs", "a", "--state-dir", sd)
    assert log.returncode == 0


def test_logs_json_gives_the_attempt_its_file_and_its_output(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "logs", "jobs": {
        "talk": {"command": "echo hello; printf 'bad \\377 byte\\n'"}, "quiet": {"command": "true"}}}))
    sd = str(tmp_path / "sd")
    run_id = json.loads(cli("run", str(plan), "--state-dir", sd, "--json").stdout)["run"]
    p = cli("logs", "talk", "--state-dir", sd, "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {
        "run": run_id, "job": "talk", "attempt": 1, "state": "SUCCEEDED",
        "path": f"{sd}/logs/{run_id}/talk.1.log", "bytes": 17, "note": "", "text": "hello\nbad \ufffd byte\n"}
    p = cli("logs", "quiet", "--state-dir", sd, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["note"] == "printed nothing" and p.stderr == "", p.stderr
    # Usage errors name the command, as its other ones do
    for extra, said in ((["--json", "--follow"], "argument --follow/-f: not allowed with argument --json"),
                        (["--jsn"], "unrecognized arguments: --jsn; did you mean --json?")):
        p = cli("logs", "talk", "--state-dir", sd, *extra)
        assert (p.returncode, p.stderr) == (2, f"wloadctl logs: error: {said} (see `wloadctl logs --help`)\n")


def test_the_exit_code_of_status_says_the_runs_outcome_in_every_form(tmp_path: Path, no_ipc_leaks: None) -> None:
    # --json and --at used to exit 0 where the text form exited 1
    forms = ([], ["--json"], ["--at", "-0s"], ["--at", "-0s", "--json"], ["--all"])
    for name, code in (("bad", 1), ("good", 0)):
        plan = tmp_path / f"{name}.yaml"
        plan.write_text(yaml.safe_dump({"name": name, "jobs": {"a": {"command": f"exit {code}"}}}))
        sd = str(tmp_path / name)
        assert cli("run", str(plan), "--state-dir", sd).returncode == code
        said = {" ".join(form): cli("status", "--state-dir", sd, *form).returncode for form in forms}
        assert said == {" ".join(form): code for form in forms}, (name, said)


def test_argv_commands_run_without_a_shell_and_a_missing_program_fails_cleanly(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "argv.txt"
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "name: argv\njobs:\n"
        f"  literal:\n    command: [\"/bin/sh\", \"-c\", \"echo '$HOME;*' > {out}\"]\n"
        "  missing:\n    command: [\"/no/such/program\"]\n")
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--json")
    assert json.loads(p.stdout)["jobs"] == {"literal": "SUCCEEDED", "missing": "FAILED"}
    assert out.read_text() == "$HOME;*\n"
    why = json.loads(cli("why", "missing", "--state-dir", str(tmp_path / "sd"), "--json").stdout)
    # Started directly it cannot start; started by the cgroup helper (root) its exec fails with 127.
    reasons = " ".join(why["reasons"])
    assert "could not start" in reasons or "exit status 127" in reasons, reasons


def test_python_dash_m_works(tmp_path: Path) -> None:
    p = subprocess.run(["python", "-m", "wloadctl", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "validate" in p.stdout


def test_a_second_run_of_a_plan_ranks_its_jobs_by_what_the_first_took(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: learn\njobs:\n  slow: {command: \"sleep 0.4\"}\n  quick: {command: \"true\"}\n"
                    "  given: {command: \"true\", expected: 3s}\n")
    sd = str(tmp_path / "sd")
    cli("run", str(plan), "--state-dir", sd, check=True)
    first = json.loads(cli("why", "slow", "--state-dir", sd, "--json").stdout)["critical_path"]
    assert first["expected"] == 1.0, "no history yet: one second"
    cli("run", str(plan), "--state-dir", sd, check=True)
    why = {j: json.loads(cli("why", j, "--state-dir", sd, "--json").stdout)["critical_path"]
           for j in ("slow", "quick", "given")}
    assert 0.35 < why["slow"]["expected"] < 5.0 and why["quick"]["expected"] < why["slow"]["expected"]
    assert why["given"]["expected"] == 3.0 and why["given"]["rank"] == 0, "the key wins over the history"


def test_a_log_exists_only_for_an_attempt_that_printed(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: logs\njobs:\n  quiet: {command: 'true'}\n"
                    "  loud: {command: 'echo hello', depends_on: [quiet]}\n")
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 0
    quiet = cli("logs", "quiet", "--state-dir", str(sd))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "wloadctl: quiet attempt 1 printed nothing\n")
    assert cli("logs", "loud", "--state-dir", str(sd)).stdout == "hello\n"
    run_id = json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["run"]
    # The executors' spare files went with them: only the log of the attempt that printed is left.
    assert sorted(p.name for p in (sd / "logs" / run_id).iterdir()) == ["loud.1.log"]


def test_a_new_run_removes_the_executor_journals_of_the_finished_runs_before_it(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given a state directory that ran a plan once, and a journal of a run it does not know
    sd = tmp_path / "sd"
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "evidence", {"a": {}, "b": {"depends_on": ["a"]}})
    first = cli("run", str(plan), "--state-dir", str(sd), "--json")
    assert first.returncode == 0, first.stderr
    run1 = json.loads(first.stdout)["run"]
    journals = sd / "executors"
    assert [p for p in journals.iterdir() if p.name.startswith(f"{run1}-")], "the run's executors journaled"
    stranger = journals / "20200101-000000-abcdef-0-1.results"
    stranger.write_bytes(b"")
    # When the next night's run starts there
    second = cli("run", str(plan), "--state-dir", str(sd), "--json")
    assert second.returncode == 0, second.stderr
    run2 = json.loads(second.stdout)["run"]
    # Then only the new run's journals are left, and what the journal cannot say is finished stays
    names = sorted(p.name for p in journals.iterdir())
    assert not [n for n in names if n.startswith(f"{run1}-")], names
    assert [n for n in names if n.startswith(f"{run2}-")], names
    assert stranger.name in names


def test_a_job_at_risk_that_made_its_deadline_is_not_listed_at_risk_afterwards(tmp_path: Path,
                                                                              no_ipc_leaks: None) -> None:
    plan = tmp_path / "plan.yaml"
    # both are at risk from the start (their deadlines are within the risk window); one makes it, one is late
    plan.write_text("name: dl\njobs:\n  ontime: {command: 'sleep 0.2', deadline: '+60s'}\n"
                    "  late: {command: 'sleep 1.5', deadline: '+1s'}\n")
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 0
    assert json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["flags"] == {"late": "LATE"}
    runs = json.loads(cli("runs", "--root", str(tmp_path), "--json").stdout)
    assert [(r["at_risk"], r["late"]) for r in runs] == [(0, 1)], runs


def test_jobs_that_never_ran_are_told_and_a_stalled_run_says_which_verb_each_held_job_needs(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "told", "variables": {"x": 2}, "jobs": {
        "lst": {"command": "echo '{\"x\": [\"a\", \"b\"]}' > $WLOADCTL_RESULT_FILE"},
        "each": {"for_each": "jobs.lst.result.x", "command": "echo {item}", "depends_on": ["lst"]},
        "sk": {"command": "true", "if": "vars.x == 1"},
        "sign": {"command": "true", "confirm": True},
        "after": {"command": "true", "depends_on": ["sign"]}}}, sort_keys=False))
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--exit-on-hold", "--executors", "1", "--slots", "1")
    assert p.returncode == 1, p.stderr
    # a job skipped as the run started is told with the others
    assert any(line.split()[1:] == ["SKIPPED", "sk", "(condition", "false:", "vars.x", "==", "1)"]
               for line in p.stdout.splitlines()), p.stdout
    assert p.stderr.splitlines()[-1] == ("wloadctl: run stalled: 1 held job(s) need an operator: approve sign "
                                         f"(waiting for confirmation); then `wloadctl resume --state-dir {sd}`")
    # a loop's parent says how it ended, live or from the journal
    why = json.loads(cli("why", "each", "--state-dir", str(sd), "--json").stdout)
    assert why["reasons"][0].startswith("succeeded: all 2 instance(s) finished"), why
    # a job that ran no process of its own has no log, and says why
    for job, said in (("each", "wloadctl: job 'each' ran no process of its own (state SUCCEEDED), so it has no log "
                               "(its for_each instances each@ITEM have theirs)"),
                      ("sk", "wloadctl: job 'sk' ran no process of its own (state SKIPPED), so it has no log"),
                      ("after", "wloadctl: job 'after' has not run yet (state WAITING)")):
        q = cli("logs", job, "--state-dir", str(sd))
        assert (q.returncode, q.stderr.strip()) == (1, said), q.stderr


def test_run_and_trigger_use_the_state_directory_of_wloadctl_state_dir_as_every_verb_does(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given $WLOADCTL_STATE_DIR, and a state root where the plan's own directory would be
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: envdir\nschedule: {cron: '0 6 * * *'}\njobs:\n  a: {command: 'true'}\n")
    sd, root = tmp_path / "sd", tmp_path / "root"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WLOADCTL_HOME": str(root), "WLOADCTL_STATE_DIR": str(sd)}
    # When the plan runs without --state-dir
    p = subprocess.run([sys.executable, "-m", "wloadctl", "run", str(plan), "--json"], capture_output=True,
                       text=True, timeout=120, env=env)
    # Then its run is in that directory, where status (reading the same variable) finds it
    assert p.returncode == 0, p.stderr
    assert (sd / "journal.db").exists() and not (root / "envdir").exists()
    st = subprocess.run([sys.executable, "-m", "wloadctl", "status", "--json"], capture_output=True, text=True,
                        timeout=60, env=env)
    assert json.loads(st.stdout)["run"] == json.loads(p.stdout)["run"]
    # And trigger keeps its runs there too
    with subprocess.Popen([sys.executable, "-m", "wloadctl", "trigger", str(plan)], stderr=subprocess.PIPE,
                          text=True, env=env, start_new_session=True) as trigger:
        assert trigger.stderr is not None
        try:
            assert select.select([trigger.stderr], [], [], 60)[0], "trigger said nothing"
            said = trigger.stderr.readline()
        finally:
            trigger.terminate()
    assert said.startswith("wloadctl: next run of 'envdir' at ") and said.endswith(f" in {sd}\n"), said
