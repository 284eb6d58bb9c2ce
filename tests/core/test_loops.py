"""for_each loops: instances per item, dependents wait for all of them."""

from __future__ import annotations

import copy
import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import make_plan
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import RunStartedEvent
from wloadctl.core.loops import UnfitItem, expand_for_each, make_instance, shell_item
from wloadctl.core.plan import JobSpec
from wloadctl.core.verbs import VERBS
from wloadctl.errors import PlanError


def looped(items: object, variables: dict | None = None):  # type: ignore[no-untyped-def]
    base = make_plan({"open": {}, "load": {"deps": ["open"], "command": "load --region {item}"},
                      "post": {"deps": ["load"]}})
    jobs = dict(base.jobs)
    jobs["load"] = dataclasses.replace(jobs["load"], for_each=items)
    return dataclasses.replace(base, jobs=jobs, variables=variables or {})


def test_one_instance_per_item_and_dependents_wait_for_all() -> None:
    plan = expand_for_each(looped(("eu", "us", "apac")))
    # the loop stays, after its instances, and waits for all of them; its dependents wait for it
    assert list(plan.jobs) == ["open", "load@eu", "load@us", "load@apac", "load", "post"]
    assert plan.jobs["load@us"].command == "load --region us"
    assert ("WLOADCTL_ITEM", "us") in plan.jobs["load@us"].env
    assert plan.jobs["load@us"].depends_on == ("open",)
    assert plan.jobs["load"].depends_on == ("open", "load@eu", "load@us", "load@apac")
    assert plan.jobs["post"].depends_on == ("load",)
    core = SchedulerCore(plan, slots=10)
    cmds = core.handle(RunStartedEvent(0.0))
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["open"]
    finish = [(core.index["open"], 1, 0, 0)]
    cmds = core.handle(JobsFinishedEvent(finish, 1.0))
    assert sorted(core.ids[i] for i, _ in dispatched(cmds)) == ["load@apac", "load@eu", "load@us"]
    cmds = core.handle(JobsFinishedEvent([(core.index[f"load@{r}"], 1, 0, 0) for r in ("eu", "us", "apac")], 2.0))
    # the loop runs nothing: it ends with its instances, and post starts
    assert state(core, "load") == JobState.SUCCEEDED and [core.ids[i] for i, _ in dispatched(cmds)] == ["post"]
    core.validate()


def test_a_loop_over_a_list_fails_once_all_its_instances_have_ended_and_one_failed() -> None:
    base = looped(("eu", "us"))
    jobs = dict(base.jobs)
    jobs["page"] = dataclasses.replace(jobs["post"], id="page", depends_on=("load",), dep_kinds=(DepKind.FAILURE,))
    jobs["tidy"] = dataclasses.replace(jobs["post"], id="tidy", depends_on=("load",), dep_kinds=(DepKind.DONE,))
    core = SchedulerCore(expand_for_each(dataclasses.replace(base, jobs=jobs)), slots=10)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobsFinishedEvent([(core.index["open"], 1, 0, 0)], 1.0))
    cmds = core.handle(JobExitedEvent(core.index["load@eu"], 1, 0, 2, 2.0))
    assert state(core, "load") == JobState.WAITING and dispatched(cmds) == [], "load@us still runs"
    cmds = core.handle(JobsFinishedEvent([(core.index["load@us"], 1, 0, 0)], 3.0))
    assert state(core, "load") == JobState.FAILED and core.reasons[core.index["load"]] == "instance load@eu FAILED"
    assert sorted(core.ids[i] for i, _ in dispatched(cmds)) == ["page", "tidy"]
    assert state(core, "post") == JobState.UPSTREAM_FAILED
    core.validate()


def test_a_loop_that_asks_for_confirmation_asks_it_of_each_instance_not_of_itself() -> None:
    base = looped(("eu", "us"))
    jobs = dict(base.jobs)
    jobs["load"] = dataclasses.replace(jobs["load"], confirm=True)
    plan = expand_for_each(dataclasses.replace(base, jobs=jobs))
    assert [j for j, spec in plan.jobs.items() if spec.confirm] == ["load@eu", "load@us"]


