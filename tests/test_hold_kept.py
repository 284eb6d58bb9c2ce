"""An operator's hold is the operator's until released: a held job that an upstream's failure ended comes back HELD
when it is reopened (the upstream retried or rerun, set ok, a rerun of the job itself), never WAITING and run with no
sign-off; the verb says it stays held. The same holds for a confirmation job's wait for its approve, and across a
kill -9 and a resume (the hold is read back from the journaled actions)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import make_plan
from tests.core.test_engine import dispatched, finish, states
from tests.core.test_loops import dynamic, finish_list
from tests.integration.helpers import cli, job_states, start, status, stop_proc, wait_for
from tui.impact import impact
from tui.view_model import JobsModel
from wloadctl.core.commands import Reply
from wloadctl.core.dag import Dag
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import JobsFinishedEvent, OperatorEvent, RunStartedEvent
from wloadctl.core.holds import holds_journaled, says_held
from wloadctl.core.plan import Plan
from wloadctl.core.planfile import load_plan_text
from wloadctl.core.states import JobState

S = JobState


def held_chain(confirm: bool = False) -> SchedulerCore:
    """prep -> approve -> send; approve held by root for treasury (or a confirmation job), prep then failed."""
    plan = make_plan({"prep": {}, "approve": {"deps": ["prep"]}, "send": {"deps": ["approve"]}})
    if confirm:
        plan = Plan(plan.name, {**plan.jobs, "approve": dataclasses.replace(plan.jobs["approve"], confirm=True)},
                    plan.resources)
    core = SchedulerCore(plan, slots=4)
    core.handle(RunStartedEvent(0.0))
    if not confirm:
        verb(core, "hold", "approve", reason="treasury")
    finish(core, "prep", code=3)
    assert states(core) == {"prep": "FAILED", "approve": "UPSTREAM_FAILED", "send": "UPSTREAM_FAILED"}
    return core


def listened(p: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str] | None:
    """A verb's answer, or None when the resumed scheduler did not listen yet (nothing was applied)."""
    if "no scheduler listens" in p.stderr:
        return None
    assert p.returncode == 0, p.stderr
    return p


def verb(core: SchedulerCore, name: str, job: str, now: float = 2.0, **kw: object) -> tuple[Reply, list]:
    cmds = core.handle(OperatorEvent(name, (core.index[job],), now, user="root", **kw))  # type: ignore[arg-type]
    return next(c for c in cmds if isinstance(c, Reply)), cmds


def test_a_held_job_reopened_by_its_upstreams_retry_stays_held_until_released() -> None:
    core = held_chain()
    a = core.index["approve"]
    assert core.reasons[a] == "upstream prep FAILED; still held by root: treasury"
    rep, _ = verb(core, "retry", "prep")
    assert rep.results[0][1:] == (True, "job 'prep' will run again with 2 downstream job(s); 1 held job(s) stay "
                                        "held ('approve': run again after it once released)")
    assert states(core) == {"prep": "QUEUED", "approve": "HELD", "send": "WAITING"}
    assert core.reasons[a] == "still held by root: treasury"
    cmds = finish(core, "prep", now=3.0)
    assert states(core)["approve"] == "HELD" and dispatched(cmds) == []
    rep, cmds = verb(core, "release", "approve", now=4.0)
    assert rep.results[0][1:] == (True, "job 'approve' released, now READY")
    assert dispatched(cmds) == [(a, 1)]
    core.validate()


@pytest.mark.parametrize("how", ["set-ok", "skip", "rerun"])
def test_a_held_job_reopened_when_its_failed_upstream_is_set_ok_skipped_or_rerun_stays_held(how: str) -> None:
    core = held_chain()
    rep, cmds = verb(core, how, "prep", downstream=how == "rerun")
    assert rep.results[0][1] and states(core)["approve"] == "HELD"
    assert core.index["approve"] not in {i for i, _a in dispatched(cmds)}
    if how == "rerun":
        assert "1 held job(s) stay held" in rep.results[0][2]


