"""Spawning, watching, replacing and reaping executors, and the life of a run's IPC objects."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wloadctl.core.states import ExecutorState
from wloadctl.errors import TransportError, WloadError
from wloadctl.ipc.arena import ARENA_STEP, DEFAULT_ARENA_SIZE
from wloadctl.ipc.mq import MessageQueue
from wloadctl.ipc.naming import (
    ROLE_ARENA,
    ROLE_BOARD,
    ROLE_EXECUTORS,
    ROLE_REQUEST,
    ROLE_RESPONSE,
    ROLE_TAILS,
    object_name,
)
from wloadctl.ipc.protocol import BOARD_STATES_OFFSET, EXECUTOR_SLOT_SIZE, SEGMENT_DATA
from wloadctl.ipc.quota import run_shapes
from wloadctl.ipc.segment import SHM_DIR, mib, shm_free
from wloadctl.ipc.shm import (
    MAX_EXECUTOR_SLOTS,
    ExecutorBoard,
    PayloadArena,
    StateBoard,
    TailRing,
    remove_run_objects,
    run_is_alive,
    survey_runs,
)
from wloadctl.procs.health import pid_alive
from wloadctl.procs.prestart import ORPHAN_TIMEOUT, Prestarted, executor_argv, executor_log

STANDBY_DIR = "standbys"
"""Directory of a state dir where each standby scheduler keeps a pidfile while it watches."""


TAIL_PART = 64 * 1024
"""Bytes of output tails per executor slot of a run."""


def shm_at_start(n_jobs: int) -> int:
    """Bytes of /dev/shm a new run's segments take at once (its arena takes more as it fills)."""
    return (SEGMENT_DATA + ARENA_STEP) + (BOARD_STATES_OFFSET + n_jobs) + \
        (SEGMENT_DATA + MAX_EXECUTOR_SLOTS * EXECUTOR_SLOT_SIZE) + (SEGMENT_DATA + MAX_EXECUTOR_SLOTS * TAIL_PART)


def shm_full(what: str, need: int, arena_size: int = DEFAULT_ARENA_SIZE) -> TransportError:
    """The one-line refusal of a run /dev/shm has no room for (`what` names it)."""
    return TransportError(f"no space left in {SHM_DIR} for {what}: its shared memory needs {mib(need)} "
                          f"to start (up to {mib(need + arena_size - ARENA_STEP)} as its payload arena fills), "
                          f"{mib(shm_free())} free", hint=f"free space in {SHM_DIR} (df -h {SHM_DIR}), or enlarge it")


@dataclass
class RunObjects:
    """The queues and segments of one run, as opened by its scheduler."""

    run_id: str
    req: MessageQueue
    rsp: MessageQueue
    arena: PayloadArena
    board: StateBoard
    eboard: ExecutorBoard
    tails: TailRing

    @classmethod
    def create(cls, run_id: str, n_jobs: int, arena_size: int = DEFAULT_ARENA_SIZE,
               queue_jobs: int | None = None) -> RunObjects:
        """Create every object of a new run (0600); on failure remove what was made.

        Two queues a run: operator verbs come over the state directory's control socket
        (wloadctl.ipc.ctlsock), and an agent's node takes them from the broker. The queues are
        sized for `queue_jobs` task ids (default `n_jobs`).

        Raises:
            TransportError: a name is taken or the user's quota is exhausted.
        """
        # /dev/shm too small: one line before anything of the run is made (a segment of it
        # that still finds no room when it is made says the same, after removing the rest).
        need = shm_at_start(n_jobs)
        if 0 < shm_free() < need:
            raise shm_full(f"run {run_id}", need, arena_size)
        made: list[object] = []
        # Sized from the user's queue quota and the run's size, so dozens of runs fit it; an agent's
        # node serves jobs it cannot count in advance: it sizes for the largest run (LARGEST_RUN).
        shapes = run_shapes(n_jobs if queue_jobs is None else queue_jobs)
        try:
            req = MessageQueue.create(object_name(run_id, ROLE_REQUEST), shapes.request.messages,
                                      shapes.request.size)
            made.append(req)
            rsp = MessageQueue.create(object_name(run_id, ROLE_RESPONSE), shapes.response.messages,
                                      shapes.response.size)
            made.append(rsp)
            arena = PayloadArena.create(object_name(run_id, ROLE_ARENA), arena_size)
            made.append(arena)
            board = StateBoard.create(object_name(run_id, ROLE_BOARD), n_jobs)
            made.append(board)
            eboard = ExecutorBoard.create(object_name(run_id, ROLE_EXECUTORS), MAX_EXECUTOR_SLOTS)
            made.append(eboard)
            tails = TailRing.create(object_name(run_id, ROLE_TAILS), MAX_EXECUTOR_SLOTS, TAIL_PART)
        except WloadError as e:
            for o in made:
                if o is not None:
                    o.close()  # type: ignore[attr-defined]
            remove_run_objects(run_id)
            if e.message.startswith(f"no space left in {SHM_DIR}"):
                raise shm_full(f"run {run_id}", need, arena_size) from None
            raise
        return cls(run_id, req, rsp, arena, board, eboard, tails)

    @classmethod
    def open(cls, run_id: str) -> RunObjects:
        """Open the objects of a run that outlived its scheduler (its executors still run)."""
        return cls(
            run_id,
            MessageQueue.open(object_name(run_id, ROLE_REQUEST)),
            MessageQueue.open(object_name(run_id, ROLE_RESPONSE)),
            PayloadArena.open(object_name(run_id, ROLE_ARENA)),
            StateBoard.open(object_name(run_id, ROLE_BOARD)),
            ExecutorBoard.open(object_name(run_id, ROLE_EXECUTORS)),
            TailRing.open(object_name(run_id, ROLE_TAILS)),
        )

    def close(self) -> None:
        """Close every handle (a queue counts against the quota until every handle is closed)."""
        for o in (self.req, self.rsp, self.arena, self.board, self.eboard, self.tails):
            if o is None:
                continue
            try:
                o.close()
            except WloadError:
                pass

    def remove(self) -> list[str]:
        """Close and unlink everything of the run."""
        self.close()
        return remove_run_objects(self.run_id)


