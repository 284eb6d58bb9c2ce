"""POSIX message queues over posix_ipc: naming, create/open/unlink, I/O with timeout."""

from __future__ import annotations

import math
import os
import resource
import select
import time
from collections.abc import Sequence

import posix_ipc

from wloadctl.errors import TransportError
from wloadctl.ipc import (
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_MAX_MESSAGES,
    MAX_WAIT,
    deadline,
)
from wloadctl.ipc.handles import Named, unlink_posix
from wloadctl.ipc.naming import object_name

_CLEANUP_HINT = "remove stale ones with `wloadctl cleanup`"


def queue_name(run_id: str, role: str) -> str:
    """The POSIX name of a run's queue, e.g. `/wloadctl.1000.eod-20240131.req`.

    Raises:
        TransportError: If the run id or role cannot be part of a name.
    """
    return object_name(run_id, role)


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def _error(name: str, action: str, exc: BaseException) -> TransportError:
    """Turn a posix_ipc failure into a one-line TransportError with a hint."""
    if isinstance(exc, posix_ipc.ExistentialError):
        if action == "create":
            return TransportError(
                f"cannot create message queue {name}: it already exists",
                hint="another run uses this id, or a crashed run left it; "
                + _CLEANUP_HINT,
            )
        return TransportError(
            f"cannot {action} message queue {name}: it does not exist",
            hint="check the run id and that its scheduler is running",
        )
    if isinstance(exc, posix_ipc.PermissionsError):
        return TransportError(
            f"cannot {action} message queue {name}: permission denied",
            hint="queues are private (0600) to the user who created them",
        )
    if isinstance(exc, ValueError):
        return TransportError(
            f"cannot {action} message queue {name}: size out of range ({exc})",
            hint="without privileges Linux allows at most the values in "
            "/proc/sys/fs/mqueue/msg_max and msgsize_max (10 and 8192 by default)",
        )
    if isinstance(exc, OSError) and "maximum number of files" in str(exc):
        # posix_ipc reports EMFILE as "too many open files" with no errno, but mq_open
        # also returns EMFILE when the user's RLIMIT_MSGQUEUE byte quota is used up,
        # which is by far the likelier cause; tell them apart by counting descriptors.
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and _open_fds() >= soft - 1:
            return TransportError(
                f"cannot {action} message queue {name}: too many open files",
                hint=f"raise `ulimit -n` (now {soft})",
            )
        return TransportError(
            f"cannot {action} message queue {name}: too many message queues for this "
            "user (ulimit -q)",
            hint=_CLEANUP_HINT,
        )
    if isinstance(exc, OSError) and "space" in str(exc).lower():
        return TransportError(
            f"cannot {action} message queue {name}: the system-wide queue limit is "
            "reached (/proc/sys/fs/mqueue/queues_max)",
            hint=_CLEANUP_HINT,
        )
    return TransportError(f"cannot {action} message queue {name}: {exc}")