def test_verbs_on_a_loop_are_about_its_instances() -> None:
    core = SchedulerCore(expand_for_each(looped(("eu", "us", "apac"))), slots=10)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobsFinishedEvent([(core.index["open"], 1, 0, 0)], 1.0))
    eu, us, apac, load = (core.index[j] for j in ("load@eu", "load@us", "load@apac", "load"))
    core.handle(JobsFinishedEvent([(eu, 1, 0, 0)], 2.0))

    def verb(name: str, i: int) -> tuple[bool, str]:
        reply = next(c for c in core.handle(OperatorEvent(name, (i,), 3.0, user="op")) if hasattr(c, "results"))
        return reply.results[0][1], reply.results[0][2]

    # While instances run, the loop cannot be skipped, held or set ok: it would end while they run
    ok, said = verb("skip", load)
    assert not ok and said == "'load' is a loop: it ends with its instances, and 2 of them have not ended; skip " \
                              "them ('load@*') instead"
    core.handle(JobExitedEvent(us, 1, 0, 1, 3.0))
    core.handle(JobsFinishedEvent([(apac, 1, 0, 0)], 3.0))
    assert state(core, "load") == JobState.FAILED and state(core, "post") == JobState.UPSTREAM_FAILED
    # A retry of the loop retries its failed instance, and the loop and what waits for it wait again
    ok, said = verb("retry", load)
    assert ok and said == "loop 'load' will run again: 1 of its 3 instance(s)"
    assert state(core, "load@us") == JobState.QUEUED and state(core, "load") == JobState.WAITING
    assert state(core, "post") == JobState.WAITING and state(core, "load@eu") == JobState.SUCCEEDED
    core.handle(JobsFinishedEvent([(us, 2, 0, 0)], 4.0))
    assert state(core, "load") == JobState.SUCCEEDED
    # A rerun of the loop reruns every instance
    ok, said = verb("rerun", load)
    assert ok and said == "loop 'load' will run again: 3 of its 3 instance(s)"
    assert {state(core, j) for j in ("load@eu", "load@us", "load@apac")} == {JobState.QUEUED}
    assert state(core, "load") == JobState.WAITING
    core.validate()


def test_why_of_a_loop_offers_only_the_verbs_it_would_take() -> None:
    core = SchedulerCore(expand_for_each(looped(("eu", "us", "apac"))), slots=10)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobsFinishedEvent([(core.index["open"], 1, 0, 0)], 1.0))
    eu, us, apac, load = (core.index[j] for j in ("load@eu", "load@us", "load@apac", "load"))

    def taken(verb: str) -> bool:
        tried = copy.deepcopy(core)  # (each verb on a copy of the run: the offer is of this run as it is)
        reply = next(c for c in tried.handle(OperatorEvent(verb, (load,), 3.0, user="op")) if hasattr(c, "results"))
        return bool(reply.results[0][1])

    def takes() -> list[str]:
        return [v for v in VERBS if v != "cancel" and taken(v)]  # (cancel is the run's, not the loop's)

    # Given instances that run (one has ended): hold, skip and set-ok are refused; a rerun of the ended one is taken
    core.handle(JobsFinishedEvent([(eu, 1, 0, 0)], 2.0))
    assert state(core, "load") == JobState.WAITING
    assert why(core, load, 2.0)["verbs"] == ["rerun"] == takes()
    # One fails while the last still runs: the loop waits, and takes a retry of the failed one
    core.handle(JobExitedEvent(us, 1, 0, 1, 3.0))
    assert state(core, "load") == JobState.WAITING
    assert why(core, load, 3.0)["verbs"] == ["retry", "rerun"] == takes()
    # When the last succeeds, the loop FAILED: what it offers, it takes
    core.handle(JobsFinishedEvent([(apac, 1, 0, 0)], 3.0))
    assert why(core, load, 3.0)["verbs"] == ["retry", "rerun", "set-ok", "skip"] == takes()


def test_items_from_a_plan_variable() -> None:
    plan = expand_for_each(looped("vars.regions", {"regions": ["emea", "amer"]}))
    assert [j for j in plan.jobs if j.startswith("load")] == ["load@emea", "load@amer", "load"]


def test_a_missing_variable_is_a_plan_error() -> None:
    with pytest.raises(PlanError) as e:
        expand_for_each(looped("vars.nope"))
    assert "not a non-empty list variable" in e.value.lines()[0]


# -- for_each over an upstream's output ---------------------------------------------------

from wloadctl.core.commands import Alert, Dispatch, Persist  # noqa: E402
from wloadctl.core.events import JobExitedEvent, JobsFinishedEvent, OperatorEvent  # noqa: E402
from wloadctl.core.explain import why  # noqa: E402
from wloadctl.core.loops import apply_expansions  # noqa: E402
from wloadctl.core.plan import DynamicItems  # noqa: E402
from wloadctl.core.states import DepKind, JobState  # noqa: E402


