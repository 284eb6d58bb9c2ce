"""Byte layouts of queue messages and shared-memory records, with versions and checks.

Queue messages (little-endian) start with an 8-byte header: magic `b"WL"`, version u8,
message type u8, record count u16, reserved u16. Records follow back to back:

* tasks (`MSG_TASKS`): 20-byte `TaskRecord`s, `<IHBBIII`.
* results (`MSG_RESULTS`): 48-byte `ResultRecord`s, `<BBHIHHiIiddII`.
* control (`MSG_CONTROL`): one compact UTF-8 JSON object, count 1.

Shared-memory segments start with a 16-byte identity block, written once at creation:
magic 4s, layout version u16, reserved u16, two u32 sizes (their meaning depends on the
segment kind). Except on the state board, data starts at offset 64 (`SEGMENT_DATA`).

* payload arena (`b"WLPA"`, sizes: capacity, 0): entries of a 24-byte header (length
  u32, CRC-32 u32, task u32, attempt u16, reserved u16, epoch u32, reserved u32) then
  the payload, each entry 8-byte aligned.
* state board (`b"WLSB"`, sizes: job capacity, 0): at 16 the sequence number u64 (odd
  while the writer is mid-write), at 24 the 144-byte header body `BOARD_BODY`, at 192
  one state byte per job index. One sequence number covers the body and the states.
* executor board (`b"WLEB"`, sizes: slot count, slot size): 192-byte slots from offset
  64, each a sequence number u64 then the body `EXECUTOR_SLOT`.
* tail ring (`b"WLTR"`, sizes: executor count, partition size): partitions from offset
  64, each a write cursor u64 then entries of a 16-byte header (task u32, attempt u16,
  reserved u16, length u32, CRC-32 u32) and at most `TAIL_MAX` bytes of output.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from itertools import chain
from typing import Any, NamedTuple

from wloadctl.errors import ProtocolError

MAGIC = b"WL"
"""First two bytes of every queue message."""
VERSION = 1
"""Layout version of messages and segments; a mismatch is refused, never guessed."""

MSG_TASKS = 1
"""Message type: a batch of TaskRecords (scheduler to executors)."""
MSG_RESULTS = 2
"""Message type: a batch of ResultRecords (executors to scheduler)."""
MSG_CONTROL = 3
"""Message type: one JSON control object (operator verbs and replies)."""
_TYPE_NAMES = {MSG_TASKS: "tasks", MSG_RESULTS: "results", MSG_CONTROL: "control"}
_FIELD_TYPES = {
    "B": "u8 (0..255)",
    "H": "u16 (0..65535)",
    "I": "u32 (0..4294967295)",
    "i": "i32 (-2147483648..2147483647)",
    "d": "f64 (a number)",
}

TASK_SHELL = 1
"""TaskRecord.kind: run the payload's command."""
TASK_NOOP = 2
"""TaskRecord.kind: complete without spawning a process."""
TASK_FOLLOW = 3
"""TaskRecord.kind: run the payload's command the moment the task its payload names (`after`: "task:attempt"),
the record just before it in the same message, exits 0; hand it back unstarted otherwise."""

RES_ACCEPTED = 1
"""ResultRecord.kind: the executor took the task into its local backlog."""
RES_STARTED = 2
"""ResultRecord.kind: the task's process was started."""
RES_EXITED = 3
"""ResultRecord.kind: the task's process ended (see exit_code, signal and flags)."""
RES_REJECTED = 4
"""ResultRecord.kind: refused, the record's epoch is older than the executor's."""

FLAG_TIMED_OUT = 1
"""ResultRecord.flags: killed for running past its timeout."""
FLAG_SPAWN_FAILED = 2
"""ResultRecord.flags: the process could not be started."""
FLAG_LOST = 4
"""ResultRecord.flags: the executor lost track of the process."""
FLAG_TAIL = 8
"""ResultRecord.flags: tail_offset/tail_length point at an output tail."""
FLAG_RETURNED = 16
"""With FLAG_LOST on an exit: the executor hands back a task it took ahead and never started, because its
slots stayed busy (another executor may run it; no attempt is spent)."""
FLAG_STARTING = 32
"""On an acceptance written to the executor's results journal only (never sent): the task's process is being
started now. An executor that dies before it journals the start leaves this behind, so whoever settles its
tasks knows the job may have started (held if it may not run twice), where a plain acceptance says it never did."""
FLAG_OUTPUT_CUT = 64
"""ResultRecord.flags (on an exit): the job's output passed its payload's `max_output`; the executor stopped it
(unless it had ended first) and cut its log back to the cap."""