def clean_stale(say: object = None, kept: dict[str, str] | None = None) -> list[str]:
    """Remove objects left by crashed runs of this user (no process of theirs alive); return what went.

    Args:
        say: told a line per run cleaned up.
        kept: filled with the runs whose objects stay, and why.
    """
    removed: list[str] = []
    stale, others = survey_runs(run_is_alive)
    if kept is not None:
        kept.update(others)
    for rid in stale:
        gone = remove_run_objects(rid)
        removed.extend(gone)
        if callable(say) and gone:
            say(f"removed {len(gone)} IPC object(s) left by crashed run {rid}")
    return removed


def clean_stale_groups(say: object = None) -> int:
    """Remove the empty job groups (cgroup mode) of runs whose scheduler and executors are all gone: a run
    killed whole and never resumed leaves them. An agent's groups are its own to keep. Returns how many went."""
    from wloadctl.procs.jobtree import grouped_runs, remove_run_groups

    n = 0
    for rid in grouped_runs():
        if rid.startswith("agent-") or run_is_alive(rid):
            continue
        gone = remove_run_groups(rid)
        n += gone
        if callable(say) and gone:
            say(f"removed {gone} empty job group folder(s) left by crashed run {rid}")
    return n


def register_standby(state_dir: Path) -> Path:
    """Record this process as a standby of the state dir's run; return its pidfile.

    The board has a single writer (the active scheduler), so a standby does not write
    it: the active reads these pidfiles and publishes one as `standby_pid`.
    """
    d = state_dir / STANDBY_DIR
    d.mkdir(parents=True, exist_ok=True)
    path = d / str(os.getpid())
    path.write_text(f"{time.time():.3f}\n")
    return path


def live_standby(state_dir: Path) -> int:
    """Pid of the longest-registered live standby of the state dir (0 if none)."""
    try:
        entries = list((state_dir / STANDBY_DIR).iterdir())
    except OSError:
        return 0
    best: tuple[float, int] = (float("inf"), 0)
    for e in entries:
        try:
            pid, since = int(e.name), e.stat().st_mtime
        except (ValueError, OSError):
            continue
        if pid_alive(pid) and (since, pid) < best:
            best = (since, pid)
    return best[1]


@dataclass
class Worker:
    """One executor process as the supervisor tracks it."""

    index: int
    """Executor index (board slot)."""
    pid: int
    """Its process id."""
    pidfd: int
    """Readable when it exits."""
    proc: subprocess.Popen[bytes] | None
    """Set when it is our child (None for an adopted executor of a previous scheduler)."""
    state: ExecutorState = ExecutorState.STARTING
    """Health as last judged."""
    spawned: float = field(default_factory=time.time)
    """When it was started or adopted."""
    last_beat: float = 0.0
    """Its last heartbeat seen on the board."""
    restarts: int = 0
    """How many times this index was replaced."""


