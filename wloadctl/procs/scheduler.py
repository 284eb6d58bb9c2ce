"""Scheduler process loop (Process A): results and operator verbs in, core decisions out, journal first."""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from wloadctl.core.commands import (
    Alert,
    Dispatch,
    Flag,
    Kill,
    Persist,
    Reply,
    RunFinished,
)
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import (
    ExecutorLostEvent,
    JobAcceptedEvent,
    JobExitedEvent,
    JobsFinishedEvent,
    JobStartedEvent,
    SlotsChangedEvent,
    TasksLostEvent,
    TimerFiredEvent,
)
from wloadctl.core.states import JobState
from wloadctl.errors import StoreError, WloadError
from wloadctl.ipc import protocol as P
from wloadctl.paths import append_ids
from wloadctl.procs.control import ControlDesk
from wloadctl.procs.recovery import ResultSweeper
from wloadctl.procs.runctx import RunContext
from wloadctl.procs.supervisor import RunObjects, Supervisor, live_standby
from wloadctl.store import Store

_SHOWN = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.TIMED_OUT, JobState.UPSTREAM_FAILED,
                    JobState.SKIPPED, JobState.CANCELLED, JobState.HELD, JobState.RETRY_WAIT})
HEALTH_INTERVAL = 0.25
"""Default seconds between heartbeats: board beat, lease renewal, executor health check."""
KILL_GRACE = 5.0
"""Seconds between SIGTERM and SIGKILL of an operator kill or preemption."""
UNACCEPTED_GRACE = 2.0
"""Seconds after an executor was lost before tasks nobody accepted count as lost with it (a live
executor accepts what it takes within milliseconds)."""


class Fenced(StoreError):
    """Another scheduler took the run over (a newer epoch): this one must stop without touching it."""

    def __init__(self, message: str, by_pid: int = 0, by_epoch: int = 0) -> None:
        super().__init__(message, hint="the run goes on under the newer scheduler; see `wloadctl status`")
        self.by_pid = by_pid
        """Pid of the scheduler that holds the run now (0 when unknown)."""
        self.by_epoch = by_epoch
        """Its epoch (0 when unknown)."""


