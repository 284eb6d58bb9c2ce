"""The active scheduler's side of a failover drill asked from another host: answer, then kill or freeze itself.

A drill on another host cannot signal this host's processes, so it asks the active over the
broker (verb `drill`, admin only, checked by wloadctl.procs.control). At the end of the turn
the active journals the request, answers it, and waits until the broker has the answer; then:

* kill: SIGKILL of itself. Its executors, and the jobs on agents, keep running as after any
  crash of a scheduler; the standby takes the run over and reattaches.
* stop: SIGSTOP of itself. Nothing on another host can send it SIGCONT, so it first starts a
  waker on its own host, in a session of its own, that watches the journal and sends SIGCONT
  once the run has a newer epoch (or after a bounded time, when nobody took over). Woken,
  the scheduler finds the newer epoch at its next look and stands down (wloadctl.procs.runner).

Run as `python -m wloadctl.procs.selfdrill PID RUN EPOCH WITHIN [STATE_DIR]`, this module is
that waker: it is the drill's own helper, not one of the run's processes (wloadctl.procs.supervisor).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from wloadctl.errors import UsageError, WloadError
from wloadctl.procs.control import DRILL_JOB
from wloadctl.store import Store, journal_url

if TYPE_CHECKING:
    from wloadctl.procs.control import ControlDesk
    from wloadctl.procs.pools import Pools
    from wloadctl.procs.runctx import RunContext

WAKER_READY = 10.0
"""Seconds the scheduler waits for its waker to be watching the journal (else the drill is refused)."""
WAKE_POLL = 0.05
"""Seconds between the waker's looks at the journal."""
WAKE_BOUNDS = (1.0, 3600.0)
"""Least and most seconds a frozen scheduler may be left frozen when nobody takes over."""
READY = b"watching\n"
"""What the waker says once it watches the journal."""


class SchedulerLoop(Protocol):
    """What a drill needs of the scheduler's loop (wloadctl.procs.scheduler, which calls in here)."""

    desk: ControlDesk
    """Its control desk: requests in, answers out."""
    ctx: RunContext
    """The run: its id, epoch, state directory and event log."""
    pools: Pools
    """Where its jobs run, and the channels (the broker link) the answer leaves by."""
    strike: Strike | None
    """The drill under way."""


def advance(loop: SchedulerLoop) -> None:
    """Take the drill asked this turn, and strike the one under way if it may now (the end of a loop turn)."""
    req = loop.desk.take_drill()
    if req is not None:
        if loop.strike is not None:
            _refuse(loop, req, "a drill of this scheduler is already under way")
        else:
            loop.strike = Strike.begin(loop, req)
    if loop.strike is not None and loop.strike.step(loop):
        loop.strike = None


class Strike:
    """A drill asked of this scheduler, struck once it may be: at once (kill), or once its waker watches (stop)."""

    def __init__(self, req: dict[str, Any], waker: Waker | None) -> None:
        self.req = req
        """The request: mode (kill or stop) and wake_after (the longest freeze, in seconds)."""
        self.waker = waker
        """The waker of a freeze (None: kill)."""

    @classmethod
    def begin(cls, loop: SchedulerLoop, req: dict[str, Any]) -> Strike | None:
        """Take a drill request; None when it is refused (journaled and answered here).

        The waker starts meanwhile: the loop goes on beating until it watches the journal
        (a Python process takes a while to start, longer than a short lease).
        """
        waker = None
        if req.get("mode") == "stop":
            within = min(max(float(req.get("wake_after") or 0), WAKE_BOUNDS[0]), WAKE_BOUNDS[1])
            ctx = loop.ctx
            try:
                if os.getpid() == 1:
                    raise UsageError("scheduler pid 1 is its pid namespace's init, which the kernel spares its own "
                                     "SIGSTOP: drill it in kill mode")
                # A server journal is read from anywhere; SQLite from the run's state directory.
                waker = Waker.start(os.getpid(), ctx.run_id, ctx.epoch, within,
                                    None if journal_url() else ctx.state_dir)
            except WloadError as e:
                _refuse(loop, req, e.one_line())
                return None
        return cls(req, waker)

    def step(self, loop: SchedulerLoop) -> bool:
        """Strike if it may now (kill; stop once the waker watches); True once done with (struck, or refused)."""
        if self.waker is not None:
            ready = self.waker.ready()
            if ready is None:
                return False
            if not ready:
                _refuse(loop, self.req, f"the waker of a frozen scheduler did not watch the journal within "
                                        f"{WAKER_READY:g}s")
                return True
        strike(loop, self.req, self.waker)
        return True


