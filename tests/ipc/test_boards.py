"""The state board and executor board: publishing, reading, and torn-read detection."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ipc_fixtures import IpcTracker

from wloadctl.errors import ProtocolError, TransportError
from wloadctl.ipc import SegmentBackend, boards
from wloadctl.ipc import protocol as P
from wloadctl.ipc.memory import MemorySegment
from wloadctl.ipc.protocol import BOARD_SEQ_OFFSET, SEGMENT_DATA, SEQ
from wloadctl.ipc.shm import (
    MAX_EXECUTOR_SLOTS,
    BoardHeader,
    ExecutorBoard,
    ExecutorSlot,
    PayloadArena,
    Segment,
    StateBoard,
)


@pytest.fixture(params=[Segment, MemorySegment], ids=["posix", "memory"])
def backend(request: pytest.FixtureRequest) -> SegmentBackend:
    """The segment implementation under test."""
    chosen: SegmentBackend = request.param
    return chosen


def header(**fields: object) -> BoardHeader:
    """A plausible header with some fields replaced."""
    base = BoardHeader(
        run_id="eod", epoch=1, scheduler_pid=100, n_jobs=5, n_executors=2
    )
    for key, value in fields.items():
        setattr(base, key, value)
    return base


def set_seq(board: StateBoard | ExecutorBoard, offset: int, value: int) -> None:
    """Force a sequence number, as a writer mid-write (odd) or done (even) would."""
    SEQ.pack_into(board.segment.buf, offset, value)


def get_seq(board: StateBoard | ExecutorBoard, offset: int) -> int:
    """The current sequence number at `offset`."""
    (value,) = SEQ.unpack_from(board.segment.buf, offset)
    return int(value)


def test_published_states_and_header_reach_a_reader(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    writer = ipc.track(StateBoard.create(ipc.name("board"), 8, backend=backend))
    reader = ipc.track(StateBoard.open(writer.name, backend=backend))
    assert reader.capacity == 8
    writer.publish(header(counts=(5,)), full=bytes(5))
    writer.publish(header(counts=(3, 1, 0, 1), beat=12.5), changes=[(1, 1), (3, 3)])
    snap = reader.read()
    assert snap.states == bytes([0, 1, 0, 3, 0])
    assert snap.header == header(counts=(3, 1, 0, 1) + (0,) * 12, beat=12.5)
    assert reader.read_header().beat == 12.5
    assert get_seq(writer, BOARD_SEQ_OFFSET) == 4  # two writes, each odd then even


def test_the_paused_byte_read_alone_is_the_headers_paused_code(ipc: IpcTracker, backend: SegmentBackend) -> None:
    writer = ipc.track(StateBoard.create(ipc.name("board"), 8, backend=backend))
    reader = ipc.track(StateBoard.open(writer.name, backend=backend))
    # Every code, beside fields whose bytes would be read instead if the offset were off by one either way.
    for code in range(P.PAUSE_STOPPING + 1):
        writer.publish(header(paused=code, done=True, n_executors=0x0909, epoch=0x07070707))
        assert reader.read_paused() == reader.read_header().paused == code


def test_states_follow_n_jobs(ipc: IpcTracker, backend: SegmentBackend) -> None:
    board = ipc.track(StateBoard.create(ipc.name("board"), 8, backend=backend))
    board.publish(header(n_jobs=8), full=bytes(range(8)))
    board.publish(header(n_jobs=3))
    assert board.read().states == bytes([0, 1, 2])


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"changes": [(8, 1)]}, "job index 8 is outside state board"),
        ({"changes": [(-1, 1)]}, "job index -1 is outside"),
        ({"full": bytes(9)}, "room for 8 jobs, not 9"),
    ],
)
def test_out_of_range_writes_are_refused_and_leave_the_board_readable(
    ipc: IpcTracker, backend: SegmentBackend, kwargs: dict[str, object], fragment: str
) -> None:
    board = ipc.track(StateBoard.create(ipc.name("board"), 8, backend=backend))
    with pytest.raises(ProtocolError, match=fragment):
        board.publish(header(), **kwargs)  # type: ignore[arg-type]
    assert get_seq(board, BOARD_SEQ_OFFSET) % 2 == 0
    board.read()


def test_header_larger_than_the_board_is_refused(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    board = ipc.track(StateBoard.create(ipc.name("board"), 4, backend=backend))
    with pytest.raises(ProtocolError, match="room for 4 jobs, not 5"):
        board.publish(header(n_jobs=5))


def test_reader_gives_up_on_a_writer_stuck_mid_write(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    board = ipc.track(StateBoard.create(ipc.name("board"), 4, backend=backend))
    board.publish(header(n_jobs=4))
    board.read_tries = 30
    set_seq(board, BOARD_SEQ_OFFSET, 3)  # odd: a write in progress that never ends
    with pytest.raises(TransportError, match="stayed mid-write over 30 read attempts"):
        board.read()
    with pytest.raises(TransportError, match="mid-write"):
        board.read_header()


def test_reader_waits_out_a_write_in_progress(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    board = ipc.track(StateBoard.create(ipc.name("board"), 8, backend=backend))
    board.publish(header(epoch=1))
    # Given a writer that began a write (odd sequence) and finishes it shortly
    set_seq(board, BOARD_SEQ_OFFSET, 3)
    board.segment.buf[24] = 2  # first byte of the header body: epoch = 2

    def finish() -> None:
        set_seq(board, BOARD_SEQ_OFFSET, 4)

    timer = threading.Timer(0.01, finish)
    timer.start()
    # When a reader reads meanwhile, Then it sees the finished write, not a torn one
    assert board.read_header().epoch == 2
    timer.join()


def test_reader_retries_when_the_sequence_moves_during_its_copy(
    ipc: IpcTracker, backend: SegmentBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    board = ipc.track(StateBoard.create(ipc.name("board"), 8, backend=backend))
    board.publish(header(epoch=1))
    # The first copy starts at sequence 2 and ends at 4 (a whole write happened during
    # it), so it is discarded; the second copy sees 4 before and after.
    script = iter([2, 4, 4, 4])
    seen: list[int] = []

    class ScriptedSeq:
        size = SEQ.size

        @staticmethod
        def unpack_from(buf: object, offset: int = 0) -> tuple[int]:
            seen.append(next(script))
            return (seen[-1],)

    monkeypatch.setattr(boards, "SEQ", ScriptedSeq)
    assert board.read_header().epoch == 1
    assert seen == [2, 4, 4, 4]


def test_writer_recovers_a_board_left_mid_write(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    board = ipc.track(StateBoard.create(ipc.name("board"), 4, backend=backend))
    set_seq(board, BOARD_SEQ_OFFSET, 7)  # a scheduler died mid-write
    taken_over = ipc.track(StateBoard.open(board.name, backend=backend))
    taken_over.publish(header(epoch=2, n_jobs=4), full=bytes([4, 4, 4, 4]))
    assert get_seq(board, BOARD_SEQ_OFFSET) == 10
    assert board.read() == (header(epoch=2, n_jobs=4), bytes([4, 4, 4, 4]))


WRITER = """
import sys, time
from wloadctl.ipc.shm import BoardHeader, StateBoard
board = StateBoard.open(sys.argv[1])
n, epoch, end = board.capacity, 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    epoch += 1
    board.publish(BoardHeader(n_jobs=n, epoch=epoch), full=bytes([epoch % 12]) * n)
    # A busy scheduler turn: readers need gaps between writes to get a copy through.
    pause = time.perf_counter() + 2e-5
    while time.perf_counter() < pause:
        pass
