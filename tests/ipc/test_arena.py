"""The payload arena: allocation, wrap-around, out-of-order release, stale offsets."""

from __future__ import annotations

import random

import pytest
from ipc_fixtures import IpcTracker

from wloadctl.errors import ProtocolError, TransportError
from wloadctl.ipc import SegmentBackend
from wloadctl.ipc.memory import MemorySegment
from wloadctl.ipc.protocol import SEGMENT_DATA, TASK_SHELL, TaskRecord
from wloadctl.ipc.shm import PayloadArena, Segment, StateBoard


@pytest.fixture(params=[Segment, MemorySegment], ids=["posix", "memory"])
def backend(request: pytest.FixtureRequest) -> SegmentBackend:
    """The segment implementation under test."""
    chosen: SegmentBackend = request.param
    return chosen


def arena(ipc: IpcTracker, backend: SegmentBackend, capacity: int) -> PayloadArena:
    """A tracked arena with `capacity` bytes for entries."""
    return ipc.track(
        PayloadArena.create(ipc.name("arena"), SEGMENT_DATA + capacity, backend=backend)
    )


def test_put_then_get_from_another_handle(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    writer = arena(ipc, backend, 4096)
    reader = ipc.track(PayloadArena.open(writer.segment.name, backend=backend))
    first = writer.put(b'{"j":"a"}')
    second = writer.put(b"")
    third = writer.put(b"x" * 100)
    assert (first, second, third) == (0, 40, 64)  # 24-byte header, 8-byte aligned
    assert reader.get(0, 9) == b'{"j":"a"}'
    assert reader.get(40, 0) == b""
    assert reader.get(64, 100) == b"x" * 100
    assert writer.live == 3 and writer.used == 40 + 24 + 128


def test_full_ring_returns_none_then_reuses_released_space(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    a = arena(ipc, backend, 256)
    offsets = [a.put(bytes(40)) for _ in range(4)]  # 64 bytes each
    assert offsets == [0, 64, 128, 192]
    assert a.put(b"") is None
    a.release(0)
    assert a.put(bytes(40)) == 0


def test_wrap_around_never_splits_a_payload(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    a = arena(ipc, backend, 256)
    assert [a.put(bytes(56)) for _ in range(3)] == [0, 80, 160]  # 80 bytes each
    a.release(0)
    # 16 bytes remain at the end: a 40-byte entry goes to the start instead.
    assert a.put(bytes(16)) == 0
    assert a.put(bytes(16)) == 40
    assert a.put(bytes(16)) is None  # 40 + 40 > 80 (the oldest live entry starts at 80)
    a.release(80)
    a.release(160)
    assert a.put(bytes(100)) == 80
    assert a.get(0, 16) == bytes(16)


def test_out_of_order_release_reclaims_when_the_oldest_goes(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    a = arena(ipc, backend, 192)
    assert [a.put(bytes(40)) for _ in range(3)] == [0, 64, 128]
    a.release(64)
    a.release(128)
    assert a.put(bytes(40)) is None  # the oldest is still held
    assert a.used == 192
    a.release(0)
    assert a.used == 0 and a.live == 0
    assert a.put(bytes(168)) == 0  # an empty ring restarts at 0 with all its room


def test_double_or_unknown_release_is_refused(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    a = arena(ipc, backend, 256)
    a.put(b"a")
    a.put(b"b")
    a.release(32)
    with pytest.raises(TransportError, match="offset 32 is not a live allocation"):
        a.release(32)
    with pytest.raises(TransportError, match="offset 5 is not a live allocation"):
        a.release(5)


def test_payload_larger_than_the_arena_is_an_error(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    a = arena(ipc, backend, 256)
    assert a.put(bytes(232)) == 0
    a.release(0)
    with pytest.raises(TransportError, match="larger than payload arena"):
        a.put(bytes(233))


def test_stale_record_is_detected(ipc: IpcTracker, backend: SegmentBackend) -> None:
    a = arena(ipc, backend, 256)
    data = b"command of job one"
    old = TaskRecord(1, 1, TASK_SHELL, 0, 4, 0, len(data))
    assert a.put(data, task=1, attempt=1, epoch=4) == old.offset
    assert a.get_for(old) == data
    a.release(old.offset)
    # A payload of the same length for another task now sits at the same offset.
    assert a.put(b"command of job two", task=2, attempt=1, epoch=4) == old.offset
    with pytest.raises(ProtocolError, match="found task 2 attempt 1 epoch 4"):
        a.get_for(old)
    with pytest.raises(ProtocolError, match="it was overwritten"):
        a.get(old.offset, old.length, epoch=3)
    with pytest.raises(ProtocolError, match="18 bytes"):
        a.get(old.offset, old.length - 1)


def test_torn_payload_is_detected(ipc: IpcTracker, backend: SegmentBackend) -> None:
    a = arena(ipc, backend, 256)
    offset = a.put(b"abcdef")
    assert offset is not None
    a.segment.buf[SEGMENT_DATA + offset + 24] = ord("X")
    with pytest.raises(ProtocolError, match="overwritten"):
        a.get(offset, 6)


def test_key_out_of_range_is_refused(ipc: IpcTracker, backend: SegmentBackend) -> None:
    a = arena(ipc, backend, 256)
    with pytest.raises(ProtocolError, match="arena key of task 1"):
        a.put(b"x", task=1, attempt=70_000)
    assert a.live == 0


@pytest.mark.parametrize(("offset", "length"), [(-8, 1), (0, 249), (250, 0)])
def test_range_outside_the_arena_is_refused(
    ipc: IpcTracker, backend: SegmentBackend, offset: int, length: int
) -> None:
    a = arena(ipc, backend, 256)
    with pytest.raises(ProtocolError, match="lies outside payload arena"):
        a.get(offset, length)


def test_open_refuses_another_kind_of_segment(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    board = ipc.track(StateBoard.create(ipc.name("board"), 10, backend=backend))
    with pytest.raises(ProtocolError, match="not a payload arena"):
        PayloadArena.open(board.name, backend=backend)


def test_random_puts_and_releases_never_overlap(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    rng = random.Random(7)
    a = arena(ipc, backend, 4096)
    live: dict[int, bytes] = {}
    for _ in range(3000):
        if live and (rng.random() < 0.45 or len(live) > 40):
            victim = rng.choice(list(live))
            assert a.get(victim, len(live[victim])) == live[victim]
            a.release(victim)
            del live[victim]
            continue
        data = rng.randbytes(rng.randrange(0, 300))
        offset = a.put(data)
        if offset is None:
            continue
        end = offset + 24 + len(data)
        assert end <= a.capacity
        for other, held in live.items():
            assert end <= other or other + 24 + len(held) <= offset
        live[offset] = data
    for offset, data in live.items():
        assert a.get(offset, len(data)) == data
