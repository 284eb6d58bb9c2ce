"""The scheduler loop under a wall clock set back or forward mid-run (stub pool, injected clock)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.procs.test_loop_stub import Harness, harness  # noqa: F401  (the fixture)
from wloadctl.procs.clockwatch import ClockWatch

HOUR = 3600.0


@pytest.mark.parametrize("jump", [-HOUR, HOUR], ids=["set-back", "set-forward"])
def test_a_retry_waits_its_delay_whatever_the_wall_clock_does_meanwhile(
        tmp_path: Path, harness: list[Harness], monkeypatch: pytest.MonkeyPatch, jump: float) -> None:  # noqa: F811
    # Given a job whose first attempt fails and is retried after 2 s
    real = time.time
    offset = [0.0]
    sent: dict[int, float] = {}

    def outcome(i: int, a: int) -> int:
        sent[a] = time.monotonic()
        return 1 if a == 1 else 0

    def wall() -> float:
        # When the wall clock jumps half a second into the delay
        if 1 in sent and 2 not in sent and time.monotonic() > sent[1] + 0.5:
            offset[0] = jump
        return real() + offset[0]

    monkeypatch.setattr(time, "time", wall)
    h = Harness(tmp_path, {"flaky": {"command": "x", "retries": {"count": 1, "delay": "2s"}}}, outcome)
    harness.append(h)
    h.loop.clock = ClockWatch(wall=wall)
    said: list[str] = []
    h.loop.say = said.append
    h.go(timeout=30.0)
    # Then the retry ran once its 2 s had passed: not at the jump, not an hour later
    assert h.loop.finished is not None and h.loop.finished.ok, h.states()
    assert offset[0] == jump
    assert sent[2] - sent[1] >= 1.75  # 2 s less the default jitter of 10 %
    assert h.journaled() == {"flaky": "SUCCEEDED"}
    assert any("the wall clock was set" in s for s in said), said
    h.core.validate()