def dynamic(max_items: int = 1000, handlers: bool = False):  # type: ignore[no-untyped-def]
    """list, the loop `load` over its output, post after load, side; with `handlers`, on_fail on load's failure
    and after on its end."""
    more = {"on_fail": {"deps": {"load": "failure"}}, "after": {"deps": {"load": "done"}}} if handlers else {}
    base = make_plan({"list": {}, "load": {"deps": ["list"], "command": "load {item}"},
                      "post": {"deps": ["load"]}, "side": {}, **more})
    jobs = dict(base.jobs)
    jobs["load"] = dataclasses.replace(jobs["load"], for_each=DynamicItems("jobs.list.result.files", max_items))
    return dataclasses.replace(base, jobs=jobs)


def dispatched(cmds: list) -> list[tuple[int, int]]:
    return [t for c in cmds if isinstance(c, Dispatch) for t in c.tasks]


def finish_list(core: SchedulerCore, result: dict, code: int = 0) -> list:
    i = core.index["list"]
    return core.handle(JobExitedEvent(i, core.attempt[i], 0, code, 1.0, result=result, cause_id="t"))


def state(core: SchedulerCore, jid: str) -> JobState:
    return JobState(core.state[core.index[jid]])


def test_output_loop_makes_instances_when_its_upstream_ends() -> None:
    core = SchedulerCore(dynamic(), slots=10)
    first = core.handle(RunStartedEvent(0.0))
    assert sorted(core.ids[i] for i, _ in dispatched(first)) == ["list", "side"]
    assert core.index["list"] in core.want
    cmds = finish_list(core, {"files": ["a.csv", "b csv", 7]})
    assert core.ids[4:] == ["load@a.csv", "load@b_csv", "load@7"]
    assert core.specs[core.index["load@7"]].command == "load 7"
    assert ("WLOADCTL_ITEM", "b csv") in core.specs[core.index["load@b_csv"]].env
    # The instances run; the looped job itself is never dispatched.
    assert sorted(core.ids[i] for i, _ in dispatched(cmds)) == ["load@7", "load@a.csv", "load@b_csv"]
    persist = next(c for c in cmds if isinstance(c, Persist))
    assert persist.added == [(core.index["load"], 4, ("a.csv", "b csv", "7"), 3)]
    assert cmds.index(persist) == 0
    assert state(core, "load") == JobState.WAITING and state(core, "post") == JobState.WAITING
    core.validate()
    done = [(i, a, 0, 0) for i, a in dispatched(cmds)[:2]]
    assert not dispatched(core.handle(JobsFinishedEvent(done, 2.0)))
    assert state(core, "load") == JobState.WAITING, "one instance is still running"
    i = core.index["load@7"]
    cmds = core.handle(JobsFinishedEvent([(i, core.attempt[i], 0, 0)], 3.0))
    assert state(core, "load") == JobState.SUCCEEDED
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["post"]
    core.validate()


def test_failed_instance_fails_the_loop_and_its_dependents_and_a_retry_heals_it() -> None:
    core = SchedulerCore(dynamic(handlers=True), slots=10)
    core.handle(RunStartedEvent(0.0))
    finish_list(core, {"files": ["x", "y"]})
    x, y = core.index["load@x"], core.index["load@y"]
    core.handle(JobsFinishedEvent([(x, 1, 0, 0)], 2.0))
    cmds = core.handle(JobExitedEvent(y, 1, 0, 3, 2.0))
    assert any(isinstance(c, Alert) for c in cmds)
    # the loop failed with its instance: what depends on its failure, or on its end, runs
    assert state(core, "load") == JobState.FAILED
    assert core.reasons[core.index["load"]] == "instance load@y FAILED"
    assert state(core, "post") == JobState.UPSTREAM_FAILED
    assert sorted(core.ids[i] for i, _ in dispatched(cmds)) == ["after", "on_fail"]
    for j in ("after", "on_fail"):
        core.handle(JobsFinishedEvent([(core.index[j], 1, 0, 0)], 2.5))
    cmds = core.handle(OperatorEvent("retry", (y,), 3.0, user="op"))
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["load@y"]
    assert state(core, "load") == JobState.WAITING
    cmds = core.handle(JobsFinishedEvent([(y, 2, 0, 0)], 4.0))
    assert state(core, "load") == JobState.SUCCEEDED
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["post"]
    core.validate()


