"""The executors' results journal and the event log on a full disk: nothing torn, nothing lost once space returns."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import types
from pathlib import Path

import pytest

from wloadctl.core.states import JobState
from wloadctl.ipc import protocol as P
from wloadctl.procs import eventlog, resultlog
from wloadctl.procs.localpool import read_results
from wloadctl.procs.resultlog import ResultLog
from wloadctl.procs.runctx import EventLog


class FullDisk:
    """An `os` whose writes stop short, then fail with ENOSPC, while `full` is set."""

    def __init__(self) -> None:
        self.full = False

    def shim(self) -> types.SimpleNamespace:
        def write(fd: int, data: bytes) -> int:
            if not self.full:
                return os.write(fd, data)
            if len(data) > 10:
                return os.write(fd, bytes(data[:10]))  # the disk took a few bytes, then no more
            raise OSError(errno.ENOSPC, "No space left on device")

        names = {n: getattr(os, n) for n in dir(os) if not n.startswith("__")}
        return types.SimpleNamespace(**{**names, "write": write})


def record(task: int) -> bytes:
    return P.encode_results([P.ResultRecord(P.RES_EXITED, 0, 0, task, 1, 0, 0, 1, 0, 1.0, 2.0, 0, 0)])


def test_a_results_journal_cut_short_by_a_full_disk_is_never_torn_and_catches_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = FullDisk()
    monkeypatch.setattr(resultlog, "os", disk.shim())
    log = ResultLog(tmp_path / "r.results")
    assert log.write(record(1))
    disk.full = True
    assert not log.write(record(2))
    assert not log.write(record(3))
    # While the disk is full the file holds only whole records
    assert [r.task for r in read_results(log.path)] == [1]
    assert log.path.stat().st_size == len(record(1))
    disk.full = False
    assert log.write(record(4))
    log.close()
    assert [r.task for r in read_results(log.path)] == [1, 2, 3, 4]


def test_the_event_log_keeps_what_a_full_disk_refuses_and_writes_it_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = FullDisk()
    monkeypatch.setattr(eventlog, "os", disk.shim())
    ev = EventLog(tmp_path / "events.jsonl", "r1")
    ev.emit("first")
    assert ev.flush()
    disk.full = True
    ev.emit("second")
    ev.emit("third")
    assert not ev.flush()
    assert isinstance(ev.error, OSError)
    disk.full = False
    ev.emit("fourth")
    ev.close()
    names = [json.loads(line)["event"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert names == ["first", "second", "third", "fourth"]



def test_a_line_a_dead_scheduler_left_cut_is_ended_before_the_next_schedulers_events(tmp_path: Path) -> None:
    # (a resume's first event was written onto the cut line: the two read as one broken line)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"event": "whole"}\n{"event": "cut sh')
    ev = EventLog(path, "r1")
    ev.emit("next")
    ev.close()
    lines = path.read_text().splitlines()
    assert lines[:2] == ['{"event": "whole"}', '{"event": "cut sh'] and json.loads(lines[2])["event"] == "next"
    ev = EventLog(path, "r1")  # a file that ends its last line gets nothing more
    ev.emit("again")
    ev.close()
    assert [json.loads(x)["event"] for x in path.read_text().splitlines()[2:]] == ["next", "again"]


def test_transition_events_carry_each_field_as_json_says_whatever_the_mix_of_a_turn(tmp_path: Path) -> None:
    ids = ["plain_1", 'quo"ted', "back\\slash", "x.y:z@1-2"]
    tx = [(i % 4, frm, to, att, ts, ex, code, reason, cause)
          for i, (frm, to, att, ts, ex, code, reason, cause) in enumerate([
              (0, 1, 0, 1.5, -1, None, "", "turn-1"),  # WAITING -> READY: not logged
              (1, 2, 1, 1.5, -1, None, "", "turn-1"),
              (2, 3, 1, 1.5, 0, None, "", "turn-1"),
              (3, 4, 1, 2.25, 1, 0, "", "turn-1"),
              (3, 5, 2, 2.25, 1, 3, "", "turn-2"),
              (2, 5, 1, 2.25, -1, None, 'gone "away"\n', "turn-2"),
              (3, 6, 1, 1796578839.011857, 0, -9, "timed out", "turn-2"),
              (1, 7, 1, 1796578839.011857, -1, 0, "held", "op"),
          ])]
    ev = EventLog(tmp_path / "events.jsonl", "r1")
    ev.transitions(tx, ids)
    ev.flush()
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    want = []
    for i, frm, to, att, ts, ex, code, reason, cause in tx[1:]:
        e = {"ts": ts, "run": "r1", "job": ids[i], "attempt": att, "trace": f"r1.{i}.{att}", "event": "transition",
             "from": JobState(frm).name, "to": JobState(to).name, "cause": cause}
        if reason:
            e["reason"] = reason
        if code is not None:
            e["exit"] = code
        if ex >= 0:
            e["executor"] = ex
        want.append(e)
    assert lines == want
    assert [list(e) for e in lines] == [list(e) for e in want]  # (and in that order)


def test_a_results_journal_refused_for_space_does_not_fail_when_its_warning_is_refused_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The executor's stderr is a log on the same full disk: /dev/full refuses every write with ENOSPC.
    full = open("/dev/full", "w")
    monkeypatch.setattr("sys.stderr", full)
    log = resultlog.ResultLog(Path("/dev/full"))
    try:
        record = P.encode_results([P.ResultRecord(P.RES_ACCEPTED, P.FLAG_STARTING, 0, 1, 1, 0, 0, 1, 0, 1.0, 0.0,
                                                  0, 0)])
        assert log.write(record) is False  # the record waits; nothing raised
        assert log.write(record) is False and len(log.waiting) == 2
    finally:
        os.close(log.fd)
        log.fd = -1  # (nothing to write to /dev/full at close)
        monkeypatch.undo()
        with contextlib.suppress(OSError):
            full.close()
