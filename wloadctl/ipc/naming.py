"""Names of a run's POSIX queues and shared-memory segments, and their parsing."""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from wloadctl.errors import TransportError

PREFIX = "wloadctl."
"""Every object name starts with `/` and this prefix, so cleanup can find ours."""

ROLE_REQUEST = "req"
"""Request queue: batched task records, scheduler to executors."""
ROLE_RESPONSE = "rsp"
"""Response queue: batched result records, executors to scheduler."""
ROLE_CONTROL = "ctl"
"""Control queue of runs made before verbs moved to the control socket: only cleaned up."""
ROLE_ARENA = "arena"
"""Segment holding job payloads written by the scheduler."""
ROLE_BOARD = "board"
"""Segment holding the scheduler's state board."""
ROLE_EXECUTORS = "exec"
"""Segment holding the executors' heartbeat board."""
ROLE_TAILS = "tail"
"""Segment holding the executors' output tails."""

QUEUE_ROLES: tuple[str, ...] = (ROLE_REQUEST, ROLE_RESPONSE)
"""Queue roles every run has."""
OLD_QUEUE_ROLES: tuple[str, ...] = (ROLE_CONTROL,)
"""Queue roles of older runs, removed with their stale objects."""
SEGMENT_ROLES: tuple[str, ...] = (ROLE_ARENA, ROLE_BOARD, ROLE_EXECUTORS, ROLE_TAILS)
"""Segment roles every run may have."""

NAME_MAX = 255
"""Longest POSIX IPC name Linux accepts (NAME_MAX), counting the leading slash."""

_PART = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ObjectName(NamedTuple):
    """The parts of one of our IPC object names."""

    uid: int
    """Owner's user id, so two users on one host never collide."""
    run_id: str
    """The run the object belongs to."""
    role: str
    """What the object is for (one of the ROLE_* values, or a caller-chosen role)."""


def object_name(run_id: str, role: str, uid: int | None = None) -> str:
    """Build the POSIX name of one object of a run.

    Args:
        run_id: The run's id: 1-64 letters, digits, `_` or `-`.
        role: What the object is for, with the same alphabet.
        uid: Owner's uid; the current user's by default.

    Returns:
        A name like `/wloadctl.1000.eod-20240131.req`.

    Raises:
        TransportError: If the run id or role holds a character POSIX names or our
            parser cannot take.
    """
    for what, value in (("run id", run_id), ("role", role)):
        if not _PART.fullmatch(value):
            raise TransportError(
                f"invalid {what} {value!r} for an IPC object name",
                hint="use 1-64 letters, digits, '_' or '-'",
            )
    owner = os.getuid() if uid is None else uid
    name = f"/{PREFIX}{owner}.{run_id}.{role}"
    if len(name) > NAME_MAX:
        raise TransportError(f"IPC object name {name!r} is longer than {NAME_MAX}")
    return name


def parse_name(name: str) -> ObjectName | None:
    """Split one of our object names into uid, run id and role.

    Args:
        name: A name with or without the leading slash (directory entries lack it).

    Returns:
        The parts, or None when the name is not one of ours.
    """
    bare = name[1:] if name.startswith("/") else name
    if not bare.startswith(PREFIX):
        return None
    parts = bare[len(PREFIX) :].split(".")
    if len(parts) != 3 or not parts[0].isdigit():
        return None
    uid, run_id, role = parts
    if not (_PART.fullmatch(run_id) and _PART.fullmatch(role)):
        return None
    return ObjectName(int(uid), run_id, role)