@pytest.mark.parametrize(("result", "why"), [
    ({}, "gave nothing, not a list"),
    ({"files": "a,b"}, "gave a str, not a list"),
    ({"files": {"a": 1}}, "gave a mapping, not a list"),
    ({"files": [["a"]]}, "holds list items"),
    ({"files": ["a", "a"]}, "gives item 'a' twice"),
    ({"files": [str(k) for k in range(4)]}, "gave 4 items, more than max_items 3"),
])
def test_an_unusable_list_fails_the_loop_with_its_reason(result: dict, why: str) -> None:
    core = SchedulerCore(dynamic(max_items=3), slots=10)
    core.handle(RunStartedEvent(0.0))
    cmds = finish_list(core, result)
    assert state(core, "load") == JobState.FAILED
    assert why in core.reasons[core.index["load"]]
    assert any(isinstance(c, Alert) and c.job == core.index["load"] for c in cmds)
    assert state(core, "post") == JobState.UPSTREAM_FAILED
    assert core.n == 4
    core.validate()


def test_an_empty_list_ends_the_loop_succeeded_and_its_dependents_run() -> None:
    core = SchedulerCore(dynamic(), slots=10)
    core.handle(RunStartedEvent(0.0))
    cmds = finish_list(core, {"files": []})
    assert state(core, "load") == JobState.SUCCEEDED
    assert "0 items: nothing to run" in core.reasons[core.index["load"]]
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["post"]


def test_no_room_left_on_the_board_fails_the_loop() -> None:
    core = SchedulerCore(dynamic(), slots=10)
    assert core.capacity() == 4 + 1000
    core.room = 5
    core.handle(RunStartedEvent(0.0))
    finish_list(core, {"files": ["a", "b"]})
    assert state(core, "load") == JobState.FAILED
    assert "do not fit" in core.reasons[core.index["load"]]


def test_a_plan_rebuilt_with_its_expansions_continues_where_it_was() -> None:
    core = SchedulerCore(dynamic(), slots=10)
    core.handle(RunStartedEvent(0.0))
    finish_list(core, {"files": ["p", "q"]})
    rebuilt = apply_expansions(dynamic(), [("load", ("p", "q"))])
    assert list(rebuilt.jobs) == core.ids
    again = SchedulerCore(rebuilt, slots=10)
    assert again.fanout.expanded == {again.index["load"]: 2}
    assert again.capacity() == again.n
    rows = [(i, core.state[i], core.attempt[i]) for i in range(core.n) if core.state[i] or core.attempt[i]]
    again.restore(rows, 5.0)
    again.handle(RunStartedEvent(5.0))
    p, q = again.index["load@p"], again.index["load@q"]
    again.handle(JobsFinishedEvent([(p, 1, 0, 0), (q, 1, 0, 0)], 6.0))
    assert JobState(again.state[again.index["load"]]) == JobState.SUCCEEDED
    again.validate()


def reply_of(cmds: list) -> str:
    return next(c for c in cmds if hasattr(c, "results")).results[0][2]


def edges(core: SchedulerCore) -> tuple[list, list, list]:
    return list(core.down_start), list(core.down), core.downs


def test_a_rerun_of_a_loops_source_with_its_downstream_makes_the_loop_again_from_its_new_list() -> None:
    # Given a loop over [a, b] that ended, and its dependent
    core = SchedulerCore(dynamic(), slots=10)
    core.handle(RunStartedEvent(0.0))
    cmds = finish_list(core, {"files": ["a", "b"]})
    cmds = core.handle(JobsFinishedEvent([(i, att, 0, 0) for i, att in dispatched(cmds)], 2.0))
    core.handle(JobsFinishedEvent([(core.index["post"], 1, 0, 0)], 3.0))
    load, a, b = core.index["load"], core.index["load@a"], core.index["load@b"]
    # When the job it reads is rerun with its downstream
    cmds = core.handle(OperatorEvent("rerun", (core.index["list"],), 4.0, user="op", downstream=True))
    assert reply_of(cmds) == ("job 'list' will run again with 2 downstream job(s); loop 'load' makes its instances "
                              "again from the list it reads then (those made before that succeeded or run stay as "
                              "they are, the others wait for it; each runs again if listed)")
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["list"]
    assert state(core, "load") == JobState.WAITING and state(core, "post") == JobState.WAITING
    assert next(c for c in cmds if isinstance(c, Persist)).added == [(load, 6, (), 0)]
    # Then the loop reads its new list: b runs again, c is made, a (no longer listed) does not run
    cmds = finish_list(core, {"files": ["b", "c"]})
    assert sorted(core.ids[i] for i, _ in dispatched(cmds)) == ["load@b", "load@c"]
    assert next(c for c in cmds if isinstance(c, Persist)).added == [(load, 6, ("b", "c"), 1)]
    assert core.specs[load].depends_on == ("list", "load@b", "load@c")
    assert state(core, "load") == JobState.WAITING and state(core, "post") == JobState.WAITING
    cmds = core.handle(JobsFinishedEvent([(i, att, 0, 0) for i, att in dispatched(cmds)], 5.0))
    assert state(core, "load") == JobState.SUCCEEDED and core.reasons[load] == "all 2 instance(s) finished"
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["post"]
    assert (core.attempt[a], core.attempt[b]) == (1, 2) and state(core, "load@a") == JobState.SUCCEEDED
    core.validate()
    # And the plan rebuilt from what the journal holds of the loop is the run's, edges and all
    rebuilt = apply_expansions(dynamic(), [("load", ("a", "b")), ("load", ()), ("load", ("b", "c"))])
    again = SchedulerCore(rebuilt, slots=10)
    assert again.ids == core.ids and again.specs[load].depends_on == core.specs[load].depends_on
    assert edges(again) == edges(core) and again.fanout.expanded == {load: 2}


