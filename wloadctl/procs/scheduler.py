"""Scheduler process loop (Process A): results and operator verbs in, core decisions out, journal first."""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING

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
from wloadctl.core.events import ClockJumpedEvent, TimerFiredEvent
from wloadctl.core.fanout import expansion_rows
from wloadctl.core.states import JobState
from wloadctl.errors import Fenced, StoreError, StoreFull, WloadError
from wloadctl.ipc.ctlsock import user_name
from wloadctl.ipc.protocol import (
    PAUSE_CANCELLED,
    PAUSE_JOURNAL_LOST,
    PAUSE_NONE,
    PAUSE_SHM_FULL,
    PAUSE_STATE_DIR_FULL,
    PAUSE_STOPPING,
)
from wloadctl.paths import append_ids, take_stop_note
from wloadctl.procs.clockwatch import ClockWatch
from wloadctl.procs.control import ControlDesk
from wloadctl.procs.failpoint import first_strike
from wloadctl.procs.pipeline import PipelineMeter
from wloadctl.procs.pools import Pools
from wloadctl.procs.recovery import STOP_VERB, STOPPED_WITH_RUN, ResultSweeper
from wloadctl.procs.runctx import RunContext
from wloadctl.procs.supervisor import RunObjects, live_standby
from wloadctl.store import StaleEpoch, Store

if TYPE_CHECKING:
    from wloadctl.hostshare import SlotGovernor
    from wloadctl.procs.selfdrill import Strike

_JOB_AND_STATE = itemgetter(0, 2)
"""A transition's job and the state it moved to (what the state board is given)."""
_SHOWN = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.TIMED_OUT, JobState.UPSTREAM_FAILED,
                    JobState.SKIPPED, JobState.CANCELLED, JobState.HELD, JobState.RETRY_WAIT})
HEALTH_INTERVAL = 0.25
"""Default seconds between heartbeats: board beat, lease renewal, executor health check."""
FENCE_RECHECK = 0.002
"""Seconds a passed fencing check stands: the checks before each queue operation of one turn read the
board once. A successor takes over only after this scheduler's lease lapsed (seconds), and a scheduler
frozen between two checks finds its monotonic clock moved on, so it looks again."""
VERB_FAILPOINT = "after-verb-commit"
"""`WLOADCTL_FAILPOINT=after-verb-commit`, for fault tests: the scheduler SIGKILLs itself right after the journal
commit of the first turn with an operator verb's transitions, before anything else of the turn (its answer, the
verb's other effects) is done. It strikes once per state directory (a file there says it struck)."""
__all__ = ["HEALTH_INTERVAL", "Fenced", "SchedulerLoop"]


