"""The console's supervision of a scheduler: start or attach, watch, restart, stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wloadctl.client import RunClient, pid_alive
from wloadctl.errors import UsageError, WloadError
from wloadctl.paths import make_state_dir, write_stop_note

if TYPE_CHECKING:
    from wloadctl.client import RunRow

FINISHED = ("succeeded", "failed", "cancelled")
"""Journal statuses of a run that is over."""
CLEAN_EXITS = (0, 1, 130)
"""Exit statuses of a scheduler that stopped on purpose (run over, handled signal)."""
LOG_NAME = "scheduler.log"
"""The scheduler's output file in its state directory: it outlives the console."""


@dataclass(frozen=True)
class Event:
    """Something the supervisor did or saw, for the operator."""

    text: str
    """One line."""
    level: str = "information"
    """information, warning or error."""


def lock_holder(state_dir: Path) -> int | None:
    """The pid of the process holding the state directory's scheduler lock, or None.

    Reads /proc/locks rather than trying the lock: taking it even for an instant could
    make a scheduler that starts at that moment fail with "already running".
    """
    path = state_dir / "scheduler.lock"
    try:
        st = path.stat()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                # "1: FLOCK  ADVISORY  WRITE 4242 08:01:123 0 EOF"; waiters carry "->"
                if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
                    continue
                # This process's own lock (a verb applied on a stopped run's journal holds it for a moment)
                # is not a scheduler's: the console must never take itself for one and signal itself.
                if parts[5] == dev and parts[4].isdigit() and int(parts[4]) != os.getpid() \
                        and pid_alive(int(parts[4])):
                    return int(parts[4])
    except OSError:
        pass
    return None


