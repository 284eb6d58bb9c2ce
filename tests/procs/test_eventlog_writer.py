"""The event log of a big run, written by a process of its own: the same file as the scheduler would write, whole
after the run's end or the scheduler's kill -9, and written on in the scheduler when the writer dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wloadctl.procs.eventlog import WRITER_FROM, EventLog, PipedEventLog, event_log


def _turns(ids: list[str], turns: int, per: int) -> list[list[tuple]]:
    out = []
    for t in range(turns):
        tx = []
        for k in range(per):
            i = (t * per + k) % len(ids)
            tx.append((i, 1 + k % 4, 2 + k % 5, 1 + t % 3, 1000.0 + t + k / 1e3, k % 3 - 1,
                       None if k % 2 else k % 7, "" if k % 3 else f'why "{k}"\n', f"turn-{t}"))
        out.append(tx)
    return out


def _log_into(log: EventLog, ids: list[str]) -> None:
    # Loop instances join the ids while the run goes on: the writer learns them as they come.
    seen = ids[:50]
    for n, tx in enumerate(_turns(ids, 40, 97)):
        if n == 20:
            seen = list(ids)
        log.transitions([t for t in tx if t[0] < len(seen)], seen)
        if n % 7 == 0:
            log._add(f'{{"event":"note","n":{n}}}\n')
        if n % 10 == 0:
            log.flush()


def _writers() -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if b"wloadctl.procs.eventlog" in cmd:
                out.append(int(d))
    return out


def test_a_big_run_gets_a_writer_process_and_a_small_one_none(tmp_path: Path) -> None:
    small = event_log(tmp_path / "a.jsonl", "r1", WRITER_FROM - 1)
    big = event_log(tmp_path / "b.jsonl", "r1", WRITER_FROM)
    try:
        assert type(small) is EventLog
        assert isinstance(big, PipedEventLog) and big.proc is not None and big.proc.pid in _writers()
    finally:
        small.close()
        big.close()
    assert isinstance(big, PipedEventLog) and big.proc is None


def test_the_writer_writes_the_file_the_scheduler_would_have_written(tmp_path: Path) -> None:
    ids = [f"job_{k}" for k in range(80)] + ['quo"ted', "back\\slash", "x.y:z@1-2"]
    here = EventLog(tmp_path / "here.jsonl", "r1")
    _log_into(here, ids)
    here.close()
    piped = PipedEventLog(tmp_path / "piped.jsonl", "r1")
    pid = piped.proc.pid if piped.proc is not None else -1
    _log_into(piped, ids)
    piped.close()
    expected = (tmp_path / "here.jsonl").read_bytes()
    assert expected.count(b"\n") > 2000
    assert (tmp_path / "piped.jsonl").read_bytes() == expected
    assert pid not in _writers()  # the close waited for it to end


_KILLED = """
import os, signal, sys
from pathlib import Path
from wloadctl.procs.eventlog import PipedEventLog
log = PipedEventLog(Path(sys.argv[1]), "r1")
ids = [f"job_{k}" for k in range(1000)]
for t in range(200):
    log.transitions([(k, 2, 5, 1, 1.0 + t, 0, 0, "", f"turn-{t}") for k in range(1000)], ids)
log.flush()
print(log.proc.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_scheduler_killed_minus_9_leaves_everything_it_sent_written(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    writer = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 30
    while writer in _writers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer not in _writers()  # it ended with its pipe
    lines = path.read_bytes().splitlines()
    assert len(lines) == 200_000
    assert json.loads(lines[-1])["cause"] == "turn-199" and json.loads(lines[-1])["job"] == "job_999"


def test_a_dead_writer_leaves_the_scheduler_writing_its_events_itself(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = PipedEventLog(path, "r1")
    ids = ["a", "b"]
    log.transitions([(0, 2, 5, 1, 1.0, 0, 0, "", "turn-1")], ids)
    log.flush()
    assert log.proc is not None
    writer = log.proc
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_bytes().count(b"\n")) and time.monotonic() < deadline:
        time.sleep(0.02)
    writer.kill()
    writer.wait()
    log.transitions([(1, 2, 5, 1, 2.0, 0, 0, "", "turn-2")], ids)
    log.flush()
    log.emit("after")
    log.close()
    events = [json.loads(x) for x in path.read_text().splitlines()]
    assert [e.get("job") or e["event"] for e in events] == ["a", "events_writer_lost", "b", "after"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_writer_outlives_signals_meant_for_its_scheduler(tmp_path: Path, signum: int) -> None:
    # (Ctrl-C at a terminal reaches the whole foreground group: the writer goes on until its pipe ends.)
    path = tmp_path / "events.jsonl"
    log = PipedEventLog(path, "r1")
    assert log.proc is not None
    writer = log.proc
    time.sleep(0.5)  # its signal handlers are set before it reads
    writer.send_signal(signum)
    log.transitions([(0, 2, 5, 1, 1.0, 0, 0, "", "turn-1")], ["a"])
    log.close()
    assert writer.returncode == 0
    assert json.loads(path.read_text())["job"] == "a"
