"""Conditional branches (`if`), repeat-until loops, and the safe expression language behind them."""

from __future__ import annotations

import pytest

from tests.conftest import make_plan
from tests.core.test_engine import dispatched, states
from wloadctl.core.commands import Alert, RunFinished
from wloadctl.core.condition import ConditionError, parse_condition
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import JobExitedEvent, RunStartedEvent
from wloadctl.core.explain import why
from wloadctl.core.plan import JobSpec, Plan


def with_fields(plan: Plan, **per_job: dict) -> Plan:
    jobs = {}
    for jid, spec in plan.jobs.items():
        fields = per_job.get(jid, {})
        jobs[jid] = JobSpec(**{**{f: getattr(spec, f) for f in JobSpec.__slots__}, **fields})  # type: ignore[arg-type]
    return Plan(plan.name, jobs, plan.resources, dict(per_job.get("__vars__", {})))


def exit_with(core: SchedulerCore, job: str, code: int = 0, result: dict | None = None) -> list:
    i = core.index[job]
    return core.handle(JobExitedEvent(i, core.attempt[i], 0, code, 1.0, result=result))


def test_branch_on_an_upstream_result_value_skips_the_branch_not_taken() -> None:
    base = make_plan({"count": {}, "big": {"deps": ["count"]}, "small": {"deps": ["count"]},
                      "after_big": {"deps": ["big"]}})
    plan = with_fields(base, big={"condition": 'jobs["count"].result.rows > 1000'},
                       small={"condition": "jobs.count.result.rows <= 1000"})
    core = SchedulerCore(plan, slots=5)
    core.handle(RunStartedEvent(0.0))
    cmds = exit_with(core, "count", 0, {"rows": 25})
    assert states(core)["big"] == "SKIPPED" and states(core)["after_big"] == "SKIPPED"
    assert core.reasons[core.index["big"]] == "condition false: jobs[\"count\"].result.rows > 1000"
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["small"]


def test_branch_on_exit_status_of_a_done_dependency_and_on_a_plan_variable() -> None:
    base = make_plan({"probe": {}, "fallback": {"deps": {"probe": "done"}}, "eu_only": {}})
    plan = with_fields(base, fallback={"condition": 'jobs["probe"].exit_code != 0'},
                       eu_only={"condition": 'vars.region == "eu"'}, __vars__={"region": "us"})
    core = SchedulerCore(plan, slots=5)
    core.handle(RunStartedEvent(0.0))
    assert states(core)["eu_only"] == "SKIPPED"
    exit_with(core, "probe", 3)
    assert states(core)["fallback"] == "QUEUED"


def test_until_repeats_the_job_until_its_result_says_done_without_spending_retries() -> None:
    plan = with_fields(make_plan({"poll": {}}), poll={"until": "result.ready == 1", "max_iterations": 5})
    core = SchedulerCore(plan, slots=1)
    core.handle(RunStartedEvent(0.0))
    exit_with(core, "poll", 0, {"ready": 0})
    assert states(core)["poll"] == "QUEUED" and core.attempt[0] == 2
    exit_with(core, "poll", 0, {"ready": 1})
    assert states(core)["poll"] == "SUCCEEDED"
    assert core.branches.iterations[0] == 2


def test_until_stops_at_max_iterations() -> None:
    plan = with_fields(make_plan({"poll": {}}), poll={"until": "result.ready == 1", "max_iterations": 3})
    core = SchedulerCore(plan, slots=1)
    core.handle(RunStartedEvent(0.0))
    for _ in range(3):
        exit_with(core, "poll", 0, {})
    assert states(core)["poll"] == "SUCCEEDED" and core.branches.iterations[0] == 3
    # and its success says the condition never came true (one that did says nothing of the kind)
    assert core.reasons[0] == "max_iterations reached (3) with its until never met"
    assert "succeeded after 3 attempt(s): max_iterations reached (3) with its until never met" in \
        why(core, 0, 2.0)["reasons"]


def test_an_until_met_at_its_last_iteration_ends_without_the_max_iterations_reason() -> None:
    plan = with_fields(make_plan({"poll": {}}), poll={"until": "result.ready == 1", "max_iterations": 2})
    core = SchedulerCore(plan, slots=1)
    core.handle(RunStartedEvent(0.0))
    exit_with(core, "poll", 0, {})
    exit_with(core, "poll", 0, {"ready": 1})
    assert states(core)["poll"] == "SUCCEEDED" and "max_iterations" not in core.reasons.get(0, "")


