"""Console test fixtures: UTC times, and real runs that leave nothing behind."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from console_helpers import LiveRun, cmdline, ipc_objects_of


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times of day render in UTC, so screens do not depend on the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def live_run(tmp_path: Path, no_ipc_leaks: None) -> Iterator[LiveRun]:
    """A real run's directory; afterwards no process or IPC object of it is left."""
    run = LiveRun(tmp_path)
    yield run
    left = run.teardown()
    assert not left, f"processes left behind: {[cmdline(p) for p in left]}"
    assert not ipc_objects_of(run.state_dir)
