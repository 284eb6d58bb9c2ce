"""Loops over output: an instance rerun while its loop reads its list again, a loop over no items, items whose
ids would be one."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import make_plan
from tests.integration.helpers import cli, job_states, start, wait_for
from wloadctl.core.commands import Dispatch, Persist, Reply
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import JobExitedEvent, JobsFinishedEvent, OperatorEvent, RunStartedEvent
from wloadctl.core.explain import why
from wloadctl.core.jobtable import JobTable
from wloadctl.core.loops import apply_expansions, expand_for_each, instance_id
from wloadctl.core.plan import DynamicItems, Plan
from wloadctl.core.states import JobState


def dynamic(gate: bool = False) -> Plan:
    """list, the loop `load` over its output, post after load, on_fail on its failure, after on its end; with
    `gate`, a job `late` of its own that runs on (the run is still going while the loop is; downstream of list,
    started, it would make a rerun of list with its downstream refused)."""
    more = {"late": {}} if gate else {}
    base = make_plan({"list": {}, "load": {"deps": ["list"], "command": "load {item}"}, "post": {"deps": ["load"]},
                      "on_fail": {"deps": {"load": "failure"}}, "after": {"deps": {"load": "done"}}, **more})
    jobs = dict(base.jobs)
    jobs["load"] = dataclasses.replace(jobs["load"], for_each=DynamicItems("jobs.list.result.files", 1000))
    return dataclasses.replace(base, jobs=jobs)


def dispatched(core: SchedulerCore, cmds: list) -> list[str]:
    return sorted(core.ids[i] for c in cmds if isinstance(c, Dispatch) for i, _ in c.tasks)


def finish(core: SchedulerCore, jid: str, result: dict | None = None, code: int = 0) -> list:
    i = core.index[jid]
    return core.handle(JobExitedEvent(i, core.attempt[i], 0, code, core.now + 1, result=result, cause_id="t"))


def finish_all(core: SchedulerCore, cmds: list) -> list:
    done = [(i, att, 0, 0) for c in cmds if isinstance(c, Dispatch) for i, att in c.tasks]
    return core.handle(JobsFinishedEvent(done, core.now + 1))


def rerun(core: SchedulerCore, *jids: str, downstream: bool = False) -> tuple[list, Reply]:
    cmds = core.handle(OperatorEvent("rerun", tuple(core.index[j] for j in jids), core.now + 1, user="op",
                                     downstream=downstream))
    return cmds, next(c for c in cmds if isinstance(c, Reply))


def state(core: SchedulerCore, jid: str) -> JobState:
    return JobState(core.state[core.index[jid]])


def looped_over(files: list[str], gate: bool = False) -> SchedulerCore:
    """A live run whose loop ran an instance per file, its dependents after it (`late`, if gated, still runs)."""
    core = SchedulerCore(dynamic(gate), slots=10)
    cmds = core.handle(RunStartedEvent(0.0))
    cmds = finish(core, "list", {"files": files})
    cmds = finish_all(core, cmds)
    assert dispatched(core, cmds) == ["after", "post"]
    cmds = finish_all(core, cmds)
    assert state(core, "load") == JobState.SUCCEEDED
    return core


def test_an_instance_rerun_while_its_loops_source_reruns_waits_for_the_new_list_in_a_live_run() -> None:
    # Given a live run (late still running) whose loop ran a and b
    core = looped_over(["a", "b"], gate=True)
    assert state(core, "late") == JobState.QUEUED
    a, b = core.index["load@a"], core.index["load@b"]
    # When the job the loop reads is rerun with its downstream, then instances a and b
    cmds, _ = rerun(core, "list", downstream=True)
    assert dispatched(core, cmds) == ["list"]
    cmds, reply = rerun(core, "load@a", "load@b")
    # Then they wait for the loop's new list, as a plain job waits for an upstream rerun
    assert dispatched(core, cmds) == []
    assert [r[1] for r in reply.results] == [True, True]
    assert reply.results[0][2] == ("job 'load@a' will run again once loop 'load' has read its list again, if it "
                                   "lists it")
    assert state(core, "load@a") == JobState.WAITING and state(core, "load@b") == JobState.WAITING
    core.validate()
    # And once it is read, a (listed again) runs once, b (not listed) is skipped, c is new
    cmds = finish(core, "list", {"files": ["a", "c"]})
    assert dispatched(core, cmds) == ["load@a", "load@c"]
    assert state(core, "load@b") == JobState.SKIPPED and "does not list load@b" in core.reasons[b]
    cmds = finish_all(core, cmds)
    assert state(core, "load") == JobState.SUCCEEDED and core.attempt[a] == 2
    assert dispatched(core, cmds) == ["after", "post"]
    core.validate()


def test_a_rerun_of_everything_with_its_downstream_applies_to_the_loop_and_its_instances() -> None:
    core = looped_over(["a", "b"])
    finish(core, "post")
    cmds, reply = rerun(core, *core.ids, downstream=True)
    assert all(applied for _, applied, _ in reply.results), reply.results
    assert ("job 'load' goes again with this rerun: now WAITING" in
            [msg for i, _, msg in reply.results if i == core.index["load"]])
    assert dispatched(core, cmds) == ["list"]
    cmds = finish(core, "list", {"files": ["a", "b"]})
    assert dispatched(core, cmds) == ["load@a", "load@b"]
    core.validate()


def test_a_rerun_instance_waits_for_its_loops_list_on_a_stopped_runs_journal_and_after_the_resume() -> None:
    # Given a run that ended, its journal's states and loop expansions
    core = looped_over(["a", "b"])
    finish(core, "post")

    def rebuilt(core: SchedulerCore, expansions: list) -> SchedulerCore:
        again = SchedulerCore(apply_expansions(dynamic(), expansions), slots=10)
        assert again.ids == core.ids
        again.restore([(i, core.state[i], core.attempt[i]) for i in range(core.n)], core.now)
        return again

    # When the loop's source is rerun with its downstream on the stopped run, then instance a
    offline = rebuilt(core, [("load", ("a", "b"))])
    offline.paused = True  # (as the client's verb on a stopped run's journal: nothing is dispatched)
    rerun(offline, "list", downstream=True)
    _, reply = rerun(offline, "load@a")
    assert state(offline, "load@a") == JobState.WAITING, reply.results
    assert why(offline, offline.index["load@a"], offline.now)["reasons"][0].startswith(
        "waiting for loop load to read its list again")
    # Then the resumed run starts the source alone, and a once the list names it
    resumed = rebuilt(offline, [("load", ("a", "b")), ("load", ())])
    cmds = resumed.handle(RunStartedEvent(resumed.now + 1))
    assert dispatched(resumed, cmds) == ["list"]
    cmds = finish(resumed, "list", {"files": ["a"]})
    assert dispatched(resumed, cmds) == ["load@a"]
    resumed.validate()


def test_an_instance_waiting_for_a_list_its_source_fails_to_give_ends_upstream_failed() -> None:
    core = looped_over(["a"])
    rerun(core, "list", downstream=True)
    rerun(core, "load@a")
    finish(core, "list", code=1)
    assert state(core, "load") == JobState.UPSTREAM_FAILED
    assert state(core, "load@a") == JobState.UPSTREAM_FAILED
    assert "loop load ended UPSTREAM_FAILED without reading its list again" in core.reasons[core.index["load@a"]]


def test_an_instance_a_list_read_again_drops_says_it_was_dropped_and_by_what() -> None:
    # Given a loop over [a, b, c] that failed (b failed), its dependents run
    core = SchedulerCore(dynamic(), slots=10)
    core.handle(RunStartedEvent(0.0))
    finish(core, "list", {"files": ["a", "b", "c"]})
    finish(core, "load@a")
    finish(core, "load@b", code=1)
    finish_all(core, finish(core, "load@c"))
    assert state(core, "load") == JobState.FAILED
    b = core.index["load@b"]
    # When the job the loop reads is rerun with its downstream, b waits for the new list (what it will do is unknown)
    rerun(core, "list", downstream=True)
    assert state(core, "load@b") == JobState.WAITING
    assert why(core, b, core.now)["reasons"][0].startswith("waiting for loop load to read its list again")
    # And the new list names a alone
    cmds = finish(core, "list", {"files": ["a"]})
    assert dispatched(core, cmds) == ["load@a"]
    # Then b is skipped saying what dropped it, in the journal's transition as well, not what might have been
    dropped = "dropped by loop load: its list read again (jobs.list.result.files) does not list load@b"
    assert state(core, "load@b") == JobState.SKIPPED and core.reasons[b] == dropped
    assert why(core, b, core.now)["reasons"] == [f"skipped: {dropped}"]
    persisted = [t for c in cmds if isinstance(c, Persist) for t in c.transitions if t[0] == b]
    assert [(JobState(t[2]), t[7]) for t in persisted] == [(JobState.SKIPPED, dropped)]
    # And c, which had succeeded, keeps how it ended
    assert state(core, "load@c") == JobState.SUCCEEDED
    core.validate()


def test_a_loop_over_no_items_succeeds_and_what_waits_for_its_success_or_end_runs() -> None:
    core = SchedulerCore(dynamic(), slots=10)
    core.handle(RunStartedEvent(0.0))
    cmds = finish(core, "list", {"files": []})
    assert state(core, "load") == JobState.SUCCEEDED
    assert core.reasons[core.index["load"]] == "for_each: jobs.list.result.files gave 0 items: nothing to run"
    assert dispatched(core, cmds) == ["after", "post"]
    assert state(core, "on_fail") == JobState.SKIPPED
    # a resume from a journal that lagged behind the loop's end starts its dependents as the run would have
    again = SchedulerCore(dynamic(), slots=10)
    again.restore([(core.index["list"], JobState.SUCCEEDED, 1), (core.index["load"], JobState.SUCCEEDED, 0)], 5.0)
    assert dispatched(again, again.handle(RunStartedEvent(5.0))) == ["after", "post"]


def test_items_whose_ids_would_be_one_get_ids_of_their_own_and_keep_them_on_resume() -> None:
    core = SchedulerCore(dynamic(), slots=10)
    core.handle(RunStartedEvent(0.0))
    items = ["q r", "q_r", "q:r", "q.r"]
    cmds = finish(core, "list", {"files": items})
    assert state(core, "load") == JobState.WAITING, core.reasons.get(core.index["load"])
    made = core.ids[5:]
    assert len(set(made)) == 4 and [made[0], *made[2:]] == ["load@q_r", "load@q:r", "load@q.r"]
    assert made[1].startswith("load@q_r_") and len(made[1]) == len("load@q_r_") + 12
    assert [core.specs[core.index[m]].item for m in made] == items
    assert dispatched(core, cmds) == sorted(made)
    # the same history gives the same ids, and an item an id was first given keeps it in a later list
    rerun(core, "list", downstream=True)
    finish(core, "list", {"files": ["q_r", "q r", "x"]})
    assert core.ids[5:] == [*made, "load@x"]
    rebuilt = apply_expansions(dynamic(), [("load", tuple(items)), ("load", ()), ("load", ("q_r", "q r", "x"))])
    assert list(rebuilt.jobs) == core.ids
    core.validate()


def test_one_item_given_twice_is_still_refused_and_a_plan_list_tells_items_apart() -> None:
    core = SchedulerCore(dynamic(), slots=10)
    core.handle(RunStartedEvent(0.0))
    finish(core, "list", {"files": ["q r", "q r"]})
    assert state(core, "load") == JobState.FAILED
    assert "gives item 'q r' twice (instance load@q_r)" in core.reasons[core.index["load"]]
    base = make_plan({"load": {"command": "x {item}"}})
    plan = expand_for_each(dataclasses.replace(base, jobs={"load": dataclasses.replace(
        base.jobs["load"], for_each=("q r", "q_r"))}))
    assert [j.item for j in plan.jobs.values() if j.item] == ["q r", "q_r"]
    assert plan.jobs["load@q_r"].item == "q r" and instance_id("load", "q r") == "load@q_r"


@pytest.mark.ipc
def test_rerun_of_everything_on_a_stopped_run_exits_0_and_each_instance_runs_once_after_its_source(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "out"
    plan = tmp_path / "rr.yaml"
    src = ("import json, os, time; time.sleep(0.3); "
           "open(os.environ['WLOADCTL_RESULT_FILE'], 'w').write(json.dumps({'files': ['a', 'b']})); "
           f"open({str(out)!r}, 'a').write('produce\\n')")
    plan.write_text(json.dumps({"name": "rr", "jobs": {
        "produce": {"command": [sys.executable, "-c", src]},
        "per_file": {"for_each": "jobs.produce.result.files", "depends_on": ["produce"],
                     "command": f"echo {{item}} >> {out}"}}}))
    sd = str(tmp_path / "sd")
    assert cli("run", str(plan), "--state-dir", sd).returncode == 0
    out.write_text("")
    p = cli("rerun", "*", "--downstream", "--state-dir", sd)
    assert p.returncode == 0 and "refused" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert cli("resume", "--state-dir", sd).returncode == 0
    lines = out.read_text().split()
    assert lines[0] == "produce" and sorted(lines[1:]) == ["a", "b"], lines
    assert set(job_states(Path(sd)).values()) == {"SUCCEEDED"}


def test_transitions_are_watched_for_a_loop_ending_unread_only_once_an_instance_waits_for_one() -> None:
    # Given a run whose instances wait for no loop: a transition pays for no check of one
    core = looped_over(["a"])
    assert core.set_state.__func__ is JobTable.set_state  # type: ignore[attr-defined]
    # When an instance is rerun and waits for its loop to read its list again
    rerun(core, "list", downstream=True)
    rerun(core, "load@a")
    assert core.set_state.__func__ is SchedulerCore._set_state_watching  # type: ignore[attr-defined]
    # Then the loop that ends without reading it still ends the instance that waited
    finish(core, "list", code=1)
    assert state(core, "load@a") == JobState.UPSTREAM_FAILED
    core.validate()


@pytest.mark.parametrize("verbs", [["release"], ["skip", "rerun"]])
def test_a_loop_over_output_let_go_on_a_stopped_run_reads_its_list_when_the_run_is_resumed(
        tmp_path: Path, no_ipc_leaks: None, verbs: list[str]) -> None:
    # Given a stopped run whose loop over its upstream's output was held, its list given
    out, go = tmp_path / "out", tmp_path / "go"
    plan = tmp_path / "held.yaml"
    src = ("import json, os, time, pathlib\n"
           f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.02)\n"
           "open(os.environ['WLOADCTL_RESULT_FILE'], 'w').write(json.dumps({'files': ['a', 'b']}))")
    plan.write_text(json.dumps({"name": "held", "jobs": {
        "produce": {"command": [sys.executable, "-c", src]},
        "per_file": {"for_each": "jobs.produce.result.files", "depends_on": ["produce"],
                     "command": f"echo {{item}} >> {out}"},
        "after": {"depends_on": ["per_file"], "command": f"echo after >> {out}"}}}))
    sd = tmp_path / "sd"
    run = start("run", str(plan), "--state-dir", str(sd), "--exit-on-hold")
    try:
        wait_for(lambda: job_states(sd)["produce"] == "RUNNING", what="produce running")
        assert cli("hold", "per_file", "--state-dir", str(sd)).returncode == 0
        go.touch()
        run.wait(timeout=60)
    finally:
        run.kill()
        run.wait()
    assert job_states(sd) == {"produce": "SUCCEEDED", "per_file": "HELD", "after": "WAITING"}
    # When an operator lets the loop go on the stopped run (releases it; or skips it, then reruns it)
    for verb in verbs:
        p = cli(verb, "per_file", *(["--downstream"] if verb == "rerun" else []), "--state-dir", str(sd))
        assert p.returncode == 0, p.stdout + p.stderr
    # Then it waits for the resume, which reads the list (the journal rebuilt for a verb has not the results)
    assert job_states(sd)["per_file"] == "WAITING", p.stdout + p.stderr
    assert "reads its list" in cli("why", "per_file", "--state-dir", str(sd)).stdout
    p = cli("resume", "--state-dir", str(sd))
    assert p.returncode == 0, p.stderr
    lines = out.read_text().split()
    assert sorted(lines[:2]) == ["a", "b"] and lines[2:] == ["after"], lines
    assert set(job_states(sd).values()) == {"SUCCEEDED"}
