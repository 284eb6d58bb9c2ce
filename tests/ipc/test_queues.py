"""Behaviour shared by the real POSIX queue and its in-memory twin, run against both."""

from __future__ import annotations

import select
import selectors
import threading
import time
from typing import Protocol

import pytest
from ipc_fixtures import IpcTracker

from wloadctl.errors import TransportError
from wloadctl.ipc import Queue
from wloadctl.ipc.memory import MemoryQueue
from wloadctl.ipc.mq import MessageQueue


class QueueClass(Protocol):
    """`MessageQueue` or `MemoryQueue`, as a class."""

    def create(
        self, name: str, max_messages: int = ..., max_message_size: int = ...
    ) -> Queue: ...

    def open(self, name: str) -> Queue: ...


@pytest.fixture(params=[MessageQueue, MemoryQueue], ids=["posix", "memory"])
def kind(request: pytest.FixtureRequest) -> QueueClass:
    """The queue implementation under test."""
    cls: QueueClass = request.param
    return cls


def small(kind: QueueClass, ipc: IpcTracker, max_messages: int = 2) -> Queue:
    """A tracked queue small enough to fill, and cheap on the user's queue quota."""
    return ipc.track(kind.create(ipc.name("req"), max_messages, 128))


def test_send_then_receive_in_order(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc, max_messages=3)
    assert q.max_message_size == 128
    assert q.send_nowait(b"one")
    assert q.send_nowait(b"two")
    assert q.current_messages == 2
    assert q.recv_nowait() == b"one"
    assert q.recv(timeout=0.5) == b"two"
    assert q.current_messages == 0


def test_higher_priority_is_received_first(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc, max_messages=3)
    q.send_nowait(b"low")
    q.send_nowait(b"high", priority=5)
    q.send_nowait(b"low2")
    assert [q.recv_nowait() for _ in range(3)] == [b"high", b"low", b"low2"]


def test_full_queue_refuses_without_blocking(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    assert q.send_nowait(b"a") and q.send_nowait(b"b")
    started = time.monotonic()
    assert q.send_nowait(b"c") is False
    assert q.send(b"c", timeout=0.05) is False
    assert time.monotonic() - started < 2
    assert q.recv_nowait() == b"a"
    assert q.send_nowait(b"c")


def test_empty_queue_returns_none(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    assert q.recv_nowait() is None
    started = time.monotonic()
    assert q.recv(timeout=0.05) is None
    assert 0.04 <= time.monotonic() - started < 2
    assert q.recv(timeout=-1) is None


def test_recv_wakes_when_a_message_arrives(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    sender = kind.open(q.name)
    try:
        timer = threading.Timer(0.05, sender.send_nowait, args=(b"late",))
        timer.start()
        started = time.monotonic()
        assert q.recv(timeout=5) == b"late"
        assert time.monotonic() - started < 2
        timer.join()
    finally:
        sender.close()


def test_send_waits_for_room(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc, max_messages=1)
    q.send_nowait(b"first")
    timer = threading.Timer(0.05, q.recv_nowait)
    timer.start()
    assert q.send(b"second", timeout=5)
    timer.join()
    assert q.recv_nowait() == b"second"


def test_poll_reports_pollin_and_pollout(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    poller = select.poll()
    poller.register(q.fd, select.POLLIN | select.POLLOUT)

    def events() -> int:
        got = dict(poller.poll(0))
        return got.get(q.fd, 0) & (select.POLLIN | select.POLLOUT)

    assert events() == select.POLLOUT  # empty: room, nothing to read
    q.send_nowait(b"a")
    assert events() == select.POLLIN | select.POLLOUT
    q.send_nowait(b"b")
    assert events() == select.POLLIN  # full: no room
    q.recv_nowait()
    assert events() == select.POLLIN | select.POLLOUT
    q.recv_nowait()
    assert events() == select.POLLOUT


def test_selector_and_select_see_readiness(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    with selectors.DefaultSelector() as sel:
        sel.register(q.fd, selectors.EVENT_READ)
        assert sel.select(timeout=0) == []
        q.send_nowait(b"x")
        [(key, mask)] = sel.select(timeout=0)
        assert key.fd == q.fd and mask == selectors.EVENT_READ
    assert select.select([q.fd], [q.fd], [], 0) == ([q.fd], [q.fd], [])
    q.send_nowait(b"y")
    assert select.select([q.fd], [q.fd], [], 0) == ([q.fd], [], [])
    q.recv_nowait()
    q.recv_nowait()


def test_selector_wakes_a_waiting_loop(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    with selectors.DefaultSelector() as sel:
        sel.register(q.fd, selectors.EVENT_READ)
        timer = threading.Timer(0.05, q.send_nowait, args=(b"wake",))
        timer.start()
        assert len(sel.select(timeout=5)) == 1
        timer.join()
    assert q.recv_nowait() == b"wake"


def test_creating_an_existing_name_fails(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    with pytest.raises(TransportError, match="already exists"):
        ipc.track(kind.create(q.name, 2, 128))


def test_opening_a_missing_name_fails(kind: QueueClass, ipc: IpcTracker) -> None:
    with pytest.raises(TransportError, match="does not exist"):
        ipc.track(kind.open(ipc.name("rsp")))


def test_oversized_message_is_refused(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    with pytest.raises(TransportError, match="129 bytes exceeds its 128-byte limit"):
        q.send_nowait(bytes(129))


def test_unlink_keeps_open_handles_working(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    q.unlink()
    q.unlink()  # a missing name is fine
    with pytest.raises(TransportError, match="does not exist"):
        ipc.track(kind.open(q.name))
    assert q.send_nowait(b"still") and q.recv_nowait() == b"still"


def test_closed_handle_refuses_use(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    q.close()
    q.close()
    with pytest.raises(TransportError, match="closed"):
        q.send_nowait(b"x")
    with pytest.raises(TransportError, match="closed"):
        q.recv_nowait()


def test_context_manager_closes(kind: QueueClass, ipc: IpcTracker) -> None:
    q = small(kind, ipc)
    with kind.open(q.name) as other:  # type: ignore[attr-defined]
        other.send_nowait(b"m")
    assert other.closed
    assert q.recv_nowait() == b"m"
