"""The POSIX queue wrapper: names, kernel limits, quota errors, attributes."""

from __future__ import annotations

import os
import resource
import stat

import pytest
from ipc_fixtures import IpcTracker

from wloadctl.errors import TransportError
from wloadctl.ipc.cleanup import MQUEUE_DIR
from wloadctl.ipc.mq import MessageQueue, queue_name, unlink_queue


def test_queue_name_carries_uid_run_and_role() -> None:
    assert (
        queue_name("eod-20240131", "req") == f"/wloadctl.{os.getuid()}.eod-20240131.req"
    )


@pytest.mark.parametrize(
    ("run_id", "role"), [("a/b", "req"), ("a.b", "req"), ("", "req"), ("r", "x y")]
)
def test_queue_name_refuses_characters_posix_or_parsing_cannot_take(
    run_id: str, role: str
) -> None:
    with pytest.raises(TransportError, match="use 1-64 letters"):
        queue_name(run_id, role)


def test_defaults_are_the_kernel_defaults(ipc: IpcTracker) -> None:
    q = ipc.track(MessageQueue.create(ipc.name("req")))
    assert (q.max_messages, q.max_message_size) == (10, 8192)
    other = ipc.track(MessageQueue.open(q.name))
    assert other.max_message_size == 8192
    assert other.fd != q.fd


@pytest.mark.skipif(not os.path.ismount(MQUEUE_DIR), reason="/dev/mqueue not mounted")
def test_queue_is_private_to_its_user(ipc: IpcTracker) -> None:
    q = ipc.track(MessageQueue.create(ipc.name("req"), 1, 64))
    mode = os.stat(MQUEUE_DIR + q.name).st_mode
    assert stat.S_IMODE(mode) & 0o077 == 0


@pytest.mark.parametrize(
    "sizes",
    [{"max_messages": 100_000}, {"max_message_size": 10**8}, {"max_messages": 0}],
)
def test_sizes_beyond_kernel_limits_give_a_hint(
    ipc: IpcTracker, sizes: dict[str, int]
) -> None:
    with pytest.raises(TransportError) as info:
        ipc.track(MessageQueue.create(ipc.name("req"), **sizes))
    assert "size out of range" in str(info.value)
    assert "msg_max" in str(info.value)


def test_exhausted_queue_quota_names_ulimit_and_cleanup(ipc: IpcTracker) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_MSGQUEUE)
    # Given a per-user queue quota too small for any queue
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (1, hard))
    try:
        # When a queue is created
        with pytest.raises(TransportError) as info:
            ipc.track(MessageQueue.create(ipc.name("req"), 1, 64))
    finally:
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (soft, hard))
    # Then the error says which limit and what to do
    message = str(info.value)
    assert "too many message queues for this user (ulimit -q)" in message
    assert "wloadctl cleanup" in message
    assert "\n" not in message


def test_unlink_queue_reports_whether_it_existed(ipc: IpcTracker) -> None:
    name = ipc.name("ctl")
    MessageQueue.create(name, 1, 64).close()
    assert unlink_queue(name) is True
    assert unlink_queue(name) is False


def test_recv_copes_with_competing_readers(ipc: IpcTracker) -> None:
    # Two executors share one request queue: a wake-up may find it empty again.
    q = ipc.track(MessageQueue.create(ipc.name("req"), 2, 64))
    rival = ipc.track(MessageQueue.open(q.name))
    q.send_nowait(b"only")
    assert rival.recv_nowait() == b"only"
    assert q.recv(timeout=0.02) is None