HEADER = struct.Struct("<2sBBHH")
"""The 8-byte header of every queue message."""
MAX_COUNT = 0xFFFF
"""Most records one message can declare (the count is a u16)."""

_TASK_FIELDS = "IHBBIII"
_RESULT_FIELDS = "BBHIHHiIiddII"
TASK = struct.Struct("<" + _TASK_FIELDS)
"""One packed TaskRecord (20 bytes)."""
RESULT = struct.Struct("<" + _RESULT_FIELDS)
"""One packed ResultRecord (48 bytes)."""


class TaskRecord(NamedTuple):
    """One task sent to the executors; the payload itself sits in the arena."""

    task: int
    """Job index in the plan (u32)."""
    attempt: int
    """Attempt number, from 1 (u16)."""
    kind: int
    """TASK_SHELL or TASK_NOOP (u8)."""
    flags: int
    """Reserved bits (u8)."""
    epoch: int
    """Fencing token of the scheduler that sent it (u32)."""
    offset: int
    """Payload offset in the arena (u32)."""
    length: int
    """Payload length in bytes (u32)."""


class ResultRecord(NamedTuple):
    """One report from an executor about one task attempt."""

    kind: int
    """RES_ACCEPTED, RES_STARTED, RES_EXITED or RES_REJECTED (u8)."""
    flags: int
    """FLAG_* bits (u8)."""
    executor: int
    """Index of the reporting executor (u16)."""
    task: int
    """Job index (u32)."""
    attempt: int
    """Attempt number (u16)."""
    signal: int
    """Signal that ended the process, 0 if none (u16)."""
    exit_code: int
    """Exit status (i32)."""
    epoch: int
    """Epoch of the task record this answers (u32)."""
    pid: int
    """Process id of the job, 0 if none (i32)."""
    started: float
    """Start time, epoch seconds (f64)."""
    ended: float
    """End time, epoch seconds (f64)."""
    tail_offset: int
    """Offset of the output tail in the tail ring (u32)."""
    tail_length: int
    """Length of the output tail (u32)."""


# tuple.__new__ bound to the class builds each record in C, without the Python-level
# frame that NamedTuple._make costs; decoding is several times faster this way.
_new_task = partial(tuple.__new__, TaskRecord)
_new_result = partial(tuple.__new__, ResultRecord)


@lru_cache(maxsize=256)
def _batch(fields: str, count: int) -> struct.Struct:
    """A Struct for a header plus `count` records, so a batch packs in one C call."""
    return struct.Struct("<2sBBHH" + fields * count)


def _per_message(max_message_size: int, record: struct.Struct, what: str) -> int:
    n = (max_message_size - HEADER.size) // record.size
    if n < 1:
        raise ProtocolError(
            f"message size {max_message_size} cannot hold one {what} record",
            hint=f"use at least {HEADER.size + record.size} bytes per message",
        )
    return min(n, MAX_COUNT)


def tasks_per_message(max_message_size: int) -> int:
    """How many TaskRecords fit in one message (409 for 8192 bytes).

    Raises:
        ProtocolError: If not even one record fits.
    """
    return _per_message(max_message_size, TASK, "task")


def results_per_message(max_message_size: int) -> int:
    """How many ResultRecords fit in one message (170 for 8192 bytes).

    Raises:
        ProtocolError: If not even one record fits.
    """
    return _per_message(max_message_size, RESULT, "result")


