"""A new run's core, built in a thread beside the journal's writes."""

from __future__ import annotations

import gc

import pytest

from wloadctl.core.engine import SchedulerCore
from wloadctl.core.planfile import load_plan_text
from wloadctl.procs.runner import _CoreMaker

PLAN = """\
name: made
jobs:
  a: {command: "true", expected: 3}
  b: {command: "true", depends_on: [a]}
  c: {command: "true", depends_on: [a, b]}
"""


def test_the_core_built_beside_the_journal_is_the_one_built_in_place() -> None:
    plan = load_plan_text(PLAN)
    history = {"b": 7.0}
    maker = _CoreMaker(plan, 4, 1, history)
    made = maker.result(4, 1)
    assert made is not None
    built = SchedulerCore(plan, 4, seed=1, history=history)
    assert (made.ids, made.slots, made.expected, made.path, list(made.key_base)) == (
        built.ids, built.slots, built.expected, built.path, list(built.key_base))
    assert made.timers.rng.random() == built.timers.rng.random()
    made.validate()


def test_a_core_built_for_another_epoch_or_slots_is_not_taken() -> None:
    plan = load_plan_text(PLAN)
    assert _CoreMaker(plan, 4, 1, {}).result(4, 2) is None
    assert _CoreMaker(plan, 4, 1, {}).result(8, 1) is None


def test_the_threads_error_is_raised_where_the_core_is_wanted_and_the_collector_is_back() -> None:
    assert gc.isenabled()
    maker = _CoreMaker(load_plan_text(PLAN), 4, 1, {"b": "not seconds"})  # type: ignore[dict-item]
    assert not gc.isenabled()
    with pytest.raises(TypeError):
        maker.result(4, 1)
    assert gc.isenabled()