def test_a_condition_that_cannot_be_evaluated_fails_its_job_and_the_run() -> None:
    base = make_plan({"count": {}, "big": {"deps": ["count"]}, "after_big": {"deps": ["big"]}})
    plan = with_fields(base, big={"condition": "jobs.count.result.rows < 5"})
    core = SchedulerCore(plan, slots=5)
    core.handle(RunStartedEvent(0.0))
    cmds = exit_with(core, "count", 0, {"rows": "abc"})
    assert states(core)["big"] == "FAILED" and states(core)["after_big"] == "UPSTREAM_FAILED"
    why = ("if: cannot evaluate 'jobs.count.result.rows < 5': '<' not supported between instances of 'str' and "
           "'int'")
    assert core.reasons[core.index["big"]] == why
    assert [(c.job, c.reason) for c in cmds if isinstance(c, Alert)] == [(core.index["big"], why)]
    assert [c.ok for c in cmds if isinstance(c, RunFinished)] == [False]


def test_an_until_that_cannot_be_evaluated_fails_its_job_rather_than_repeating_or_passing_it() -> None:
    plan = with_fields(make_plan({"poll": {}}), poll={"until": "result.n > 5", "max_iterations": 3})
    core = SchedulerCore(plan, slots=1)
    core.handle(RunStartedEvent(0.0))
    cmds = exit_with(core, "poll", 0, {"n": "abc"})
    assert states(core)["poll"] == "FAILED" and core.attempt[0] == 1
    assert core.reasons[0] == ("until: cannot evaluate 'result.n > 5': '>' not supported between instances of "
                               "'str' and 'int'")
    assert [c.ok for c in cmds if isinstance(c, RunFinished)] == [False]
    core.validate()


def test_the_variables_an_expression_reads_are_known() -> None:
    assert parse_condition('vars.region == "eu" and vars["tier"] > 1 or jobs.a.result.n').vars == {"region", "tier"}


@pytest.mark.parametrize("text", ['__import__("os")', "open('x')", "jobs[x]", "lambda: 1", "a + b", "1 +"])
def test_expressions_outside_the_language_are_refused(text: str) -> None:
    with pytest.raises(ConditionError):
        parse_condition(text)


@pytest.mark.parametrize("text", ["not " * 1000 + "vars.x", "not " * 5000 + "vars.x", "- " * 50000 + "vars.x",
                                  "vars.x" + ".a" * 5000], ids=["not-1000", "not-5000", "minus-50000", "dots-5000"])
def test_an_expression_nested_past_the_limit_is_refused_before_anything_recurses_over_it(text: str) -> None:
    with pytest.raises(ConditionError, match=r"nested .*\(at most 100"):
        parse_condition(text)
    assert parse_condition("not " * 91 + "vars.x").evaluate({}, {"x": 0}) is True


@pytest.mark.parametrize(("text", "guess"), [("jobs.a.exitcode == 0", "exit_code"),
                                             ("jobs.a.results.rows == 5", "result"),
                                             ('jobs.a.status == "SUCCEEDED"', "state"),
                                             ('jobs["a"]["exitcode"] == 0', "exit_code")])
def test_a_job_field_outside_exit_code_state_and_result_is_refused_with_a_guess(text: str, guess: str) -> None:
    with pytest.raises(ConditionError, match="a job has no field") as caught:
        parse_condition(text)
    assert caught.value.hint is not None and caught.value.hint.startswith(f"did you mean '{guess}'?")


def test_the_own_names_an_expression_reads_are_known() -> None:
    assert parse_condition("result.n > 1 and iteration < 3").own == {"result", "iteration"}
    assert parse_condition('jobs.a.result.n > 1 and jobs["a"].state == "FAILED"').own == frozenset()


def test_missing_values_satisfy_no_ordering() -> None:
    c = parse_condition("jobs.a.result.n > 0")
    assert c.evaluate({"a": {"result": {}}}, {}) is False
    assert parse_condition("jobs.a.result.n == None").evaluate({"a": {}}, {}) is True


def test_true_false_and_null_as_other_languages_write_them_are_told_how_to_write_them() -> None:
    for word, right in (("true", "True"), ("false", "False"), ("null", "None")):
        with pytest.raises(ConditionError) as e:
            parse_condition(f"jobs.a.result.ok == {word}")
        assert str(e.value).endswith(f"unknown name '{word}' (use jobs, vars, result, exit_code, iteration; "
                                     f"{right} is written so)"), e.value
