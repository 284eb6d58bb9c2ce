"""`wloadctl run --json`'s summary: the text `json.dumps(summary, indent=2)` writes, made faster where it can be."""

from __future__ import annotations

import json
from array import array
from types import SimpleNamespace
from typing import Any

import pytest

from wloadctl.cli_run import summary, summary_text
from wloadctl.core.states import JobState


def _outcome(ids: list[str], states: list[JobState]) -> Any:
    counts = [0] * len(JobState)
    for s in states:
        counts[s] += 1
    core = SimpleNamespace(ids=ids, state=array("b", states), counts=counts)
    return SimpleNamespace(plan=SimpleNamespace(name="p"), run=SimpleNamespace(run_id="r1", business_date="2026-12-06"),
                           status="failed", exit_code=1, resumed=False, wall=1.23456, core=core,
                           flags={"late job": "LATE"})


@pytest.mark.parametrize("ids", [
    ["a", "b.c", "d-e:f@g_1", "2"],  # what plans allow
    ["a", 'with "quotes"', "back\\slash"],  # a loop's instance named after an item: escapes needed
    ["a", "caf\u00e9", "tab\there", "del\x7f"],  # not ASCII, not printable
    ["only"],
])
def test_the_summary_is_the_text_the_json_module_writes_with_indent_2(ids: list[str]) -> None:
    states = [JobState(k % 6 + 3) for k in range(len(ids))]
    o = _outcome(ids, states)
    text = summary_text(o)
    assert text == json.dumps(summary(o), indent=2)
    assert json.loads(text)["jobs"] == {i: s.name for i, s in zip(ids, states, strict=True)}


def test_a_big_summary_of_plain_ids_is_joined_without_the_json_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import wloadctl.cli_run as cli_run

    ids = [f"s{k % 50:02d}_job_{k:06d}" for k in range(20_000)]
    o = _outcome(ids, [JobState.SUCCEEDED if k % 7 else JobState.SKIPPED for k in range(len(ids))])
    expected = json.dumps(summary(o), indent=2)

    def no_dict(_o: Any) -> Any:
        raise AssertionError("the jobs' dict was built: the summary went through the json module")

    monkeypatch.setattr(cli_run, "summary", no_dict)
    assert summary_text(o) == expected