def test_a_loop_made_again_while_its_instances_run_lets_them_go_and_skips_those_not_succeeded_nor_listed() -> None:
    # Given a loop over [a, b] whose instance a failed while b runs
    core = SchedulerCore(dynamic(handlers=True), slots=10)
    core.handle(RunStartedEvent(0.0))
    finish_list(core, {"files": ["a", "b"]})
    a, b = core.index["load@a"], core.index["load@b"]
    core.handle(JobExitedEvent(a, 1, 0, 1, 2.0))
    assert state(core, "load") == JobState.WAITING
    # When the job the loop reads is rerun with its downstream
    cmds = core.handle(OperatorEvent("rerun", (core.index["list"],), 3.0, user="op", downstream=True))
    assert reply_of(cmds).startswith("job 'list' will run again with 1 downstream job(s); loop 'load' makes")
    # Then the failed instance waits for the new list (the loop no longer waits for it), the running one runs on
    assert state(core, "load@a") == JobState.WAITING
    assert why(core, a, 3.0)["reasons"][0].startswith("waiting for loop load to read its list again")
    assert state(core, "load@b") == JobState.QUEUED and core.downstream(b) == [] and core.downstream(a) == []
    core.handle(JobsFinishedEvent([(b, 1, 0, 0)], 4.0))
    assert state(core, "load") == JobState.WAITING, "its end is no longer the loop's"
    cmds = finish_list(core, {"files": ["b"]})
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["load@b"]
    # And the failed instance the new list drops is skipped, saying what dropped it
    assert state(core, "load@a") == JobState.SKIPPED
    assert core.reasons[a] == "dropped by loop load: its list read again (jobs.list.result.files) does not list load@a"
    cmds = core.handle(JobsFinishedEvent([(b, 2, 0, 0)], 5.0))
    assert state(core, "load") == JobState.SUCCEEDED
    assert sorted(core.ids[i] for i, _ in dispatched(cmds)) == ["after", "post"]
    assert state(core, "on_fail") == JobState.SKIPPED
    core.validate()


def test_a_rerun_of_a_loops_own_instance_leaves_the_loop_its_list() -> None:
    core = SchedulerCore(dynamic(), slots=10)
    core.handle(RunStartedEvent(0.0))
    cmds = finish_list(core, {"files": ["a", "b"]})
    core.handle(JobsFinishedEvent([(i, att, 0, 0) for i, att in dispatched(cmds)], 2.0))
    core.handle(JobsFinishedEvent([(core.index["post"], 1, 0, 0)], 3.0))
    cmds = core.handle(OperatorEvent("rerun", (core.index["load"],), 4.0, user="op", downstream=True))
    assert reply_of(cmds) == "loop 'load' will run again: 2 of its 2 instance(s)"
    assert sorted(core.ids[i] for i, _ in dispatched(cmds)) == ["load@a", "load@b"]
    assert core.fanout.expanded == {core.index["load"]: 2} and not next(c for c in cmds if isinstance(c, Persist)).added


