"""A full disk under the state directory mid-run: the scheduler pauses, says why, and goes on when space returns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.faults.inns import ENV, ns_available, ns_command
from tests.integration.helpers import evidence_plan, read_evidence

pytestmark = pytest.mark.ipc

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    if not ns_available():
        pytest.fail("this test gives the state directory a small disk of its own (a tmpfs in a mount "
                    "namespace): it needs util-linux unshare, and root or unprivileged user namespaces")


def scenario(name: str, tmp: Path, mounts: list[tuple[Path | str, str]], cfg: dict) -> dict:
    """Run a scenario of tests/faults/inns.py in its namespaces; return its report."""
    cfg = {**cfg, "report": str(tmp / "report.json")}
    (tmp / "cfg.json").write_text(json.dumps(cfg))
    p = subprocess.run(ns_command(mounts, [sys.executable, "-m", "tests.faults.inns", name, str(tmp / "cfg.json")]),
                       capture_output=True, text=True, timeout=300, env=ENV, cwd=ROOT)
    log = Path(cfg["log"]).read_text() if Path(cfg.get("log", "/nonexistent")).exists() else ""
    assert p.returncode == 0, f"scenario {name} exited {p.returncode}: {p.stderr[-2000:]}\nscheduler: {log[-2000:]}"
    return json.loads((tmp / "report.json").read_text())


def test_a_full_state_dir_pauses_dispatch_and_the_run_goes_on_when_space_returns(tmp_path: Path) -> None:
    # Given a run of 30 jobs in three layers whose state directory is a 16 MiB disk of its own
    # (the jobs' evidence is written elsewhere; their logs go to the small disk)
    sd = tmp_path / "sd"
    sd.mkdir()
    out = tmp_path / "evidence"
    jobs: dict[str, dict] = {}
    for layer in range(3):
        for k in range(10):
            jobs[f"l{layer}_{k}"] = {"sleep": 0.3, **({"depends_on": [f"l{layer - 1}_{k}"]} if layer else {})}
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs)
    text = plan.read_text().replace("; sleep 0.3;", "; echo output of the job; sleep 0.3; echo more output;")
    plan.write_text(text)
    log = tmp_path / "scheduler.log"
    # When the disk fills up once 4 jobs succeeded, and the file is removed while the scheduler is paused
    got = scenario("full_state_dir", tmp_path, [(sd, "16m"), ("/dev/shm", "64m")],
                   {"sd": str(sd), "plan": str(plan), "evidence": str(out), "log": str(log), "fill_after": 4})
    said = log.read_text()
    # Then the scheduler stopped dispatching and said why, in its log and in `status`
    assert "No space left on device" in got["dd"], got["dd"]
    assert f"paused: no space left on device in {sd}" in said, said
    assert got["paused_status"]["paused"] == f"no space left on device in {sd}"
    assert f"PAUSED: no space left on device in {sd}" in got["status_text"], got["status_text"]
    assert got["paused_status"]["counts"].get("READY", 0) + got["paused_status"]["counts"].get("WAITING", 0) > 0
    assert got["still_paused"] and got["alive_while_paused"]
    assert got["starts_while_paused"] == 0
    # and went on by itself when the space came back, to a clean finish
    assert "resumed: space is back in" in said, said
    assert got["rc"] == 0, said[-3000:]
    assert got["run_status"] == "succeeded"
    # with nothing lost and nothing done twice: one success per job in an intact journal, one run each
    assert got["integrity"] == "ok"
    assert got["succeeded"] == {j: 1 for j in jobs}, got["succeeded"]
    evidence = read_evidence(out)
    assert {j: [k for k, _t in evidence[j]] for j in jobs} == {j: ["start", "end"] for j in jobs}
    # and an event log that kept what the full disk refused: whole lines, the pause and the resume in order
    assert "torn" not in got["events"]
    assert got["events"].index("paused") < got["events"].index("resumed") < got["events"].index("scheduler_stop")
    # and nothing left behind
    assert got["shm"] == [] and got["procs"] == [], (got["shm"], got["procs"])
    assert "Traceback" not in said


def _sixty_jobs(tmp: Path) -> Path:
    plan = tmp / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "small", "jobs": {
        f"j{k:02d}": {"command": f"sleep {0.15 + (k * 7 % 8) / 20:.2f}"} for k in range(60)}}))
    return plan


def test_a_small_state_dir_filled_mid_run_goes_on_when_space_returns(tmp_path: Path) -> None:
    # Given a run of 60 short jobs whose state directory is a disk of 2 MiB, which fills up mid-run
    sd = tmp_path / "sd"
    sd.mkdir()
    log = tmp_path / "scheduler.log"
    # When the fill is removed once the scheduler has paused
    got = scenario("small_state_dir", tmp_path, [(sd, "2m"), ("/dev/shm", "64m")],
                   {"sd": str(sd), "plan": str(_sixty_jobs(tmp_path)), "log": str(log), "fill_after": 10})
    said = log.read_text()
    # Then the run went on by itself (the journal's write-ahead log gave its space back) to a clean finish
    assert f"paused: no space left on device in {sd}" in said and "resumed: space is back in" in said, said
    assert got["rc"] == 0 and got["run_status"] == "succeeded", said[-3000:]
    assert got["integrity"] == "ok" and got["succeeded"] == {f"j{k:02d}": 1 for k in range(60)}
    assert got["wal"] < 1024 * 1024, got["wal"]
    assert got["shm"] == [] and got["procs"] == [], (got["shm"], got["procs"])
    assert "Traceback" not in said


def test_a_run_stopped_while_paused_for_a_full_disk_says_to_resume_and_resumes(tmp_path: Path) -> None:
    # Given a run of 60 short jobs on a 2 MiB state directory, paused for a full disk
    sd = tmp_path / "sd"
    sd.mkdir()
    log = tmp_path / "scheduler.log"
    # When it is stopped (SIGTERM) while paused, the space is freed and the run resumed
    got = scenario("small_state_dir", tmp_path, [(sd, "2m"), ("/dev/shm", "64m")],
                   {"sd": str(sd), "plan": str(_sixty_jobs(tmp_path)), "log": str(log), "fill_after": 10,
                    "stop": True})
    # Then the stop exited as a stop does, saying in one line to resume (its jobs were left running: stopped
    # with no room to journal it, they would read as failed), never that the scheduler goes on by itself
    assert got["rc"] == 130, log.read_text()[-3000:]
    said = got["stop_said"]
    assert said.startswith(f"wloadctl: run {got['run_id']} stopped"), said
    assert f"`wloadctl resume --state-dir {sd}`" in said and "retries" not in said, said
    assert "stopped while paused: no space left on device" in said or "keep running under their executors" in said
    # and the resume finished the run, each job once
    assert got["resume_rc"] == 0 and got["run_status"] == "succeeded", got["resume_err"]
    assert got["integrity"] == "ok" and got["succeeded"] == {f"j{k:02d}": 1 for k in range(60)}
    assert got["shm"] == [] and got["procs"] == [], (got["shm"], got["procs"])


def test_a_disk_full_before_the_runs_first_writes_after_dispatch_pauses_it_too(tmp_path: Path) -> None:
    # Given a run whose first job fills the state directory's disk at once, then waits for the space to come back
    sd = tmp_path / "sd"
    sd.mkdir()
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "early", "jobs": {
        "a": {"command": 'dd if=/dev/zero of="$WLOADCTL_STATE_DIR/filler" bs=64k 2>/dev/null; '
                         'while [ -e "$WLOADCTL_STATE_DIR/filler" ]; do sleep 0.05; done'},
        "b": {"command": "true", "depends_on": ["a"]}}}))
    log = tmp_path / "scheduler.log"
    # When the plan's copy and facts are refused by the full disk, and the space comes back later
    got = scenario("full_from_the_start", tmp_path, [(sd, "4m"), ("/dev/shm", "64m")],
                   {"sd": str(sd), "plan": str(plan), "log": str(log)})
    said = log.read_text()
    # Then the scheduler paused (it did not die of the refused writes) and finished the run when space returned
    assert got["alive_while_full"], said
    assert "resumed: space is back in" in said, said
    assert got["rc"] == 0 and got["run_status"] == "succeeded", said
    assert got["integrity"] == "ok" and got["succeeded"] == {"a": 1, "b": 1}
    assert json.loads(got["why"])["state"] == "SUCCEEDED"
    assert got["shm"] == [] and got["procs"] == [], (got["shm"], got["procs"])
    assert "Traceback" not in said and "no transaction is active" not in said


def test_a_run_on_a_full_disk_is_refused_in_one_line_saying_so(tmp_path: Path) -> None:
    # Given a state directory whose disk is full, then one with 48 KiB left (less than a journal takes)
    sd = tmp_path / "sd"
    sd.mkdir()
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "evidence", {"a": {}, "b": {"depends_on": ["a"]}})
    got = scenario("full_before_the_run", tmp_path, [(sd, "1m"), ("/dev/shm", "64m")],
                   {"sd": str(sd), "plan": str(plan), "leave": 48 * 1024})
    # When a run starts there, each time it is refused in one line that says the disk is full and what to do,
    # with no promise of a retry (nothing of the run has started)
    for case in ("full", "nearly"):
        lines = got[case]["stderr"].strip().splitlines()
        assert got[case]["rc"] != 0 and len(lines) == 1, got[case]
        assert "no space left on device" in lines[0].lower() and "free space" in lines[0], lines[0]
        assert "retries" not in lines[0] and "internal error" not in lines[0], lines[0]
    assert got["full"]["rc"] == 2
    assert not (tmp_path / "evidence").exists()
    assert got["shm"] == [] and got["procs"] == [], got


def test_a_run_that_does_not_fit_dev_shm_is_refused_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    # Given a /dev/shm of 2 MiB, too small for a run's segments
    sd = tmp_path / "sd"
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "evidence", {"a": {}, "b": {"depends_on": ["a"]}})
    # When a run starts there
    got = scenario("shm_full_at_start", tmp_path, [("/dev/shm", "2m")], {"sd": str(sd), "plan": str(plan)})
    # Then it is refused in one line naming /dev/shm and what the run needs, and nothing of it is left
    lines = got["stderr"].strip().splitlines()
    assert got["rc"] != 0 and len(lines) == 1, got["stderr"]
    assert "no space left in /dev/shm for a run of plan 'it'" in lines[0]
    assert "MiB to start" in lines[0] and "free" in lines[0]
    assert "Traceback" not in got["stderr"]
    assert got["shm"] == [] and got["procs"] == [], got
    assert not (tmp_path / "evidence").exists()
    assert got["status"] == "", "no run was recorded in the journal"


def test_dev_shm_full_mid_run_holds_dispatches_back_and_the_run_goes_on_when_room_returns(tmp_path: Path) -> None:
    # Given a run on a /dev/shm of 12 MiB whose later jobs' payloads (700 KB of environment each)
    # need more of the payload arena than the first ones ever did; they wait for a gate job
    sd = tmp_path / "sd"
    out = tmp_path / "evidence"
    gate = tmp_path / "gate"
    jobs: dict[str, dict] = {"a": {}, "gate": {"depends_on": ["a"]}}
    jobs.update({f"b{k}": {"depends_on": ["gate"]} for k in range(4)})
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs)
    spec = yaml.safe_load(plan.read_text())
    spec["jobs"]["gate"]["command"] = f"while [ ! -e {gate} ]; do sleep 0.05; done; " + spec["jobs"]["gate"]["command"]
    for k in range(4):  # one variable may hold at most 128 KiB (MAX_ARG_STRLEN)
        spec["jobs"][f"b{k}"]["env"] = {f"BULK{n}": "x" * 100_000 for n in range(7)}
    plan.write_text(yaml.safe_dump(spec, sort_keys=False))
    log = tmp_path / "scheduler.log"
    # When /dev/shm fills up once the first job succeeded, the gate opens, and room comes back while
    # the scheduler waits
    got = scenario("shm_full_mid_run", tmp_path, [("/dev/shm", "12m")],
                   {"sd": str(sd), "plan": str(plan), "log": str(log), "fill_after": 1, "gate": str(gate)})
    said = log.read_text()
    # Then the scheduler did not crash: it held dispatches back and said why
    assert "No space left on device" in got["dd"], got["dd"]
    assert "paused: no space left in /dev/shm for the payload arena" in said, said
    assert "no space left in /dev/shm" in got["paused_status"]["paused"]
    assert "PAUSED: no space left in /dev/shm" in got["status_text"], got["status_text"]
    assert got["alive_while_paused"]
    # and sent them once there was room, to a clean finish with every job run once
    assert "resumed: /dev/shm has room for payloads again" in said, said
    assert got["rc"] == 0 and got["run_status"] == "succeeded", said[-3000:]
    assert got["integrity"] == "ok" and got["succeeded"] == {j: 1 for j in jobs}
    evidence = read_evidence(out)
    assert {j: [k for k, _t in evidence[j]] for j in jobs} == {j: ["start", "end"] for j in jobs}
    assert got["shm"] == [] and got["procs"] == [], (got["shm"], got["procs"])
    assert "Traceback" not in said