class MessageQueue(Named):
    """A handle on a POSIX message queue, used without ever blocking indefinitely.

    The queue descriptor is put in non-blocking mode: sends and receives either happen
    now or report full/empty, and waits go through poll() on the descriptor, whose
    timeout runs on the monotonic clock (mq_timedreceive's runs on the wall clock).
    """

    def __init__(self, name: str, mq: posix_ipc.MessageQueue) -> None:
        """Wrap an open posix_ipc queue; use `create` or `open` instead."""
        self._name = name
        self._mq: posix_ipc.MessageQueue | None = mq
        self._max_message_size = int(mq.max_message_size)
        self._fd = int(mq.mqd)
        mq.block = False
        self._readable = select.poll()
        self._readable.register(self._fd, select.POLLIN)
        self._writable = select.poll()
        self._writable.register(self._fd, select.POLLOUT)

    @classmethod
    def create(
        cls,
        name: str,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ) -> MessageQueue:
        """Create a new queue, private to this user (mode 0600).

        Args:
            name: A POSIX name (see `queue_name`).
            max_messages: Capacity in messages.
            max_message_size: Largest message in bytes.

        Returns:
            The open queue, readable and writable.

        Raises:
            TransportError: If the name exists, the sizes exceed the kernel's limits, or
                the user's queue quota is used up.
        """
        try:
            mq = posix_ipc.MessageQueue(
                name,
                posix_ipc.O_CREX,
                mode=0o600,
                max_messages=max_messages,
                max_message_size=max_message_size,
            )
        except (posix_ipc.Error, OSError, ValueError) as exc:
            raise _error(name, "create", exc) from None
        return cls(name, mq)

    @classmethod
    def open(cls, name: str) -> MessageQueue:
        """Open an existing queue for reading and writing.

        Raises:
            TransportError: If it does not exist or belongs to another user.
        """
        try:
            mq = posix_ipc.MessageQueue(name)
        except (posix_ipc.Error, OSError, ValueError) as exc:
            raise _error(name, "open", exc) from None
        return cls(name, mq)

    @property
    def fd(self) -> int:
        """The queue descriptor: POLLIN while messages wait, POLLOUT while not full."""
        return self._fd

    @property
    def max_message_size(self) -> int:
        """Largest message the queue accepts, in bytes."""
        return self._max_message_size

    @property
    def max_messages(self) -> int:
        """Capacity in messages."""
        return int(self._live("query").max_messages)

    @property
    def current_messages(self) -> int:
        """Messages waiting now."""
        return int(self._live("query").current_messages)

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._mq is None

    def _live(self, action: str) -> posix_ipc.MessageQueue:
        if self._mq is None:
            raise TransportError(
                f"cannot {action} message queue {self._name}: it is closed"
            )
        return self._mq

    def send_nowait(self, data: bytes, priority: int = 0) -> bool:
        """Send one message if there is room now.

        Args:
            data: At most `max_message_size` bytes.
            priority: Higher priorities are received first.

        Returns:
            True if sent, False if the queue is full.

        Raises:
            TransportError: If the message is too large or the queue is unusable.
        """
        mq = self._live("send to")
        if len(data) > self._max_message_size:
            raise TransportError(
                f"cannot send to message queue {self._name}: message of {len(data)} "
                f"bytes exceeds its {self._max_message_size}-byte limit",
                hint="send fewer records per message",
            )
        try:
            mq.send(data, priority=priority)
        except posix_ipc.BusyError:
            return False
        except posix_ipc.SignalError:
            return False
        except (posix_ipc.Error, OSError, ValueError) as exc:
            raise _error(self._name, "send to", exc) from None
        return True

    def send(self, data: bytes, timeout: float) -> bool:
        """Send one message, waiting at most `timeout` seconds for room.

        Returns:
            True if sent, False if the queue stayed full.

        Raises:
            TransportError: If the message is too large or the queue is unusable.
        """
        end = deadline(timeout)
        while True:
            if self.send_nowait(data):
                return True
            remaining = end - time.monotonic()
            if remaining <= 0:
                return False
            self._writable.poll(math.ceil(min(remaining, MAX_WAIT) * 1000))

    def recv_nowait(self) -> bytes | None:
        """Receive one message if one waits now.

        Returns:
            The message, or None when the queue is empty.

        Raises:
            TransportError: If the queue is unusable.
        """
        mq = self._live("receive from")
        try:
            data, _ = mq.receive()
        except (posix_ipc.BusyError, posix_ipc.SignalError):
            return None
        except (posix_ipc.Error, OSError, ValueError) as exc:
            raise _error(self._name, "receive from", exc) from None
        return bytes(data)

    def recv(self, timeout: float) -> bytes | None:
        """Receive one message, waiting at most `timeout` seconds.

        Several executors may wait on one queue, so a wake-up can find it empty again;
        the wait then goes on until the deadline.

        Returns:
            The message, or None if none came in time.

        Raises:
            TransportError: If the queue is unusable.
        """
        end = deadline(timeout)
        while True:
            data = self.recv_nowait()
            if data is not None:
                return data
            remaining = end - time.monotonic()
            if remaining <= 0:
                return None
            self._readable.poll(math.ceil(min(remaining, MAX_WAIT) * 1000))

    def close(self) -> None:
        """Close this handle; the queue counts against the user's quota until every
        handle is closed, so close even after unlink. Idempotent."""
        mq, self._mq = self._mq, None
        if mq is not None:
            try:
                mq.close()
            except posix_ipc.Error as exc:
                raise _error(self._name, "close", exc) from None

    def unlink(self) -> None:
        """Remove the queue's name; open handles keep working. Missing is fine."""
        unlink_queue(self._name)

    def __repr__(self) -> str:
        return f"MessageQueue({self._name!r}{', closed' if self.closed else ''})"


def unlink_queue(name: str) -> bool:
    """Remove a queue by name.

    Returns:
        True if it existed, False if it did not.

    Raises:
        TransportError: If it exists but may not be removed by this user.
    """
    return unlink_posix(name, posix_ipc.unlink_message_queue, _error)


MSG_HEADER = 48
"""Bytes the kernel keeps per message slot beside its text (struct msg_msg on 64-bit Linux)."""
TREE_NODE = 48
"""Bytes per priority node of a queue (struct posix_msg_tree_node on 64-bit Linux)."""
MQ_PRIO_MAX = 32768
"""Priorities a queue may hold nodes for."""


def queue_charge(max_messages: int, max_message_size: int) -> int:
    """Bytes a queue of this shape counts against its owner's RLIMIT_MSGQUEUE (`ulimit -q`).

    The kernel charges the whole capacity at creation, empty or not (ipc/mqueue.c:
    message texts, one header per slot, one priority node per slot up to MQ_PRIO_MAX).
    """
    return (max_messages * (max_message_size + MSG_HEADER)
            + min(max_messages, MQ_PRIO_MAX) * TREE_NODE)


def queues_fit(shapes: Sequence[tuple[int, int]], run_id: str) -> bool:
    """Whether queues of these (max_messages, max_message_size) shapes can all be made now.

    The kernel answers: each is made under the run's name with a probe role, its name removed at once,
    and all are closed before returning, so nothing stays (a crash in between leaves names `cleanup`
    finds). Its count of the user's quota holds queues no listing shows: removed ones a process still
    has open, and those of another IPC namespace.

    Raises:
        TransportError: A failure other than the quota (a name taken, a size out of range, too many
            open files).
    """
    made: list[posix_ipc.MessageQueue] = []
    try:
        for i, (messages, size) in enumerate(shapes):
            name = object_name(run_id, f"probe{i}")
            try:
                mq = posix_ipc.MessageQueue(name, posix_ipc.O_CREX, mode=0o600,
                                            max_messages=messages, max_message_size=size)
            except (posix_ipc.Error, OSError, ValueError) as exc:
                err = _error(name, "create", exc)
                if "(ulimit -q)" in err.message:
                    return False
                raise err from None
            made.append(mq)
            mq.unlink()
    finally:
        for mq in made:
            mq.close()
    return True


def queue_shape(name: str) -> tuple[int, int] | None:
    """(max_messages, max_message_size) of an existing queue, or None when it is gone or not ours.

    Opening a queue only reads its attributes: nothing is sent, received or charged.
    """
    try:
        mq = posix_ipc.MessageQueue(name, 0)
    except (posix_ipc.Error, OSError, ValueError):
        return None
    try:
        return int(mq.max_messages), int(mq.max_message_size)
    finally:
        mq.close()