def test_a_loop_that_gets_new_instances_from_a_changed_plan_waits_for_them_and_so_do_its_dependents() -> None:
    # Given a loop over [x, y] that ended while post, held, was released (no scheduler dispatching it)
    old = expand_for_each(looped(("x", "y")))
    core = SchedulerCore(old, slots=10)
    core.handle(OperatorEvent("hold", (core.index["post"],), 0.0, user="op"))
    core.handle(RunStartedEvent(0.0))
    core.handle(JobsFinishedEvent([(core.index["open"], 1, 0, 0)], 1.0))
    core.handle(JobsFinishedEvent([(core.index[j], 1, 0, 0) for j in ("load@x", "load@y")], 2.0))
    core.paused = True
    core.handle(OperatorEvent("release", (core.index["post"],), 3.0, user="op"))
    assert state(core, "load") == JobState.SUCCEEDED and state(core, "post") == JobState.READY
    # When the run resumes with the plan's list grown to [x, y, z] (its new job after the others)
    new = expand_for_each(looped(("x", "y", "z")))
    plan = dataclasses.replace(new, jobs={j: new.jobs[j] for j in [*old.jobs, "load@z"]})
    again = SchedulerCore(plan, slots=10)
    again.restore([(i, core.state[i], core.attempt[i]) for i in range(core.n)], 4.0)
    cmds = again.handle(RunStartedEvent(4.0))
    # Then the new instance runs, and the loop and post wait for it
    assert [again.ids[i] for i, _ in dispatched(cmds)] == ["load@z"]
    assert state(again, "load") == JobState.WAITING and state(again, "post") == JobState.WAITING
    assert again.reasons[again.index["load"]] == "waiting for its instance(s) load@z, not run yet"
    cmds = again.handle(JobsFinishedEvent([(again.index["load@z"], 1, 0, 0)], 5.0))
    assert state(again, "load") == JobState.SUCCEEDED and [again.ids[i] for i, _ in dispatched(cmds)] == ["post"]
    again.validate()


def test_a_loop_restored_with_a_failed_instance_and_one_still_running_ends_failed_with_them() -> None:
    core = SchedulerCore(dynamic(handlers=True), slots=10)
    core.handle(RunStartedEvent(0.0))
    finish_list(core, {"files": ["a", "b"]})
    core.handle(JobExitedEvent(core.index["load@a"], 1, 0, 1, 2.0))
    rebuilt = apply_expansions(dynamic(handlers=True), [("load", ("a", "b"))])
    again = SchedulerCore(rebuilt, slots=10)
    again.restore([(i, core.state[i], core.attempt[i]) for i in range(core.n)], 3.0)
    again.handle(RunStartedEvent(3.0))
    assert state(again, "load") == JobState.WAITING, "load@b still runs"
    cmds = again.handle(JobsFinishedEvent([(again.index["load@b"], 1, 0, 0)], 4.0))
    assert state(again, "load") == JobState.FAILED
    assert sorted(again.ids[i] for i, _ in dispatched(cmds)) == ["after", "on_fail"]


def test_an_instance_of_a_long_item_gets_an_id_short_enough_to_name_files_and_its_own() -> None:
    from wloadctl.core.loops import instance_id
    from wloadctl.core.plan import JOB_ID_MAX
    from wloadctl.core.planfields import JOB_ID

    a, b = "/data/" + "x" * 300 + "/a.csv", "/data/" + "x" * 300 + "/b.csv"
    ia, ib = instance_id("load", a), instance_id("load", b)
    assert len(ia) == len(ib) == JOB_ID_MAX and ia != ib
    assert ia.startswith("load@_data_xxx") and JOB_ID.fullmatch(ia.split("@", 1)[1])
    assert instance_id("load", "emea") == "load@emea"


HOSTILE = ["x; touch PWNED", "$(touch PWNED)", "`touch PWNED`", "it's", 'say "hi"', "back\\slash", "two  spaces",
           "$HOME", "*", "", "'; touch PWNED; '", '"; touch PWNED; "', "a\nb"]


