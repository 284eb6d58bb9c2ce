"""The payload arena: a shared-memory ring of job payloads, scheduler to executors."""

from __future__ import annotations

import struct
import zlib
from collections import deque

from wloadctl.errors import ProtocolError, TransportError
from wloadctl.ipc import SegmentBackend, SegmentLike
from wloadctl.ipc.protocol import (
    ARENA_ENTRY,
    ARENA_MAGIC,
    SEGMENT_DATA,
    TaskRecord,
    read_identity,
    write_identity,
)
from wloadctl.ipc.segment import OnSegment, Segment

DEFAULT_ARENA_SIZE = 16 * 1024 * 1024
"""Default arena segment size: room for tens of thousands of typical payloads."""
_ALIGN = 8
ARENA_STEP = 256 * 1024
"""The arena is backed with memory in steps of this many bytes as its ring first reaches them
(a run that never needs its whole arena never takes it from /dev/shm)."""


class PayloadArena(OnSegment):
    """Payloads written by one scheduler and read by any executor, by offset.

    The writer allocates in a ring: each payload goes after the newest live one, and
    space is reclaimed from the oldest end once the oldest allocations are released.
    Releases may come in any order; a released allocation behind a live one waits for
    it. A payload never straddles the end of the ring: when it does not fit before the
    end, it goes to the start if the oldest allocation leaves room there.

    Each entry carries its length, a CRC-32 and the task, attempt and epoch it was
    written for, so a reader holding a stale offset (for instance a task record sent by
    a previous scheduler) gets a ProtocolError instead of another job's command.

    The allocation bookkeeping lives in the writer's process only. A scheduler that
    takes over a run starts with an empty ring; records from older epochs must be
    rejected by executors before they read the arena.
    """

    def __init__(self, segment: SegmentLike) -> None:
        """Attach to an initialised arena segment.

        Raises:
            ProtocolError: If the segment is not an arena of this layout version.
        """
        capacity, _ = read_identity(
            segment.buf, ARENA_MAGIC, "payload arena", segment.name
        )
        if SEGMENT_DATA + capacity > segment.size:
            raise ProtocolError(
                f"payload arena {segment.name} claims {capacity} bytes but the segment "
                f"holds {segment.size}"
            )
        self._segment = segment
        self._capacity = capacity
        # Offsets of live allocations, oldest first; released ones stay until they reach
        # the front, so each release costs O(1) amortised.
        self._order: deque[int] = deque()
        self._ends: dict[int, int] = {}
        self._released: set[int] = set()
        self._head = 0
        self._used = 0
        self.starved = False
        """The last `put` found no memory in /dev/shm to back its entry (it waits, like a full ring)."""

    @classmethod
    def create(
        cls,
        name: str,
        size: int = DEFAULT_ARENA_SIZE,
        *,
        backend: SegmentBackend = Segment,
    ) -> PayloadArena:
        """Create the arena segment (the writer does this).

        Args:
            name: Segment name (see `segment_name`).
            size: Total segment size in bytes, header included.
            backend: `Segment` for shared memory, `MemorySegment` for tests.

        Raises:
            TransportError: If the segment cannot be created.
        """
        if size < SEGMENT_DATA + ARENA_ENTRY.size:
            raise TransportError(f"payload arena {name} of {size} bytes is too small")
        segment = backend.create(name, size, reserve=SEGMENT_DATA + ARENA_STEP)
        write_identity(segment.buf, ARENA_MAGIC, size - SEGMENT_DATA, 0)
        return cls(segment)

    @property
    def capacity(self) -> int:
        """Bytes available for entries."""
        return self._capacity

    @property
    def used(self) -> int:
        """Bytes held by allocations not yet reclaimed (writer side)."""
        return self._used

    @property
    def live(self) -> int:
        """Allocations not yet released (writer side)."""
        return len(self._ends) - len(self._released)

    def _place(self, need: int) -> int | None:
        if not self._order:
            return 0
        tail, head = self._order[0], self._head
        if head > tail:
            if head + need <= self._capacity:
                return head
            return 0 if need <= tail else None
        return head if head + need <= tail else None

    def put(
        self, data: bytes, *, task: int = 0, attempt: int = 0, epoch: int = 0
    ) -> int | None:
        """Copy a payload into the arena.

        Args:
            data: The encoded payload.
            task: Job index of the task record that will point here.
            attempt: Its attempt number.
            epoch: Its epoch. With task and attempt, lets `get` tell this payload
                from a later one of the same length at the same offset.

        Returns:
            The offset to send in the task record, or None when there is no room now
            (release some allocations and retry), in the ring or in /dev/shm (`starved`).

        Raises:
            TransportError: If the payload can never fit, or a key is out of range.
        """
        try:
            header = ARENA_ENTRY.pack(
                len(data), zlib.crc32(data), task, attempt, 0, epoch, 0
            )
        except struct.error as exc:
            raise ProtocolError(
                f"arena key of task {task} is out of range: {exc}"
            ) from None
        need = -(-(ARENA_ENTRY.size + len(data)) // _ALIGN) * _ALIGN
        if need > self._capacity:
            raise TransportError(
                f"payload of {len(data)} bytes is larger than payload arena "
                f"{self._segment.name} ({self._capacity} bytes)",
                hint="shorten the job's command and environment, or enlarge the arena",
            )
        if not self._order:
            # An empty ring restarts at 0, so the largest payload fits again.
            self._head = 0
        offset = self._place(need)
        if offset is None:
            return None
        base = SEGMENT_DATA + offset
        upto = min(self._segment.size, -(-(base + need) // ARENA_STEP) * ARENA_STEP)
        self.starved = not self._segment.reserve(upto)
        if self.starved:
            return None  # /dev/shm is full: writing here would kill this process (SIGBUS)
        buf = self._segment.buf
        buf[base : base + ARENA_ENTRY.size] = header
        start = base + ARENA_ENTRY.size
        buf[start : start + len(data)] = data
        self._order.append(offset)
        self._ends[offset] = offset + need
        self._head = offset + need
        self._used += need
        return offset

    def release(self, offset: int) -> None:
        """Free the allocation at `offset` (once the executor has the payload).

        Raises:
            TransportError: If `offset` is not a live allocation (a double release).
        """
        if offset not in self._ends or offset in self._released:
            raise TransportError(
                f"offset {offset} is not a live allocation of payload arena "
                f"{self._segment.name}"
            )
        self._released.add(offset)
        order, released = self._order, self._released
        while order and order[0] in released:
            front = order.popleft()
            released.discard(front)
            self._used -= self._ends.pop(front) - front

    def get(
        self,
        offset: int,
        length: int,
        *,
        task: int | None = None,
        attempt: int | None = None,
        epoch: int | None = None,
    ) -> bytes:
        """Read a payload (executor side).

        Args:
            offset: From the task record.
            length: From the task record.
            task: When given, the entry must have been written for this job index.
            attempt: When given, the entry must have been written for this attempt.
            epoch: When given, the entry must have been written in this epoch.

        Returns:
            A copy of the payload.

        Raises:
            ProtocolError: If the range is outside the arena, or the entry there is not
                this payload any more (overwritten after a release or a takeover).
        """
        if (
            offset < 0
            or length < 0
            or offset + ARENA_ENTRY.size + length > self._capacity
        ):
            raise ProtocolError(
                f"payload at offset {offset} of {length} bytes lies outside payload "
                f"arena {self._segment.name} ({self._capacity} bytes)"
            )
        buf = self._segment.buf
        base = SEGMENT_DATA + offset
        stored, crc, got_task, got_attempt, _, got_epoch, _ = ARENA_ENTRY.unpack_from(
            buf, base
        )
        start = base + ARENA_ENTRY.size
        data = bytes(buf[start : start + length])
        if (
            stored != length
            or (task is not None and task != got_task)
            or (attempt is not None and attempt != got_attempt)
            or (epoch is not None and epoch != got_epoch)
            or zlib.crc32(data) != crc
        ):
            raise ProtocolError(
                f"payload at offset {offset} of arena {self._segment.name} is not the "
                f"one its record points at (found task {got_task} attempt "
                f"{got_attempt} epoch {got_epoch}, {stored} bytes): it was overwritten"
            )
        return data

    def get_for(self, record: TaskRecord) -> bytes:
        """Read the payload of a task record, checking it was written for that record.

        Raises:
            ProtocolError: If it lies outside the arena or was overwritten.
        """
        return self.get(
            record.offset,
            record.length,
            task=record.task,
            attempt=record.attempt,
            epoch=record.epoch,
        )

