"""The transport contract: what a queue and a shared-memory segment offer.

`mq.MessageQueue` and `segment.Segment` (re-exported by `shm`) implement these over
posix_ipc; `memory.MemoryQueue` and `memory.MemorySegment` implement them in-process for
tests. Importing this package does not import posix_ipc.
"""

from __future__ import annotations

import math
import mmap
import time
from typing import Protocol, TypeAlias

from wloadctl.errors import TransportError

SharedBuffer: TypeAlias = mmap.mmap | bytearray
"""The bytes of a segment: an mmap for a real segment, a bytearray in memory."""

DEFAULT_MAX_MESSAGES = 10
"""Linux's default (and, without CAP_SYS_RESOURCE, maximum) messages per queue."""
DEFAULT_MAX_MESSAGE_SIZE = 8192
"""Linux's default (and, without CAP_SYS_RESOURCE, maximum) bytes per message."""
MAX_WAIT = 3600.0
"""Longest single sleep in a queue wait; longer timeouts loop, as poll() and lock
timeouts overflow on very large values."""


def deadline(timeout: float) -> float:
    """The monotonic time `timeout` seconds from now (negative counts as 0).

    Raises:
        TransportError: If `timeout` is not a finite number: no wait is endless.
    """
    if not math.isfinite(timeout):
        raise TransportError(
            f"queue wait of {timeout} seconds refused", hint="give a finite timeout"
        )
    return time.monotonic() + max(0.0, timeout)


class Queue(Protocol):
    """A bounded message queue whose descriptor can be waited on with select/poll."""

    @property
    def name(self) -> str:
        """The queue's name."""
        ...

    @property
    def fd(self) -> int:
        """Descriptor readable while messages wait and writable while there is room."""
        ...

    @property
    def max_message_size(self) -> int:
        """Largest message the queue accepts, in bytes."""
        ...

    @property
    def current_messages(self) -> int:
        """Messages waiting now."""
        ...

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        ...

    def send_nowait(self, data: bytes, priority: int = 0) -> bool:
        """Send one message; False when the queue is full. Never blocks."""
        ...

    def send(self, data: bytes, timeout: float) -> bool:
        """Send one message, waiting at most `timeout` seconds for room."""
        ...

    def recv_nowait(self) -> bytes | None:
        """Receive one message, or None when the queue is empty. Never blocks."""
        ...

    def recv(self, timeout: float) -> bytes | None:
        """Receive one message, waiting at most `timeout` seconds."""
        ...

    def close(self) -> None:
        """Release this handle (idempotent)."""
        ...

    def unlink(self) -> None:
        """Remove the queue's name; a missing name is not an error."""
        ...


class SegmentLike(Protocol):
    """A named block of shared memory."""

    @property
    def name(self) -> str:
        """The segment's name."""
        ...

    @property
    def size(self) -> int:
        """Size in bytes."""
        ...

    @property
    def buf(self) -> SharedBuffer:
        """The segment's bytes, for struct.pack_into/unpack_from and slicing."""
        ...

    def reserve(self, upto: int) -> bool:
        """Back the first `upto` bytes with memory now; False when there is no room for them."""
        ...

    def close(self) -> None:
        """Unmap this handle (idempotent)."""
        ...

    def unlink(self) -> None:
        """Remove the segment's name; a missing name is not an error."""
        ...


class SegmentBackend(Protocol):
    """How to create or open a segment by name (the real class or the memory twin)."""

    def create(self, name: str, size: int, reserve: int | None = None) -> SegmentLike:
        """Create a new segment of `size` bytes, failing if the name exists; back `reserve` of them (all) now."""
        ...

    def open(self, name: str) -> SegmentLike:
        """Open an existing segment."""
        ...