@pytest.mark.parametrize("command,expected", [
    ("printf '%s\\n' {item}", "{}"),
    ("printf '%s\\n' \"{item}\"", "{}"),
    ("printf '%s\\n' '{item}'", "{}"),
    ("printf '%s\\n' \"pre {item} post\"", "pre {} post"),
    ("printf '%s\\n' pre{item}'post'", "pre{}post"),
    ("printf '%s\\n' \"$(printf '%s' {item})\"", "{}"),
    ("printf '%s\\n' \"$(printf '%s' '{item}')\"", "{}"),
    ("printf '%s\\n' \"$(printf '%s' \"{item}\")\"", "{}"),
    ("X=${UNSET_VAR:-{item}}; printf '%s\\n' \"$X\"", "{}"),
    # a quote in a comment, a here-document (whose body holds a quote), a here-document's own quoting
    ("# don't load twice\nprintf '%s\\n' {item}", "{}"),
    ("true # say \"hi\nprintf '%s\\n' {item}", "{}"),
    ("cat <<EOF\n{item}\nEOF", "{}"),
    ("cat <<-'EOT' >/dev/null\n\tit's\n\tEOT\nprintf '%s\\n' {item}", "{}"),
])
def test_an_item_is_text_to_the_shell_wherever_it_stands(tmp_path: Path, command: str, expected: str) -> None:
    """An item comes from variables or an upstream's output (a file name): the shell running the instance's
    command reads it as text, inside quotes, outside them and inside substitutions alike."""
    for item in HOSTILE:
        cmd = shell_item(command, item)
        p = subprocess.run(["/bin/sh", "-c", cmd], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "WLOADCTL_ITEM": item})
        assert not (tmp_path / "PWNED").exists(), (command, item, cmd)
        assert (p.returncode, p.stdout) == (0, expected.format(item) + "\n"), (command, item, cmd, p.stderr)


@pytest.mark.parametrize("shell", ["/bin/sh", "bash"])
def test_an_item_is_no_number_in_arithmetic_unless_it_is_one(tmp_path: Path, shell: str) -> None:
    """bash evaluates an expanded value in arithmetic (`a[$(cmd)]` runs cmd): an item that is not plain is not
    given there, and the command fails; a number is."""
    command = "echo $(( {item} * 2 ))"
    assert subprocess.run([shell, "-c", shell_item(command, "21")], capture_output=True, text=True).stdout == "42\n"
    for item in ("a[$(touch PWNED)]", "1 + 1"):
        p = subprocess.run([shell, "-c", shell_item(command, item)], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "WLOADCTL_ITEM": item})
        assert p.returncode != 0 and not (tmp_path / "PWNED").exists(), (item, p)


def test_the_script_of_a_shell_in_an_argv_command_is_shell_text() -> None:
    base = looped(("x; touch PWNED",))
    jobs = dict(base.jobs)
    jobs["load"] = dataclasses.replace(jobs["load"], command=("/bin/sh", "-c", "echo {item}", "name-{item}"))
    plan = expand_for_each(dataclasses.replace(base, jobs=jobs))
    inst = next(j for j in plan.jobs.values() if j.item)
    assert inst.command == ("/bin/sh", "-c", 'echo "$WLOADCTL_ITEM"', "name-x; touch PWNED")


def test_a_plain_item_leaves_the_command_as_written() -> None:
    assert shell_item("load --region {item} && echo \"{item} done\"", "eu") == "load --region eu && echo \"eu done\""
    assert shell_item("echo no placeholder", "x; y") == "echo no placeholder"
    # argv commands run without a shell: the item is one argument as it is
    plan = expand_for_each(dataclasses.replace(looped(("a b; c",)), jobs={
        **looped(("a b; c",)).jobs,
        "load": dataclasses.replace(looped(("a b; c",)).jobs["load"], command=("load", "--region={item}"))}))
    assert plan.jobs["load@a_b__c"].command == ("load", "--region=a b; c")


def instance(command: str | tuple[str, ...], item: str, **keys: object) -> JobSpec:
    spec = JobSpec("load", command, for_each=DynamicItems("jobs.list.result.files"), **keys)  # type: ignore[arg-type]
    return make_instance(spec, item)


def run_argv(argv: tuple[str, ...], item: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "WLOADCTL_ITEM": item})


@pytest.mark.parametrize("argv", [
    ("bash", "-ec", "echo ec: {item}"),
    ("sh", "-xc", "echo ec: {item}"),
    ("bash", "-l", "-c", "echo ec: {item}"),
    ("bash", "-e", "-c", "echo ec: {item}"),
    ("bash", "-o", "pipefail", "-c", "echo ec: {item}"),
    ("bash", "-euxc", "echo ec: {item}"),
    ("/usr/bin/env", "sh", "-c", "echo ec: {item}"),
    ("nice", "bash", "-c", "echo ec: {item}"),
    ("timeout", "5", "sh", "-c", "echo ec: {item}"),
    ("env", "/bin/dash", "-c", "echo ec: {item}"),
])
def test_the_script_of_a_shell_anywhere_in_an_argv_gets_the_item_as_text(tmp_path: Path,
                                                                         argv: tuple[str, ...]) -> None:
    for item in ("x; touch PWNED", "$(touch PWNED)", "`touch PWNED`", "'; touch PWNED; '", "a\ntouch PWNED"):
        cmd = instance(argv, item).command
        assert isinstance(cmd, tuple)
        p = run_argv(cmd, item, tmp_path)
        assert not (tmp_path / "PWNED").exists(), (argv, item, cmd)
        assert p.stdout == f"ec: {item}\n", (argv, item, cmd, p.stderr)


