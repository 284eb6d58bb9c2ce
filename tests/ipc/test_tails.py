"""The tail ring: truncation, per-executor partitions, overwrite detection."""

from __future__ import annotations

import pytest
from ipc_fixtures import IpcTracker

from wloadctl.errors import ProtocolError, TransportError
from wloadctl.ipc import SegmentBackend
from wloadctl.ipc.memory import MemorySegment
from wloadctl.ipc.protocol import SEGMENT_DATA
from wloadctl.ipc.shm import TAIL_MAX, Segment, TailRing

SMALLEST = 8 + 16 + TAIL_MAX
"""A partition that holds exactly one full tail."""


@pytest.fixture(params=[Segment, MemorySegment], ids=["posix", "memory"])
def backend(request: pytest.FixtureRequest) -> SegmentBackend:
    """The segment implementation under test."""
    chosen: SegmentBackend = request.param
    return chosen


def ring(
    ipc: IpcTracker, backend: SegmentBackend, n: int = 2, part_size: int = 16384
) -> TailRing:
    """A tracked tail ring."""
    return ipc.track(TailRing.create(ipc.name("tail"), n, part_size, backend=backend))


def test_tail_round_trip_through_another_handle(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    executor = ring(ipc, backend)
    scheduler = ipc.track(TailRing.open(executor.segment.name, backend=backend))
    offset, length = executor.write(1, 42, 2, b"step 3 of 3 done\n")
    assert length == 17
    assert offset == SEGMENT_DATA + 16384 + 8  # partition 1, after its cursor
    assert scheduler.read(offset, length, 42, 2) == b"step 3 of 3 done\n"


def test_only_the_last_4_kib_are_kept(ipc: IpcTracker, backend: SegmentBackend) -> None:
    r = ring(ipc, backend)
    output = b"".join(b"line %05d\n" % i for i in range(1000))
    offset, length = r.write(0, 1, 1, output)
    assert length == TAIL_MAX
    assert r.read(offset, length, 1, 1) == output[-TAIL_MAX:]


def test_empty_output_needs_no_entry(ipc: IpcTracker, backend: SegmentBackend) -> None:
    r = ring(ipc, backend)
    assert r.write(0, 1, 1, b"") == (0, 0)
    assert r.read(0, 0, 1, 1) == b""


def test_overwritten_tail_reads_as_none(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    r = ring(ipc, backend, part_size=SMALLEST)
    first = r.write(0, 1, 1, b"a" * TAIL_MAX)
    assert r.read(*first, 1, 1) == b"a" * TAIL_MAX
    # The partition holds one full tail, so the next write wraps onto the first.
    second = r.write(0, 2, 1, b"b" * TAIL_MAX)
    assert second == first
    assert r.read(*first, 1, 1) is None
    assert r.read(*second, 2, 1) == b"b" * TAIL_MAX


def test_same_task_next_attempt_is_not_mistaken_for_the_old_one(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    r = ring(ipc, backend, part_size=SMALLEST)
    old = r.write(0, 7, 1, b"x" * TAIL_MAX)
    r.write(0, 7, 2, b"y" * TAIL_MAX)
    assert r.read(*old, 7, 1) is None


def test_partially_overwritten_tail_reads_as_none(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    r = ring(ipc, backend, part_size=SMALLEST + 1024)
    small = r.write(0, 1, 1, b"s" * 1000)
    r.write(0, 2, 1, b"t" * 3000)
    # The next entry does not fit before the end, wraps to the start and covers the
    # first one's header and data at a different length.
    r.write(0, 3, 1, b"u" * 2000)
    assert r.read(*small, 1, 1) is None


def test_corrupted_data_reads_as_none(ipc: IpcTracker, backend: SegmentBackend) -> None:
    r = ring(ipc, backend)
    offset, length = r.write(0, 1, 1, b"hello")
    r.segment.buf[offset + 16] = ord("J")
    assert r.read(offset, length, 1, 1) is None


def test_partitions_do_not_disturb_each_other(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    r = ring(ipc, backend, part_size=SMALLEST)
    mine = r.write(0, 1, 1, b"m" * TAIL_MAX)
    r.write(1, 2, 1, b"o" * TAIL_MAX)
    r.write(1, 3, 1, b"p" * TAIL_MAX)
    assert r.read(*mine, 1, 1) == b"m" * TAIL_MAX


def test_restarted_executor_continues_after_its_predecessor(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    r = ring(ipc, backend)
    before = r.write(0, 1, 1, b"before crash")
    restarted = ipc.track(TailRing.open(r.segment.name, backend=backend))
    after = restarted.write(0, 2, 1, b"after restart")
    assert after[0] > before[0]
    assert r.read(*before, 1, 1) == b"before crash"


@pytest.mark.parametrize(
    ("offset", "length"),
    [(0, 5), (SEGMENT_DATA, 5), (SEGMENT_DATA + 8, TAIL_MAX + 1), (10**9, 5)],
)
def test_impossible_ranges_are_refused(
    ipc: IpcTracker, backend: SegmentBackend, offset: int, length: int
) -> None:
    r = ring(ipc, backend)
    with pytest.raises(ProtocolError, match="cannot be an entry of tail ring"):
        r.read(offset, length, 1, 1)


def test_bad_executor_index_and_fields_are_refused(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    r = ring(ipc, backend)
    with pytest.raises(ProtocolError, match="executor index 2 is outside"):
        r.write(2, 1, 1, b"x")
    with pytest.raises(ProtocolError, match="tail of task 1"):
        r.write(0, 1, 2**16, b"x")


def test_partition_too_small_for_one_tail_is_refused(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    with pytest.raises(TransportError, match="partitions of 4096 bytes"):
        ring(ipc, backend, part_size=4096)



@pytest.mark.parametrize("char", ["é", "日", "🚀"])
def test_the_cut_to_4_kib_never_splits_a_utf8_character(
    ipc: IpcTracker, backend: SegmentBackend, char: str
) -> None:
    r = ring(ipc, backend)
    for newlines in range(1, len(char.encode()) + 1):
        # Given output whose last 4 KiB start inside a character (for some of these counts of newlines)
        output = (char * TAIL_MAX).encode() + b"\n" * newlines
        offset, length = r.write(0, 7, newlines, output)
        tail = r.read(offset, length, 7, newlines)
        # Then the tail is whole characters: it reads as UTF-8, and ends as the output does
        assert tail is not None and output.endswith(tail)
        text = tail.decode()
        assert text == char * (len(text) - newlines) + "\n" * newlines
