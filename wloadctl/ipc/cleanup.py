"""Finding and removing the queues and segments that crashed runs left behind.

Objects are listed from /dev/mqueue and /dev/shm. When /dev/mqueue is not mounted
(common in containers and CI) queues cannot be listed, but `remove_run_objects` still
removes a run's queues by their known names.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NamedTuple

from wloadctl.errors import TransportError
from wloadctl.ipc.boards import ExecutorBoard, StateBoard
from wloadctl.ipc.mq import unlink_queue
from wloadctl.ipc.naming import (
    OLD_QUEUE_ROLES,
    PREFIX,
    QUEUE_ROLES,
    ROLE_BOARD,
    ROLE_EXECUTORS,
    SEGMENT_ROLES,
    object_name,
    parse_name,
)
from wloadctl.ipc.segment import unlink_segment
from wloadctl.procs.health import pid_alive

MQUEUE_DIR = "/dev/mqueue"
"""Where Linux shows POSIX queues, when the mqueue filesystem is mounted."""
SHM_DIR = "/dev/shm"
"""Where Linux keeps POSIX shared memory."""
DEFAULT_GRACE = 10.0
"""Seconds during which a run's fresh objects are never called stale: a starting run
creates its queues before its state board."""


class IpcObject(NamedTuple):
    """One of our queues or segments found on this host."""

    kind: str
    """`mq` or `shm`."""
    name: str
    """POSIX name, with its leading slash."""
    run_id: str
    """The run it belongs to."""
    mtime: float
    """Last modification, epoch seconds."""

    @property
    def label(self) -> str:
        """`kind:name`, as `list_objects` and `remove_run_objects` report it."""
        return f"{self.kind}:{self.name}"


def scan_objects(prefix: str = PREFIX) -> list[IpcObject]:
    """Our queues and segments owned by the current user, sorted by label.

    Args:
        prefix: Directory-entry prefix to match (names without their leading slash).

    Returns:
        The objects found; none from a directory that is missing or unreadable.
    """
    uid = os.getuid()
    found: list[IpcObject] = []
    for kind, directory in (("mq", MQUEUE_DIR), ("shm", SHM_DIR)):
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.startswith(prefix):
                continue
            parsed = parse_name(entry.name)
            if parsed is None or parsed.uid != uid:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # removed while we looked
            if st.st_uid == uid:
                found.append(
                    IpcObject(kind, "/" + entry.name, parsed.run_id, st.st_mtime)
                )
    return sorted(found, key=lambda o: o.label)


def list_objects(prefix: str = PREFIX) -> list[str]:
    """Labels (`mq:/name` or `shm:/name`) of our objects owned by the current user."""
    return [o.label for o in scan_objects(prefix)]


def run_ids_present() -> set[str]:
    """Ids of the runs that have at least one listed object on this host."""
    return {o.run_id for o in scan_objects()}


def remove_run_objects(run_id: str) -> list[str]:
    """Unlink every queue and segment of a run.

    The known roles are removed by name (so queues go even when /dev/mqueue is not
    mounted), then anything else listed under the run id. Open handles elsewhere keep
    working until closed; only the names go.

    Returns:
        Labels of what was removed.

    Raises:
        TransportError: If an object exists but this user may not remove it.
    """
    removed: list[str] = []
    for role in QUEUE_ROLES + OLD_QUEUE_ROLES:
        name = object_name(run_id, role)
        if unlink_queue(name):
            removed.append(f"mq:{name}")
    for role in SEGMENT_ROLES:
        name = object_name(run_id, role)
        if unlink_segment(name):
            removed.append(f"shm:{name}")
    for obj in scan_objects():
        if obj.run_id != run_id or obj.label in removed:
            continue
        unlink = unlink_queue if obj.kind == "mq" else unlink_segment
        if unlink(obj.name):
            removed.append(obj.label)
    return removed


def run_is_alive(run_id: str) -> bool:
    """Whether some process of the run still lives.

    A run is dead when its state board is missing or unreadable, or when neither its
    scheduler, its standby nor any executor listed on its executor board is alive.
    """
    header = StateBoard.header_at(object_name(run_id, ROLE_BOARD))
    if header is None:
        return False
    pids = [header.scheduler_pid, header.standby_pid]
    try:
        executors = ExecutorBoard.open(object_name(run_id, ROLE_EXECUTORS))
    except TransportError:
        pass
    else:
        try:
            pids += [slot.pid for slot in executors.read_all()]
        except TransportError:
            pass
        finally:
            executors.close()
    return any(pid_alive(pid) for pid in pids)


def stale_runs(
    is_alive: Callable[[str], bool] = run_is_alive, *, grace: float = DEFAULT_GRACE
) -> list[str]:
    """Runs whose objects are left on this host by processes that are gone.

    Args:
        is_alive: Liveness test per run id.
        grace: Runs with an object modified in the last `grace` seconds are skipped
            (they may be starting).

    Returns:
        Sorted run ids; pass each to `remove_run_objects`.
    """
    return survey_runs(is_alive, grace=grace)[0]


def survey_runs(
    is_alive: Callable[[str], bool] = run_is_alive, *, grace: float = DEFAULT_GRACE
) -> tuple[list[str], dict[str, str]]:
    """The runs with objects on this host: those left by processes that are gone (as stale_runs), and
    the others, each with why its objects stay (in use, or too fresh to tell: a run starting).

    Returns:
        (sorted stale run ids, {run id: why its objects are kept}).
    """
    newest: dict[str, float] = {}
    for obj in scan_objects():
        newest[obj.run_id] = max(newest.get(obj.run_id, 0.0), obj.mtime)
    now = time.time()
    stale: list[str] = []
    kept: dict[str, str] = {}
    for run_id, mtime in sorted(newest.items()):
        if is_alive(run_id):
            kept[run_id] = "a process of the run is alive"
        elif mtime > now - grace:
            kept[run_id] = (f"changed {max(0.0, now - mtime):.0f}s ago, no process of it alive: a run starting "
                            f"looks so for its first {grace:.0f}s (a cleanup {max(1.0, mtime + grace - now):.0f}s "
                            "from now takes them if it is gone)")
        else:
            stale.append(run_id)
    return stale, kept
