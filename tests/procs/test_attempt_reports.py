"""Recovery's reading of the executors' journals when a task was handed back and ran on another executor."""

from __future__ import annotations

from pathlib import Path

import pytest

from wloadctl.ipc import protocol as P
from wloadctl.procs.localpool import read_results, result_journals
from wloadctl.procs.recovery import AttemptReports
from wloadctl.procs.resultlog import ResultLog

RUN = "20261202-000000-abcdef"


def rec(kind: int, executor: int, t: float, flags: int = 0) -> P.ResultRecord:
    """A report of job 7, attempt 1, stamped t."""
    return P.ResultRecord(kind, flags, executor, 7, 1, 0, 0, 3, 100 + executor, t, t, 0, 0)


def journal(sd: Path, executor: int, pid: int, records: list[P.ResultRecord]) -> None:
    (sd / "executors").mkdir(parents=True, exist_ok=True)
    log = ResultLog(sd / "executors" / f"{RUN}-{executor}-{pid}.results")
    for r in records:
        log.write(P.encode_results([r]))
    log.close()


def read(sd: Path) -> AttemptReports:
    """The reports as recovery reads them: every journal, in file order."""
    got = AttemptReports()
    for _ex, pid, path in result_journals(sd, RUN):
        for r in read_results(path):
            got.add(pid, r)
    return got


RETURNED = P.FLAG_LOST | P.FLAG_RETURNED


@pytest.mark.parametrize("taker", [0, 1], ids=["ran-on-the-first-journal", "ran-on-the-second-journal"])
def test_an_exit_on_the_executor_that_ran_it_wins_over_the_hand_back_of_the_one_that_took_it_ahead(
        tmp_path: Path, taker: int) -> None:
    giver = 1 - taker
    # Given executor `giver` took the task ahead and handed it back, and `taker` ran it to its end
    journal(tmp_path, giver, 500 + giver, [rec(P.RES_ACCEPTED, giver, 1.0), rec(P.RES_EXITED, giver, 1.1, RETURNED)])
    journal(tmp_path, taker, 500 + taker, [rec(P.RES_ACCEPTED, taker, 1.2), rec(P.RES_STARTED, taker, 1.2),
                                           rec(P.RES_EXITED, taker, 1.2)])
    got = read(tmp_path).of((7, 1))
    # Then recovery sees the real end, from the executor that ran it, whichever journal it read last
    assert sorted(got) == [P.RES_ACCEPTED, P.RES_STARTED, P.RES_EXITED]
    assert {pid for pid, _r in got.values()} == {500 + taker}
    assert not got[P.RES_EXITED][1].flags & P.FLAG_RETURNED


def test_a_task_handed_back_and_taken_by_nobody_is_held_by_no_executor(tmp_path: Path) -> None:
    # (recovery then requeues it as handed back, from AttemptReports.handed_back, and sends it again)
    journal(tmp_path, 0, 500, [rec(P.RES_ACCEPTED, 0, 1.0), rec(P.RES_EXITED, 0, 1.1, RETURNED)])
    journal(tmp_path, 1, 501, [])
    assert read(tmp_path).of((7, 1)) == {}


def test_a_task_handed_back_then_taken_again_by_the_same_executor_is_its_again(tmp_path: Path) -> None:
    journal(tmp_path, 0, 500, [rec(P.RES_ACCEPTED, 0, 1.0), rec(P.RES_EXITED, 0, 1.1, RETURNED),
                               rec(P.RES_ACCEPTED, 0, 1.3), rec(P.RES_STARTED, 0, 1.3)])
    got = read(tmp_path).of((7, 1))
    assert sorted(got) == [P.RES_ACCEPTED, P.RES_STARTED]
    assert got[P.RES_STARTED] == (500, rec(P.RES_STARTED, 0, 1.3))


def test_only_the_journals_of_finished_runs_are_dropped(tmp_path: Path) -> None:
    from wloadctl.procs.localpool import drop_result_journals

    (tmp_path / "executors").mkdir()
    for run, ex in (("20261201-010101-aaaaaa", 0), ("20261201-010101-aaaaaa", 1), ("20261202-020202-bbbbbb", 0)):
        log = ResultLog(tmp_path / "executors" / f"{run}-{ex}-{100 + ex}.results")
        log.write(P.encode_results([rec(P.RES_EXITED, ex, 1.0)]))
        log.close()
    (tmp_path / "executors" / "notes.txt").write_text("not a journal")
    asked: list[str] = []

    def finished(run_id: str) -> bool:
        asked.append(run_id)
        return run_id == "20261201-010101-aaaaaa"

    assert drop_result_journals(tmp_path, finished) == 2
    left = sorted(p.name for p in (tmp_path / "executors").iterdir())
    assert left == ["20261202-020202-bbbbbb-0-100.results", "notes.txt"]
    assert sorted(asked) == ["20261201-010101-aaaaaa", "20261202-020202-bbbbbb"], "one question a run"


def at(kind: int, executor: int, t: float, epoch: int, signal: int = 0) -> P.ResultRecord:
    """A report of job 7, attempt 1, stamped t, of a copy sent in `epoch`."""
    return P.ResultRecord(kind, 0, executor, 7, 1, signal, 128 + signal if signal else 0, epoch, 100 + executor,
                          t, t, 0, 0)


def test_the_end_of_a_copy_stopped_with_the_run_is_not_the_end_of_the_copy_a_resume_sent_again(
        tmp_path: Path) -> None:
    # Given a copy stopped with the run (ended by SIGTERM on an executor that exited with it), and the resume's
    # copy of the same attempt running on a new executor under the next epoch
    journal(tmp_path, 1, 600, [at(P.RES_ACCEPTED, 1, 1.0, 1), at(P.RES_STARTED, 1, 1.0, 1),
                               at(P.RES_EXITED, 1, 1.0, 1, signal=15)])
    journal(tmp_path, 1, 700, [at(P.RES_ACCEPTED, 1, 2.0, 2), at(P.RES_STARTED, 1, 2.0, 2)])
    got = read(tmp_path).of((7, 1))
    # Then recovery sees the running copy, not the stopped one's end
    assert sorted(got) == [P.RES_ACCEPTED, P.RES_STARTED]
    assert {pid for pid, _r in got.values()} == {700}


def test_a_copy_preempted_then_sent_again_to_the_same_executor_is_running_not_ended(tmp_path: Path) -> None:
    # Given a copy preempted (its end: SIGTERM) and the same attempt sent again to the same executor
    journal(tmp_path, 0, 500, [at(P.RES_ACCEPTED, 0, 1.0, 1), at(P.RES_STARTED, 0, 1.0, 1),
                               at(P.RES_EXITED, 0, 1.0, 1, signal=15), at(P.RES_ACCEPTED, 0, 1.5, 1),
                               at(P.RES_STARTED, 0, 1.5, 1)])
    got = read(tmp_path).of((7, 1))
    assert sorted(got) == [P.RES_ACCEPTED, P.RES_STARTED]
    assert got[P.RES_STARTED][1].started == 1.5
