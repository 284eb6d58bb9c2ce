"""Reports taken from the response queue in the middle of a turn are applied by the next drain, in order.

The scheduler empties the response queue between the parts of a turn, so the executors can send their
next reports while the turn goes on; what it took waits in memory for the next turn.
"""

from __future__ import annotations

import pytest

from tests.procs.test_payload_lifecycle import Rig, res, rig  # noqa: F401 (the pool over in-memory queues)
from wloadctl.core.events import JobsFinishedEvent
from wloadctl.errors import Fenced
from wloadctl.ipc import protocol as P


def _finished(pool_rig: Rig) -> list[int]:
    """Jobs the pool fed to the engine as ended, in the order fed."""
    return [job for ev in pool_rig.book.fed if isinstance(ev, JobsFinishedEvent) for job, *_ in ev.results]


def test_reports_taken_ahead_free_the_queue_and_are_applied_first_at_the_next_drain(rig: Rig) -> None:  # noqa: F811
    rsp = rig.pool.objs.rsp
    for i in range(12):
        rig.book.queue(i, 1)
    # Given a response queue filled by the executors while the turn goes on
    for i in range(10):
        assert rsp.send_nowait(P.encode_results([res(P.RES_EXITED, 0, i, 1)]))
    assert not rsp.send_nowait(P.encode_results([res(P.RES_EXITED, 0, 10, 1)]))
    # When the turn takes them ahead
    assert rig.pool.take_ahead()
    # Then the queue has room for the next reports, and nothing was fed to the engine yet
    assert rsp.current_messages == 0 and not rig.book.fed
    assert rsp.send_nowait(P.encode_results([res(P.RES_EXITED, 1, 10, 1), res(P.RES_EXITED, 1, 11, 1)]))
    # And the next turn's drain applies every report, those taken ahead first
    rig.pool.drain(rig.book.feed, "turn-2")
    assert _finished(rig) == list(range(12))
    assert not rig.pool.take_ahead() and not rig.pool.early


def test_a_fenced_scheduler_takes_nothing_ahead(rig: Rig) -> None:  # noqa: F811
    rsp = rig.pool.objs.rsp
    rig.book.queue(3, 1)
    assert rsp.send_nowait(P.encode_results([res(P.RES_EXITED, 0, 3, 1)]))

    def fenced() -> None:
        raise Fenced("fenced: another scheduler took over")

    rig.pool.guard = fenced
    with pytest.raises(Fenced):
        rig.pool.take_ahead()
    # The report stays in the queue for the successor (whose sweeper also finds it in the executor's journal)
    assert rsp.current_messages == 1 and not rig.pool.early
