"""The suite's quota lock (tests/conftest.py): a test marked `exclusive` runs while no other test does."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.conftest import _turn


def test_an_exclusive_turn_waits_for_the_shared_ones_and_keeps_the_next_ones_out(tmp_path: Path) -> None:
    order: list[str] = []
    first_in, exclusive_waits = threading.Event(), threading.Event()

    def shared(name: str, hold: float, ready: threading.Event | None = None) -> None:
        with _turn(tmp_path, exclusive=False):
            order.append(f"{name} in")
            if ready is not None:
                ready.set()
            time.sleep(hold)
            order.append(f"{name} out")

    def exclusive() -> None:
        exclusive_waits.set()
        with _turn(tmp_path, exclusive=True):
            order.append("exclusive in")
            time.sleep(0.2)
            order.append("exclusive out")

    # Given a test running (a shared turn), when an exclusive one asks, then another shared one
    a = threading.Thread(target=shared, args=("a", 0.5, first_in))
    a.start()
    first_in.wait(5)
    x = threading.Thread(target=exclusive)
    x.start()
    exclusive_waits.wait(5)
    time.sleep(0.1)  # (the exclusive one is waiting at the lock by now)
    b = threading.Thread(target=shared, args=("b", 0.0))
    b.start()
    for t in (a, x, b):
        t.join(10)
    # Then the exclusive one ran alone, after the first, and the later one after it
    assert order == ["a in", "a out", "exclusive in", "exclusive out", "b in", "b out"]