board.close()
print(epoch)
"""


def test_reader_never_sees_a_torn_snapshot_from_another_process(
    ipc: IpcTracker,
) -> None:
    # Given a scheduler process rewriting every job's state as epoch % 12, fast
    n = 2000
    board = ipc.track(StateBoard.create(ipc.name("board"), n))
    board.publish(header(n_jobs=n, epoch=0), full=bytes(n))
    root = str(Path(boards.__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, board.name, "0.4"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # When a reader copies the board meanwhile
        reads = 0
        while writer.poll() is None:
            snap = board.read()
            # Then every copy is whole: all states match the header's epoch
            whole = bytes([snap.header.epoch % 12]) * n
            assert snap.states == whole, (snap.header.epoch, set(snap.states), reads)
            reads += 1
    finally:
        if writer.poll() is None:
            writer.kill()
        out, _ = writer.communicate()
    assert writer.returncode == 0
    assert int(out) > 100 and reads > 100


def test_open_refuses_a_segment_of_another_kind(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    other = ipc.track(PayloadArena.create(ipc.name("arena"), 4096, backend=backend))
    with pytest.raises(ProtocolError, match="not a state board"):
        StateBoard.open(other.segment.name, backend=backend)
    with pytest.raises(ProtocolError, match="not an executor board"):
        ExecutorBoard.open(other.segment.name, backend=backend)


def slot(index: int, **fields: object) -> ExecutorSlot:
    """A plausible heartbeat with some fields replaced."""
    base = ExecutorSlot(executor=index, pid=1000 + index, state=1, beat=5.0, slots=4)
    for key, value in fields.items():
        setattr(base, key, value)
    return base


def test_executor_slots_are_written_and_read_independently(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    board = ipc.track(ExecutorBoard.create(ipc.name("exec"), 3, backend=backend))
    executor = ipc.track(ExecutorBoard.open(board.name, backend=backend))
    assert executor.n_slots == 3
    executor.write(2, slot(2, running=1, running_tasks=((7, 1),), seen_epoch=3))
    executor.write(0, slot(0))
    assert board.read(2) == slot(2, running=1, running_tasks=((7, 1),), seen_epoch=3)
    slots = board.read_all()
    assert [s.pid for s in slots] == [1000, 0, 1002]  # slot 1 never written
    assert slots[1] == ExecutorSlot()


def test_a_stuck_slot_does_not_hide_the_others(
    ipc: IpcTracker, backend: SegmentBackend
) -> None:
    board = ipc.track(ExecutorBoard.create(ipc.name("exec"), 2, backend=backend))
    board.write(0, slot(0))
    board.write(1, slot(1))
    board.read_tries = 5
    set_seq(board, SEGMENT_DATA + 192, 1)  # slot 1's writer died mid-write
    assert board.read(0) == slot(0)
    with pytest.raises(TransportError, match="slot 1 of executor board"):
        board.read(1)
    board.write(1, slot(1, jobs_done=9))  # the restarted executor recovers its slot
    assert board.read(1).jobs_done == 9


@pytest.mark.parametrize("index", [-1, 3])
def test_executor_index_out_of_range_is_refused(
    ipc: IpcTracker, backend: SegmentBackend, index: int
) -> None:
    board = ipc.track(ExecutorBoard.create(ipc.name("exec"), 3, backend=backend))
    with pytest.raises(ProtocolError, match=f"executor index {index} is outside"):
        board.write(index, slot(0))
    with pytest.raises(ProtocolError, match="outside"):
        board.read(index)


@pytest.mark.parametrize("n_slots", [0, MAX_EXECUTOR_SLOTS + 1])
def test_slot_count_out_of_range_is_refused(
    ipc: IpcTracker, backend: SegmentBackend, n_slots: int
) -> None:
    with pytest.raises(TransportError, match=f"{n_slots} slots"):
        ipc.track(ExecutorBoard.create(ipc.name("exec"), n_slots, backend=backend))


def test_read_all_leaves_out_a_slot_whose_writer_died_mid_write() -> None:
    from wloadctl.ipc.boards import SEQ
    from wloadctl.ipc.memory import MemorySegment
    from wloadctl.ipc.protocol import ExecutorSlot

    board = ExecutorBoard.create("/wloadctl.test.torn.exec", 3, backend=MemorySegment)
    board.read_tries = 5
    for i in range(3):
        board.write(i, ExecutorSlot(executor=i, pid=100 + i, state=1, beat=1.0, load1=0.0, rss_kb=0, running=0,
                                    slots=1, jobs_done=0, seen_epoch=1, seen_scheduler_beat=1.0, running_tasks=[]))
    offset = board._slot_offset(1)
    (seq,) = SEQ.unpack_from(board.segment.buf, offset)
    SEQ.pack_into(board.segment.buf, offset, seq + 1)  # the writer of slot 1 died mid-write
    assert [s.executor for s in board.read_all()] == [0, 2]
    board.write(1, ExecutorSlot(executor=1, pid=201, state=1, beat=2.0, load1=0.0, rss_kb=0, running=0,
                                slots=1, jobs_done=0, seen_epoch=1, seen_scheduler_beat=2.0, running_tasks=[]))
    assert [s.pid for s in board.read_all()] == [100, 201, 102]