def test_an_argument_that_is_no_script_gets_the_item_as_it_is() -> None:
    item = "x; touch PWNED"
    assert instance(("sh", "-c", 'echo "$1"', "sh", "{item}"), item).command == (
        "sh", "-c", 'echo "$1"', "sh", item)
    assert instance(("bash", "script.sh", "--name={item}"), item).command == ("bash", "script.sh", f"--name={item}")
    assert instance(("awk", "-v", "r={item}", "$1 == r", "/data/{item}.csv"), item).command == (
        "awk", "-v", f"r={item}", "$1 == r", f"/data/{item}.csv")


@pytest.mark.parametrize("argv", [
    ("python3", "-c", "print('{item}')"),
    ("perl", "-ne", "print '{item}'"),
    ("awk", "BEGIN { print \"{item}\" }"),
    ("sed", "-e", "s/^/{item}/"),
    ("bash", "script.sh", "-c", "echo {item}"),
])
def test_an_item_in_another_languages_program_makes_the_instance_unfit(tmp_path: Path,
                                                                        argv: tuple[str, ...]) -> None:
    inst = instance(argv, "x'); __import__('os').system('touch PWNED'); print('")
    assert inst.unfit is not None and "where the item would be code" in inst.unfit
    assert inst.command == argv, "the item is not written into it"


@pytest.mark.parametrize("opening", ["<<'EOF'", '<<"EOF"', "<<\\EOF", '<<E"OF"', "<<-'EOF'"])
def test_a_quoted_here_document_gets_the_items_text(tmp_path: Path, opening: str) -> None:
    command = f"cat {opening}\nitem: {{item}} $HOME\nEOF"
    for item in ("x; touch PWNED", "$(touch PWNED)", "it's", "emea", "EOF"):
        cmd = shell_item(command, item)
        p = subprocess.run(["sh", "-c", cmd], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "WLOADCTL_ITEM": item})
        assert not (tmp_path / "PWNED").exists(), (item, cmd)
        assert p.stdout == f"item: {item} $HOME\n", (item, cmd, p.stderr)


@pytest.mark.parametrize("command", ["cat <<'EOF'\n{item}\nEOF\n", "cat <<-\"EOT\"\n\t{item}\n\tEOT\n"])
def test_an_item_that_would_end_a_quoted_here_document_makes_the_instance_unfit(command: str) -> None:
    for item in ("a\nEOF\ntouch PWNED", "a\n\tEOT\ntouch PWNED", "EOF" if "EOF" in command else "EOT"):
        inst = instance(command, item)
        assert inst.unfit is not None and "quoted here-document" in inst.unfit, item
        assert inst.command == command
    with pytest.raises(UnfitItem, match="holds a line break"):
        shell_item(command, "a\nEOF\ntouch PWNED")


def test_an_item_in_an_unquoted_here_document_that_would_end_it_is_expanded_there(tmp_path: Path) -> None:
    cmd = shell_item("cat <<EOF\n{item}\ntouch PWNED\nEOF", "EOF")
    p = subprocess.run(["sh", "-c", cmd], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "WLOADCTL_ITEM": "EOF"})
    assert not (tmp_path / "PWNED").exists() and p.stdout == "EOF\ntouch PWNED\n", cmd


def test_cwd_and_env_values_get_the_item_as_it_is() -> None:
    inst = instance("ls", "2024/03 q1; x", cwd="/srv/{item}", env=(("WHERE", "at {item}"), ("PLAIN", "p")))
    assert inst.unfit is None
    assert inst.cwd == "/srv/2024/03 q1; x"
    assert inst.env == (("WHERE", "at 2024/03 q1; x"), ("PLAIN", "p"), ("WLOADCTL_ITEM", "2024/03 q1; x"))


@pytest.mark.parametrize("item", ["..", "../etc", "a/../../b", "a/.."])
def test_an_item_leading_out_of_its_cwd_makes_the_instance_unfit(item: str) -> None:
    inst = instance("ls", item, cwd="/srv/{item}")
    assert inst.unfit is not None and "'..'" in inst.unfit
    assert inst.cwd == "/srv/{item}"
    assert instance("ls", item).unfit is None, "without {item} in its cwd the item goes nowhere near it"