def log_tail(state_dir: Path, lines: int = 15, start: int = 0) -> str:
    """The last lines of the scheduler's log from byte `start` on (where the output of the
    scheduler a console started begins: earlier starts' lines are not its)."""
    try:
        with open(state_dir / LOG_NAME, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            at = max(start, size - 8192)
            f.seek(at)
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").splitlines()
    if at > start and text:
        text = text[1:]  # read from the middle of a line
    return "\n".join(text[-lines:])


class SchedulerSupervisor:
    """Starts or attaches to a state directory's scheduler; restarts it while needed.

    The scheduler runs in its own session, so a lost SSH connection or a closed terminal
    (SIGHUP to the console's session) does not reach it; the console may exit and a
    later console attaches again.
    """

    def __init__(
        self,
        state_dir: Path,
        plan: str | None = None,
        executors: int = 0,
        slots: int = 0,
        max_restarts: int = 5,
        restart_window: float = 300.0,
        clock: Callable[[], float] = time.time,
        accept_plan_change: bool = False,
    ) -> None:
        self.state_dir = state_dir
        """The run's state directory."""
        self.plan = plan
        """The plan file given on the command line (None: resume or watch)."""
        self.executors = executors
        """Executor processes for a new run (0: the scheduler's default)."""
        self.slots = slots
        """Jobs per executor for a new run (0: the scheduler's default)."""
        self.max_restarts = max_restarts
        """Restarts allowed within `restart_window` before the console stops trying."""
        self.restart_window = restart_window
        """Seconds over which restarts are counted."""
        self.clock = clock
        self.accept_plan_change = accept_plan_change
        """Resume the run under the plan given though it changed since the run started (jobs added)."""
        self.proc: subprocess.Popen[bytes] | None = None
        """The scheduler when the console started it."""
        self.pid: int | None = None
        """The scheduler being watched."""
        self.restarts = 0
        """Scheduler restarts done by this console."""
        self.gave_up = False
        """Set after too many crashes in a row: the console no longer restarts it."""
        self.stopping = False
        """Set while an operator's stop is under way (the scheduler should exit)."""
        self.spawned_at = 0.0
        """When the console last started a scheduler."""
        self.log_from = 0
        """Where the output of the scheduler this console last started begins in its log
        (after the `--- ... console starts` line written before it)."""
        self._recent: deque[float] = deque()
        self._reaped: list[subprocess.Popen[bytes]] = []
        self._older: list[subprocess.Popen[bytes]] = []
        """Schedulers started here that are no longer the watched one but may still run."""
        self._lock = threading.RLock()
        """Serializes the feed thread's `check` and an action's `resume`: both may start one."""

    # -- start and attach ----------------------------------------------------------

    def describe(self) -> str:
        """One line on how the scheduler is watched."""
        if self.pid is None:
            return "no scheduler" + (
                " (gave up after repeated crashes)" if self.gave_up else ""
            )
        how = "started" if self.proc is not None else "attached"
        again = f", restarted {self.restarts}x" if self.restarts else ""
        return f"{how} pid {self.pid}{again}"

    def attach_or_start(self, timeout: float = 30.0) -> Event:
        """Attach to the state directory's live scheduler, or start one and wait for it.

        Raises:
            UsageError: nothing to run (no plan, no unfinished run), or the scheduler
                failed to start (the message carries the end of its log).
        """
        holder = lock_holder(self.state_dir)
        if holder is not None:
            self.pid = holder
            return Event(
                f"attached to the scheduler (pid {holder}) of {self.state_dir}"
            )
        if self.plan is None:
            run = _latest_run(self.state_dir)
            if run is None:
                raise UsageError(
                    f"no run in {self.state_dir}",
                    hint="give a plan: `wloadctl console PLAN`",
                )
            if run.status in FINISHED:
                return Event(
                    f"run {run.run_id} is over ({run.status}); watching its journal"
                )
        pid = self.start(self.plan)
        self.wait_up(timeout)
        return Event(
            f"started the scheduler (pid {pid}); it keeps running if the console exits"
        )

    def start(self, plan: str | None) -> int:
        """Spawn `wloadctl scheduler` in its own session, output to scheduler.log."""
        with self._lock:
            return self._start(plan)

    def _start(self, plan: str | None) -> int:
        make_state_dir(self.state_dir)
        if self.proc is not None:
            self._older.append(self.proc)  # never dropped while it may run: reaped later
            self.proc = None
        cmd = [sys.executable, "-m", "wloadctl", "scheduler"]
        if plan:
            cmd.append(str(Path(plan).resolve()))
        cmd += ["--state-dir", str(self.state_dir)]
        if self.executors:
            cmd += ["--executors", str(self.executors)]
        if self.slots:
            cmd += ["--slots", str(self.slots)]
        if plan and self.accept_plan_change:
            cmd.append("--accept-plan-change")
        with open(self.state_dir / LOG_NAME, "ab") as log:
            log.write(
                f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} console starts: "
                f"{' '.join(cmd)}\n".encode()
            )
            log.flush()
            self.log_from = log.tell()
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.pid = self.proc.pid
        self.spawned_at = self.clock()
        return self.proc.pid

    def wait_up(self, timeout: float) -> None:
        """Wait until the started scheduler publishes its board, or its run is over.

        Raises:
            UsageError: it exited without a run to show, or took over `timeout`.
        """
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            try:
                with RunClient(self.state_dir) as client:
                    h = client.board_header()
                    if h is not None and h.scheduler_pid == self.proc.pid:
                        return
                    fresh = (
                        client.run.started >= self.spawned_at - 1.0
                        or client.run.status not in FINISHED
                    )
                    if rc is not None and rc in CLEAN_EXITS and fresh:
                        self.reap()
                        return  # a short run can be over before the console looks
            except WloadError:
                pass  # the journal is not there yet
            if rc is not None:
                self.reap()
                tail = log_tail(self.state_dir, start=self.log_from)
                # Its last line says why (one line, as every error; the rest is in the log).
                said = tail.strip().splitlines()[-1].removeprefix("wloadctl: ") if tail.strip() else ""
                raise UsageError(
                    f"the scheduler exited with status {rc} before the run started"
                    + (f": {said}" if said else ""),
                    hint=f"see {self.state_dir / LOG_NAME}",
                )
            time.sleep(0.05)
        raise UsageError(
            f"the scheduler did not start within {timeout:.0f}s; "
            f"see {self.state_dir / LOG_NAME}"
        )

    # -- watching ------------------------------------------------------------------

    def check(self) -> list[Event]:
        """Look at the scheduler once; restart it if it died before the run ended.

        Called a few times a second from the feed thread; costs a waitpid or a kill(0).
        """
        with self._lock:
            return self._check()

    def _check(self) -> list[Event]:
        if self.pid is None or self.stopping:
            return []
        rc: int | None = None
        if self.proc is not None and self.proc.pid == self.pid:
            rc = self.proc.poll()
            if rc is None:
                return []
        elif pid_alive(self.pid):
            return []
        gone = self.pid
        self.reap()
        self.pid = None
        how = _exit_words(rc)
        other = lock_holder(self.state_dir) or _board_scheduler(self.state_dir, gone)
        if other is not None:
            # A standby that took over (or another console's scheduler) holds the run:
            # attach to it rather than starting a rival that the journal would refuse.
            self.pid = other
            return [
                Event(
                    f"scheduler pid {gone} {how}; scheduler pid {other} runs the run "
                    "now (attached)",
                    "warning",
                )
            ]
        run = _latest_run(self.state_dir)
        status = run.status if run is not None else "unknown"
        if status in FINISHED:
            return [
                Event(
                    f"run over: {status}; the scheduler (pid {gone}) exited",
                    "information",
                )
            ]
        crashed = status == "running" or (rc is not None and rc not in CLEAN_EXITS)
        if not crashed:
            return [
                Event(
                    f"scheduler pid {gone} stopped; the run is interrupted "
                    "(resume with :resume)",
                    "warning",
                )
            ]
        now = self.clock()
        while self._recent and now - self._recent[0] > self.restart_window:
            self._recent.popleft()
        if len(self._recent) >= self.max_restarts:
            self.gave_up = True
            return [
                Event(
                    f"scheduler pid {gone} {how} again: {len(self._recent)} restarts "
                    f"in {self.restart_window:.0f}s, not restarting "
                    f"(see {self.state_dir / LOG_NAME})",
                    "error",
                )
            ]
        self._recent.append(now)
        self.restarts += 1
        try:
            pid = self.start(None)
        except OSError as e:
            return [Event(f"scheduler pid {gone} {how}; restart failed: {e}", "error")]
        return [
            Event(
                f"scheduler pid {gone} {how}; restarted as pid {pid}, "
                "resuming from the journal",
                "warning",
            )
        ]

    def resume(self) -> Event:
        """Start a scheduler for an interrupted run (after a rerun, or :resume)."""
        with self._lock:
            return self._resume()

    def _resume(self) -> Event:
        if self.pid is not None and pid_alive(self.pid):
            return Event(f"the scheduler (pid {self.pid}) is already running")
        holder = lock_holder(self.state_dir)
        if holder is not None:
            self.pid = holder
            return Event(f"attached to the scheduler (pid {holder})")
        self.gave_up = False
        self._recent.clear()
        pid = self.start(None)
        return Event(f"started the scheduler (pid {pid}) to resume the run")

    # -- stopping ------------------------------------------------------------------

    def stop(self, timeout: float = 30.0, reason: str = "") -> bool:
        """SIGTERM the scheduler: it stops executors, journals, exits (resumable).

        Args:
            timeout: seconds to wait for it to exit.
            reason: why, for the run's audit trail (a signal carries no words: it is left
                in the state directory for the scheduler to journal with this user's name).

        Returns:
            True when it exited within `timeout` (or was not running).
        """
        self.stopping = True
        pid = self.pid or lock_holder(self.state_dir)
        if pid is None:
            return True
        run = _latest_run(self.state_dir)
        # A scheduler whose run is over is already cleaning up (its signal handlers
        # are gone by then): a SIGTERM would cut that short and leave its queues.
        if run is None or run.status not in FINISHED:
            if reason:
                write_stop_note(self.state_dir, pid, reason)
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                return True
        if not self._wait_gone(pid, timeout):
            return False
        self.reap()
        self.pid = None
        return True

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.pid == pid:
                if self.proc.poll() is not None:
                    return True
            elif not pid_alive(pid):
                return True
            time.sleep(0.05)
        return False

    def reap(self) -> None:
        """Collect the exit status of schedulers started here that have exited."""
        with self._lock:
            if self.proc is not None and self.proc.poll() is not None:
                self._reaped.append(self.proc)
                self.proc = None
            for proc in [p for p in self._older if p.poll() is not None]:
                self._older.remove(proc)
                self._reaped.append(proc)

    def children(self) -> list[subprocess.Popen[bytes]]:
        """Schedulers started here that may still run (detaching leaves them)."""
        with self._lock:
            return self._older + ([self.proc] if self.proc is not None else [])


def _board_scheduler(state_dir: Path, not_pid: int) -> int | None:
    """The live scheduler the run's state board names, if it is another process than `not_pid`."""
    try:
        with RunClient(state_dir) as client:
            header = client.board_header()
    except WloadError:
        return None
    if header is None or header.scheduler_pid == not_pid or not pid_alive(header.scheduler_pid):
        return None
    return int(header.scheduler_pid)


def _latest_run(state_dir: Path) -> RunRow | None:
    """The journal's latest run (status as recorded, not as judged live), or None."""
    try:
        with RunClient(state_dir) as client:
            return client.run
    except WloadError:
        return None


def _exit_words(rc: int | None) -> str:
    if rc is None:
        return "is gone"
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with status {rc}"
