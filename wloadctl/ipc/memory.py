"""In-process twins of the message queue and shared-memory segment, for tests.

Names live in a process-wide registry, so `create` then `open` by name behaves like the
real objects, including "already exists" and "does not exist" errors. The queue's
descriptor is an eventfd whose counter mirrors the queue: it is non-zero (POLLIN) while
messages wait and saturated (no POLLOUT) while the queue is full, so selectors and poll
see the same readiness as on a real POSIX queue.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque

from wloadctl.errors import TransportError
from wloadctl.ipc import (
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_MAX_MESSAGES,
    MAX_WAIT,
    deadline,
)
from wloadctl.ipc.handles import Named

_EVENTFD_FULL = 0xFFFFFFFFFFFFFFFE
"""The largest eventfd counter: at this value the descriptor has no room to write."""

_registry_lock = threading.Lock()
_queues: dict[str, _QueueState] = {}
_segments: dict[str, bytearray] = {}


class _QueueState:
    """The shared body of one in-memory queue, referenced by every handle on it."""

    def __init__(self, max_messages: int, max_message_size: int) -> None:
        self.cond = threading.Condition()
        self.messages: deque[tuple[int, int, bytes]] = deque()
        self.max_messages = max_messages
        self.max_message_size = max_message_size
        self.handles = 0
        self.unlinked = False
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.serial = 0

    def sync_fd(self) -> None:
        """Set the eventfd counter to reflect the queue; call with `cond` held."""
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            pass
        n = len(self.messages)
        if n:
            os.eventfd_write(self.fd, _EVENTFD_FULL if n >= self.max_messages else n)


class MemoryQueue(Named):
    """A bounded in-process queue with the interface of `mq.MessageQueue`."""

    def __init__(self, name: str, state: _QueueState) -> None:
        """Wrap a registry entry; use `create` or `open` instead."""
        self._name = name
        self._state: _QueueState | None = state
        with state.cond:
            state.handles += 1

    @classmethod
    def create(
        cls,
        name: str,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ) -> MemoryQueue:
        """Create a queue; fails like the real one if the name exists.

        Raises:
            TransportError: If the name exists or a size is not positive.
        """
        if max_messages < 1 or max_message_size < 1:
            raise TransportError(
                f"cannot create message queue {name}: size out of range"
            )
        with _registry_lock:
            if name in _queues:
                raise TransportError(
                    f"cannot create message queue {name}: it already exists"
                )
            state = _queues[name] = _QueueState(max_messages, max_message_size)
        return cls(name, state)

    @classmethod
    def open(cls, name: str) -> MemoryQueue:
        """Open an existing queue.

        Raises:
            TransportError: If no queue has that name.
        """
        with _registry_lock:
            state = _queues.get(name)
        if state is None:
            raise TransportError(f"cannot open message queue {name}: it does not exist")
        return cls(name, state)

    def _live(self, action: str) -> _QueueState:
        if self._state is None:
            raise TransportError(
                f"cannot {action} message queue {self._name}: it is closed"
            )
        return self._state

    @property
    def fd(self) -> int:
        """An eventfd: POLLIN while messages wait, POLLOUT while not full."""
        return self._live("query").fd

    @property
    def max_message_size(self) -> int:
        """Largest message in bytes."""
        return self._live("query").max_message_size

    @property
    def max_messages(self) -> int:
        """Capacity in messages."""
        return self._live("query").max_messages

    @property
    def current_messages(self) -> int:
        """Messages waiting now."""
        return len(self._live("query").messages)

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._state is None

    def send_nowait(self, data: bytes, priority: int = 0) -> bool:
        """Send if there is room; False when full. Higher priorities are received first.

        Raises:
            TransportError: If the message is too large or the handle is closed.
        """
        state = self._live("send to")
        if len(data) > state.max_message_size:
            raise TransportError(
                f"cannot send to message queue {self._name}: message of {len(data)} "
                f"bytes exceeds its {state.max_message_size}-byte limit"
            )
        with state.cond:
            if len(state.messages) >= state.max_messages:
                return False
            state.serial += 1
            # Kept sorted by (-priority, arrival), like a POSIX queue.
            entry = (-priority, state.serial, bytes(data))
            msgs = state.messages
            i = len(msgs)
            while i and msgs[i - 1][0] > entry[0]:
                i -= 1
            msgs.insert(i, entry)
            state.sync_fd()
            state.cond.notify_all()
        return True

    def send(self, data: bytes, timeout: float) -> bool:
        """Send, waiting at most `timeout` seconds for room; False if none came."""
        state = self._live("send to")
        end = deadline(timeout)
        while not self.send_nowait(data):
            with state.cond:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return False
                if len(state.messages) >= state.max_messages:
                    state.cond.wait(min(remaining, MAX_WAIT))
        return True

    def recv_nowait(self) -> bytes | None:
        """Receive one message, or None when empty."""
        state = self._live("receive from")
        with state.cond:
            if not state.messages:
                return None
            _, _, data = state.messages.popleft()
            state.sync_fd()
            state.cond.notify_all()
        return data

    def recv(self, timeout: float) -> bytes | None:
        """Receive one message, waiting at most `timeout` seconds; None if none came."""
        state = self._live("receive from")
        end = deadline(timeout)
        while (data := self.recv_nowait()) is None:
            with state.cond:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return None
                if not state.messages:
                    state.cond.wait(min(remaining, MAX_WAIT))
        return data

    def close(self) -> None:
        """Release this handle; the eventfd is closed with the last handle of an
        unlinked queue. Idempotent."""
        state, self._state = self._state, None
        if state is None:
            return
        with state.cond:
            state.handles -= 1
            if state.handles == 0 and state.unlinked:
                os.close(state.fd)

    def unlink(self) -> None:
        """Remove the name; handles keep working. A missing name is fine."""
        with _registry_lock:
            state = _queues.pop(self._name, None)
        if state is not None:
            _retire(state)


class MemorySegment(Named):
    """A named bytearray with the interface of `shm.Segment`."""

    def __init__(self, name: str, data: bytearray) -> None:
        """Wrap a registry entry; use `create` or `open` instead."""
        self._name = name
        self._data: bytearray | None = data
        self._size = len(data)

    @classmethod
    def create(cls, name: str, size: int, reserve: int | None = None) -> MemorySegment:
        """Create a zero-filled segment; fails like the real one if the name exists.

        Raises:
            TransportError: If the name exists or the size is not positive.
        """
        if size <= 0:
            raise TransportError(f"cannot create shared memory {name} of {size} bytes")
        with _registry_lock:
            if name in _segments:
                raise TransportError(
                    f"cannot create shared memory {name}: it already exists"
                )
            data = _segments[name] = bytearray(size)
        return cls(name, data)

    @classmethod
    def open(cls, name: str) -> MemorySegment:
        """Open an existing segment.

        Raises:
            TransportError: If no segment has that name.
        """
        with _registry_lock:
            data = _segments.get(name)
        if data is None:
            raise TransportError(f"cannot open shared memory {name}: it does not exist")
        return cls(name, data)

    @property
    def size(self) -> int:
        """Size in bytes."""
        return self._size

    @property
    def buf(self) -> bytearray:
        """The shared bytearray.

        Raises:
            TransportError: If this handle was closed.
        """
        if self._data is None:
            raise TransportError(f"shared memory {self._name} is closed")
        return self._data

    def reserve(self, upto: int) -> bool:
        """Memory is a bytearray here: always there."""
        return True

    def close(self) -> None:
        """Drop this handle's reference. Idempotent."""
        self._data = None

    def unlink(self) -> None:
        """Remove the name; open handles keep their bytes. A missing name is fine."""
        with _registry_lock:
            _segments.pop(self._name, None)



def registered_names() -> list[str]:
    """Names of in-memory queues and segments that exist now (for teardown checks)."""
    with _registry_lock:
        return sorted([*_queues, *_segments])


def unlink_name(name: str) -> bool:
    """Remove an in-memory queue and segment of that name, as `unlink` on each would.

    Returns:
        True if either existed.
    """
    with _registry_lock:
        state = _queues.pop(name, None)
        segment = _segments.pop(name, None)
    if state is not None:
        _retire(state)
    return state is not None or segment is not None


def _retire(state: _QueueState) -> None:
    """Mark an unlinked queue; its eventfd goes now if no handle holds it."""
    with state.cond:
        state.unlinked = True
        if state.handles == 0:
            os.close(state.fd)