def test_a_rerun_of_the_held_job_itself_keeps_it_held_and_says_so() -> None:
    core = held_chain()
    verb(core, "set-ok", "prep")  # (approve HELD again, its upstream done)
    verb(core, "cancel", "prep")  # the run is cancelled: approve, held, is CANCELLED with it
    assert states(core)["approve"] == "CANCELLED"
    core.cancelled = False  # (as a stopped run's journal core for an offline rerun is not live)
    rep, cmds = verb(core, "rerun", "approve")
    assert rep.results[0][1:] == (True, "job 'approve' stays held, held by root: treasury: `wloadctl release "
                                        "approve` lets it run")
    assert states(core)["approve"] == "HELD" and dispatched(cmds) == []


def test_a_skip_or_set_ok_of_the_held_job_itself_ends_its_hold() -> None:
    core = held_chain()
    verb(core, "skip", "approve")
    assert core.index["approve"] not in core.holds
    verb(core, "set-ok", "prep")  # (a rerun behind prep FAILED is refused: it would not run)
    rep, _ = verb(core, "rerun", "approve")
    assert rep.results[0][2] == "job 'approve' will run again"


def test_a_confirmation_job_reopened_by_its_upstreams_retry_still_waits_for_its_approve() -> None:
    core = held_chain(confirm=True)
    a = core.index["approve"]
    # (its approve applies once it is reopened: the reason of a job UPSTREAM_FAILED does not offer it now)
    assert core.reasons[a] == "upstream prep FAILED; still waiting for confirmation once it is reopened"
    assert not verb(core, "approve", "approve")[0].results[0][1]
    rep, _ = verb(core, "retry", "prep")
    assert "1 held job(s) stay held" in rep.results[0][2]
    cmds = finish(core, "prep", now=3.0)
    assert states(core)["approve"] == "HELD" and dispatched(cmds) == []
    assert not verb(core, "release", "approve")[0].results[0][1]
    rep, cmds = verb(core, "approve", "approve", now=4.0)
    assert rep.results[0][1] and dispatched(cmds) == [(a, 1)]


def test_a_resumed_core_knows_the_holds_from_the_journaled_actions() -> None:
    core = held_chain()
    rows = [(i, core.state[i], core.attempt[i]) for i in range(core.n)]
    actions = [(1.0, "root", "hold", "approve", "treasury", "job 'approve' held", True),
               (1.5, "ana", "release", "send", "", "refused", False),
               (1.6, "ana", "hold", "gone", "", "", True)]  # (a job the plan no longer has)
    again = SchedulerCore(make_plan({"prep": {}, "approve": {"deps": ["prep"]}, "send": {"deps": ["approve"]}}),
                          slots=4)
    again.restore(rows, 5.0)
    again.holds = holds_journaled(actions, again)
    again.handle(RunStartedEvent(5.0))
    assert again.holds == {again.index["approve"]: "held by root: treasury"}
    verb(again, "retry", "prep", now=6.0)
    assert states(again)["approve"] == "HELD"
    # a release journaled after the hold ends it
    released = holds_journaled([*actions, (2.0, "root", "release", "approve", "", "released", True)], again)
    assert released == {}


def test_a_resumed_core_knows_a_confirmation_job_still_waits_for_its_approve() -> None:
    core = held_chain(confirm=True)
    rows = [(i, core.state[i], core.attempt[i]) for i in range(core.n)]
    again = SchedulerCore(core.plan, slots=4)
    again.restore(rows, 5.0)
    assert holds_journaled([(1.0, "root", "approve", "approve", "", "confirmed", True)], again) == {}
    again.holds = holds_journaled([], again)
    again.handle(RunStartedEvent(5.0))
    verb(again, "retry", "prep", now=6.0)
    cmds = finish(again, "prep", now=7.0)
    assert states(again)["approve"] == "HELD" and dispatched(cmds) == []