def _encode(
    records: Sequence[tuple[Any, ...]],
    msg_type: int,
    fields: str,
    record: struct.Struct,
    max_size: int | None,
) -> bytes:
    count = len(records)
    what = _TYPE_NAMES[msg_type]
    if count > MAX_COUNT:
        raise ProtocolError(
            f"{count} {what} records in one message (at most {MAX_COUNT})"
        )
    size = HEADER.size + count * record.size
    if max_size is not None and size > max_size:
        raise ProtocolError(
            f"{count} {what} records need {size} bytes, more than {max_size} allowed",
            hint=f"send at most {_per_message(max_size, record, what)} per message",
        )
    try:
        return _batch(fields, count).pack(
            MAGIC, VERSION, msg_type, count, 0, *chain.from_iterable(records)
        )
    except (struct.error, TypeError):
        pass
    # Slow path, only on error: find the record and field to name them.
    names = (TaskRecord if msg_type == MSG_TASKS else ResultRecord)._fields
    for i, rec in enumerate(records):
        if not isinstance(rec, tuple) or len(rec) != len(fields):
            raise ProtocolError(
                f"{what} record {i} is not a {len(fields)}-field record"
            )
        for code, name, value in zip(fields, names, rec, strict=True):
            try:
                struct.pack("<" + code, value)
            except struct.error:
                raise ProtocolError(
                    f"{what} record {i}: {name}={value!r} does not fit "
                    f"{_FIELD_TYPES[code]}"
                ) from None
    raise ProtocolError(f"{what} records do not fit the layout")


def _check(
    data: bytes | bytearray | memoryview, msg_type: int, record_size: int
) -> int:
    """Validate the header of a message and return its record count."""
    size = len(data)
    if size < HEADER.size:
        raise ProtocolError(
            f"message of {size} bytes is shorter than the {HEADER.size}-byte header"
        )
    magic, version, got_type, count, _ = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ProtocolError(
            f"bad magic {bytes(magic)!r} (expected {MAGIC!r}): not a wloadctl message"
        )
    if version != VERSION:
        raise ProtocolError(
            f"protocol version {version} (expected {VERSION})",
            hint="scheduler and executors must come from the same wloadctl release",
        )
    if got_type != msg_type:
        got = _TYPE_NAMES.get(got_type, f"unknown type {got_type}")
        raise ProtocolError(f"{got} message where {_TYPE_NAMES[msg_type]} was expected")
    if record_size and size != HEADER.size + count * record_size:
        raise ProtocolError(
            f"{_TYPE_NAMES[msg_type]} message of {size} bytes declares {count} records "
            f"(expected {HEADER.size + count * record_size} bytes)"
        )
    return int(count)


def message_type(data: bytes | bytearray | memoryview) -> int:
    """The type (MSG_*) of a message, after checking its magic and version.

    Raises:
        ProtocolError: If the header is short, foreign, of another version or type.
    """
    if len(data) < HEADER.size:
        raise ProtocolError(f"message of {len(data)} bytes has no complete header")
    msg_type = int(data[3])
    if msg_type not in _TYPE_NAMES:
        raise ProtocolError(f"unknown message type {msg_type} (expected 1, 2 or 3)")
    _check(data, msg_type, 0)
    return msg_type


def encode_tasks(records: Sequence[TaskRecord], max_size: int | None = None) -> bytes:
    """Pack task records into one message.

    Args:
        records: The batch, at most `tasks_per_message(max_size)` long.
        max_size: The queue's message size limit, checked when given.

    Returns:
        The message bytes.

    Raises:
        ProtocolError: If a field is out of range or the batch is too large.
    """
    return _encode(records, MSG_TASKS, _TASK_FIELDS, TASK, max_size)


def decode_tasks(data: bytes | bytearray | memoryview) -> list[TaskRecord]:
    """Unpack a tasks message.

    Raises:
        ProtocolError: On bad magic, version, type or size.
    """
    _check(data, MSG_TASKS, TASK.size)
    return list(map(_new_task, TASK.iter_unpack(memoryview(data)[HEADER.size :])))


def encode_results(
    records: Sequence[ResultRecord], max_size: int | None = None
) -> bytes:
    """Pack result records into one message.

    Args:
        records: The batch, at most `results_per_message(max_size)` long.
        max_size: The queue's message size limit, checked when given.

    Returns:
        The message bytes.

    Raises:
        ProtocolError: If a field is out of range or the batch is too large.
    """
    return _encode(records, MSG_RESULTS, _RESULT_FIELDS, RESULT, max_size)


def decode_results(data: bytes | bytearray | memoryview) -> list[ResultRecord]:
    """Unpack a results message.

    Raises:
        ProtocolError: On bad magic, version, type or size.
    """
    _check(data, MSG_RESULTS, RESULT.size)
    return list(map(_new_result, RESULT.iter_unpack(memoryview(data)[HEADER.size :])))


