"""Byte layouts of the batches carried by the broker: dispatch (tasks) and results.

Both kinds (little-endian) open with a 16-byte header `HEAD` = magic `b"WN"`, version u8,
kind u8, epoch u32 (dispatch: the sender's epoch; results: 0), count u32, two name lengths
u8 and a reserved u16; the two names follow as UTF-8 (dispatch: scheduler id, run id;
results: agent name, run id). Then:

* dispatch (`KIND_DISPATCH`): `count` TaskRecords (20 bytes each, the local queue layout
  of `wloadctl.ipc.protocol`), then the payloads back to back. A record's offset and
  length point into that payload area (not into an arena as on the local path); the
  payloads are those of `protocol.encode_payload`, empty for no-op tasks.
* results (`KIND_RESULTS`): `count` ResultRecords (48 bytes each), then `count` pairs
  `EXTRA` = (job result offset u32, job result length u32), then a data area. A record's
  tail_offset/tail_length point at its output tail in that area (FLAG_TAIL set when it
  has one); the pair points at the JSON the job wrote to $WLOADCTL_RESULT_FILE, length
  `NO_RESULT` when it wrote none.

Offsets must be the running sum of the lengths (each area is packed densely); anything
else, or a size that does not add up, is refused.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache, partial
from itertools import accumulate, chain
from typing import NamedTuple

from wloadctl.errors import ProtocolError
from wloadctl.ipc.protocol import (
    FLAG_TAIL,
    RESULT,
    TASK,
    ResultRecord,
    TaskRecord,
)

MAGIC = b"WN"
"""First two bytes of every broker batch."""
VERSION = 1
"""Layout version of broker batches; a mismatch is refused, never guessed."""
KIND_DISPATCH = 1
"""Batch kind: tasks from a scheduler to agents."""
KIND_RESULTS = 2
"""Batch kind: results from an agent to a scheduler."""
_KIND_NAMES = {KIND_DISPATCH: "dispatch", KIND_RESULTS: "results"}

HEAD = struct.Struct("<2sBBIIBBH")
"""The 16-byte header of every batch."""
EXTRA = struct.Struct("<II")
"""Per result: offset and length of the job's result JSON in the data area."""
NO_RESULT = 0xFFFFFFFF
"""EXTRA length meaning the job wrote no result file."""
MAX_MESSAGE = 1024 * 1024
"""Default largest batch in bytes: the NATS server's default max_payload (1 MiB)."""
NAME_MAX = 255
"""Longest scheduler id, agent name or run id, in UTF-8 bytes."""

_TASK_FIELDS = TASK.format.lstrip("<")
_RESULT_FIELDS = RESULT.format.lstrip("<")
_CHUNK = 1024
"""Records packed per struct call: one compiled format serves any batch size."""
_new_task = partial(tuple.__new__, TaskRecord)
_new_result = partial(tuple.__new__, ResultRecord)


class DispatchBatch(NamedTuple):
    """A decoded dispatch message."""

    epoch: int
    """Epoch of the scheduler that sent it."""
    scheduler: str
    """Id of the sending scheduler."""
    run: str
    """Run id the tasks belong to."""
    tasks: list[TaskRecord]
    """The tasks; offset/length locate each payload in the message."""
    payloads: list[bytes]
    """Payload of each task (protocol.encode_payload bytes; empty for no-op tasks)."""


class ResultEntry(NamedTuple):
    """One result with what travels beside it."""

    record: ResultRecord
    """The result; tail_offset/tail_length are set by the encoder."""
    tail: bytes = b""
    """Last bytes of the job's output (may be empty)."""
    result: bytes | None = None
    """The JSON the job wrote to $WLOADCTL_RESULT_FILE, or None if it wrote none."""


_new_entry = partial(tuple.__new__, ResultEntry)


class ResultBatch(NamedTuple):
    """A decoded results message."""

    agent: str
    """Name of the agent that sent it."""
    run: str
    """Run id the results belong to."""
    entries: list[ResultEntry]
    """The results in the order sent."""