def test_a_held_instance_a_loop_lists_again_stays_held() -> None:
    core = SchedulerCore(dynamic(), slots=2)
    core.handle(RunStartedEvent(0.0))  # (list and side run)
    cmds = finish_list(core, {"files": ["a", "b"]})  # a runs in list's slot; b waits for one
    b = core.index["load@b"]
    assert [core.ids[i] for i, _a in dispatched(cmds)] == ["load@a"] and core.state[b] == S.READY
    verb(core, "hold", "load@b", reason="treasury")
    core.handle(JobsFinishedEvent([(core.index["load@a"], 1, 0, 0), (core.index["side"], 1, 0, 0)], 2.0))
    verb(core, "rerun", "list", now=3.0, downstream=True)
    assert core.state[b] == S.WAITING  # (for the list its loop reads again)
    cmds = finish_list(core, {"files": ["a", "b"]})
    assert core.state[b] == S.HELD and core.reasons[b] == "still held by root: treasury (listed again by loop load)"
    assert b not in {i for i, _a in dispatched(cmds)}
    rep, cmds = verb(core, "release", "load@b", now=4.0)
    assert rep.results[0][1] and b in {i for i, _a in dispatched(cmds)}


def test_says_held_reads_the_reasons_a_kept_hold_leaves() -> None:
    assert says_held("held by root: treasury") and says_held("held")
    assert says_held("upstream prep FAILED; still held by root: treasury")
    assert says_held("still waiting for confirmation: `wloadctl approve x`")
    assert not says_held("upstream prep FAILED") and not says_held("interrupted, needs operator")


def test_the_consoles_preview_of_a_retry_says_the_held_jobs_stay_held() -> None:
    core = held_chain()
    model = JobsModel(ids=list(core.ids), tier=bytearray(core.tier))
    model.load_rows([(i, core.ids[i], core.state[i], core.attempt[i], -1, None, None, None, core.reasons.get(i, ""))
                     for i in range(core.n)])
    imp = impact("retry", [core.index["prep"]], model, Dag(core.plan))
    assert imp.affected == ["approve", "send"] and imp.held == ["approve"]
    assert "downstream: 2 job(s) are reopened (blocked by them); 1 held job(s) stay held until released" in imp.lines()


@pytest.mark.ipc
def test_a_hold_outlasts_a_failed_upstream_a_kill_9_and_a_resume(tmp_path: Path, no_ipc_leaks: None) -> None:
    sd, prep_go, other_go, out = tmp_path / "sd", tmp_path / "prep.go", tmp_path / "other.go", tmp_path / "out"
    plan = tmp_path / "hold.yaml"
    plan.write_text(yaml.safe_dump({"name": "hold", "jobs": {
        "prep": {"command": f'while [ ! -e {prep_go} ]; do sleep 0.05; done; [ "$WLOADCTL_ATTEMPT" != 1 ]'},
        "approve": {"command": f"echo approve >> {out}", "depends_on": ["prep"]},
        "send": {"command": f"echo send >> {out}", "depends_on": ["approve"]},
        "other": {"command": f"while [ ! -e {other_go} ]; do sleep 0.05; done"}}}))
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: job_states(sd).get("prep") == "RUNNING", what="prep running")
        cli("hold", "approve", "--reason", "treasury", "--state-dir", str(sd), check=True)
        prep_go.touch()
        wait_for(lambda: job_states(sd).get("approve") == "UPSTREAM_FAILED", what="prep failed")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc = start("resume", "--state-dir", str(sd))
        wait_for(lambda: status(sd).get("live"), what="the run resumed")
        p = wait_for(lambda: listened(cli("retry", "prep", "--state-dir", str(sd))), what="the retry taken")
        assert "1 held job(s) stay held ('approve'" in p.stdout
        wait_for(lambda: job_states(sd).get("prep") == "SUCCEEDED", what="prep succeeded")
        assert job_states(sd)["approve"] == "HELD" and not out.exists()
        cli("release", "approve", "--state-dir", str(sd), check=True)
        other_go.touch()
        assert proc.wait(30) == 0
    finally:
        prep_go.touch()
        other_go.touch()
        if proc.poll() is None:  # (a failed check: the run is let end, its queues and segments gone with it)
            cli("release", "approve", "--state-dir", str(sd))
        stop_proc(proc, grace=30, term=False)
    assert out.read_text() == "approve\nsend\n"
    hist = cli("history", "approve", "--state-dir", str(sd), check=True).stdout
    assert "still held by" in hist and "treasury" in hist


