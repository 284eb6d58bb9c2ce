"""The executors' results journal and the event log on a full disk: nothing torn, nothing lost once space returns."""

from __future__ import annotations

import errno
import json
import os
import types
from pathlib import Path

import pytest

from wloadctl.ipc import protocol as P
from wloadctl.procs import resultlog, runctx
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
    monkeypatch.setattr(runctx, "os", disk.shim())
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