def _verb_failpoint(state_dir: Path, transitions: Sequence[tuple]) -> None:
    """Strike VERB_FAILPOINT if it is set, these transitions are an operator verb's, and it has not struck yet."""
    if os.environ.get("WLOADCTL_FAILPOINT") != VERB_FAILPOINT or not any(
            str(t[8]).startswith("op-") for t in transitions) or not first_strike(state_dir):
        return
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class SchedulerLoop:
    """The scheduler's event loop around a SchedulerCore: pools and control in, core decisions out, journal first."""

    ctx: RunContext
    """What run this is and where its files live."""
    core: SchedulerCore
    """The pure engine."""
    store: Store
    """The journal."""
    objs: RunObjects
    """The run's queues and segments (the loop itself uses the state board)."""
    pools: Pools
    """Where jobs run: this host's executors (a LocalPool; a StubPool in tests of the loop), and agents
    on other hosts when the run has a broker."""
    on_turn: Callable[[SchedulerLoop], None] | None = None
    """Called after each turn (progress display), at most every 0.2 s."""
    stop_requested: bool = False
    """Set by SIGINT/SIGTERM: stop the run (it can be resumed)."""
    keep_jobs: bool = False
    """The stop leaves running jobs to their executors (Ctrl-C): a resume reattaches to them."""
    finished: RunFinished | None = None
    """Set when the core reports the run finished."""
    changes: list[tuple[int, int]] = field(default_factory=list)
    """Board changes not yet published."""
    unlogged: list[tuple[list, float]] = field(default_factory=list)
    """Transitions committed this turn, with their commit's seconds, for the event log and the pipeline meter:
    written after the turn's dispatch (with the board), so a job's successor is sent without waiting for them."""
    turn: int = 0
    """Loop turns so far (cause ids of results name their turn)."""
    exit_when_stalled: bool = False
    """Stop (resumable) when only HELD jobs remain: a headless run has nobody to release them."""
    stalled: bool = False
    """Set when the loop stopped because the run stalled on held jobs."""
    watch: list[tuple[int, int, str]] | None = None
    """When a list: every terminal transition (job, state, reason) is appended for a line log."""
    restored: bytes = b""
    """A resume: every job's state as the journal gave it back, before the first turn (a line log tells only the
    jobs that end from then on: the others were told by the run that ended them)."""
    beat_interval: float = HEALTH_INTERVAL
    """Seconds between heartbeats (board beat and lease renewal) and executor health checks."""
    not_idempotent: set[int] = field(default_factory=set)
    """Jobs declared `idempotent: false`: a turn that touches one is committed durably (see Store.open)."""
    sweeper: ResultSweeper | None = None
    """After a takeover: recovers results a fenced predecessor took from the response queue."""
    standby_pid: int = 0
    """The standby scheduler watching this one, published on the board."""
    governor: SlotGovernor | None = None
    """Gives the core its share of the host's slots at each beat (None: the run keeps its own)."""
    meter: PipelineMeter | None = None
    """Figures of the pipeline (`wloadctl top`, metrics); made when the loop starts."""
    fence_checked: float = float("-inf")
    """When (monotonic) the last fencing check passed."""
    lease_renewed: float = float("inf")
    """When the journal's lease was last renewed (set as the loop starts: the first lease has its grace)."""
    say: Callable[[str], None] = lambda _m: None
    """Where one-line notices go (paused for want of space, resumed)."""
    no_space: str = ""
    """Why dispatch is paused for want of disk space ("" when it is not): status and the console show it."""
    held_back: list = field(default_factory=list)
    """Commands waiting for a journal write the full disk refused, in order (retried at each beat)."""
    space_failures: int = 0
    """Writes refused for want of space so far."""
    clock: ClockWatch = field(default_factory=ClockWatch)
    """Tells jumps of the wall clock from time passing (the core's retry waits move with a jump)."""
    shm_short: bool = False
    """The payload arena found no memory in /dev/shm: dispatches wait to be sent (dispatch degrades, never crashes)."""
    strike: Strike | None = None
    """A failover drill asked of this scheduler from another host, until it strikes (wloadctl.procs.selfdrill)."""
    journal_lost: bool = False
    """The journal's server is unreachable: the loop waits inside the store until it is back."""

    def run(self) -> RunFinished | None:
        """Loop until the run finishes or a stop is requested; return how it finished (None if stopped)."""
        self.desk = desk = ControlDesk.open(self.core, self.ctx, self.store)
        try:
            return self._run(desk)
        finally:
            desk.send_replies()  # (a turn cut short: its answers still go)
            desk.close()

    def _run(self, desk: ControlDesk) -> RunFinished | None:
        core, pools = self.core, self.pools
        self.lease_renewed = time.time()
        pools.join_desk(desk)  # verbs of operators on other hosts, through the broker
        self.not_idempotent = {i for i, spec in enumerate(core.specs) if not spec.idempotent}
        meter = self.meter = self.meter or PipelineMeter(self.ctx.state_dir, self.ctx.run_id, self.ctx.epoch)
        poller = select.poll()
        desk.ctl.attach(poller)
        pools.attach(poller)
        next_health = 0.0
        last_progress = 0.0
        self._check_fenced()
        self.objs.board.publish(self.ctx.board_header(core), full=bytes(core.state))
        self._execute(core.flush())
        self._publish(force=True)
        taken = False  # reports taken ahead wait to be applied: the next turn starts at once
        while self.finished is None and not self.stop_requested:
            now = time.time()
            due = min(next_health, core.next_timer() or float("inf"), pools.next_due())
            # Never longer than a beat: a wall clock set back would otherwise stretch the wait
            # by the jump (the beat after it finds the jump and moves the waits).
            timeout_ms = 0 if taken else max(0, min(int((due - now) * 1000) + 1, int(self.beat_interval * 1000) + 1))
            ready = poller.poll(timeout_ms)
            # A scheduler frozen (SIGSTOP) past its lease wakes here: it must learn that it
            # was fenced before it touches a queue, a job or the board.
            self._check_fenced()
            self.turn += 1
            began = time.perf_counter()
            now = time.time()
            beat = False
            cause = f"turn-{self.turn}"
            jump = self.clock.jumped()
            if jump is not None:
                now = jump[0]
                next_health = now
                self._clock_jumped(jump[1])
            for fd, _ev in ready:
                if desk.ctl.owns(fd):
                    desk.on_ready(fd, now)
                else:
                    pools.on_ready(fd, cause)
            if taken:
                pools.drain_taken(core.feed, cause)
            if pools.health_due:
                next_health = now
            nt = core.next_timer()
            if nt is not None and nt <= now:
                core.feed(TimerFiredEvent(now, cause_id=f"timer-{self.turn}"))
            if now >= next_health:
                next_health = now + self.beat_interval
                self._check_health(now)
                beat = True
            pools.fire_kills(now)
            cmds = core.flush()
            # The response queue holds a few messages: emptied while the turn goes on, it takes the
            # executors' next reports meanwhile, and the next turn settles them all at once.
            taken = pools.take_ahead()
            self._execute(cmds)
            taken = pools.take_ahead() or taken
            # Reports applied this turn are journaled now: they may leave the broker's stream
            # (not while a full disk holds their journal write back).
            if not self.held_back:
                pools.after_commit()
            if pools.pending():
                self._check_fenced()
            pools.pump()
            self._watch_shm()
            # The board's beat is the heartbeat standbys and executors watch: publish it
            # every interval even when no job changed state.
            self._publish(force=beat)
            desk.send_replies()  # (once the board shows what the verbs did: `status` then reads it at once)
            taken = pools.take_ahead() or taken
            if desk.drill is not None or self.strike is not None:
                # A failover drill asked from another host: struck at the end of a turn, once it may be.
                from wloadctl.procs.selfdrill import advance

                advance(self)
            meter.turn_done(began, time.perf_counter())
            if self.exit_when_stalled and core.is_stalled() and not pools.pending():
                self.stalled = True
                break
            if self.on_turn is not None and now - last_progress >= 0.2:
                last_progress = now
                self.on_turn(self)
        if self.on_turn is not None:
            self.on_turn(self)  # the last turns' changes, told now: not after the run's end work (hooks' wait)
        if self.finished is not None:
            self._publish(force=True, done=True)
        return self.finished

    # -- inputs --------------------------------------------------------------------------

    def _check_health(self, now: float) -> None:
        """Renew the lease; executors that exited or stopped beating lose their jobs and are replaced.

        The lease comes first: a fenced scheduler must not kill or respawn anything.
        """
        failures = self.space_failures
        if self.no_space:
            self.store.make_room()  # before any write: space come back goes to the checkpoint first
        self._renew(now)
        if self.no_space:
            self._retry_held(failures)
        self.standby_pid = live_standby(self.ctx.state_dir)
        # Each beat pushes the event log out, so a console following it (and a crash) loses
        # at most one interval of events.
        self.ctx.events.flush()
        cause = f"health-{self.turn}"
        self.pools.check(now, self.core.feed, cause, replace=not self.stop_requested and self.finished is None)
        if self.governor is not None:
            self.governor.beat(self.core, now)
        if self.sweeper is not None and not self.sweeper.sweep(self.core.feed, now):
            self.sweeper = None
        if self.meter is not None:
            self.meter.beat(now, self.objs, self.pools)

    def _clock_jumped(self, by: float) -> None:
        """The wall clock was set forward or back: the core moves its retry waits, and the log says so."""
        self.core.feed(ClockJumpedEvent(time.time(), by, cause_id=f"clock-{self.turn}"))
        way = "forward" if by > 0 else "back"
        self.say(f"the wall clock was set {way} by {abs(by):.1f}s: retry delays keep their length, "
                 "deadlines are judged on the new time")
        self.ctx.events.emit("clock_jumped", by=round(by, 3))

    def _watch_shm(self) -> None:
        """Say when sending stops for want of /dev/shm for payloads, and when it goes on."""
        short = self.pools.starved()
        if short == self.shm_short:
            return
        self.shm_short = short
        if short:
            self.say(f"paused: no space left in /dev/shm for the payload arena; {self.pools.backlog()} job(s) "
                     "wait to be sent, retried at each turn")
            self.ctx.events.emit("paused", reason="no space left in /dev/shm for the payload arena")
        else:
            self.say("resumed: /dev/shm has room for payloads again, sending goes on")
            self.ctx.events.emit("resumed", reason="/dev/shm has room for payloads again")
        self._publish(force=True)

    def journal_outage(self, lost: bool, notice: str) -> None:
        """The journal's server went away, or came back (the store calls this while it waits for it).

        The loop is held inside a journal call meanwhile, so nothing is dispatched; the event log
        and the board say why at once. Only the board's pause code changes: its counts and states
        stay what the journal holds, and the journal is not asked anything from here.

        Args:
            lost: True when the server went away, False when it is back.
            notice: the store's one-line notice.
        """
        self.journal_lost = lost
        self.ctx.events.emit("journal_lost" if lost else "journal_back", notice=notice)
        self.ctx.events.flush()
        board = self.objs.board
        try:
            if board.read_epoch() > self.ctx.epoch:
                return  # a successor writes the board now
            board.publish(dataclasses.replace(board.read_header(), paused=self._pause_code()))
        except WloadError:
            pass  # unreadable for now: the next publish sets it

    def _renew(self, now: float) -> None:
        """Extend the journal's lease; raise Fenced if a successor holds the run.

        A full disk refuses the renewal too: the loop pauses and tries again at the next beat
        (a standby that takes the lapsed lease meanwhile fences this scheduler at its next write).
        """
        try:
            renewed = self.store.renew_lease(self.ctx.run.id, self.ctx.epoch, now + self.ctx.lease_seconds)
        except StoreFull:
            self._pause_for_space()
            renewed = True
        if not renewed:
            self._raise_if_fenced()
        self.lease_renewed = now

    def keep_lease(self) -> None:
        """Renew the journal's lease once a beat has passed since the last renewal (work before the loop's
        first turn that may take longer than a lease, as a recovery reading its run's stored results)."""
        now = time.time()
        if not now - self.beat_interval < self.lease_renewed <= now:
            self._renew(now)

    def _check_fenced(self) -> None:
        """Raise Fenced if the board shows a newer epoch, or the lease lapsed and a successor holds the run.

        A successor on another host publishes nothing on this host's board: a scheduler that
        was frozen or cut off past its lease asks the journal before it touches anything.
        """
        tick = time.monotonic()
        if tick - self.fence_checked < FENCE_RECHECK:
            return
        now = time.time()
        if now - self.lease_renewed > self.ctx.lease_seconds:
            self._renew(now)
        try:
            # The epoch alone: this check runs several times a turn (before every queue operation).
            if self.objs.board.read_epoch() <= self.ctx.epoch:
                self.fence_checked = tick
                return
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
            host = self.store.holder_host(row.id) if row else None
            where = f" on {host}" if host else ""
            raise Fenced(f"fenced: scheduler pid {pid}{where} took run {self.ctx.run_id} over at epoch {epoch} "
                         f"(this scheduler held epoch {self.ctx.epoch})", pid, epoch)

    # -- outputs -------------------------------------------------------------------------

    def _execute(self, cmds: list) -> None:
        """Carry out the core's commands in order; a journal write refused for want of space holds back the rest.

        Journal first holds here too: nothing that follows a write the disk refused (a dispatch, a
        kill, an alert, a reply) happens before that write goes through at a later beat.
        """
        if self.held_back:
            self.held_back.extend(cmds)
            return
        # A verb's audit rows go in the transaction of the transitions it caused (the flush's Persist
        # comes before its Replies): after a crash at any moment, no applied transition lacks its row.
        replies = [c for c in cmds if isinstance(c, Reply)]
        for k, c in enumerate(cmds):
            try:
                self._carry_out(c, replies)
            except StoreFull:
                self.held_back = list(cmds[k:])
                self._pause_for_space()
                return
            except StaleEpoch:
                self._raise_if_fenced()  # (said as the successor that took the run over)
                raise

    def _pause_for_space(self) -> None:
        """A write was refused for want of space: stop dispatching and say why (once)."""
        self.space_failures += 1
        self.store.make_room()
        if self.no_space:
            return
        self.no_space = f"no space left on device in {self.ctx.state_dir}"
        self.core.paused = True
        self.say(f"paused: {self.no_space}; no job is dispatched until journal writes go through again "
                 f"(retried every {self.beat_interval:g}s)")
        self.ctx.events.emit("paused", reason=self.no_space)
        self._publish(force=True)

    def _retry_held(self, failures: int) -> None:
        """Retry the writes held back for want of space; resume dispatch once every write of this beat went through.

        Args:
            failures: `space_failures` before this beat's lease renewal.
        """
        cmds, self.held_back = self.held_back, []
        self._execute(cmds)
        if self.space_failures != failures or self.held_back:
            return
        self.say(f"resumed: space is back in {self.ctx.state_dir}; {len(cmds)} held-back step(s) done, "
                 "dispatch goes on")
        self.ctx.events.emit("resumed", reason=f"space is back in {self.ctx.state_dir}",
                             paused_writes=self.space_failures)
        self.no_space = ""
        self.core.paused = self.stop_requested

    def _carry_out(self, c: object, replies: Sequence[Reply] = ()) -> None:
        """Carry out one command of the core (`replies`: the Reply commands of the same flush).

        Raises:
            StoreFull: the command's journal write was refused for want of space (nothing of it happened).
        """
        if isinstance(c, Persist):
            # The journal first: nothing below may be visible before this commits.
            added = expansion_rows(c.added, self.core.ids)
            risky = self.not_idempotent
            if added:  # loop instances are as idempotent as their loop
                risky.update(k for k in range(added[0][1], self.core.n) if not self.core.specs[k].idempotent)
            durable = bool(risky) and any(t[0] in risky for t in c.transitions)
            actions = self.desk.turn_actions(replies) if replies else []
            try:
                t0 = time.perf_counter()
                self.store.write_turn(self.ctx.run.id, c.transitions, epoch=self.ctx.epoch, added=added,
                                      durable=durable, actions=actions)
                self.unlogged.append((c.transitions, time.perf_counter() - t0))
            except StoreError:
                self._raise_if_fenced()
                raise
            _verb_failpoint(self.ctx.state_dir, c.transitions)
            if replies:
                self.desk.turn_journaled(replies)
            if added:
                self._announce_instances(added)
            self.changes.extend(map(_JOB_AND_STATE, c.transitions))
            if self.watch is not None:
                self.watch.extend((t[0], t[2], t[7]) for t in c.transitions if t[2] in _SHOWN)
        elif isinstance(c, Dispatch):
            self.pools.submit(c.tasks, c.follow)
        elif isinstance(c, Kill):
            self.pools.kill(c)
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

    def _publish(self, force: bool = False, done: bool = False) -> None:
        if self.unlogged:
            self._log_committed()
        if not self.changes and not force:
            return
        # The board has one writer: once a successor published there, this one must not.
        self._check_fenced()
        hdr = dataclasses.replace(self.ctx.board_header(self.core, done=done), standby_pid=self.standby_pid,
                                  paused=self._pause_code())
        self.objs.board.publish(hdr, changes=self.changes)
        self.changes = []

    def _log_committed(self) -> None:
        """The event log's lines and the pipeline meter's figures of the transitions committed since the last call."""
        done, self.unlogged = self.unlogged, []
        ids, meter, n = self.core.ids, self.meter, self.core.n
        for transitions, seconds in done:
            if meter is not None:
                meter.committed(transitions, seconds, n)
            self.ctx.events.transitions(transitions, ids)

    def _pause_code(self) -> int:
        """Why dispatch is paused, for the board (PAUSE_NONE when it is not)."""
        if self.journal_lost:
            return PAUSE_JOURNAL_LOST
        if self.no_space:
            return PAUSE_STATE_DIR_FULL
        if self.shm_short:
            return PAUSE_SHM_FULL
        # Followers (SchedulerCore.follow) an executor holds must not start now: it reads this before each.
        return PAUSE_CANCELLED if self.core.cancelled else PAUSE_STOPPING if self.core.paused else PAUSE_NONE

    def publish_final(self) -> None:
        """Publish the last states with the done flag (executors exit when they see it), and the last figures."""
        try:
            self._publish(force=True, done=True)
        except WloadError:
            pass
        if self.meter is not None:
            self.meter.beat(time.time(), self.objs, self.pools, last=True)

    def request_stop(self, keep_jobs: bool = False) -> None:
        """Stop dispatching; running jobs are stopped and requeued so a resume runs them again,
        or, with `keep_jobs`, left running under their executors for a resume to reattach to."""
        self.stop_requested = True
        # Paused for a full disk, the journal cannot record running jobs stopped and requeued: stopped, their
        # exits would read as failures to the resume. They run on under their executors for it to pick up.
        # So with the journal unreachable.
        self.keep_jobs = keep_jobs or bool(self.no_space) or self.journal_lost
        self.core.paused = True

    def jobs_here(self) -> int:
        """Jobs sent to or running on nodes that stop with this scheduler (this host's executors) now."""
        core, ends = self.core, self.pools.stops_with_scheduler
        return sum(1 for i in range(core.n) if core.state[i] in (JobState.QUEUED, JobState.RUNNING) and ends(i))

    def _journal_stop(self, jobs: int, note: tuple[str, str] | None) -> None:
        """Journal the stop before any job is signalled: a resume after a crash mid-stop reads the ends of the
        jobs it was stopping as stopped with the run, not as their failures (recovery.stopped_with_run).
        `note`: (user, reason) the signaller left (paths.take_stop_note), else the stop is "by a signal"."""
        user, reason = user_name(os.getuid()), "stopped by a signal"
        if note is not None:  # the console said who stops it and why before its signal
            user, reason = note[0] or user, note[1] or reason
        try:
            self.store.record_action(self.ctx.run.id, user, STOP_VERB, "*", reason,
                                     f"run stopping: {jobs} job(s) in flight stopped, run again on resume "
                                     "(held when they may not run twice)", True)
        except Fenced:
            raise
        except StoreError as e:
            self.say(f"cannot journal the stop ({e}): a crash before it ends would read the jobs it stops as failed")

    def drain_after_stop(self, grace: float) -> None:
        """After a stop: requeue running jobs, let executors stop them, and journal what they report.

        Raises:
            Fenced: a successor holds the run; its executors are not this scheduler's to stop.
        """
        self._check_fenced()
        self._raise_if_fenced()
        core, ends = self.core, self.pools.stops_with_scheduler
        stopping = self.pools.stopping()
        # Jobs on agents keep running there: their results wait in the broker for the next scheduler.
        here = [i for i in range(core.n) if core.state[i] in (JobState.QUEUED, JobState.RUNNING) and ends(i)]
        note = take_stop_note(Path(self.ctx.state_dir), os.getpid())  # taken always: none is left behind
        if here:
            self._journal_stop(len(here), note)
        for i in here:
            core.kill_reason[i] = (STOPPED_WITH_RUN, True)
        for p in stopping:
            p.stop_all()
        deadline = time.time() + grace
        while time.time() < deadline and any(p.alive() for p in stopping) and \
                any(core.state[i] in (JobState.QUEUED, JobState.RUNNING) for i in here):
            time.sleep(0.05)
            for p in stopping:
                p.drain(core.feed, "stop")
            self._execute(core.flush())
        try:
            for p in stopping:
                p.drain(core.feed, "stop")
            self._execute(core.flush())
            self._publish(force=True)
        except Fenced:
            raise
        except WloadError:
            pass