def test_a_confirmation_approved_on_a_stopped_run_is_kept_when_its_if_keeps_it_waiting(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: conf\nvariables: {go: true}\njobs:\n  a: {command: 'true'}\n"
                    "  c: {command: 'true', confirm: true, if: 'vars.go', depends_on: [a]}\n")
    sd = str(tmp_path / "sd")
    assert cli("run", str(plan), "--state-dir", sd, "--exit-on-hold").returncode == 1  # held for c's approve
    p = cli("approve", "c", "--state-dir", sd)
    assert p.returncode == 0 and p.stdout.strip() == "job 'c' confirmed, now WAITING", p.stdout
    # (a resume held it for its approve again: the approval was lost, and a plain resume waited for ever)
    p = cli("resume", "--state-dir", sd, "--exit-on-hold")
    assert p.returncode == 0, p.stdout + p.stderr
    assert job_states(Path(sd)) == {"a": "SUCCEEDED", "c": "SUCCEEDED"}


CONFIRM_IF = """name: conf
variables: {go: %s}
jobs:
  extract: {command: 'true'}
  publish: {command: 'true', confirm: true, if: 'vars.go', depends_on: [extract]}
  notify: {command: 'true', depends_on: [publish]}
  audit: {command: 'true', confirm: true, if: 'vars.go'}
"""


def confirm_if(go: str) -> SchedulerCore:
    core = SchedulerCore(load_plan_text(CONFIRM_IF % go), slots=4)
    core.handle(RunStartedEvent(0.0))
    return core


def test_a_confirmation_job_whose_if_is_false_is_skipped_without_an_approve() -> None:
    core = confirm_if("false")
    # A root: judged at the run's start. Nobody is asked to approve what would not run.
    assert states(core)["audit"] == "SKIPPED"
    assert core.reasons[core.index["audit"]] == "condition false: vars.go; no confirmation asked"
    assert states(core)["publish"] == "HELD"  # its `if` reads its upstream's outcome: not judged yet
    finish(core, "extract")
    assert states(core) == {"extract": "SUCCEEDED", "publish": "SKIPPED", "notify": "SKIPPED", "audit": "SKIPPED"}
    # Its wait is kept: reopened by a rerun of its upstream, it waits for its approve again, never runs without.
    verb(core, "rerun", "extract", downstream=True)
    assert states(core)["publish"] == "HELD"
    assert "waiting for confirmation" in core.reasons[core.index["publish"]]


def test_a_confirmation_job_whose_if_is_true_still_waits_for_its_approve() -> None:
    core = confirm_if("true")
    finish(core, "extract")
    assert states(core) == {"extract": "SUCCEEDED", "publish": "HELD", "notify": "WAITING", "audit": "HELD"}
    reply, _cmds = verb(core, "approve", "publish")
    assert states(core)["publish"] == "QUEUED", reply


def test_an_operator_hold_outlasts_a_false_if() -> None:
    core = confirm_if("false")
    i = core.index["notify"]
    verb(core, "hold", "notify", reason="treasury")
    assert states(core)["notify"] == "HELD"
    # publish's skip (its `if` false) blocks notify, held: a skip of its upstream ends it as before ...
    finish(core, "extract")
    assert states(core)["notify"] == "SKIPPED"
    # ... but an operator's hold is never ended by an `if`: a held job with a false `if` of its own stays HELD.
    plan = load_plan_text("name: h\nvariables: {go: false}\njobs:\n  a: {command: 'true'}\n"
                          "  b: {command: 'true', if: 'vars.go', depends_on: [a]}\n")
    core = SchedulerCore(plan, slots=4)
    core.handle(RunStartedEvent(0.0))
    verb(core, "hold", "b", reason="treasury")
    finish(core, "a")
    assert states(core) == {"a": "SUCCEEDED", "b": "HELD"}
    assert core.reasons[core.index["b"]].startswith("held by root"), i


def test_a_headless_run_needs_no_approve_for_a_confirmation_job_its_if_skips(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(CONFIRM_IF % "false")
    sd = str(tmp_path / "sd")
    # (it waited, HELD, for an approve of a job that would not run: a plain run never ended)
    p = cli("run", str(plan), "--state-dir", sd, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert job_states(Path(sd)) == {"extract": "SUCCEEDED", "publish": "SKIPPED", "notify": "SKIPPED",
                                    "audit": "SKIPPED"}
    assert "no confirmation asked" in cli("why", "publish", "--state-dir", sd, check=True).stdout