@dataclass
class Supervisor:
    """Owns the executor processes of a run: spawn, health, replacement, shutdown."""

    run_id: str
    state_dir: Path
    eboard: ExecutorBoard
    executors: int = 2
    slots: int = 4
    suspect_after: float = 1.0
    """Seconds without a heartbeat before an executor is SUSPECT (nothing new is sent to it)."""
    dead_after: float = 5.0
    """Seconds without a heartbeat before it is DEAD: killed, its jobs reassigned, replaced."""
    orphan_timeout: float = ORPHAN_TIMEOUT
    """How long executors wait for a scheduler to come back before exiting."""
    cpus: float = 0.0
    """CPUs each executor offers jobs that claim some (0 = no limit)."""
    prefetch: int = 0
    """Tasks per slot each executor may hold beyond those it runs."""
    memory: int = 0
    """MiB each executor offers jobs that claim some (0 = no limit)."""
    hand_back: float | None = None
    """Each executor's `--hand-back` (None: the executors' default; 0: take ahead always, never hand back)."""
    fence_ahead: bool = False
    """Each executor's `--fence-ahead`: tasks it holds ahead of an older epoch than the board's are handed back, not
    started (an agent's node)."""
    silent_start: float | None = None
    """Each executor's `--silent-start` (None: the executors' default, SILENT_START)."""
    workdir: str | None = None
    """The directory the run was started from: its executors run there, and so do the jobs without a `cwd:` of
    their own, when a resume starts them from another directory (None: this process's)."""
    prestarted: Prestarted | None = None
    """Executors started ahead of the run (`wloadctl run`), taken where one was started with the same command
    line (prestart.py)."""
    workers: dict[int, Worker] = field(default_factory=dict)
    poller: select.poll | None = None
    messages: list[str] = field(default_factory=list)
    """Health events for the operator (restarts, deaths)."""
    tell: Callable[[str], None] | None = None
    """Where its health messages go besides `messages` (the run's event log)."""
    last_check: float | None = None
    """When `check` last ran, on the monotonic clock."""

    def spawn(self, index: int) -> Worker:
        """Start executor `index` in its own session (a closed terminal or Ctrl-C does not reach it), in the
        run's directory."""
        state_dir, cwd = self.state_dir, self._workdir()
        if cwd is not None:
            state_dir = state_dir.absolute()
        argv = executor_argv(self.run_id, index, self.slots, state_dir, self.orphan_timeout, self.cpus,
                             self.prefetch, self.memory, self.hand_back, self.fence_ahead, self.silent_start)
        proc = self.prestarted.take(argv) if self.prestarted is not None else None
        if proc is None:
            logf = open(executor_log(self.state_dir, index), "ab")
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                        start_new_session=True, cwd=cwd)
            except OSError as e:
                raise TransportError(f"cannot start executor {index}: {e}") from None
            finally:
                logf.close()
        w = Worker(index, proc.pid, os.pidfd_open(proc.pid), proc)
        prev = self.workers.get(index)
        if prev is not None:
            w.restarts = prev.restarts + 1
        self.workers[index] = w
        if self.poller is not None:
            self.poller.register(w.pidfd, select.POLLIN)
        return w

    def start(self) -> None:
        """Start every executor."""
        for i in range(self.executors):
            self.spawn(i)

    def adopt(self) -> list[int]:
        """Take over executors of a previous scheduler that are still alive; return their indices."""
        found = []
        for slot in self.eboard.read_all():
            if slot.pid and pid_alive(slot.pid) and slot.executor not in self.workers:
                try:
                    fd = os.pidfd_open(slot.pid)
                except OSError:
                    continue
                self.workers[slot.executor] = Worker(slot.executor, slot.pid, fd, None, ExecutorState.ALIVE,
                                                     last_beat=slot.beat)
                if self.poller is not None:
                    self.poller.register(fd, select.POLLIN)
                found.append(slot.executor)
        return found

    def fds(self) -> list[int]:
        """pidfds to watch."""
        return [w.pidfd for w in self.workers.values() if w.state != ExecutorState.DEAD]

    def alive_count(self) -> int:
        """Executors not judged dead or suspect."""
        return sum(1 for w in self.workers.values()
                   if w.state in (ExecutorState.ALIVE, ExecutorState.STARTING))

    def check(self, now: float) -> list[tuple[int, str]]:
        """Judge every executor; return (index, why) for each that just became DEAD."""
        dead: list[tuple[int, str]] = []
        slots = {s.executor: s for s in self.eboard.read_all() if s.pid}
        mono = time.monotonic()
        # This process did not watch (it was stopped, frozen or suspended): the silence it finds is its own,
        # not the executors'. Each is judged from now on, not killed as stuck for a pause that was not its.
        away = self.last_check is not None and mono - self.last_check > self.dead_after
        self.last_check = mono
        for w in list(self.workers.values()):
            if w.state == ExecutorState.DEAD:
                continue
            slot = slots.get(w.index)
            if slot is not None and slot.pid == w.pid and slot.beat > w.last_beat:
                w.last_beat = slot.beat
            if away and w.last_beat:
                w.last_beat = max(w.last_beat, now)
            exited = self._exited(w)
            if exited is not None:
                dead.append((w.index, exited))
                self._bury(w)
                continue
            since = now - (w.last_beat or w.spawned)
            if since > self.dead_after + (5.0 if w.state == ExecutorState.STARTING else 0.0):
                _signal(w, signal.SIGKILL)
                dead.append((w.index, f"no heartbeat for {since:.1f}s (stuck); killed"))
                self._bury(w)
            elif since > self.suspect_after and w.state != ExecutorState.STARTING:
                w.state = ExecutorState.SUSPECT
            elif w.last_beat:
                w.state = ExecutorState.ALIVE
        return dead

    def _exited(self, w: Worker) -> str | None:
        if w.proc is not None:
            rc = w.proc.poll()
            if rc is None:
                return None
            return f"exited with status {rc}" if rc >= 0 else f"killed by signal {-rc}"
        return None if pid_alive(w.pid) else "exited"

    def _bury(self, w: Worker) -> None:
        w.state = ExecutorState.DEAD
        if self.poller is not None:
            try:
                self.poller.unregister(w.pidfd)
            except KeyError:
                pass
        if w.proc is not None:
            try:
                w.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        os.close(w.pidfd)

    def respawn(self, index: int) -> Worker | None:
        """Start a replacement for a dead executor (spawn registers it with the poller)."""
        try:
            w = self.spawn(index)
        except WloadError as e:
            self.log(str(e))
            return None
        self.log(f"executor {index} restarted (pid {w.pid}, restart #{w.restarts})")
        return w

    def _workdir(self) -> str | None:
        """The run's directory when executors must be started there (None: this process's own is it)."""
        if self.workdir is None or os.path.realpath(self.workdir) == os.path.realpath(os.getcwd()):
            return None
        return self.workdir if os.path.isdir(self.workdir) else None  # (gone: the runner said so at the start)

    def log(self, msg: str) -> None:
        """Keep a health message for the operator, and tell it (the run's events)."""
        self.messages.append(f"{time.strftime('%H:%M:%S')} {msg}")
        if self.tell is not None:
            self.tell(msg)

    def terminate_all(self) -> None:
        """SIGTERM every executor (each stops its jobs and exits)."""
        for w in self.workers.values():
            if w.state != ExecutorState.DEAD:
                _signal(w, signal.SIGTERM)

    def wake_all(self) -> None:
        """Tell every executor to read the board now (SIGUSR1): the run is done, they exit without waiting for
        their next beat.

        Only an executor that has beaten is told: it set its handler before its first beat, and SIGUSR1 would
        end one still starting (it finds the board done at its first beat anyway)."""
        try:
            beaten = {s.executor: s.pid for s in self.eboard.read_all() if s.pid and s.beat}
        except WloadError:
            return
        for w in self.workers.values():
            if w.state != ExecutorState.DEAD and beaten.get(w.index) == w.pid:
                _signal(w, signal.SIGUSR1)

    def wait_all(self, timeout: float) -> None:
        """Wait for every executor to exit; SIGKILL the ones that do not in time; reap them all."""
        deadline = time.monotonic() + timeout
        # Each executor's pidfd turns readable when it exits: wait on them all at once, not in turns.
        waiting = select.poll()
        left = set()
        for w in self.workers.values():
            if w.state != ExecutorState.DEAD:
                waiting.register(w.pidfd, select.POLLIN)
                left.add(w.pidfd)
        while left:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for fd, _ev in waiting.poll(max(1, int(remaining * 1000))):
                waiting.unregister(fd)
                left.discard(fd)
        for w in self.workers.values():
            if w.state == ExecutorState.DEAD:
                continue
            if w.pidfd in left:  # not exited in time
                _signal(w, signal.SIGKILL)
                self.log(f"executor {w.index} (pid {w.pid}) did not exit within {timeout:.0f}s: killed")
            if w.proc is not None:
                w.proc.wait()
            self._bury(w)


def _signal(w: Worker, sig: int) -> None:
    """Signal an executor through its pidfd: an adopted one (not this process's child) may have exited and its
    pid gone to another process, which a kill by pid would reach."""
    try:
        signal.pidfd_send_signal(w.pidfd, sig)
    except ProcessLookupError:
        pass
    except OSError:
        try:
            os.kill(w.pid, sig)  # a closed or unusable pidfd: by pid, as before
        except ProcessLookupError:
            pass