@dataclass
class SchedulerLoop:
    """The scheduler's event loop around a SchedulerCore."""

    ctx: RunContext
    """What run this is and where its files live."""
    core: SchedulerCore
    """The pure engine."""
    store: Store
    """The journal."""
    objs: RunObjects
    """The run's queues and segments."""
    sup: Supervisor
    """Spawns, watches and replaces executors."""
    on_turn: Callable[[SchedulerLoop], None] | None = None
    """Called after each turn (progress display), at most every 0.2 s."""
    stop_requested: bool = False
    """Set by SIGINT/SIGTERM: stop the run (it can be resumed)."""
    finished: RunFinished | None = None
    """Set when the core reports the run finished."""
    sendq: deque[P.TaskRecord] = field(default_factory=deque)
    """Task records waiting for room in the request queue."""
    unplaced: deque[tuple[int, int]] = field(default_factory=deque)
    """Dispatches waiting for room in the payload arena."""
    payload_at: dict[int, int] = field(default_factory=dict)
    """Arena offset of each in-flight job's payload, released at its first result."""
    pids: dict[int, int] = field(default_factory=dict)
    """Process (group) id of each running job, for kills."""
    kills: list[tuple[float, int, int]] = field(default_factory=list)
    """(when, job, attempt) SIGKILLs that follow a graceful SIGTERM."""
    pending_kill: dict[int, bool] = field(default_factory=dict)
    """Kills asked for before the job started, applied at its start."""
    changes: list[tuple[int, int]] = field(default_factory=list)
    """Board changes not yet published."""
    turn: int = 0
    """Loop turns so far (cause ids of results name their turn)."""
    exit_when_stalled: bool = False
    """Stop (resumable) when only HELD jobs remain: a headless run has nobody to release them."""
    stalled: bool = False
    """Set when the loop stopped because the run stalled on held jobs."""
    watch: list[tuple[int, int, str]] | None = None
    """When a list: every terminal transition (job, state, reason) is appended for a line log."""
    beat_interval: float = HEALTH_INTERVAL
    """Seconds between heartbeats (board beat and lease renewal) and executor health checks."""
    unaccepted: tuple[float, tuple[tuple[int, int], ...]] | None = None
    """After an executor was lost: when, and the tasks no executor had accepted then."""
    not_idempotent: set[int] = field(default_factory=set)
    """Jobs declared `idempotent: false`: a turn that touches one is committed durably (see Store.open)."""
    sweeper: ResultSweeper | None = None
    """After a takeover: recovers results a fenced predecessor took from the response queue."""
    standby_pid: int = 0
    """The standby scheduler watching this one, published on the board."""

    def run(self) -> RunFinished | None:
        """Loop until the run finishes or a stop is requested; return how it finished (None if stopped)."""
        core = self.core
        req, rsp = self.objs.req, self.objs.rsp
        self.per_msg = P.tasks_per_message(req.max_message_size)
        self.desk = ControlDesk(self)
        self.not_idempotent = {i for i, spec in enumerate(core.specs) if not spec.idempotent}
        poller = select.poll()
        poller.register(rsp.fd, select.POLLIN)
        poller.register(self.objs.ctl.fd, select.POLLIN)
        self.sup.poller = poller
        for fd in self.sup.fds():
            poller.register(fd, select.POLLIN)
        req_out = False
        next_health = 0.0
        last_progress = 0.0
        self._check_fenced()
        self.objs.board.publish(self.ctx.board_header(core), full=bytes(core.state))
        self._execute(core.flush())
        self._publish(force=True)
        while self.finished is None and not self.stop_requested:
            now = time.time()
            due = min(next_health, core.next_timer() or float("inf"), self.kills[0][0] if self.kills else float("inf"))
            timeout_ms = max(0, int((due - now) * 1000) + 1)
            want_out = bool(self.sendq)
            if want_out != req_out:
                if want_out:
                    poller.register(req.fd, select.POLLOUT)
                else:
                    poller.unregister(req.fd)
                req_out = want_out
            ready = poller.poll(timeout_ms)
            # A scheduler frozen (SIGSTOP) past its lease wakes here: it must learn that it
            # was fenced before it touches a queue, a job or the board.
            self._check_fenced()
            self.turn += 1
            now = time.time()
            beat = False
            for fd, _ev in ready:
                if fd == rsp.fd:
                    self._drain_results()
                elif fd == self.objs.ctl.fd:
                    self.desk.drain(now)
                elif fd != req.fd:
                    next_health = now  # an executor's pidfd: it exited
            nt = core.next_timer()
            if nt is not None and nt <= now:
                core.feed(TimerFiredEvent(now, cause_id=f"timer-{self.turn}"))
            if now >= next_health:
                next_health = now + self.beat_interval
                self._check_health(now)
                beat = True
            self._fire_kills(now)
            self._execute(core.flush())
            self._place()
            self._send()
            # The board's beat is the heartbeat standbys and executors watch: publish it
            # every interval even when no job changed state.
            self._publish(force=beat)
            if self.exit_when_stalled and core.is_stalled() and not self.sendq:
                self.stalled = True
                break
            if self.on_turn is not None and now - last_progress >= 0.2:
                last_progress = now
                self.on_turn(self)
        if self.finished is not None:
            self._publish(force=True, done=True)
        return self.finished

    # -- inputs --------------------------------------------------------------------------

    def _drain_results(self) -> None:
        rsp, core, tails = self.objs.rsp, self.core, self.objs.tails
        want = core.want
        cause = f"turn-{self.turn}"
        while True:
            # Checked before every message, so a scheduler frozen mid-drain takes at most
            # one message of its successor's when it wakes (the successor's sweeper finds
            # those reports in the executors' journals).
            self._check_fenced()
            data = rsp.recv_nowait()
            if data is None:
                return
            plain: list[tuple[int, int, int, int]] = []
            for r in P.decode_results(data):
                i = r.task
                k = r.kind
                if i >= core.n:
                    continue
                if k == P.RES_REJECTED:
                    if r.epoch == self.ctx.epoch:
                        raise Fenced("fenced: an executor rejected this scheduler's epoch "
                                     f"{r.epoch}: another scheduler took over")
                    continue  # a predecessor's record, refused for us: nothing to apply
                # Only this scheduler's records point at payloads it placed; a predecessor's
                # late report of the same job must not free the payload of its new attempt.
                if self.payload_at and r.epoch == self.ctx.epoch:
                    off = self.payload_at.pop(i, None)
                    if off is not None:
                        self.objs.arena.release(off)
                if k == P.RES_EXITED and not r.signal and not (r.flags & ~P.FLAG_TAIL) and i not in want:
                    # A plain exit status: batched into one event (the common case at scale).
                    self.pids.pop(i, None)
                    plain.append((i, r.attempt, r.executor, r.exit_code))
                elif k == P.RES_EXITED:
                    self.pids.pop(i, None)
                    tail = ""
                    if r.flags & P.FLAG_TAIL:
                        raw = tails.read(r.tail_offset, r.tail_length, r.task, r.attempt)
                        tail = raw.decode("utf-8", "replace") if raw else ""
                    core.feed(JobExitedEvent(i, r.attempt, r.executor, r.exit_code, r.ended or time.time(),
                                             signal=r.signal, timed_out=bool(r.flags & P.FLAG_TIMED_OUT),
                                             spawn_failed=bool(r.flags & P.FLAG_SPAWN_FAILED),
                                             started=r.started, tail=tail, cause_id=cause,
                                             result=self.ctx.result_of(core.specs[i].id, r.attempt)
                                             if i in want else None))
                elif k == P.RES_STARTED:
                    self.pids[i] = r.pid
                    core.feed(JobStartedEvent(i, r.attempt, r.executor, r.pid, r.started, cause_id=cause))
                    if self.pending_kill.pop(i, None) is not None:
                        self._signal_job(i, signal.SIGTERM)
                        self.kills.append((time.time() + KILL_GRACE, i, r.attempt))
                elif k == P.RES_ACCEPTED:
                    core.feed(JobAcceptedEvent(i, r.attempt, r.executor, r.started, cause_id=cause))
            if plain:
                core.feed(JobsFinishedEvent(plain, time.time(), cause_id=cause))

    def _check_health(self, now: float) -> None:
        """Renew the lease; executors that exited or stopped beating lose their jobs and are replaced.

        The lease comes first: a fenced scheduler must not kill or respawn anything.
        """
        if not self.store.renew_lease(self.ctx.run.id, self.ctx.epoch, now + self.ctx.lease_seconds):
            self._raise_if_fenced()
        self.standby_pid = live_standby(self.ctx.state_dir)
        # Each beat pushes the event log out, so a console following it (and a crash) loses
        # at most one interval of events.
        self.ctx.events.flush()
        for index, why in self.sup.check(now):
            self._kill_orphans(index)
            self.core.feed(ExecutorLostEvent(index, now, why, cause_id=f"health-{self.turn}"))
            # Tasks sent but not accepted yet may be in the queue, or taken by the dead one:
            # watched until the queue has emptied (see _settle_unaccepted).
            self.unaccepted = (now, self.core.unaccepted())
            self.sup.log(f"executor {index}: {why}")
            self.ctx.events.emit("executor_lost", executor=index, reason=why)
            if not self.stop_requested and self.finished is None and self.sup.respawn(index) is None:
                # No replacement: the run goes on with fewer slots rather than over-committing the rest.
                per_executor = self.core.slots // max(1, len(self.sup.workers))
                self.core.feed(SlotsChangedEvent(self.sup.alive_count() * per_executor, now,
                                                 cause_id=f"health-{self.turn}"))
        if self.sweeper is not None and not self.sweeper.sweep(self, now):
            self.sweeper = None
        if self.unaccepted is not None:
            self._settle_unaccepted(now)

    def _settle_unaccepted(self, now: float) -> None:
        """Requeue tasks a lost executor took with it before accepting them.

        Once the request queue is empty, every task sent before the loss has been taken, and a
        live executor accepts what it takes at once: tasks still unaccepted a grace period
        later went with the dead executor.
        """
        since, jobs = self.unaccepted  # type: ignore[misc]
        if not jobs:
            self.unaccepted = None
            return
        if now - since < UNACCEPTED_GRACE or self.sendq or self.unplaced or self.objs.req.current_messages > 0:
            return  # some may still be on their way to a live executor
        self.unaccepted = None
        self.core.feed(TasksLostEvent(jobs, now, cause_id=f"health-{self.turn}"))

    def _check_fenced(self) -> None:
        """Raise Fenced if the board shows a newer epoch (a successor published it)."""
        try:
            hdr = self.objs.board.read_header()
        except WloadError:
            return  # unreadable for now: the journal's epoch check still guards every write
        if hdr.epoch > self.ctx.epoch:
            raise Fenced(f"fenced: scheduler pid {hdr.scheduler_pid} took run {self.ctx.run_id} over at "
                         f"epoch {hdr.epoch} (this scheduler held epoch {self.ctx.epoch})",
                         hdr.scheduler_pid, hdr.epoch)

    def _raise_if_fenced(self) -> None:
        """Raise Fenced if the journal moved to a newer epoch; otherwise return (the caller re-raises)."""
        row = self.store.get_run(self.ctx.run_id)
        if row is None or row.epoch != self.ctx.epoch:
            pid, epoch = (row.scheduler_pid or 0, row.epoch) if row else (0, 0)
            raise Fenced(f"fenced: scheduler pid {pid} took run {self.ctx.run_id} over at epoch {epoch} "
                         f"(this scheduler held epoch {self.ctx.epoch})", pid, epoch)

    # -- outputs -------------------------------------------------------------------------

    def _execute(self, cmds: list) -> None:
        for c in cmds:
            if isinstance(c, Persist):
                # The journal first: nothing below may be visible before this commits.
                ids = self.core.ids
                added = [(ids[parent], first, items, ids[first : first + len(items)])
                         for parent, first, items in c.added]
                risky = self.not_idempotent
                if added:  # loop instances are as idempotent as their loop
                    risky.update(k for k in range(added[0][1], self.core.n) if not self.core.specs[k].idempotent)
                durable = bool(risky) and any(t[0] in risky for t in c.transitions)
                try:
                    self.store.write_turn(self.ctx.run.id, c.transitions, epoch=self.ctx.epoch, added=added,
                                          durable=durable)
                except StoreError:
                    self._raise_if_fenced()
                    raise
                if added:
                    self._announce_instances(added)
                self.changes.extend((t[0], t[2]) for t in c.transitions)
                self.ctx.events.transitions(c.transitions, self.core.ids)
                if self.watch is not None:
                    self.watch.extend((t[0], t[2], t[7]) for t in c.transitions if t[2] in _SHOWN)
            elif isinstance(c, Dispatch):
                self.unplaced.extend(c.tasks)
            elif isinstance(c, Kill):
                self._kill(c)
            elif isinstance(c, Alert):
                self.ctx.alert(self.store, self.core, c)
            elif isinstance(c, Flag):
                self.ctx.flag(self.store, self.core, c)
            elif isinstance(c, Reply):
                self.desk.reply(c)
            elif isinstance(c, RunFinished):
                self.finished = c

    def _announce_instances(self, added: list[tuple[str, int, tuple[str, ...], list[str]]]) -> None:
        """New loop instances: readers of the id list see them, the event log says so."""
        append_ids(self.ctx.state_dir, self.ctx.run.run_id, [j for a in added for j in a[3]])
        for parent, first, items, _ids in added:
            self.ctx.events.emit("for_each_expanded", job=parent, items=len(items), first_index=first)

    def _place(self) -> None:
        """Turn dispatches into task records, writing shell payloads into the arena."""
        core, ctx, arena = self.core, self.ctx, self.objs.arena
        epoch = ctx.epoch
        un = self.unplaced
        while un:
            i, att = un[0]
            if core.state[i] != JobState.QUEUED or core.attempt[i] != att:
                un.popleft()
                continue
            spec = core.specs[i]
            if spec.type == "noop":
                self.sendq.append(P.TaskRecord(i, att, P.TASK_NOOP, 0, epoch, 0, 0))
            else:
                data = P.encode_payload(ctx.payload(spec, att))
                off = arena.put(data, task=i, attempt=att, epoch=epoch)
                if off is None:
                    return  # the arena is full: the rest waits for results to free room
                self.payload_at[i] = off
                # flags carry the SLA tier: an executor starts its most urgent backlog task first.
                self.sendq.append(P.TaskRecord(i, att, P.TASK_SHELL, core.tier[i], epoch, off, len(data)))
            un.popleft()

    def _send(self) -> None:
        q, req = self.sendq, self.objs.req
        if not q:
            return
        self._check_fenced()
        # Spread small batches over the executors so one does not hoard the work.
        per = max(1, min(self.per_msg, len(q) // max(1, self.sup.alive_count())))
        while q:
            batch = [q[k] for k in range(min(per, len(q)))]
            if not req.send_nowait(P.encode_tasks(batch)):
                return  # full: keep the batch for the next turn, never block, never drop
            for _ in batch:
                q.popleft()

    def _publish(self, force: bool = False, done: bool = False) -> None:
        if not self.changes and not force:
            return
        # The board has one writer: once a successor published there, this one must not.
        self._check_fenced()
        hdr = dataclasses.replace(self.ctx.board_header(self.core, done=done), standby_pid=self.standby_pid)
        self.objs.board.publish(hdr, changes=self.changes)
        self.changes = []

    def publish_final(self) -> None:
        """Publish the last states with the done flag (executors exit when they see it)."""
        try:
            self._publish(force=True, done=True)
        except WloadError:
            pass

    def _kill(self, c: Kill) -> None:
        i = c.job
        if i not in self.pids:
            self.pending_kill[i] = c.graceful
            return
        self._signal_job(i, signal.SIGTERM)
        self.kills.append((time.time() + (KILL_GRACE if c.graceful else 1.0), i, c.attempt))
        self.kills.sort()

    def _fire_kills(self, now: float) -> None:
        while self.kills and self.kills[0][0] <= now:
            _, i, att = self.kills.pop(0)
            if self.core.attempt[i] == att and i in self.pids:
                self._signal_job(i, signal.SIGKILL)

    def _kill_orphans(self, executor: int) -> None:
        """Jobs of a dead executor may still run, unsupervised: stop them before they are retried."""
        core = self.core
        for i, _pid in list(self.pids.items()):
            if core.executor[i] == executor:
                self._signal_job(i, signal.SIGKILL)
                del self.pids[i]

    def _signal_job(self, i: int, sig: int) -> None:
        pid = self.pids.get(i)
        if pid:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def request_stop(self) -> None:
        """Stop dispatching; running jobs are stopped and requeued so a resume runs them again."""
        self.stop_requested = True
        self.core.paused = True

    def drain_after_stop(self, grace: float) -> None:
        """After a stop: requeue running jobs, let executors stop them, and journal what they report.

        Raises:
            Fenced: a successor holds the run; its executors are not this scheduler's to stop.
        """
        self._check_fenced()
        self._raise_if_fenced()
        core = self.core
        for i in range(core.n):
            if core.state[i] in (JobState.QUEUED, JobState.RUNNING):
                core.kill_reason[i] = ("interrupted: run stopped", True)
        self.sup.terminate_all()
        deadline = time.time() + grace
        while time.time() < deadline and core.busy and self.sup.alive_count():
            select.select([self.objs.rsp.fd], [], [], 0.05)
            self._drain_results()
            self._execute(core.flush())
        try:
            self._drain_results()
            self._execute(core.flush())
            self._publish(force=True)
        except Fenced:
            raise
        except WloadError:
            pass
