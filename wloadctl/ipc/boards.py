"""Status boards in shared memory: the state board and the executors' heartbeats.

Both use a seqlock: the writer makes the sequence number odd, writes, then makes it even
again; a reader copies the data between two reads of the number and retries unless both
are the same even value. Readers never block the writer and never see a half-written
record.

Without a memory barrier, a reader facing a writer that published back to back got a
torn copy past the sequence check a few times per million reads. The copies are memcpy
calls, which glibc does with fast-string instructions for a few KiB, and x86-64 only
orders those against other memory accesses across a barrier. Python has no barrier
primitive, so `_fence` takes and releases a lock: its atomic read-modify-write
instructions order every earlier load and store before every later one.

A seqlock favours its writer: a writer that publishes back to back, with no pause,
starves readers of a full board (each copy is a few microseconds of cache misses), and
they give up with a TransportError after `READ_TRIES`. Publish once per loop turn, or
less often, not in a tight loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import NamedTuple

from wloadctl.errors import ProtocolError, TransportError
from wloadctl.ipc import SegmentBackend, SegmentLike, SharedBuffer
from wloadctl.ipc.protocol import (
    BOARD_BODY,
    BOARD_BODY_OFFSET,
    BOARD_EPOCH,
    BOARD_PAUSED_AT,
    BOARD_SEQ_OFFSET,
    BOARD_STATES_OFFSET,
    EXECUTOR_BOARD_MAGIC,
    EXECUTOR_SLOT,
    EXECUTOR_SLOT_SIZE,
    SEGMENT_DATA,
    SEQ,
    STATE_BOARD_MAGIC,
    BoardHeader,
    ExecutorSlot,
    pack_board_header,
    pack_executor_slot,
    read_identity,
    unpack_board_header,
    unpack_executor_slot,
    write_identity,
)
from wloadctl.ipc.segment import OnSegment, Segment

READ_TRIES = 1000
"""Attempts at a consistent read (about half a second) before giving up; a writer that
died mid-write would otherwise leave readers spinning forever."""
_SPINS = 20
"""Attempts before a reader starts sleeping between tries."""
_PAUSE = 0.0005
"""Seconds a reader sleeps between later tries (a write takes microseconds)."""
MAX_EXECUTOR_SLOTS = 64
"""Most executors one executor board holds."""


_FENCE_LOCK = threading.Lock()


def _fence() -> None:
    """A full memory barrier (see the module docstring)."""
    with _FENCE_LOCK:
        pass


def _seq_begin(buf: SharedBuffer, offset: int) -> int:
    """Make the sequence number odd; returns the odd value. Survives a writer that died
    mid-write (odd number left behind) by moving to the next odd value."""
    (seq,) = SEQ.unpack_from(buf, offset)
    start = seq + 1 if seq % 2 == 0 else seq + 2
    SEQ.pack_into(buf, offset, start)
    _fence()
    return int(start)


def _seq_end(buf: SharedBuffer, offset: int, start: int) -> None:
    """Make the sequence number even again once the data is written."""
    _fence()
    SEQ.pack_into(buf, offset, start + 1)


def _seq_read(
    buf: SharedBuffer, offset: int, lo: int, hi: int, tries: int, what: str
) -> bytes:
    """Copy buf[lo:hi] consistently with the sequence number at `offset`."""
    for attempt in range(tries):
        (before,) = SEQ.unpack_from(buf, offset)
        if before % 2 == 0:
            _fence()
            data = bytes(buf[lo:hi])
            _fence()
            (after,) = SEQ.unpack_from(buf, offset)
            if after == before:
                return data
        if attempt >= _SPINS:
            time.sleep(_PAUSE)
    raise TransportError(
        f"{what} stayed mid-write over {tries} read attempts",
        hint="its writer may have died mid-write; restart it or run `wloadctl cleanup`",
    )


class _Board(OnSegment):
    """What both boards share: the segment, and how hard a reader tries for a consistent read."""

    def __init__(self, segment: SegmentLike) -> None:
        super().__init__(segment)
        self.read_tries = READ_TRIES
        """Attempts at a consistent read before a TransportError."""


class BoardSnapshot(NamedTuple):
    """A consistent copy of the state board."""

    header: BoardHeader
    """The run-wide header."""
    states: bytes
    """One JobState value per job index, `header.n_jobs` long."""


class StateBoard(_Board):
    """The run's status, written by the active scheduler, read by console and CLI."""

    def __init__(self, segment: SegmentLike) -> None:
        """Attach to an initialised state board segment.

        Raises:
            ProtocolError: If the segment is not a state board of this layout version.
        """
        capacity, _ = read_identity(
            segment.buf, STATE_BOARD_MAGIC, "state board", segment.name
        )
        if BOARD_STATES_OFFSET + capacity > segment.size:
            raise ProtocolError(
                f"state board {segment.name} claims {capacity} jobs but the segment "
                f"holds {segment.size} bytes"
            )
        super().__init__(segment)
        self._capacity = capacity

    @classmethod
    def create(
        cls, name: str, n_jobs: int, *, backend: SegmentBackend = Segment
    ) -> StateBoard:
        """Create a board with one state byte per job (the scheduler does this).

        Raises:
            TransportError: If the segment cannot be created.
        """
        segment = backend.create(name, BOARD_STATES_OFFSET + max(n_jobs, 0))
        write_identity(segment.buf, STATE_BOARD_MAGIC, max(n_jobs, 0), 0)
        return cls(segment)

    @classmethod
    def header_at(cls, name: str) -> BoardHeader | None:
        """The header of the board `name` on this host; None when there is none or it cannot be read."""
        try:
            board = cls.open(name)
        except TransportError:
            return None
        try:
            return board.read_header()
        except TransportError:
            return None
        finally:
            board.close()

    @property
    def capacity(self) -> int:
        """Jobs the board has room for."""
        return self._capacity

    def publish(
        self,
        header: BoardHeader,
        changes: Iterable[tuple[int, int]] | None = None,
        full: bytes | None = None,
    ) -> None:
        """Write the header and job states as one atomic update for readers.

        Args:
            header: The new header.
            changes: (job index, state value) pairs to set.
            full: State bytes from index 0, replacing that many jobs' states (applied
                before `changes`).

        Raises:
            ProtocolError: If the header does not fit or an index is out of range.
        """
        body = pack_board_header(header)
        cap = self._capacity
        if header.n_jobs > cap or (full is not None and len(full) > cap):
            raise ProtocolError(
                f"state board {self.name} has room for {cap} jobs, not "
                f"{max(header.n_jobs, len(full or b''))}"
            )
        buf = self._segment.buf
        start = _seq_begin(buf, BOARD_SEQ_OFFSET)
        try:
            buf[BOARD_BODY_OFFSET : BOARD_BODY_OFFSET + BOARD_BODY.size] = body
            if full is not None:
                buf[BOARD_STATES_OFFSET : BOARD_STATES_OFFSET + len(full)] = full
            if changes is not None:
                for index, state in changes:
                    if not 0 <= index < cap:
                        raise ProtocolError(
                            f"job index {index} is outside state board {self.name} "
                            f"(0..{cap - 1})"
                        )
                    buf[BOARD_STATES_OFFSET + index] = state
        finally:
            # Even on error the number goes even again, or readers would give up.
            _seq_end(buf, BOARD_SEQ_OFFSET, start)

    def read(self) -> BoardSnapshot:
        """A consistent copy of the header and the states of its `n_jobs` jobs.

        Raises:
            TransportError: If no consistent copy could be taken in `read_tries` tries.
        """
        data = _seq_read(
            self._segment.buf,
            BOARD_SEQ_OFFSET,
            BOARD_BODY_OFFSET,
            BOARD_STATES_OFFSET + self._capacity,
            self.read_tries,
            f"state board {self.name}",
        )
        header = unpack_board_header(data)
        skip = BOARD_STATES_OFFSET - BOARD_BODY_OFFSET
        return BoardSnapshot(
            header, data[skip : skip + min(header.n_jobs, self._capacity)]
        )

    def read_header(self) -> BoardHeader:
        """A consistent copy of the header alone (cheap: no state bytes).

        Raises:
            TransportError: If no consistent copy could be taken in `read_tries` tries.
        """
        data = _seq_read(
            self._segment.buf,
            BOARD_SEQ_OFFSET,
            BOARD_BODY_OFFSET,
            BOARD_BODY_OFFSET + BOARD_BODY.size,
            self.read_tries,
            f"state board {self.name}",
        )
        return unpack_board_header(data)


    def read_paused(self) -> int:
        """The header's `paused` code alone (a PAUSE_* code): one byte, read as it is now."""
        return int(self._segment.buf[BOARD_PAUSED_AT])

    def read_epoch(self) -> int:
        """A consistent copy of the header's epoch alone (the cheapest fencing check).

        Raises:
            TransportError: If no consistent copy could be taken in `read_tries` tries.
        """
        data = _seq_read(
            self._segment.buf,
            BOARD_SEQ_OFFSET,
            BOARD_BODY_OFFSET,
            BOARD_BODY_OFFSET + BOARD_EPOCH.size,
            self.read_tries,
            f"state board {self.name}",
        )
        return int(BOARD_EPOCH.unpack(data)[0])


