"""A supervisor that was itself stopped judges its executors from when it wakes, not for its own pause."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

from wloadctl.core.states import ExecutorState
from wloadctl.procs.supervisor import Supervisor, Worker


def test_a_supervisor_stopped_longer_than_dead_after_does_not_kill_its_executors_for_its_pause(
        tmp_path: Path) -> None:
    """(an agent stopped 15 s with its executors, then continued, killed both as stuck at once, and a held job
    that may not run twice died with them, without a word)"""
    child = subprocess.Popen(["sleep", "60"])  # the executor: silent since the pause
    fd = os.pidfd_open(child.pid)
    try:
        sup = Supervisor("r", tmp_path, SimpleNamespace(read_all=lambda: []))  # type: ignore[arg-type]
        sup.workers[0] = Worker(0, child.pid, fd, None, ExecutorState.ALIVE, last_beat=time.time() - 15)
        sup.last_check = time.monotonic() - 15  # its last look: before the 15 s it was stopped
        assert sup.check(time.time()) == [] and child.poll() is None
        # From its waking on it judges as ever: silent past dead_after since then, killed as stuck
        sup.last_check = time.monotonic()
        dead = sup.check(time.time() + sup.dead_after + 1)
        assert [i for i, _why in dead] == [0] and "(stuck); killed" in dead[0][1]
        assert child.wait(5) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        with contextlib.suppress(OSError):
            os.close(fd)  # (closed already by the supervisor that buried it)
