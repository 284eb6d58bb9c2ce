"""The compact encoded form of a plan round-trips every field."""

from __future__ import annotations

from pathlib import Path

import pytest

from wloadctl.core.plancodec import decode_plan, encode_plan
from wloadctl.core.planfile import load_plan

SAMPLES = sorted((Path(__file__).parents[2] / "samples").glob("*.yaml"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples_round_trip(path: Path) -> None:
    plan = load_plan(path)
    assert decode_plan(encode_plan(plan)) == plan


def test_unknown_forms_are_refused() -> None:
    assert decode_plan("not json") is None
    assert decode_plan('{"v": 99}') is None