def _refuse(loop: SchedulerLoop, req: dict[str, Any], why: str) -> None:
    msg = f"drill refused: {why}"
    loop.desk.record(req, DRILL_JOB, msg, False)
    loop.desk.answer(req, {"ok": False, "error": msg})


def strike(loop: SchedulerLoop, req: dict[str, Any], waker: Waker | None) -> None:
    """Journal the drill, answer it, then kill (no waker) or freeze (its waker watches) this scheduler."""
    desk, ctx = loop.desk, loop.ctx
    mode, pid, host = str(req["mode"]), os.getpid(), socket.gethostname()
    what = "SIGKILL" if waker is None else "SIGSTOP"
    woken = f"; waker pid {waker.pid} sends SIGCONT once the run is taken over" if waker is not None else ""
    desk.record(req, DRILL_JOB, f"{what} of scheduler pid {pid} on {host} at epoch {ctx.epoch}{woken}", True)
    ctx.events.emit("drill_strike", pid=pid, epoch=ctx.epoch, mode=mode, user=str(req.get("user", "")))
    ctx.events.flush()
    at = time.time()
    desk.answer(req, {"ok": True, "mode": mode, "pid": pid, "host": host, "epoch": ctx.epoch, "at": round(at, 6),
                      "waker": waker.pid if waker is not None else 0})
    # The answer first: the drill measures from it, and a dead scheduler answers nothing.
    loop.pools.flush(2.0)
    if waker is None:
        die()
    os.kill(pid, signal.SIGSTOP)
    # Here once woken: the next look at the journal finds whether the run moved on without it.
    waker.reap()


def die() -> NoReturn:
    """SIGKILL this process: no handler, no cleanup, nothing flushed."""
    os.kill(os.getpid(), signal.SIGKILL)
    # Still here: this process is its pid namespace's init (a container's first process), which
    # the kernel spares its own SIGKILL. Leaving at once, with nothing closed, is the same crash.
    os._exit(128 + signal.SIGKILL)


class Waker:
    """The helper that sends SIGCONT to a scheduler frozen by a drill, from the scheduler's own host."""

    def __init__(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        self.proc = proc
        """The waker's process (a child of the scheduler, in a session of its own)."""
        self.deadline = deadline
        """By when (monotonic) it must say it watches the journal."""

    @property
    def pid(self) -> int:
        """The waker's process id."""
        return self.proc.pid

    @classmethod
    def start(cls, pid: int, run_id: str, epoch: int, within: float, state_dir: Path | None) -> Waker:
        """Start a waker (it says when it watches the journal: see `ready`).

        Raises:
            UsageError: it could not be started.
        """
        args = [sys.executable, "-m", "wloadctl.procs.selfdrill", str(pid), run_id, str(epoch), f"{within:g}"]
        if state_dir is not None:
            args.append(str(state_dir))
        try:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            raise UsageError(f"cannot start the waker of a frozen scheduler: {e.strerror}") from None
        return cls(proc, time.monotonic() + WAKER_READY)

    def ready(self) -> bool | None:
        """True once it watches the journal; False when it will not (stopped here); None while it starts."""
        out = self.proc.stdout
        assert out is not None
        if select.select([out], [], [], 0)[0]:
            said = out.readline()
        elif time.monotonic() < self.deadline:
            return None
        else:
            said = b""
        out.close()
        if said == READY:
            return True
        self.proc.kill()
        self.proc.wait()
        return False

    def reap(self) -> None:
        """Wait for the waker, which ends once it has sent SIGCONT."""
        try:
            self.proc.wait(5.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wake(pid: int, run_id: str, epoch: int, within: float, state_dir: Path | None) -> int:
    """The waker: SIGCONT to `pid` once the journal shows run `run_id` past `epoch`, or after `within` seconds.

    Returns:
        0 (the scheduler was sent SIGCONT), 1 when the journal could not be opened (nothing was frozen yet).
    """
    deadline = time.time() + within
    try:
        st = Store.open(state_dir, create=False, readonly=True)
    except WloadError:
        return 1  # never said it watches: the scheduler refuses the drill and does not freeze
    try:
        os.write(1, READY)
        os.close(1)
        while time.time() < deadline:
            try:
                row = st.get_run(run_id)
            except WloadError:
                row = None  # the journal is away for now: the bound still wakes it
            if row is not None and (row.epoch > epoch or row.status != "running"):
                break
            time.sleep(WAKE_POLL)
    finally:
        st.close()
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # it is gone already: nothing to wake
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(wake(int(a[0]), a[1], int(a[2]), float(a[3]), Path(a[4]) if len(a) > 4 else None))
