"""IPC test fixtures: unique names per test, and proof that nothing is left behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ipc_fixtures import IpcTracker, leftovers

from wloadctl.ipc import memory
from wloadctl.ipc.cleanup import remove_run_objects
from wloadctl.ipc.mq import unlink_queue
from wloadctl.ipc.segment import unlink_segment


@pytest.fixture(autouse=True)
def ipc() -> Iterator[IpcTracker]:
    """Unique names for the test; afterwards, assert nothing named with them remains."""
    tracker = IpcTracker()
    try:
        yield tracker
    finally:
        try:
            tracker.release()
        finally:
            left = leftovers(tracker)
            # Remove strays before failing, so one bad test does not leak into the next
            # runs or eat the user's queue quota.
            for run_id in tracker.run_ids:
                remove_run_objects(run_id)
            for name in tracker.names:
                unlink_queue(name)
                unlink_segment(name)
                memory.unlink_name(name)
        assert not left, f"IPC objects left behind: {left}"
