"""An agent's book of the tasks it holds reads as the engine's arrays do, for tasks it no longer holds too."""

from __future__ import annotations

from wloadctl.core.events import ExecutorLostEvent, JobAcceptedEvent
from wloadctl.core.states import JobState
from wloadctl.remote.node import Held, NodeBook


def test_a_task_dropped_or_never_taken_reads_as_held_by_nobody() -> None:
    """A pool judging a dead executor reads its record's tasks in the book: one the agent already dropped (it
    ended, or was reported lost as the agent stopped) is in no state, at no attempt, on no executor (a lookup
    of it crashed the agent with KeyError)."""
    book = NodeBook(slots=2)
    book.take(Held(7, "run-1", 3, 1, 1, "j3", "etl"), tier=2)
    book.feed(JobAcceptedEvent(7, 1, 0, 1.0))
    book.started(7)
    assert (book.state[7], book.attempt[7], book.executor[7]) == (JobState.RUNNING, 1, 0)
    book.drop(7)
    for local in (7, 8):
        assert (book.state[local], book.attempt[local], book.executor[local]) == (-1, 0, -1)
    assert 7 not in book.state and book.unaccepted() == () and book.running_count() == 0
    book.feed(ExecutorLostEvent(0, 2.0, "gone"))
    assert book.lost == []


def test_the_agents_reports_of_its_executors_read_as_words() -> None:
    from wloadctl.remote.agent import _pool_words

    # (they were Python dicts: "executor_lost: {'executor': 1, 'reason': ...}")
    assert _pool_words("executor_note", {"text": "executor 0: stopped as asked"}) == "executor 0: stopped as asked"
    assert _pool_words("executor_lost", {"executor": 1, "reason": "no heartbeat for 12.0s (stuck); killed"}) == \
        "executor 1 lost: no heartbeat for 12.0s (stuck); killed"
    assert _pool_words("executor_stopped", {"executor": 0, "reason": "exited with status 0"}) == \
        "executor 0 stopped: exited with status 0"