@lru_cache(maxsize=64)
def _records(fields: str, count: int) -> struct.Struct:
    """A Struct for `count` records, so a whole batch packs in one C call."""
    return struct.Struct("<" + fields * count)


def _names(first: str, run: str, what: str) -> tuple[bytes, bytes]:
    a, b = first.encode(), run.encode()
    if len(a) > NAME_MAX or len(b) > NAME_MAX:
        raise ProtocolError(f"{what} name or run id longer than {NAME_MAX} bytes")
    return a, b


def _pack(fields: str, flat: list[int | float], count: int, what: str) -> bytes:
    """Pack `count` records of `fields` from one flat list, in chunks of `_CHUNK` records."""
    width = len(fields)
    try:
        if count <= _CHUNK:
            return _records(fields, count).pack(*flat)
        step = _CHUNK * width
        full = _records(fields, _CHUNK)
        parts = [full.pack(*flat[i : i + step]) for i in range(0, (count // _CHUNK) * step, step)]
        rest = count % _CHUNK
        if rest:
            parts.append(_records(fields, rest).pack(*flat[len(flat) - rest * width :]))
        return b"".join(parts)
    except struct.error as exc:
        raise ProtocolError(f"a {what} record does not fit the layout: {exc}") from None


def encode_dispatch(
    epoch: int, scheduler: str, run: str, tasks: Sequence[TaskRecord], payloads: Sequence[bytes]
) -> bytes:
    """Pack tasks and their payloads into one dispatch message.

    Args:
        epoch: The sending scheduler's epoch.
        scheduler: Id of the sending scheduler.
        run: Run id.
        tasks: The task records; their offset and length fields are replaced.
        payloads: One payload per task (b"" for no-op tasks).

    Returns:
        The message bytes (see `split_dispatch` to keep under a size limit).

    Raises:
        ProtocolError: If the lists differ in length or a field does not fit.
    """
    count = len(tasks)
    if len(payloads) != count:
        raise ProtocolError(f"{count} tasks but {len(payloads)} payloads in a dispatch batch")
    a, b = _names(scheduler, run, "scheduler")
    lengths = list(map(len, payloads))
    flat: list[int | float] = list(chain.from_iterable(tasks))
    if len(flat) != count * 7:
        raise ProtocolError("a dispatch task is not a 7-field TaskRecord")
    flat[5::7] = list(accumulate(lengths, initial=0))[:-1]
    flat[6::7] = lengths
    try:
        head = HEAD.pack(MAGIC, VERSION, KIND_DISPATCH, epoch, count, len(a), len(b), 0)
    except struct.error as exc:
        raise ProtocolError(f"dispatch header does not fit the layout: {exc}") from None
    return b"".join((head, a, b, _pack(_TASK_FIELDS, flat, count, "task"), *payloads))


def foreign_version(data: bytes | bytearray | memoryview) -> int | None:
    """The version of a wloadctl broker message of another release than this one (None: this release's, or
    not a wloadctl broker message at all).

    Such a message is sound for a process of its release: one that cannot read it leaves it to them.
    """
    if len(data) < HEAD.size:
        return None
    magic, version = HEAD.unpack_from(data)[:2]
    return version if magic == MAGIC and version != VERSION else None


def _open(data: bytes | bytearray | memoryview, kind: int) -> tuple[int, int, str, str, int]:
    """Check a batch's header; return (epoch, count, first name, run id, body offset)."""
    size = len(data)
    what = _KIND_NAMES[kind]
    if size < HEAD.size:
        raise ProtocolError(f"{what} message of {size} bytes is shorter than the {HEAD.size}-byte header")
    magic, version, got, epoch, count, la, lb, _ = HEAD.unpack_from(data)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {bytes(magic)!r} (expected {MAGIC!r}): not a wloadctl broker message")
    if version != VERSION:
        raise ProtocolError(
            f"broker message version {version} (expected {VERSION})",
            hint="schedulers and agents must come from the same wloadctl release",
        )
    if got != kind:
        raise ProtocolError(f"{_KIND_NAMES.get(got, f'unknown kind {got}')} message where {what} was expected")
    end = HEAD.size + la + lb
    if size < end:
        raise ProtocolError(f"{what} message of {size} bytes is cut short in its names")
    view = memoryview(data)
    try:
        first = str(view[HEAD.size : HEAD.size + la], "utf-8")
        run = str(view[HEAD.size + la : end], "utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"{what} message names are not UTF-8") from None
    return epoch, count, first, run, end


def _areas(view: memoryview, pos: int, lengths: list[int], offsets: list[int], what: str) -> None:
    """Check that offsets are the running sum of lengths and the data area is exactly full."""
    expected = list(accumulate(lengths, initial=0))
    if offsets != expected[:-1] or len(view) - pos != expected[-1]:
        raise ProtocolError(
            f"{what} message of {len(view)} bytes: its records point outside their data area "
            f"({len(view) - pos} bytes after the records, {expected[-1]} declared)"
        )


def decode_dispatch(data: bytes | bytearray | memoryview) -> DispatchBatch:
    """Unpack a dispatch message.

    Raises:
        ProtocolError: On bad magic, version, kind, or sizes that do not add up.
    """
    epoch, count, scheduler, run, pos = _open(data, KIND_DISPATCH)
    view = memoryview(data)
    end = pos + count * TASK.size
    if len(view) < end:
        raise ProtocolError(
            f"dispatch message of {len(view)} bytes declares {count} tasks (at least {end} bytes expected)"
        )
    tasks = list(map(_new_task, TASK.iter_unpack(view[pos:end])))
    offsets = [t[5] for t in tasks]
    lengths = [t[6] for t in tasks]
    _areas(view, end, lengths, offsets, "dispatch")
    blob = bytes(view[end:])
    payloads = [blob[o : o + n] for o, n in zip(offsets, lengths, strict=True)]
    return DispatchBatch(epoch, scheduler, run, tasks, payloads)


def split_dispatch(
    epoch: int,
    scheduler: str,
    run: str,
    tasks: Sequence[TaskRecord],
    payloads: Sequence[bytes],
    max_bytes: int = MAX_MESSAGE,
) -> list[bytes]:
    """Pack tasks into as few dispatch messages as keep each within `max_bytes`.

    Raises:
        ProtocolError: If a single task with its payload does not fit `max_bytes`.
    """
    fixed = HEAD.size + len(scheduler.encode()) + len(run.encode())
    return [
        encode_dispatch(epoch, scheduler, run, tasks[i:j], payloads[i:j])
        for i, j in _cuts([TASK.size + len(p) for p in payloads], fixed, max_bytes, "task")
    ]


def _cuts(sizes: list[int], fixed: int, max_bytes: int, what: str) -> list[tuple[int, int]]:
    """Greedy ranges [i, j) whose sizes plus `fixed` stay within `max_bytes`."""
    cuts: list[tuple[int, int]] = []
    start, total = 0, fixed
    for i, n in enumerate(sizes):
        if fixed + n > max_bytes:
            raise ProtocolError(
                f"one {what} needs {fixed + n} bytes, more than the {max_bytes}-byte message limit",
                hint="shorten its command or environment, or raise the broker's max_payload",
            )
        if total + n > max_bytes:
            cuts.append((start, i))
            start, total = i, fixed
        total += n
    if start < len(sizes) or not sizes:
        cuts.append((start, len(sizes)))
    return cuts


def encode_results(agent: str, run: str, entries: Sequence[ResultEntry]) -> bytes:
    """Pack results, their output tails and job results into one message.

    Args:
        agent: Name of the sending agent.
        run: Run id.
        entries: The results; each record's tail fields are replaced (FLAG_TAIL set
            exactly when the tail is not empty).

    Returns:
        The message bytes (see `split_results` to keep under a size limit).

    Raises:
        ProtocolError: If a field does not fit its layout.
    """
    count = len(entries)
    a, b = _names(agent, run, "agent")
    tails = [e[1] for e in entries]
    results = [e[2] for e in entries]
    tail_lengths = list(map(len, tails))
    result_lengths = [NO_RESULT if r is None else len(r) for r in results]
    # The data area holds tail 0, result 0, tail 1, result 1, ...
    chunks: list[bytes] = [b""] * (2 * count)
    chunks[0::2] = tails
    chunks[1::2] = [r or b"" for r in results]
    lengths = [0] * (2 * count)
    lengths[0::2] = tail_lengths
    lengths[1::2] = [0 if n == NO_RESULT else n for n in result_lengths]
    positions = list(accumulate(lengths, initial=0))
    flat: list[int | float] = list(chain.from_iterable(e[0] for e in entries))
    if len(flat) != count * 13:
        raise ProtocolError("a result is not a 13-field ResultRecord")
    flat[1::13] = [(e[0].flags | FLAG_TAIL) if e[1] else (e[0].flags & ~FLAG_TAIL) for e in entries]
    flat[11::13] = positions[0:-1:2]
    flat[12::13] = tail_lengths
    extra: list[int | float] = [0] * (2 * count)
    extra[0::2] = positions[1::2]
    extra[1::2] = result_lengths
    try:
        head = HEAD.pack(MAGIC, VERSION, KIND_RESULTS, 0, count, len(a), len(b), 0)
    except struct.error as exc:
        raise ProtocolError(f"results header does not fit the layout: {exc}") from None
    return b"".join(
        (head, a, b, _pack(_RESULT_FIELDS, flat, count, "result"), _pack("II", extra, count, "result"), *chunks)
    )


def decode_results(data: bytes | bytearray | memoryview) -> ResultBatch:
    """Unpack a results message.

    Raises:
        ProtocolError: On bad magic, version, kind, or sizes that do not add up.
    """
    _, count, agent, run, pos = _open(data, KIND_RESULTS)
    view = memoryview(data)
    mid = pos + count * RESULT.size
    end = mid + count * EXTRA.size
    if len(view) < end:
        raise ProtocolError(
            f"results message of {len(view)} bytes declares {count} results (at least {end} bytes expected)"
        )
    records = list(map(_new_result, RESULT.iter_unpack(view[pos:mid])))
    extra = EXTRA.iter_unpack(view[mid:end])
    result_offsets, result_lengths = (list(c) for c in zip(*extra, strict=True)) if count else ([], [])
    tail_offsets = [r[11] for r in records]
    tail_lengths = [r[12] for r in records]
    offsets = [0] * (2 * count)
    offsets[0::2] = tail_offsets
    offsets[1::2] = result_offsets
    lengths = [0] * (2 * count)
    lengths[0::2] = tail_lengths
    lengths[1::2] = [0 if n == NO_RESULT else n for n in result_lengths]
    _areas(view, end, lengths, offsets, "results")
    if end == len(view):  # no tails and no job results: the common case of a no-op batch
        tails: list[bytes] = [b""] * count
        results: list[bytes | None] = [None if n == NO_RESULT else b"" for n in result_lengths]
    else:
        blob = bytes(view[end:])
        tails = [blob[o : o + n] for o, n in zip(tail_offsets, tail_lengths, strict=True)]
        results = [
            None if n == NO_RESULT else blob[o : o + n] for o, n in zip(result_offsets, result_lengths, strict=True)
        ]
    entries = list(map(_new_entry, zip(records, tails, results, strict=True)))
    return ResultBatch(agent, run, entries)


def split_results(agent: str, run: str, entries: Sequence[ResultEntry], max_bytes: int = MAX_MESSAGE) -> list[bytes]:
    """Pack results into as few messages as keep each within `max_bytes`.

    Raises:
        ProtocolError: If a single result with its tail and job result does not fit.
    """
    fixed = HEAD.size + len(agent.encode()) + len(run.encode())
    sizes = [RESULT.size + EXTRA.size + len(e[1]) + len(e[2] or b"") for e in entries]
    return [encode_results(agent, run, entries[i:j]) for i, j in _cuts(sizes, fixed, max_bytes, "result")]