def decode_result_log(data: bytes | bytearray | memoryview) -> list[ResultRecord]:
    """Decode results messages stored back to back (an executor's results journal).

    A message cut short at the end, as a writer killed mid-append leaves it, is ignored.

    Raises:
        ProtocolError: If a complete message in the log is malformed.
    """
    view = memoryview(data)
    records: list[ResultRecord] = []
    pos = 0
    while len(view) - pos >= HEADER.size:
        count = HEADER.unpack_from(view, pos)[3]
        end = pos + HEADER.size + count * RESULT.size
        if end > len(view):
            break
        records += decode_results(view[pos:end])
        pos = end
    return records


def encode_control(obj: dict[str, Any], max_size: int | None = None) -> bytes:
    """Pack one control object (an operator verb or its reply) as header + JSON.

    Args:
        obj: A JSON-serialisable dict.
        max_size: The message size limit of the control socket, checked when given.

    Returns:
        The message bytes.

    Raises:
        ProtocolError: If `obj` is not a JSON-serialisable dict or is too large.
    """
    if not isinstance(obj, dict):
        raise ProtocolError(f"control message must be a dict, not {type(obj).__name__}")
    try:
        body = json.dumps(
            obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise ProtocolError(
            f"control message is not JSON-serialisable: {exc}"
        ) from None
    data = HEADER.pack(MAGIC, VERSION, MSG_CONTROL, 1, 0) + body.encode()
    if max_size is not None and len(data) > max_size:
        raise ProtocolError(
            f"control message of {len(data)} bytes exceeds the {max_size}-byte limit",
            hint="send fewer or shorter job ids, and a shorter reason, per request",
        )
    return data


def decode_control(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Unpack a control message.

    Raises:
        ProtocolError: On a bad header, or a body that is not a UTF-8 JSON object.
    """
    _check(data, MSG_CONTROL, 0)
    try:
        obj = json.loads(bytes(data[HEADER.size :]).decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"control message body is not UTF-8 JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(
            f"control message body is a {type(obj).__name__}, not an object"
        )
    return obj


@dataclass(slots=True)
class Payload:
    """What an executor needs to run one job; in the arena, pointed at by a task."""

    job: str
    """Job id, for logs and messages."""
    command: str | list[str] | None
    """Shell string, argv list, or None for no-op jobs."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables."""
    cwd: str | None = None
    """Working directory, or None for the executor's own."""
    timeout: float | None = None
    """Seconds before the process group is killed, or None."""
    log_path: str = ""
    """File that receives the job's stdout and stderr."""
    max_output: int | None = None
    """Bytes the log may reach before the job is stopped and its log cut back to them, or None for no cap."""
    extra: dict[str, str] = field(default_factory=dict)
    """Fields added by later releases; unknown keys are kept, not dropped."""


def encode_payload(p: Payload) -> bytes:
    """Pack a payload as compact JSON with short keys.

    Raises:
        ProtocolError: If a field cannot be represented.
    """
    command: str | list[str] | None = p.command
    if isinstance(command, tuple):
        command = list(command)
    obj: dict[str, Any] = {"v": VERSION, "j": p.job, "c": command}
    if p.env:
        obj["e"] = p.env
    if p.cwd is not None:
        obj["d"] = p.cwd
    if p.timeout is not None:
        obj["t"] = p.timeout
    if p.log_path:
        obj["l"] = p.log_path
    if p.max_output is not None:
        obj["o"] = p.max_output
    if p.extra:
        obj["x"] = p.extra
    try:
        # A lone surrogate passes as is: Python gives one for each byte of a file name that is not UTF-8
        # (os.listdir, then json.dump, in a job whose result a loop reads), and exec turns it back into that byte.
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError) as exc:
        raise ProtocolError(
            f"payload of job {p.job!r} cannot be encoded: {exc}"
        ) from None


def _str_map(value: Any, what: str) -> dict[str, str]:
    # JSON object keys are always strings: only the values need a look (one pass in C).
    if not isinstance(value, dict) or (value and set(map(type, value.values())) != {str}):
        raise ProtocolError(f"payload field {what!r} must map strings to strings")
    return value


def decode_payload(b: bytes | bytearray | memoryview) -> Payload:
    """Unpack a payload written by `encode_payload`.

    Raises:
        ProtocolError: If the bytes are not a payload of this version.
    """
    try:
        obj = json.loads(bytes(b).decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"payload is not UTF-8 JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("payload is not a JSON object")
    if obj.get("v") != VERSION:
        raise ProtocolError(f"payload version {obj.get('v')!r} (expected {VERSION})")
    job, command = obj.get("j"), obj.get("c")
    if not isinstance(job, str):
        raise ProtocolError("payload field 'j' (job id) must be a string")
    if not (
        command is None
        or isinstance(command, str)
        or (isinstance(command, list) and all(isinstance(a, str) for a in command))
    ):
        raise ProtocolError(f"payload of job {job!r}: command must be a string or list")
    cwd, timeout, log_path = obj.get("d"), obj.get("t"), obj.get("l", "")
    if cwd is not None and not isinstance(cwd, str):
        raise ProtocolError(f"payload of job {job!r}: cwd must be a string")
    if timeout is not None and not isinstance(timeout, int | float):
        raise ProtocolError(f"payload of job {job!r}: timeout must be a number")
    if not isinstance(log_path, str):
        raise ProtocolError(f"payload of job {job!r}: log path must be a string")
    cap = obj.get("o")
    if cap is not None and (type(cap) is not int or cap <= 0):
        raise ProtocolError(f"payload of job {job!r}: max_output must be a positive whole number of bytes")
    return Payload(
        job=job,
        command=command,
        env=_str_map(obj.get("e", {}), "e"),
        cwd=cwd,
        timeout=None if timeout is None else float(timeout),
        log_path=log_path,
        max_output=cap,
        extra=_str_map(obj.get("x", {}), "x"),
    )


# Shared-memory layouts.

IDENTITY = struct.Struct("<4sHHII")
"""Identity block at offset 0 of every segment: magic, version, reserved, two sizes."""
SEGMENT_DATA = 64
"""Where a segment's data starts, after its identity block."""
SEQ = struct.Struct("<Q")
"""A seqlock sequence number (odd while its writer is mid-write)."""

ARENA_MAGIC = b"WLPA"
"""Identity magic of a payload arena."""
ARENA_ENTRY = struct.Struct("<IIIHHII")
"""Header of one arena entry: payload length, CRC-32 of the payload, then the task,
attempt and epoch it was written for, so a stale task record is recognised."""

STATE_BOARD_MAGIC = b"WLSB"
"""Identity magic of a state board."""
BOARD_SEQ_OFFSET = 16
"""Offset of the state board's sequence number."""
BOARD_BODY_OFFSET = 24
"""Offset of the state board's header body."""
BOARD_BODY = struct.Struct("<IiiIHBB4xddd32s16I")
"""Header body: epoch, scheduler_pid, standby_pid, n_jobs, n_executors, done, paused, beat,
started, lease_until, run_id, counts (`paused` was a pad byte: older readers see 0)."""
BOARD_PAUSED_AT = BOARD_BODY_OFFSET + struct.calcsize("<IiiIHB")
"""Offset of the header's `paused` byte: one byte is never seen half written, so it is read without the
sequence number (an executor reads it at every chain job it ends)."""
PAUSE_NONE = 0
"""The scheduler dispatches."""
PAUSE_STATE_DIR_FULL = 1
"""Dispatch is paused: the disk of the state directory is full (journal writes are retried)."""
PAUSE_SHM_FULL = 2
"""Dispatch is paused: the payload arena in /dev/shm has no room (it waits for running jobs to free some)."""
PAUSE_JOURNAL_LOST = 3
"""Dispatch is paused: the journal's server is unreachable (the scheduler reconnects with a bounded backoff)."""
PAUSE_CANCELLED = 4
"""Nothing new starts: the run was cancelled (an executor hands back the followers it holds)."""
PAUSE_STOPPING = 5
"""Nothing new starts: the scheduler is stopping (an executor hands back the followers it holds)."""
BOARD_EPOCH = struct.Struct("<I")
"""The header body's first field, the epoch: read alone by a scheduler checking it was not fenced."""
BOARD_STATES_OFFSET = 192
"""Offset of the per-job state bytes."""
BOARD_COUNTS = 16
"""Number of per-state job counts in the header."""
RUN_ID_MAX = 32
"""Longest run id, in UTF-8 bytes, a board header holds."""

EXECUTOR_BOARD_MAGIC = b"WLEB"
"""Identity magic of an executor board."""
MAX_RUNNING_TASKS = 16
"""Most (task, attempt) pairs an executor slot lists; `running` holds the true count."""
EXECUTOR_SLOT = struct.Struct("<HBBidddQIIHH4x" + "IH" * MAX_RUNNING_TASKS)
"""Slot body: executor, state, n_tasks, pid, beat, load1, seen_scheduler_beat, rss_kb,
jobs_done, seen_epoch, running, slots, then the running (task, attempt) pairs."""
EXECUTOR_SLOT_SIZE = 192
"""Bytes per slot: the sequence number, the body, padding to whole cache lines."""

TAIL_MAGIC = b"WLTR"
"""Identity magic of a tail ring."""
TAIL_ENTRY = struct.Struct("<IHHII")
"""Header of one tail entry: task, attempt, reserved, length, CRC-32 of the data."""
TAIL_MAX = 4096
"""Most bytes of output kept per task attempt (the last ones)."""


def write_identity(buf: Any, magic: bytes, first: int, second: int) -> None:
    """Write a segment's identity block."""
    IDENTITY.pack_into(buf, 0, magic, VERSION, 0, first, second)


def read_identity(buf: Any, magic: bytes, what: str, name: str) -> tuple[int, int]:
    """Check a segment's identity block and return its two sizes.

    Raises:
        ProtocolError: If the segment is too small, of another kind or version.
    """
    if len(buf) < SEGMENT_DATA:
        raise ProtocolError(
            f"segment {name} of {len(buf)} bytes is too small for a {what}"
        )
    got, version, _, first, second = IDENTITY.unpack_from(buf, 0)
    if got != magic:
        article = "an" if what[0] in "aeiou" else "a"
        raise ProtocolError(
            f"segment {name} has magic {bytes(got)!r}, expected {magic!r}: "
            f"not {article} {what}, or its creator has not initialised it yet"
        )
    if version != VERSION:
        raise ProtocolError(
            f"{what} {name} has layout version {version} (expected {VERSION})",
            hint="scheduler, executors and console must come from the same release",
        )
    return int(first), int(second)


@dataclass(slots=True)
class BoardHeader:
    """The run-wide part of the state board, written by the active scheduler."""

    run_id: str = ""
    """The run's id (at most 32 UTF-8 bytes)."""
    epoch: int = 0
    """Fencing epoch of the active scheduler."""
    scheduler_pid: int = 0
    """Process id of the active scheduler."""
    beat: float = 0.0
    """Time of the scheduler's last loop turn, epoch seconds."""
    started: float = 0.0
    """When the run started, epoch seconds."""
    n_jobs: int = 0
    """Jobs in the run (state bytes that are meaningful)."""
    n_executors: int = 0
    """Executors in the run."""
    done: bool = False
    """The run has finished."""
    counts: tuple[int, ...] = (0,) * BOARD_COUNTS
    """Jobs per state value, indexed by the JobState value."""
    standby_pid: int = 0
    """Process id of the standby scheduler, 0 if none."""
    lease_until: float = 0.0
    """Until when the active scheduler holds its lease, epoch seconds."""
    paused: int = PAUSE_NONE
    """Why dispatch is paused, when it is (a PAUSE_* code)."""


def pack_board_header(h: BoardHeader) -> bytes:
    """Pack a board header body.

    Raises:
        ProtocolError: If a field is out of range or the run id is too long.
    """
    run_id = h.run_id.encode()
    if len(run_id) > RUN_ID_MAX:
        raise ProtocolError(f"run id {h.run_id!r} is longer than {RUN_ID_MAX} bytes")
    counts = tuple(h.counts)
    if len(counts) > BOARD_COUNTS:
        raise ProtocolError(f"{len(counts)} state counts (at most {BOARD_COUNTS})")
    counts += (0,) * (BOARD_COUNTS - len(counts))
    try:
        return BOARD_BODY.pack(
            h.epoch, h.scheduler_pid, h.standby_pid, h.n_jobs, h.n_executors,
            bool(h.done), h.paused, h.beat, h.started, h.lease_until, run_id, *counts,
        )  # fmt: skip
    except struct.error as exc:
        raise ProtocolError(f"board header does not fit the layout: {exc}") from None


def unpack_board_header(data: bytes | bytearray | memoryview) -> BoardHeader:
    """Unpack a board header body packed by `pack_board_header`.

    Raises:
        ProtocolError: If `data` is shorter than the layout.
    """
    if len(data) < BOARD_BODY.size:
        raise ProtocolError(f"board header of {len(data)} bytes, expected {BOARD_BODY.size}")
    f = BOARD_BODY.unpack_from(data)
    return BoardHeader(
        run_id=f[10].rstrip(b"\0").decode(errors="replace"),
        epoch=f[0],
        scheduler_pid=f[1],
        beat=f[7],
        started=f[8],
        n_jobs=f[3],
        n_executors=f[4],
        done=bool(f[5]),
        counts=tuple(f[11:]),
        standby_pid=f[2],
        lease_until=f[9],
        paused=f[6],
    )


@dataclass(slots=True)
class ExecutorSlot:
    """One executor's heartbeat, written only by that executor."""

    executor: int = 0
    """Executor index (its slot number)."""
    pid: int = 0
    """Process id; 0 means the slot was never written."""
    state: int = 0
    """ExecutorState value as the executor sees itself."""
    beat: float = 0.0
    """Time of the last heartbeat, epoch seconds."""
    load1: float = 0.0
    """One-minute load average of the host."""
    rss_kb: int = 0
    """Resident memory of the executor and its jobs, KiB."""
    running: int = 0
    """Tasks running now (may exceed the listed `running_tasks`)."""
    slots: int = 0
    """How many tasks it may run at once."""
    jobs_done: int = 0
    """Tasks finished since it started."""
    seen_epoch: int = 0
    """Highest scheduler epoch it has accepted."""
    seen_scheduler_beat: float = 0.0
    """The scheduler beat it last observed (a standby checks it before taking over)."""
    running_tasks: tuple[tuple[int, int], ...] = ()
    """Up to MAX_RUNNING_TASKS (task, attempt) pairs running now."""


def pack_executor_slot(s: ExecutorSlot) -> bytes:
    """Pack an executor slot body; running tasks past MAX_RUNNING_TASKS are left out.

    Raises:
        ProtocolError: If a field is out of range.
    """
    tasks = tuple(s.running_tasks)[:MAX_RUNNING_TASKS]
    pairs = list(chain.from_iterable(tasks))
    pairs += [0] * (2 * MAX_RUNNING_TASKS - len(pairs))
    try:
        return EXECUTOR_SLOT.pack(
            s.executor, s.state, len(tasks), s.pid, s.beat, s.load1,
            s.seen_scheduler_beat, s.rss_kb, s.jobs_done, s.seen_epoch, s.running,
            s.slots, *pairs,
        )  # fmt: skip
    except struct.error as exc:
        raise ProtocolError(
            f"slot of executor {s.executor} does not fit the layout: {exc}"
        ) from None


def unpack_executor_slot(data: bytes | bytearray | memoryview) -> ExecutorSlot:
    """Unpack an executor slot body packed by `pack_executor_slot`.

    Raises:
        ProtocolError: If `data` is shorter than the layout.
    """
    if len(data) < EXECUTOR_SLOT.size:
        raise ProtocolError(f"executor slot of {len(data)} bytes, expected {EXECUTOR_SLOT.size}")
    f = EXECUTOR_SLOT.unpack_from(data)
    n = min(f[2], MAX_RUNNING_TASKS)
    pairs = f[12:]
    return ExecutorSlot(
        executor=f[0],
        pid=f[3],
        state=f[1],
        beat=f[4],
        load1=f[5],
        rss_kb=f[7],
        running=f[10],
        slots=f[11],
        jobs_done=f[8],
        seen_epoch=f[9],
        seen_scheduler_beat=f[6],
        running_tasks=tuple((pairs[2 * i], pairs[2 * i + 1]) for i in range(n)),
    )
