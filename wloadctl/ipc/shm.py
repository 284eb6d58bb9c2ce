"""Shared memory of a run in one import: segments, arena, boards, tails and cleanup.

Each concern lives in its own module (segment, arena, boards, tails, cleanup) to keep
modules small; callers import from here. Every class built on a segment takes a
`backend=` (`Segment`, or `memory.MemorySegment` in tests) in `create`/`open`, or an
already open segment in its constructor.
"""

from __future__ import annotations

from wloadctl.ipc.arena import DEFAULT_ARENA_SIZE, PayloadArena
from wloadctl.ipc.boards import (
    MAX_EXECUTOR_SLOTS,
    READ_TRIES,
    BoardSnapshot,
    ExecutorBoard,
    StateBoard,
)
from wloadctl.ipc.cleanup import (
    IpcObject,
    list_objects,
    remove_run_objects,
    run_ids_present,
    run_is_alive,
    scan_objects,
    stale_runs,
    survey_runs,
)
from wloadctl.ipc.protocol import MAX_RUNNING_TASKS, TAIL_MAX, BoardHeader, ExecutorSlot
from wloadctl.ipc.segment import Segment, segment_name, unlink_segment
from wloadctl.ipc.tails import DEFAULT_PART_SIZE, TailRing

__all__ = [
    "DEFAULT_ARENA_SIZE",
    "DEFAULT_PART_SIZE",
    "MAX_EXECUTOR_SLOTS",
    "MAX_RUNNING_TASKS",
    "READ_TRIES",
    "TAIL_MAX",
    "BoardHeader",
    "BoardSnapshot",
    "ExecutorBoard",
    "ExecutorSlot",
    "IpcObject",
    "PayloadArena",
    "Segment",
    "StateBoard",
    "TailRing",
    "list_objects",
    "remove_run_objects",
    "run_ids_present",
    "run_is_alive",
    "scan_objects",
    "segment_name",
    "stale_runs",
    "survey_runs",
    "unlink_segment",
]
