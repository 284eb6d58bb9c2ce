"""IPC test helpers: unique names per test, and a tracker that cleans up after it."""

from __future__ import annotations

import itertools
import os
from typing import Protocol, TypeVar

from wloadctl.errors import TransportError
from wloadctl.ipc import memory
from wloadctl.ipc.cleanup import MQUEUE_DIR, SHM_DIR
from wloadctl.ipc.mq import MessageQueue
from wloadctl.ipc.naming import object_name

_serial = itertools.count()


class Closeable(Protocol):
    """Anything the tracker can clean up."""

    def close(self) -> None: ...

    def unlink(self) -> None: ...


T = TypeVar("T", bound=Closeable)


class IpcTracker:
    """Hands out unique run ids and names, and closes and unlinks what tests create."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []
        """Every run id handed out to this test."""
        self.names: list[str] = []
        """Every object name handed out to this test."""
        self._objects: list[Closeable] = []

    def run_id(self) -> str:
        """A run id no other test, process or earlier test in this process uses."""
        run_id = f"t{os.getpid()}n{next(_serial)}"
        self.run_ids.append(run_id)
        return run_id

    def name(self, role: str = "q", run_id: str | None = None) -> str:
        """An object name under a fresh run id (or under `run_id`)."""
        name = object_name(run_id or self.run_id(), role)
        self.names.append(name)
        return name

    def track(self, obj: T) -> T:
        """Close and unlink `obj` at teardown, whatever the test's outcome."""
        self._objects.append(obj)
        return obj

    def release(self) -> None:
        """Close and unlink every tracked object, newest first; re-raise any error."""
        errors: list[Exception] = []
        while self._objects:
            obj = self._objects.pop()
            for step in (obj.close, obj.unlink):
                try:
                    step()
                except Exception as exc:  # keep cleaning the rest
                    errors.append(exc)
        if errors:
            raise errors[0]


def leftovers(tracker: IpcTracker) -> list[str]:
    """Objects of the test's runs that still exist."""
    marks = tuple(f".{run_id}." for run_id in tracker.run_ids)
    found = [
        f"{directory}/{entry}"
        for directory in (MQUEUE_DIR, SHM_DIR)
        if os.path.isdir(directory)
        for entry in os.listdir(directory)
        if any(mark in entry for mark in marks)
    ]
    found += [n for n in memory.registered_names() if any(m in n for m in marks)]
    if not os.path.ismount(MQUEUE_DIR):
        # Queues cannot be listed; probe every name the test was given instead.
        for name in tracker.names:
            try:
                MessageQueue.open(name).close()
            except TransportError:
                continue
            found.append(name)
    return sorted(set(found))
