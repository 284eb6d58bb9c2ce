"""Finding and removing what dead runs left behind, and never touching live runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from ipc_fixtures import IpcTracker, leftovers

from wloadctl.ipc.cleanup import MQUEUE_DIR
from wloadctl.ipc.memory import MemoryQueue, unlink_name
from wloadctl.ipc.mq import MessageQueue
from wloadctl.ipc.naming import (
    QUEUE_ROLES,
    ROLE_ARENA,
    ROLE_BOARD,
    ROLE_EXECUTORS,
    ROLE_TAILS,
    SEGMENT_ROLES,
    object_name,
    parse_name,
)
from wloadctl.ipc.shm import (
    BoardHeader,
    ExecutorBoard,
    ExecutorSlot,
    PayloadArena,
    StateBoard,
    TailRing,
    list_objects,
    remove_run_objects,
    run_ids_present,
    run_is_alive,
    stale_runs,
    survey_runs,
)
from wloadctl.procs.health import pid_alive


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def make_run(
    ipc: IpcTracker, scheduler_pid: int, executor_pids: tuple[int, ...] = ()
) -> str:
    """Leave every object of a run behind, closed but not unlinked, as a crash would."""
    run_id = ipc.run_id()
    for role in QUEUE_ROLES:
        MessageQueue.create(ipc.name(role, run_id), 1, 64).close()
    board = StateBoard.create(ipc.name(ROLE_BOARD, run_id), 4)
    board.publish(BoardHeader(run_id=run_id, scheduler_pid=scheduler_pid, n_jobs=4))
    board.close()
    executors = ExecutorBoard.create(ipc.name(ROLE_EXECUTORS, run_id), 2)
    for index, pid in enumerate(executor_pids):
        executors.write(index, ExecutorSlot(executor=index, pid=pid))
    executors.close()
    PayloadArena.create(ipc.name(ROLE_ARENA, run_id), 4096).close()
    TailRing.create(ipc.name(ROLE_TAILS, run_id), 1, 8 + 16 + 4096).close()
    return run_id


def all_labels(run_id: str) -> list[str]:
    """Labels of every object `make_run` creates."""
    queues = [f"mq:{object_name(run_id, role)}" for role in QUEUE_ROLES]
    return queues + [f"shm:{object_name(run_id, role)}" for role in SEGMENT_ROLES]


@pytest.fixture
def scrub(ipc: IpcTracker) -> Iterator[None]:
    """Remove the runs a test leaves on purpose, before the leftover check runs."""
    try:
        yield
    finally:
        for run_id in ipc.run_ids:
            remove_run_objects(run_id)


def test_names_parse_back() -> None:
    name = object_name("eod-1", "req", uid=1000)
    assert name == "/wloadctl.1000.eod-1.req"
    assert parse_name(name) == (1000, "eod-1", "req")
    assert parse_name(name[1:]) == (1000, "eod-1", "req")
    for foreign in (
        "/other.1000.a.req",
        "/wloadctl.x.a.req",
        "/wloadctl.1.a.b.c",
        "sem.x",
    ):
        assert parse_name(foreign) is None


@pytest.mark.usefixtures("scrub")
def test_dead_run_is_found_and_removed(ipc: IpcTracker, dead_pid: int) -> None:
    # Given a run whose scheduler and executor are gone
    run_id = make_run(ipc, scheduler_pid=dead_pid, executor_pids=(dead_pid,))
    # Then it is listed, judged dead, and stale
    assert run_id in run_ids_present()
    labels = [label for label in list_objects() if f".{run_id}." in label]
    expected = all_labels(run_id)
    if not os.path.ismount(MQUEUE_DIR):
        expected = [label for label in expected if label.startswith("shm:")]
    assert sorted(labels) == sorted(expected)
    assert run_is_alive(run_id) is False
    assert run_id in stale_runs(grace=0)
    # When its objects are removed, Then every one goes and nothing is left
    assert sorted(remove_run_objects(run_id)) == sorted(all_labels(run_id))
    assert run_id not in run_ids_present()
    assert remove_run_objects(run_id) == []


@pytest.mark.usefixtures("scrub")
def test_live_scheduler_keeps_a_run(ipc: IpcTracker) -> None:
    run_id = make_run(ipc, scheduler_pid=os.getpid())
    assert run_is_alive(run_id) is True
    assert run_id not in stale_runs(grace=0)


@pytest.mark.usefixtures("scrub")
def test_live_executor_keeps_a_run_whose_scheduler_died(
    ipc: IpcTracker, dead_pid: int
) -> None:
    # Executors keep running jobs while a new scheduler is awaited.
    run_id = make_run(
        ipc, scheduler_pid=dead_pid, executor_pids=(dead_pid, os.getpid())
    )
    assert run_is_alive(run_id) is True
    assert run_id not in stale_runs(grace=0)


@pytest.mark.usefixtures("scrub")
def test_run_without_a_board_is_stale_after_the_grace_period(ipc: IpcTracker) -> None:
    run_id = ipc.run_id()
    MessageQueue.create(ipc.name("req", run_id), 1, 64).close()
    PayloadArena.create(ipc.name(ROLE_ARENA, run_id), 4096).close()
    assert run_is_alive(run_id) is False
    # A run that is starting has objects before its board: fresh ones are spared.
    assert run_id not in stale_runs(grace=60)
    assert run_id in stale_runs(grace=0)


@pytest.mark.usefixtures("scrub")
def test_the_survey_says_why_a_runs_objects_are_kept(ipc: IpcTracker, dead_pid: int) -> None:
    """`cleanup` right after a crash removed nothing and said only "removed 0": the operator saw the queues stay."""
    live = make_run(ipc, scheduler_pid=os.getpid())
    fresh = make_run(ipc, scheduler_pid=dead_pid)
    stale, kept = survey_runs(grace=60)
    assert live not in stale and kept[live] == "a process of the run is alive"
    assert fresh not in stale and kept[fresh].startswith("changed 0s ago, no process of it alive: a run starting "
                                                         "looks so for its first 60s (a cleanup ")
    stale, kept = survey_runs(grace=0)
    assert fresh in stale and fresh not in kept and live in kept


@pytest.mark.usefixtures("scrub")
def test_unreadable_board_makes_a_run_dead(ipc: IpcTracker) -> None:
    run_id = make_run(ipc, scheduler_pid=os.getpid())
    board = StateBoard.open(object_name(run_id, ROLE_BOARD))
    try:
        board.segment.buf[0:4] = b"JUNK"
    finally:
        board.close()
    assert run_is_alive(run_id) is False


def test_stale_runs_asks_the_given_liveness_test(ipc: IpcTracker) -> None:
    run_id = ipc.run_id()
    arena = ipc.track(PayloadArena.create(ipc.name(ROLE_ARENA, run_id), 4096))
    asked: list[str] = []

    def alive(candidate: str) -> bool:
        asked.append(candidate)
        return candidate == run_id

    assert run_id not in stale_runs(alive, grace=0)
    assert run_id in asked
    assert arena.capacity > 0


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(0)
    assert not pid_alive(-5)


def test_zombie_counts_as_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while pid_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pid_alive(child.pid)  # exited, not yet reaped
    finally:
        child.wait()


def test_leftover_check_sees_objects_nobody_cleaned(ipc: IpcTracker) -> None:
    queue_name = ipc.name("req")
    segment_name = ipc.name(ROLE_ARENA)
    memory_name = ipc.name("ctl")
    MessageQueue.create(queue_name, 1, 64).close()
    PayloadArena.create(segment_name, 4096).close()
    MemoryQueue.create(memory_name, 1, 64).close()
    try:
        left = leftovers(ipc)
    finally:
        for run_id in ipc.run_ids:
            remove_run_objects(run_id)
        unlink_name(memory_name)
    assert memory_name in left
    assert f"/dev/shm{segment_name}" in left
    assert f"/dev/mqueue{queue_name}" in left or queue_name in left
    assert leftovers(ipc) == []
