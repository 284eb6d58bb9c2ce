"""Output tails in shared memory: the last KiB of each job's output, per executor."""

from __future__ import annotations

import struct
import zlib

from wloadctl.errors import ProtocolError, TransportError
from wloadctl.ipc import SegmentBackend, SegmentLike
from wloadctl.ipc.protocol import (
    SEGMENT_DATA,
    SEQ,
    TAIL_ENTRY,
    TAIL_MAGIC,
    TAIL_MAX,
    read_identity,
    write_identity,
)
from wloadctl.ipc.segment import OnSegment, Segment

DEFAULT_PART_SIZE = 256 * 1024
"""Bytes per executor: about sixty full tails before the oldest is overwritten."""
_ALIGN = 8


class TailRing(OnSegment):
    """Per-executor rings of output tails, one partition per executor index.

    Each executor writes only its own partition, oldest entries overwritten first; the
    partition's write cursor lives in shared memory so a restarted executor carries on
    where its predecessor stopped. Each entry records its task, attempt, length and a
    CRC-32, so a reader holding an old (offset, length) learns that the tail was
    overwritten instead of reading someone else's output.
    """

    def __init__(self, segment: SegmentLike) -> None:
        """Attach to an initialised tail ring segment.

        Raises:
            ProtocolError: If the segment is not a tail ring of this layout version.
        """
        n_parts, part_size = read_identity(
            segment.buf, TAIL_MAGIC, "tail ring", segment.name
        )
        if SEGMENT_DATA + n_parts * part_size > segment.size:
            raise ProtocolError(
                f"tail ring {segment.name} declares {n_parts} partitions of "
                f"{part_size} bytes but the segment holds {segment.size}"
            )
        self._segment = segment
        self._n_parts = n_parts
        self._part_size = part_size

    @classmethod
    def create(
        cls,
        name: str,
        n_executors: int,
        part_size: int = DEFAULT_PART_SIZE,
        *,
        backend: SegmentBackend = Segment,
    ) -> TailRing:
        """Create the ring segment with one partition per executor.

        Args:
            name: Segment name (see `segment_name`).
            n_executors: Partitions to make.
            part_size: Bytes per partition; at least one full tail must fit.
            backend: `Segment` for shared memory, `MemorySegment` for tests.

        Raises:
            TransportError: If a size is out of range or the segment cannot be made.
        """
        smallest = SEQ.size + TAIL_ENTRY.size + TAIL_MAX
        if n_executors < 1 or part_size < smallest or part_size % _ALIGN:
            raise TransportError(
                f"tail ring {name}: {n_executors} partitions of {part_size} bytes",
                hint=f"use at least 1 partition of at least {smallest} bytes, "
                f"a multiple of {_ALIGN}",
            )
        segment = backend.create(name, SEGMENT_DATA + n_executors * part_size)
        write_identity(segment.buf, TAIL_MAGIC, n_executors, part_size)
        return cls(segment)

    @property
    def n_executors(self) -> int:
        """Number of partitions."""
        return self._n_parts

    def write(
        self, executor: int, task: int, attempt: int, data: bytes
    ) -> tuple[int, int]:
        """Store the tail of one attempt's output in `executor`'s partition.

        Args:
            executor: The writer's executor index.
            task: Job index.
            attempt: Attempt number.
            data: Output; only its last TAIL_MAX bytes are kept, less the bytes of a UTF-8
                character the cut leaves without its start.

        Returns:
            (offset, length) to put in the result record; (0, 0) for empty output.

        Raises:
            ProtocolError: If the executor index or a field is out of range.
        """
        if not 0 <= executor < self._n_parts:
            raise ProtocolError(
                f"executor index {executor} is outside tail ring {self._segment.name} "
                f"(0..{self._n_parts - 1})"
            )
        if len(data) > TAIL_MAX:
            data = _whole_characters(bytes(data[-TAIL_MAX:]))
        data = bytes(data)
        if not data:
            return 0, 0
        n = len(data)
        try:
            header = TAIL_ENTRY.pack(task, attempt, 0, n, zlib.crc32(data))
        except struct.error as exc:
            raise ProtocolError(
                f"tail of task {task} does not fit the layout: {exc}"
            ) from None
        buf = self._segment.buf
        part = SEGMENT_DATA + executor * self._part_size
        area = self._part_size - SEQ.size
        need = -(-(TAIL_ENTRY.size + n) // _ALIGN) * _ALIGN
        (cursor,) = SEQ.unpack_from(buf, part)
        if cursor % _ALIGN or cursor + need > area:
            # Wrap (or recover from a cursor a crashed writer left behind).
            cursor = 0
        offset = part + SEQ.size + cursor
        # Blank the header first, so a reader of the entry being overwritten fails its
        # check even if it looks before the new data is complete.
        buf[offset : offset + TAIL_ENTRY.size] = bytes(TAIL_ENTRY.size)
        buf[offset + TAIL_ENTRY.size : offset + TAIL_ENTRY.size + n] = data
        buf[offset : offset + TAIL_ENTRY.size] = header
        SEQ.pack_into(buf, part, cursor + need)
        return offset, n

    def read(self, offset: int, length: int, task: int, attempt: int) -> bytes | None:
        """Read a tail written by `write`, if it is still there.

        Returns:
            The tail, or None if its space was reused since (or is being reused now).

        Raises:
            ProtocolError: If (offset, length) cannot be an entry of this ring.
        """
        if length == 0:
            return b""
        rel = offset - SEGMENT_DATA
        within = rel % self._part_size
        if (
            rel < 0
            or rel // self._part_size >= self._n_parts
            or within < SEQ.size
            or not 0 < length <= TAIL_MAX
            or within + TAIL_ENTRY.size + length > self._part_size
        ):
            raise ProtocolError(
                f"tail at offset {offset} of {length} bytes cannot be an entry of tail "
                f"ring {self._segment.name}"
            )
        buf = self._segment.buf
        got_task, got_attempt, _, got_length, crc = TAIL_ENTRY.unpack_from(buf, offset)
        if (got_task, got_attempt, got_length) != (task, attempt, length):
            return None
        start = offset + TAIL_ENTRY.size
        data = bytes(buf[start : start + length])
        return data if zlib.crc32(data) == crc else None



def _whole_characters(tail: bytes) -> bytes:
    """`tail` without the continuation bytes it starts with: the cut that made it split a UTF-8 character,
    whose rest would read as U+FFFD (at most three bytes are dropped, so output that is not UTF-8 keeps its
    tail)."""
    k = 0
    while k < 3 and k < len(tail) and 0x80 <= tail[k] <= 0xBF:
        k += 1
    return tail[k:]
