"""for_each loops: instances per item, dependents wait for all of them."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import make_plan
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import RunStartedEvent
from wloadctl.core.loops import expand_for_each
from wloadctl.errors import PlanError


def looped(items: object, variables: dict | None = None):  # type: ignore[no-untyped-def]
    base = make_plan({"open": {}, "load": {"deps": ["open"], "command": "load --region {item}"},
                      "post": {"deps": ["load"]}})
    jobs = dict(base.jobs)
    jobs["load"] = dataclasses.replace(jobs["load"], for_each=items)
    return dataclasses.replace(base, jobs=jobs, variables=variables or {})


def test_one_instance_per_item_and_dependents_wait_for_all() -> None:
    plan = expand_for_each(looped(("eu", "us", "apac")))
    assert list(plan.jobs) == ["open", "load@eu", "load@us", "load@apac", "post"]
    assert plan.jobs["load@us"].command == "load --region us"
    assert ("WLOADCTL_ITEM", "us") in plan.jobs["load@us"].env
    assert plan.jobs["load@us"].depends_on == ("open",)
    assert plan.jobs["post"].depends_on == ("load@eu", "load@us", "load@apac")
    core = SchedulerCore(plan, slots=10)
    core.handle(RunStartedEvent(0.0))
    core.validate()


def test_items_from_a_plan_variable() -> None:
    plan = expand_for_each(looped("vars.regions", {"regions": ["emea", "amer"]}))
    assert [j for j in plan.jobs if j.startswith("load")] == ["load@emea", "load@amer"]


def test_a_missing_variable_is_a_plan_error() -> None:
    with pytest.raises(PlanError) as e:
        expand_for_each(looped("vars.nope"))
    assert "not a non-empty list variable" in e.value.lines()[0]
