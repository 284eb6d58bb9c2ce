"""Starting executors: their command line, log and defaults; and starting them ahead of a new run.

An executor is a Python process: about 0.15 s of interpreter start and imports on a 2-core machine, which
used to come after the scheduler's own start, before the first job. `wloadctl run PLAN --state-dir DIR`
knows at its start everything an executor of a new run is started with (the run's id is chosen then), so
it starts them at once with `--await-go`: each imports what it runs with, then waits on its standard input.
The supervisor hands one over (`go`) when it would start that executor with the same command line; an
executor nobody takes (the plan is bad, the run resumes, the settings differ) is killed before it has
touched anything, and one whose scheduler dies reads the end of its input and exits.
"""

from __future__ import annotations

import datetime as dt
import os
import select
import subprocess
import sys
import time
from pathlib import Path

GO = b"g"
"""What a waiting executor reads to go on; anything else (the end of its input) and it exits."""
AWAIT_FLAG = "--await-go"
"""The flag of an executor started ahead of its run's objects."""
MOST_AHEAD = 4
"""The most executors started ahead (the rest start as usual)."""
DEFAULT_PREFETCH = 8
"""Most tasks per slot an executor takes ahead while its jobs are short ones (see the executor's HAND_BACK
and ahead_per_slot): a slot that frees starts its next short job at once instead of waiting a round trip
through the scheduler, and each turn of the scheduler takes the exits of several jobs."""
DEFAULT_EXECUTORS, DEFAULT_SLOTS = 2, 4
"""Executors of a new run, and slots of each, unless the command line says."""
ORPHAN_TIMEOUT = 120.0
"""Seconds executors wait for a silent scheduler to come back before they exit."""
MOST_EXECUTORS = 64
"""The most executors one run may have."""
MOST_SLOTS = 65535
"""The most slots of one executor (its board slot counts them in 16 bits)."""
WARM_WAITING = 60.0
"""The longest an executor started ahead goes on with keep-warm writes while it waits to be taken (see
jobtree.WARM_EVERY and waiting_warmer)."""


def counts_problem(executors: int, slots: int, prefetch: int) -> str | None:
    """What is wrong with a command line's `--executors`, `--slots` and `--prefetch` (None: nothing)."""
    for flag, value in (("--executors", executors), ("--slots", slots), ("--prefetch", prefetch)):
        if value < 0:
            return f"{flag} must be 0 or more, not {value}"
    if executors > MOST_EXECUTORS:
        return f"--executors {executors}: at most {MOST_EXECUTORS} executors per run"
    if slots > MOST_SLOTS:
        return f"--slots {slots}: at most {MOST_SLOTS} slots per executor"
    return None


def new_run_id() -> str:
    """A new run's id: its start time and six random hex digits."""
    return f"{dt.datetime.now():%Y%m%d-%H%M%S}-{os.urandom(3).hex()}"


def executor_log(state_dir: Path, index: int) -> Path:
    """Where executor `index` of a state directory writes its output (appended across its restarts)."""
    return state_dir / f"executor-{index}.log"


def executor_argv(run_id: str, index: int, slots: int, state_dir: Path, orphan_timeout: float, cpus: float,
                  prefetch: int, memory: int, hand_back: float | None, fence_ahead: bool = False,
                  silent_start: float | None = None) -> list[str]:
    """The command line of executor `index` of a run (`fence_ahead`, `silent_start`: see Executor's; None: its
    default)."""
    return [sys.executable, "-m", "wloadctl.procs.executor", "--run", run_id, "--index", str(index),
            "--slots", str(slots), "--state-dir", str(state_dir), "--orphan-timeout", str(orphan_timeout),
            "--cpus", str(cpus), "--prefetch", str(prefetch), "--memory", str(memory),
            *(["--hand-back", str(hand_back)] if hand_back is not None else []),
            *(["--fence-ahead"] if fence_ahead else []),
            *(["--silent-start", str(silent_start)] if silent_start is not None else [])]


class Prestarted:
    """Executors started ahead, each waiting for the supervisor that starts its command line to take it."""

    def __init__(self, run_id: str, argvs: list[list[str]]) -> None:
        self.run_id = run_id
        """The id a new run takes, named on the executors' command lines."""
        self.waiting: list[tuple[list[str], subprocess.Popen[bytes]]] = []
        """(command line, process) of each executor not taken yet."""
        for argv in argvs[:MOST_AHEAD]:
            try:
                proc = subprocess.Popen([*argv, AWAIT_FLAG], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True, bufsize=0)
            except OSError:
                break  # the supervisor starts them as usual, and says why if it cannot either
            self.waiting.append((argv, proc))

    def take(self, argv: list[str]) -> subprocess.Popen[bytes] | None:
        """The waiting executor started with `argv`, told to go on (None: there is none, or it died waiting)."""
        for k, (want, proc) in enumerate(self.waiting):
            if want == argv:
                del self.waiting[k]
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(GO)
                    proc.stdin.close()
                except OSError:
                    _end(proc)
                    return None
                return proc
        return None

    def close(self) -> None:
        """Kill and reap every executor not taken (none has made or opened anything of a run)."""
        for _, proc in self.waiting:
            _end(proc)
        self.waiting.clear()


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass


def await_go(state_dir: Path, index: int, warm: tuple[int, float] | None = None) -> bool:
    """In an executor started ahead: wait to be taken, then take the usual input and output (nothing in,
    output appended to its log). False when its scheduler ended without taking it.

    `warm` (jobtree.waiting_warmer: a descriptor and seconds) keeps cgroup moves fast while it waits, for at
    most WARM_WAITING; the descriptor is closed before this returns."""
    if warm is not None:
        fd, every = warm
        try:
            waiter = select.poll()
            waiter.register(0, select.POLLIN)
            until = time.monotonic() + WARM_WAITING
            while time.monotonic() < until and not waiter.poll(every * 1000):
                os.write(fd, b"0")
        except OSError:
            pass  # refused: it waits without
        finally:
            os.close(fd)
    try:
        go = os.read(0, 1)
    except OSError:
        return False
    if go != GO:
        return False
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(executor_log(state_dir, index), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    return True
