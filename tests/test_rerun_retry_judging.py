"""Operator retries and reruns judge a job as a fresh run would: its `if` read again, its `until` loop counted
from where it stands (a rerun: from none), and each copy of a job sent again under a number of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import make_plan
from tests.core.test_conditions import exit_with, with_fields
from tests.core.test_engine import dispatched, states
from tests.integration.helpers import cli, start, stop_proc, wait_for
from wloadctl.core.commands import Kill
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import JobExitedEvent, JobStartedEvent, OperatorEvent, RunStartedEvent


def verb(core: SchedulerCore, name: str, job: str, downstream: bool = False) -> list:
    return core.handle(OperatorEvent(name, (core.index[job],), 2.0, downstream=downstream))


# -- the core, live -----------------------------------------------------------------------------------------


def test_a_live_retry_of_a_job_whose_if_could_not_be_evaluated_judges_it_again() -> None:
    plan = with_fields(make_plan({"a": {}, "b": {"deps": ["a"]}}), b={"condition": "vars.limit > 5"},
                       __vars__={"limit": "abc"})
    core = SchedulerCore(plan, slots=2)
    core.handle(RunStartedEvent(0.0))
    exit_with(core, "a")
    assert states(core)["b"] == "FAILED" and core.reasons[core.index["b"]].startswith("if: cannot evaluate")
    # When the operator retries it, the variable unchanged: it fails on its `if` again, its command not run
    cmds = verb(core, "retry", "b")
    assert dispatched(cmds) == []
    assert states(core)["b"] == "FAILED" and core.reasons[core.index["b"]].startswith("if: cannot evaluate")
    core.validate()


def test_a_released_job_whose_if_came_out_false_while_it_was_held_is_skipped_not_run() -> None:
    plan = with_fields(make_plan({"count": {}, "big": {"deps": ["count"]}}),
                       big={"condition": "jobs.count.result.rows > 1000"})
    core = SchedulerCore(plan, slots=2)
    core.handle(RunStartedEvent(0.0))
    verb(core, "hold", "big")
    exit_with(core, "count", 0, {"rows": 25})
    cmds = verb(core, "release", "big")
    assert dispatched(cmds) == [] and states(core)["big"] == "SKIPPED"
    core.validate()


def _loop_plan() -> SchedulerCore:
    plan = with_fields(make_plan({"up": {}, "poll": {"deps": ["up"]}}),
                       poll={"until": "result.ready == 1", "max_iterations": 2})
    core = SchedulerCore(plan, slots=2)
    core.handle(RunStartedEvent(0.0))
    exit_with(core, "up")
    exit_with(core, "poll", 0, {"ready": 0})
    exit_with(core, "poll", 0, {"ready": 0})
    assert states(core)["poll"] == "SUCCEEDED"  # it ran its two iterations
    return core


@pytest.mark.parametrize("how", ["rerun", "rerun --downstream of its upstream"])
def test_a_rerun_of_an_until_job_runs_its_loop_afresh(how: str) -> None:
    core = _loop_plan()
    if how == "rerun":
        verb(core, "rerun", "poll")
    else:
        verb(core, "rerun", "up", downstream=True)
        exit_with(core, "up")
    assert states(core)["poll"] == "QUEUED"
    exit_with(core, "poll", 0, {"ready": 0})
    # its first iteration of the new loop, not its third: it goes round again
    assert states(core)["poll"] == "QUEUED" and core.reasons[core.index["poll"]] == "until not met after iteration 1/2"
    exit_with(core, "poll", 0, {"ready": 0})
    assert states(core)["poll"] == "SUCCEEDED"
    core.validate()


def _fast_loop() -> SchedulerCore:
    plan = with_fields(make_plan({"poll": {}, "after": {"deps": ["poll"]}}),
                       poll={"until": "result.done == 1", "max_iterations": 1000})
    core = SchedulerCore(plan, slots=2)
    core.handle(RunStartedEvent(0.0))
    exit_with(core, "poll", 0, {"done": 0})
    assert states(core)["poll"] == "QUEUED"  # an iteration follows another: never WAITING or READY for long
    return core


def test_a_hold_of_an_until_loop_between_iterations_holds_it_once_the_iteration_ends_and_release_goes_on() -> None:
    core = _fast_loop()
    p = core.index["poll"]
    # When the operator holds it while an iteration is under way (it was refused: only kill applied)
    reply = next(c for c in verb(core, "hold", "poll") if type(c).__name__ == "Reply")
    assert reply.results == [(p, True, f"job 'poll' will be held after its current iteration (attempt "
                                       f"{core.attempt[p]}): it starts no other until released")]
    assert states(core)["poll"] == "QUEUED"
    # Then the iteration ends and the loop starts no other
    cmds = exit_with(core, "poll", 0, {"done": 0})
    assert states(core)["poll"] == "HELD" and dispatched(cmds) == []
    # And a release goes on with the loop where it was
    cmds = verb(core, "release", "poll")
    assert states(core)["poll"] == "QUEUED" and [core.ids[i] for i, _a in dispatched(cmds)] == ["poll"]
    exit_with(core, "poll", 0, {"done": 1})
    assert states(core)["poll"] == "SUCCEEDED" and states(core)["after"] == "QUEUED"
    core.validate()


def test_a_release_calls_off_a_hold_that_waits_for_an_until_loops_iteration() -> None:
    core = _fast_loop()
    verb(core, "hold", "poll")
    reply = next(c for c in verb(core, "release", "poll") if type(c).__name__ == "Reply")
    assert reply.results == [(core.index["poll"], True,
                               "job 'poll' released: its hold after this iteration is called off")]
    exit_with(core, "poll", 0, {"done": 0})
    assert states(core)["poll"] == "QUEUED"  # it goes round again
    core.validate()


def test_a_hold_asked_for_in_the_last_iteration_of_an_until_loop_is_moot() -> None:
    core = _fast_loop()
    verb(core, "hold", "poll")
    exit_with(core, "poll", 0, {"done": 1})
    assert states(core)["poll"] == "SUCCEEDED" and core.index["poll"] not in core.holds
    verb(core, "rerun", "poll")
    assert states(core)["poll"] == "QUEUED"  # (not held by the hold of a loop that had ended)
    core.validate()


def test_a_kill_of_an_until_loop_heard_after_its_iteration_exited_0_stops_the_loop() -> None:
    core = _fast_loop()
    verb(core, "kill", "poll")
    # When the iteration the kill was sent to had already exited 0 (the kill arrived too late to stop it)
    cmds = exit_with(core, "poll", 0, {"done": 0})
    # Then the loop ends there, failed by the kill (it went on iterating, the kill lost)
    assert states(core)["poll"] == "FAILED" and dispatched(cmds) == []
    assert core.reasons[core.index["poll"]].endswith("(its iteration had exited 0: the loop starts no other)")
    assert states(core)["after"] == "UPSTREAM_FAILED"
    core.validate()


def test_a_preempted_job_is_sent_again_under_a_new_attempt_that_its_retries_do_not_count() -> None:
    plan = with_fields(make_plan({"bulk": {"sla": "low"}, "gate": {}, "urgent": {"sla": "critical", "deps": ["gate"]}}),
                       bulk={"preemptible": True})
    core = SchedulerCore(plan, slots=1)
    verb(core, "hold", "gate")
    core.handle(RunStartedEvent(0.0))
    b = core.index["bulk"]
    core.handle(JobStartedEvent(b, 1, 0, 100, 0.5))
    kills = [c for c in verb(core, "set-ok", "gate") if isinstance(c, Kill)]
    assert [(k.job, k.attempt) for k in kills] == [(b, 1)]
    core.handle(JobExitedEvent(b, 1, 0, 143, 2.0, signal=15))
    exit_with(core, "urgent")
    # the copy sent after the preemption is attempt 2: attempt 1 keeps its log, and its late reports stay its own
    assert states(core)["bulk"] == "QUEUED" and core.attempt[b] == 2
    core.handle(JobExitedEvent(b, 1, 0, -9, 3.0, signal=9))  # the first copy's late end changes nothing
    assert states(core)["bulk"] == "QUEUED"
    core.handle(JobExitedEvent(b, 2, 0, 1, 4.0))
    # its retry policy (none) counts the one attempt that failed: it fails, not retried for the preemption
    assert states(core)["bulk"] == "FAILED"
    core.validate()


# -- real runs: a verb on a stopped run's journal, then resume -----------------------------------------------


def _plan(path: Path, jobs: dict, variables: dict | None = None) -> Path:
    spec: dict = {"name": path.stem, "jobs": jobs}
    if variables:
        spec["variables"] = variables
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _wl(*args: str) -> str:
    p = cli(*args, timeout=60)
    assert p.returncode in (0, 1), f"wloadctl {' '.join(args)} exited {p.returncode}: {p.stderr}"
    return p.stdout + p.stderr


def test_a_retry_on_a_stopped_run_of_a_job_whose_if_failed_is_judged_when_the_run_resumes(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    sd, ran = tmp_path / "sd", tmp_path / "ran"
    jobs = {"a": {"command": "true"},
            "b": {"command": f"echo b >> {ran}", "depends_on": ["a"], "if": "vars.limit > 5"}}
    bad = _plan(tmp_path / "judged.yaml", jobs, {"limit": "abc"})
    assert cli("run", str(bad), "--state-dir", str(sd)).returncode == 1
    # Given a retry with the variable still text: the resume fails it on its `if` again, its command not run
    assert "judged again when the run resumes" in _wl("retry", "b", "--state-dir", str(sd))
    assert "`if` (vars.limit > 5) is judged again when the run resumes" in _wl("why", "b", "--state-dir", str(sd))
    assert cli("resume", "--state-dir", str(sd)).returncode == 1
    assert not ran.exists()
    assert "if: cannot evaluate" in _wl("why", "b", "--state-dir", str(sd))
    # When the variable is fixed (a changed plan accepted) and it is retried: it is judged on it, and runs
    fixed = _plan(tmp_path / "judged.yaml", jobs, {"limit": 10})
    _wl("retry", "b", "--state-dir", str(sd))
    assert cli("resume", str(fixed), "--state-dir", str(sd), "--accept-plan-change").returncode == 0
    assert ran.read_text() == "b\n"


def _loop_jobs(ev: Path) -> dict:
    # Its second run fails (exit 1, no retries); every other iteration succeeds and never says done.
    cmd = f'n=$(cat {ev} 2>/dev/null | wc -l); echo x >> {ev}; [ "$n" != 1 ]'
    return {"poll": {"command": cmd, "until": "result.done == 1", "max_iterations": 3}}


@pytest.mark.parametrize(("verb_name", "runs_after"), [("retry", 2), ("rerun", 3)])
def test_a_resume_goes_on_with_an_until_loop_where_a_retry_left_it_and_afresh_after_a_rerun(
        tmp_path: Path, no_ipc_leaks: None, verb_name: str, runs_after: int) -> None:
    sd, ev = tmp_path / "sd", tmp_path / "ev"
    plan = _plan(tmp_path / "loop.yaml", _loop_jobs(ev))
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 1  # iteration 1 done, the 2nd failed
    assert len(ev.read_text().splitlines()) == 2
    _wl(verb_name, "poll", "--state-dir", str(sd))
    assert cli("resume", "--state-dir", str(sd)).returncode == 0
    # a retry goes on with iterations 2 and 3; a rerun runs all three again
    assert len(ev.read_text().splitlines()) == 2 + runs_after


def test_a_job_retried_on_a_stopped_run_keeps_its_retries_when_the_run_resumes(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    sd, ev = tmp_path / "sd", tmp_path / "ev"
    plan = _plan(tmp_path / "tries.yaml", {"f": {"command": f"echo x >> {ev}; exit 1",
                                                  "retries": {"count": 2, "delay": "0s"}}})
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 1
    assert len(ev.read_text().splitlines()) == 3
    _wl("retry", "f", "--state-dir", str(sd))
    assert cli("resume", "--state-dir", str(sd)).returncode == 1
    assert len(ev.read_text().splitlines()) == 6  # its attempt and its two retries again


def test_the_log_of_a_preempted_copy_is_kept_beside_the_log_of_the_copy_sent_after_it(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    sd, mark = tmp_path / "sd", tmp_path / "first"
    plan = _plan(tmp_path / "preempt.yaml", {
        "bulk": {"command": f'if [ -e {mark} ]; then echo second copy; exit 0; fi; echo first copy; touch {mark}; '
                            "sleep 30",
                 "sla": "low", "preemptible": True},
        "urgent": {"command": "true", "sla": "critical", "confirm": True},
    })
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    try:
        wait_for(mark.exists, timeout=30, what="bulk's first copy")
        _wl("approve", "urgent", "--state-dir", str(sd))
        assert proc.wait(60) == 0
    finally:
        stop_proc(proc)
    # `logs bulk` is the copy that ran to its end; the preempted copy's log is its attempt's, not written over
    assert _wl("logs", "bulk", "--state-dir", str(sd)).startswith("second copy")
    assert _wl("logs", "bulk", "--attempt", "1", "--state-dir", str(sd)).startswith("first copy")