class ExecutorBoard(_Board):
    """One heartbeat slot per executor; each slot is written only by its executor."""

    def __init__(self, segment: SegmentLike) -> None:
        """Attach to an initialised executor board segment.

        Raises:
            ProtocolError: If the segment is not an executor board of this version.
        """
        n_slots, slot_size = read_identity(
            segment.buf, EXECUTOR_BOARD_MAGIC, "executor board", segment.name
        )
        if (
            slot_size != EXECUTOR_SLOT_SIZE
            or SEGMENT_DATA + n_slots * slot_size > segment.size
        ):
            raise ProtocolError(
                f"executor board {segment.name} declares {n_slots} slots of "
                f"{slot_size} bytes (expected {EXECUTOR_SLOT_SIZE}) in "
                f"{segment.size} bytes"
            )
        super().__init__(segment)
        self._n_slots = n_slots

    @classmethod
    def create(
        cls, name: str, n_slots: int, *, backend: SegmentBackend = Segment
    ) -> ExecutorBoard:
        """Create a board with `n_slots` empty slots (the supervisor does this).

        Raises:
            TransportError: If `n_slots` is out of range or the segment cannot be made.
        """
        if not 1 <= n_slots <= MAX_EXECUTOR_SLOTS:
            raise TransportError(
                f"executor board {name}: {n_slots} slots (1 to {MAX_EXECUTOR_SLOTS})"
            )
        segment = backend.create(name, SEGMENT_DATA + n_slots * EXECUTOR_SLOT_SIZE)
        write_identity(segment.buf, EXECUTOR_BOARD_MAGIC, n_slots, EXECUTOR_SLOT_SIZE)
        return cls(segment)

    @property
    def n_slots(self) -> int:
        """Number of slots."""
        return self._n_slots

    def _slot_offset(self, index: int) -> int:
        if not 0 <= index < self._n_slots:
            raise ProtocolError(
                f"executor index {index} is outside executor board {self.name} "
                f"(0..{self._n_slots - 1})"
            )
        return SEGMENT_DATA + index * EXECUTOR_SLOT_SIZE

    def write(self, index: int, slot: ExecutorSlot) -> None:
        """Publish executor `index`'s heartbeat (only that executor calls this).

        Raises:
            ProtocolError: If the index is out of range or a field does not fit.
        """
        offset = self._slot_offset(index)
        body = pack_executor_slot(slot)
        buf = self._segment.buf
        start = _seq_begin(buf, offset)
        buf[offset + SEQ.size : offset + SEQ.size + EXECUTOR_SLOT.size] = body
        _seq_end(buf, offset, start)

    def read(self, index: int) -> ExecutorSlot:
        """A consistent copy of one slot; a never-written slot has pid 0.

        Raises:
            TransportError: If the index is out of range or no consistent copy could be
                taken in `read_tries` tries.
        """
        offset = self._slot_offset(index)
        data = _seq_read(
            self._segment.buf,
            offset,
            offset + SEQ.size,
            offset + SEQ.size + EXECUTOR_SLOT.size,
            self.read_tries,
            f"slot {index} of executor board {self.name}",
        )
        return unpack_executor_slot(data)

    def read_all(self) -> list[ExecutorSlot]:
        """Every slot that reads consistently, in index order.

        A slot whose executor was killed in the middle of writing it stays mid-write
        until a replacement writes it again; it is left out rather than failing every
        reader (the scheduler's health check among them) until then.
        """
        out = []
        for i in range(self._n_slots):
            try:
                out.append(self.read(i))
            except TransportError:
                continue
        return out
