"""The local pool: this host's executors over MQ+SHM, as the scheduler loop sees them through the pool seam.

A pool takes dispatches, places their payloads, sends task records, turns reports into
engine events, kills jobs, watches its nodes and says what each one holds. The loop
never touches an executor, a queue of theirs or a job's process itself.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from wloadctl.core.commands import Kill
from wloadctl.core.events import ExecutorLostEvent, JobAcceptedEvent, JobExitedEvent, SlotsChangedEvent, TasksLostEvent
from wloadctl.core.states import ExecutorState, JobState
from wloadctl.errors import Fenced
from wloadctl.ipc import protocol as P
from wloadctl.procs.executor import ahead_per_slot, hand_back_seconds
from wloadctl.procs.jobtree import kill_executor_trees, kill_job_tree
from wloadctl.procs.pools import Book, Feed
from wloadctl.procs.reports import ReportReader
from wloadctl.procs.supervisor import RunObjects, Supervisor

if TYPE_CHECKING:
    from wloadctl.core.events import Event
    from wloadctl.procs.control import ControlDesk

KILL_GRACE = 5.0
"""Seconds between SIGTERM and SIGKILL of an operator kill or preemption."""
UNACCEPTED_SETTLE = 0.25
"""Seconds, once the request queue has emptied after an executor died, before tasks found in no
executor's record count as lost with it (live executors record what they take at once)."""

def _journal_name(name: str) -> tuple[str, int, int] | None:
    """(run id, executor index, executor pid) of an executor's results journal file name, RUN-INDEX-PID.results
    (the run id holding dashes of its own), or None for any other name."""
    if not name.endswith(".results"):
        return None
    parts = name[: -len(".results")].rsplit("-", 2)
    if len(parts) != 3:
        return None
    try:
        return parts[0], int(parts[1]), int(parts[2])
    except ValueError:
        return None


def result_journals(state_dir: Path, run_id: str) -> list[tuple[int, int, Path]]:
    """(executor index, executor pid, path) of every executor results journal of a run."""
    out = []
    for p in sorted((state_dir / "executors").glob(f"{run_id}-*.results")):
        named = _journal_name(p.name)
        if named is not None and named[0] == run_id:
            out.append((named[1], named[2], p))
    return out


def runs_with_result_journals(state_dir: Path) -> set[str]:
    """The runs whose executors left results journals in a state directory."""
    try:
        names = os.listdir(state_dir / "executors")
    except OSError:
        return set()
    return {named[0] for named in map(_journal_name, names) if named is not None}


def drop_result_journals(state_dir: Path, finished: Callable[[str], bool]) -> int:
    """Remove the executors' results journals of the runs `finished` says are over (their journals served
    only their own recovery). Returns how many went.

    Without this a state directory run every night would keep three records a job, every night, forever.
    """
    gone = 0
    try:
        names = os.listdir(state_dir / "executors")
    except OSError:
        return 0
    verdict: dict[str, bool] = {}
    for name in names:
        named = _journal_name(name)
        if named is None:
            continue
        run_id = named[0]
        if run_id not in verdict:
            verdict[run_id] = finished(run_id)
        if verdict[run_id]:
            try:
                os.unlink(state_dir / "executors" / name)
                gone += 1
            except OSError:
                pass
    return gone


def read_results(path: Path) -> list[P.ResultRecord]:
    """Every result record in one executor's journal (a torn last record is ignored)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    return P.decode_result_log(data)


def killpg(pgid: int, sig: int) -> None:
    """Signal a job's process group, if it is still there."""
    if pgid > 0:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class LocalPool:
    """This host's executors: MQ+SHM transport, their processes, their jobs' process groups."""

    core: Book
    """The engine (or an agent's book), read only here: states and attempts decide what is stale."""
    objs: RunObjects
    """The run's queues and segments."""
    sup: Supervisor
    """Spawns, watches and replaces the executor processes."""
    reader: ReportReader
    """Records to events."""
    payload_of: Callable[[int, int], bytes | None]
    """Encoded payload of (job, attempt); None for a no-op job."""
    guard: Callable[[], None]
    """Raises when this scheduler was fenced: called before every queue operation."""
    epoch: int
    """This scheduler's epoch, carried by every task record."""
    state_dir: Path
    """Where executors keep their results journals."""
    say: Callable[[str, dict[str, object]], None] = field(default=lambda _e, _f: None)
    """Event log line for the operator (event name, fields)."""
    serves: Callable[[int], bool] = field(default=lambda _i: True)
    """Whether a job runs on this host (the jobs of no other pool)."""
    sendq: deque[P.TaskRecord] = field(default_factory=deque)
    """Task records waiting for room in the request queue."""
    unplaced: deque[tuple[int, int]] = field(default_factory=deque)
    """Dispatches waiting for room in the payload arena."""
    payload_at: dict[int, tuple[int, int]] = field(default_factory=dict)
    """(attempt, arena offset) of the payload of each job's copy sent in this epoch that no executor has
    reported reading yet. Freed only once that copy is settled: at its own first report (this epoch, this
    attempt: an executor reads the payload before it reports anything), or once the engine has settled it
    without one (see `_forget_copy`). A report of another copy never frees it: an attempt's number is used
    again after a loss before start or a hand-back, and a lost copy may still report."""
    sent_here: bytearray = field(default_factory=bytearray)
    """1 for each job this scheduler has dispatched in its own epoch (from the moment the engine hands it over,
    before its payload is placed), or whose predecessor's copy its recovery settled: a predecessor's report
    of such a job is of an earlier copy (requeued without spending its attempt, so under the same number)
    and is not applied."""
    pids: dict[int, int] = field(default_factory=dict)
    """Process (group) id of each running job, for kills."""
    kills: list[tuple[float, int, int, int]] = field(default_factory=list)
    """(when, job, attempt, process group) SIGKILLs that follow a graceful SIGTERM."""
    pending_kill: dict[int, tuple[int, bool]] = field(default_factory=dict)
    """Kills asked for before the job started, applied at its start: job -> (attempt, graceful)."""
    follows: set[int] = field(default_factory=set)
    """Dispatched jobs not yet placed that follow the task dispatched just before them (Dispatch.follow)."""
    unaccepted: tuple[float, tuple[tuple[int, int], ...]] | None = None
    """After an executor was lost: when the queue was seen empty (0: not yet), and the tasks nobody had
    accepted then."""
    health_due: bool = False
    """An executor's pidfd fired: judge health at once."""
    stopping: bool = False
    """Every executor was asked to stop (stop_all): one that exits cleanly now is stopped, not lost."""
    per_msg: int = 0
    """Task records per request message."""
    sent_batches: int = 0
    """Request messages sent (pipeline figures)."""
    received_batches: int = 0
    early: list[bytes] = field(default_factory=list)
    """Report messages taken from the response queue ahead of the next drain (take_ahead)."""
    """Response messages received (pipeline figures)."""
    paced: bool = True
    """The core's slots follow the jobs' lengths (see `_pace`); False when a host share sets them."""
    ahead: int = 0
    """Tasks per slot the executors take ahead after the last job they ended (ahead_per_slot): the core
    has as many more slots per executor slot."""
    hand_back: float = field(default_factory=hand_back_seconds)
    """Under how many seconds a job counts as short (the executors' threshold)."""
    chains: Callable[[bool], None] | None = None
    """Told, as the jobs' lengths change, whether they are short (the executors take tasks ahead): the
    engine sends chains of followers only then (SchedulerCore.follow); a follower that waits longer than
    `hand_back` behind a long job is handed back, and would only have made a round trip for nothing."""

    keeps_jobs: ClassVar[bool] = False
    """A stop stops this host's jobs (or, after Ctrl-C, leaves them to a resume that reattaches)."""

    @classmethod
    def start(cls, core: Book, objs: RunObjects, reader: ReportReader, payload_of: Callable[[int, int], bytes | None],
              guard: Callable[[], None], epoch: int, state_dir: Path, *, executors: int, slots: int,
              say: Callable[[str, dict[str, object]], None] | None = None,
              serves: Callable[[int], bool] | None = None, **limits: Any) -> LocalPool:
        """The pool of a run's (or a node's) executors, with the supervisor that spawns and watches them.

        Args:
            core: what the pool reads of its tasks.
            objs: the run's queues and segments (their run id names the executors).
            reader: records to events.
            payload_of: encoded payload of (job, attempt).
            guard: raises when this scheduler was fenced.
            epoch: carried by every task record.
            state_dir: where the executors keep their journals and pidfiles.
            executors: how many executors.
            slots: slots of each.
            say: event log line for the operator.
            serves: whether a job runs on this host (default: every job).
            limits: the supervisor's per-executor settings (dead_after, orphan_timeout, cpus,
                memory, prefetch).
        """
        sup = Supervisor(objs.run_id, state_dir, objs.eboard, executors, slots, **limits)
        pool = cls(core, objs, sup, reader, payload_of, guard, epoch, state_dir)
        if say is not None:
            pool.say = say
            sup.tell = lambda msg: say("executor_note", {"text": msg})  # (restarts, the run's directory gone)
        if serves is not None:
            pool.serves = serves
        return pool

    def __post_init__(self) -> None:
        self.per_msg = P.tasks_per_message(self.objs.req.max_message_size)
        self._req_out = False
        self._poller: select.poll | None = None

    # -- the loop's side -----------------------------------------------------------------

    def attach(self, poller: select.poll) -> None:
        """Register the response queue and the executors' pidfds."""
        self._poller = poller
        poller.register(self.objs.rsp.fd, select.POLLIN)
        self.sup.poller = poller
        for fd in self.sup.fds():
            poller.register(fd, select.POLLIN)

    def join_desk(self, desk: ControlDesk) -> None:
        """Nothing to carry: operators on this host reach the desk over its own socket."""

    def on_ready(self, fd: int, cause: str) -> bool:
        """Handle one ready descriptor if it is this pool's; return whether it was."""
        if fd == self.objs.rsp.fd:
            self.drain(self.core.feed, cause)
            return True
        if fd == self.objs.req.fd:
            return True
        if any(w.pidfd == fd for w in self.sup.workers.values()):
            self.health_due = True  # an executor exited
            return True
        return False

    def submit(self, tasks: list[tuple[int, int]], follow: frozenset[int] = frozenset()) -> None:
        """Take dispatched (job, attempt) pairs; they are placed and sent by pump(). Those in `follow` go
        in the same message as the task before them (see Dispatch.follow)."""
        payload_at = self.payload_at
        if payload_at:
            release = self.objs.arena.release
            for i, _att in tasks:
                # Sent again: the engine settled the copy sent before with no report of its own (lost before
                # any executor read it), or the ring would stop for good once it came round to its room.
                copy = payload_at.pop(i, None)
                if copy is not None:
                    release(copy[1])
        self.unplaced.extend(tasks)
        # Marked now, not when placed: a predecessor's report drained before then (the next turn's, or while
        # the arena is full) must not settle this copy.
        if tasks:
            self.own(max(tasks)[0])  # (sized once for the batch)
            sent = self.sent_here
            for i, _att in tasks:
                sent[i] = 1
        if follow:
            self.follows |= follow

    def own(self, i: int) -> None:
        """Job i's copy in flight is this scheduler's (dispatched in its epoch, or settled by its recovery):
        a predecessor's report of the job, still in the response queue, is not applied to it."""
        sent = self.sent_here
        if i >= len(sent):
            # Doubled as it grows (an agent's book numbers its tasks up to 2**31: never sized by `n`).
            sent.extend(bytes(max(i + 1 - len(sent), len(sent))))
        sent[i] = 1

    def pump(self) -> None:
        """Place payloads and send task records while there is room; keep the rest for the next turn."""
        self._place()
        self._send()
        want_out = bool(self.sendq)
        if self._poller is not None and want_out != self._req_out:
            if want_out:
                self._poller.register(self.objs.req.fd, select.POLLOUT)
            else:
                self._poller.unregister(self.objs.req.fd)
            self._req_out = want_out

    def after_commit(self) -> None:
        """Nothing to let go: executors journal their reports themselves."""

    def flush(self, timeout: float) -> None:
        """Nothing waits: the queues hand over at once."""

    def pending(self) -> bool:
        """Dispatches not yet handed to an executor's queue."""
        return bool(self.sendq or self.unplaced)

    def backlog(self) -> int:
        """Dispatches waiting for room in the request queue or the payload arena."""
        return len(self.sendq) + len(self.unplaced)

    def starved(self) -> bool:
        """The payload arena found no memory in /dev/shm: dispatches wait to be sent."""
        return self.objs.arena.starved

    def traffic(self) -> tuple[int, int]:
        """Request messages sent and response messages received."""
        return self.sent_batches, self.received_batches

    def next_due(self) -> float:
        """When this pool next needs the loop (a SIGKILL due after a SIGTERM)."""
        return self.kills[0][0] if self.kills else float("inf")

    def alive(self) -> int:
        """Executors alive now."""
        return self.sup.alive_count()

    def health(self, now: float) -> list[dict[str, object]]:
        """One row per executor: its index, pid, state, heartbeat age and restarts."""
        return [{"executor": w.index, "pid": w.pid, "state": w.state.name,
                 "age": round(now - w.last_beat, 1) if w.last_beat else None, "restarts": w.restarts}
                for w in sorted(list(self.sup.workers.values()), key=lambda w: w.index)]

    def inventory(self) -> dict[int, set[tuple[int, int]]]:
        """What each live executor's journal shows it took and has not reported ended."""
        live = {w.pid for w in self.sup.workers.values() if w.state != ExecutorState.DEAD}
        held: dict[int, set[tuple[int, int]]] = {}
        for index, pid, path in result_journals(self.state_dir, self.objs.run_id):
            if pid not in live:
                continue
            mine = held.setdefault(index, set())
            for r in read_results(path):
                if r.kind in (P.RES_ACCEPTED, P.RES_STARTED):
                    mine.add((r.task, r.attempt))
                elif r.kind == P.RES_EXITED:
                    mine.discard((r.task, r.attempt))
        return held

    # -- reports -------------------------------------------------------------------------

    def drain(self, feed: Feed, cause: str) -> None:
        """Feed the engine every report waiting in the response queue."""
        recs = self.take_reports()
        if recs:
            for ev in self.reader.batch(recs, cause, time.time()):
                feed(ev)
            if self.paced and self.sup.prefetch:
                self._pace(recs, feed, cause)

    def _pace(self, recs: list[P.ResultRecord], feed: Feed, cause: str) -> None:
        """Give the core as many more slots per executor slot as the executors take tasks ahead after the
        last job that ended (ahead_per_slot: none after a long one).

        The executors take tasks ahead only while their jobs are short; the core keeps as many in flight
        only then too, so that behind long jobs no task waits in the queue where a more urgent one that
        becomes ready later could not overtake it.
        """
        for r in reversed(recs):
            if r.kind == P.RES_EXITED and r.started and not r.flags & P.FLAG_LOST:
                ahead = ahead_per_slot(self.sup.prefetch, self.hand_back, r.ended - r.started)
                break
        else:
            return
        if ahead == self.ahead:
            return
        if self.chains is not None:
            self.chains(ahead > 0)
        self.ahead = ahead
        slots = self.sup.alive_count() * self.sup.slots * (1 + ahead)
        feed(SlotsChangedEvent(slots, time.time(), cause_id=cause))

    def take_reports(self) -> list[P.ResultRecord]:
        """Every report waiting in the response queue, with this pool's bookkeeping of each done.

        Raises:
            Fenced: an executor refused this scheduler's epoch (a newer one took over).
        """
        rsp, n = self.objs.rsp, self.core.n
        recs: list[P.ResultRecord] = []
        early, self.early = self.early, []
        taken = iter(early)
        while True:
            # Checked before every message, so a scheduler frozen mid-drain takes at most
            # one message of its successor's when it wakes (the successor's sweeper finds
            # those reports in the executors' journals).
            self.guard()
            data = next(taken, None)
            if data is None:
                data = rsp.recv_nowait()
                if data is None:
                    return recs
                self.received_batches += 1
            for r in P.decode_results(data):
                if r.task >= n:
                    continue
                if r.kind == P.RES_REJECTED:
                    if r.epoch == self.epoch:
                        raise Fenced(f"fenced: an executor rejected this scheduler's epoch {r.epoch}: "
                                     "another scheduler took over")
                    continue  # a predecessor's record, refused for us: nothing to apply
                if self.stale(r):
                    continue
                self._settle_record(r)
                recs.append(r)

    def take_ahead(self) -> bool:
        """Take the report messages waiting now, for the next drain to apply; return whether any wait so.

        The response queue holds a few messages: taken out in the middle of a turn, it has room
        for the executors' next reports while the turn goes on, and the next turn settles them all.
        """
        rsp, early = self.objs.rsp, self.early
        while True:
            self.guard()
            data = rsp.recv_nowait()
            if data is None:
                return bool(early)
            self.received_batches += 1
            early.append(data)

    def stale(self, r: P.ResultRecord) -> bool:
        """Whether a report is a predecessor's (a hand-back, a start, an end) of a copy it sent of a job this
        scheduler has sent again since, or whose copy its recovery settled: applied, it would settle (or
        requeue, and so send twice) this scheduler's copy of the same job and attempt number."""
        return r.epoch < self.epoch and r.task < len(self.sent_here) and bool(self.sent_here[r.task])

    def _settle_record(self, r: P.ResultRecord) -> None:
        """Bookkeeping of one report: its payload's room, its process group, a kill waiting for its start."""
        i = r.task
        # Only the copy's own report frees its payload: this scheduler's epoch (a predecessor's records point
        # at another ring) and its attempt (the report of an earlier attempt, lost to the engine but still
        # running, must not free the payload of the attempt sent since, still waiting in the queue).
        if self.payload_at and r.epoch == self.epoch:
            copy = self.payload_at.get(i)
            if copy is not None and copy[0] == r.attempt:
                del self.payload_at[i]
                self.objs.arena.release(copy[1])
        if r.kind == P.RES_EXITED:
            self.pids.pop(i, None)
        elif r.kind == P.RES_STARTED:
            self.pids[i] = r.pid
            k = self.pending_kill.pop(i, None)
            if k is not None and k[0] == r.attempt:
                killpg(r.pid, signal.SIGTERM)
                self.kills.append((time.time() + KILL_GRACE, i, r.attempt, r.pid))
                self.kills.sort()

    def replay(self, r: P.ResultRecord, cause: str) -> Event:
        """A report read from an executor's journal rather than its queue (recovery, a sweep): booked
        as if received, and turned into its event.

        Args:
            r: an accepted, started or exited record.
            cause: cause id of the event.
        """
        self._settle_record(r)
        ev = self.reader.event(r, cause)
        assert ev is not None, f"record kind {r.kind} has no event"
        return ev

    # -- recovery --------------------------------------------------------------------------

    def reattach(self) -> tuple[list[int], int]:
        """Take over a previous scheduler's executors still alive, and drop the task records it sent
        that no executor took (they are sent again under this scheduler's epoch).

        Returns:
            The indices of the executors reattached, and how many task records were dropped.
        """
        found = self.sup.adopt()
        dropped = 0
        while (data := self.objs.req.recv_nowait()) is not None:
            dropped += len(P.decode_tasks(data))
        return found, dropped

    def executor_pids(self, indices: list[int]) -> set[int]:
        """Process ids of these executors."""
        return {self.sup.workers[i].pid for i in indices}

    def kill_lost(self, started: P.ResultRecord, executor_pid: int) -> None:
        """A started job whose executor (`executor_pid`) is gone may live on: stop its process group, and
        whatever left the group with it, before it is retried. (`started`: its start record, or the acceptance
        its executor journaled as it started it, FLAG_STARTING, whose pid is unknown: its group and marker.)"""
        killpg(started.pid, signal.SIGKILL)
        kill_job_tree(self.objs.run_id, started.executor, executor_pid, started.task, started.attempt)
        self.pids.pop(started.task, None)

    # -- health --------------------------------------------------------------------------

    def check(self, now: float, feed: Feed, cause: str, replace: bool = True) -> None:
        """Judge every executor; one that died loses its jobs (from its record) and is replaced."""
        self.health_due = False
        for index, why in self.sup.check(now):
            self._claim_from_record(index, feed, cause)
            self._kill_orphans(index)
            feed(ExecutorLostEvent(index, now, why, cause_id=cause))
            # Tasks sent but accepted by nobody may still be in the queue, or be taken by a
            # live executor right now: watched until the queue has emptied (_settle_unaccepted).
            self.unaccepted = (0.0, self.core.unaccepted())
            stopped = self.stopping and why == "exited with status 0"  # (as asked: its jobs were settled above)
            self.sup.log(f"executor {index}: {'stopped as asked' if stopped else why}")
            self.say("executor_stopped" if stopped else "executor_lost", {"executor": index, "reason": why})
            if replace and self.sup.respawn(index) is None:
                # No replacement: the run goes on with fewer slots rather than over-committing the rest.
                per_executor = self.core.slots // max(1, len(self.sup.workers))
                feed(SlotsChangedEvent(self.sup.alive_count() * per_executor, now, cause_id=cause))
        if self.unaccepted is not None:
            self._settle_unaccepted(now, feed, cause)

    def _claim_from_record(self, index: int, feed: Feed, cause: str) -> None:
        """Tell the engine every task the dead executor recorded as taken, even those it never reported.

        An executor journals what it takes right after taking it off the queue, before it does
        anything else with it, so its journal, not a guess, says what it held when it died.
        """
        core = self.core
        held: dict[tuple[int, int], P.ResultRecord] = {}
        facts: list[P.ResultRecord] = []
        for ex, _pid, path in result_journals(self.state_dir, self.objs.run_id):
            if ex != index:
                continue
            for r in read_results(path):
                key = (r.task, r.attempt)
                if r.kind == P.RES_ACCEPTED and r.epoch == self.epoch:
                    held[key] = r
                elif r.kind == P.RES_EXITED:
                    held.pop(key, None)
                    facts.append(r)
                elif r.kind == P.RES_STARTED:
                    facts.append(r)
        # Starts and ends it recorded but had not reported yet (a job that ended is not lost with it; one that
        # started counts its attempt), in the order it recorded them.
        for r in facts:
            if self._of_current_copy(r, index):
                feed(self.replay(r, cause))
        for (i, att), r in held.items():
            if i < core.n and core.state[i] == JobState.QUEUED and core.attempt[i] == att and core.executor[i] < 0:
                feed(JobAcceptedEvent(i, att, index, r.started, cause_id=cause))
            if r.flags & P.FLAG_STARTING and i < core.n and core.state[i] == JobState.QUEUED \
                    and core.attempt[i] == att and core.executor[i] == index:
                # It died starting the job, before it recorded the start: the job may have started (and is
                # stopped with the executor's other jobs). Not one that never did: held if it may not run twice.
                feed(JobExitedEvent(i, att, index, -1, time.time(), lost=True, unheard=True, cause_id=cause))

    def _of_current_copy(self, r: P.ResultRecord, index: int) -> bool:
        """Whether a start or an end the dead executor `index` journaled can be of the copy of its job the
        engine has in flight, and not of an earlier copy under the same number.

        An attempt's number is used again for a copy that never started (lost before start, handed back), so
        the journal of an executor that handed a task back still holds that hand-back when the job, sent
        again, runs on another executor: read as the new copy's end, it would count that one lost while it
        runs, and have its attempt sent again beside it.
        """
        i, core = r.task, self.core
        if i >= core.n or core.attempt[i] != r.attempt:
            return False
        if self.stale(r):
            return False  # a predecessor's copy: this scheduler has sent the job again since
        st, ex = core.state[i], core.executor[i]
        if st == JobState.RUNNING:
            return r.kind == P.RES_EXITED and ex == index  # its end is in the journal of the one running it
        if st != JobState.QUEUED:
            return False
        if r.kind == P.RES_EXITED and r.flags & P.FLAG_LOST:
            # Given back unstarted: only a copy this executor is known to hold (else: found lost with the rest).
            return ex == index
        return ex < 0 or ex == index

    def _settle_unaccepted(self, now: float, feed: Feed, cause: str) -> None:
        """Requeue tasks a lost executor took off the queue and died with before it recorded them.

        Once the request queue is empty every task sent before the loss has been taken; live
        executors record what they take at once, so a task in nobody's record a moment later
        went with the dead one.
        """
        since, jobs = self.unaccepted  # type: ignore[misc]
        core = self.core
        jobs = tuple((i, a) for i, a in jobs
                     if core.state[i] == JobState.QUEUED and core.attempt[i] == a and core.executor[i] < 0)
        if not jobs:
            self.unaccepted = None
            return
        if self.sendq or self.unplaced or self.objs.req.current_messages > 0:
            self.unaccepted = (0.0, jobs)
            return  # some may still be on their way to a live executor
        if not since:
            self.unaccepted = (now, jobs)
            return
        if now - since < UNACCEPTED_SETTLE:
            return
        recorded = self._recorded(set(jobs))
        lost = tuple(k for k in jobs if k not in recorded)
        self.unaccepted = None
        if lost:
            feed(TasksLostEvent(lost, now, cause_id=cause))

    def _recorded(self, keys: set[tuple[int, int]]) -> set[tuple[int, int]]:
        """Which of these attempts some live executor's journal shows as taken (its report is on its way)."""
        live = {w.pid for w in self.sup.workers.values() if w.state != ExecutorState.DEAD}
        found: set[tuple[int, int]] = set()
        for _ex, pid, path in result_journals(self.state_dir, self.objs.run_id):
            if pid in live:
                found.update(k for r in read_results(path) if (k := (r.task, r.attempt)) in keys)
        return found

    # -- dispatch ------------------------------------------------------------------------

    def _place(self) -> None:
        """Turn dispatches into task records, writing shell payloads into the arena."""
        core, arena, epoch = self.core, self.objs.arena, self.epoch
        state, attempt, payload_of, payload_at = core.state, core.attempt, self.payload_of, self.payload_at
        send, record, queued, noop = self.sendq.append, P.TaskRecord, int(JobState.QUEUED), P.TASK_NOOP
        un = self.unplaced
        while un:
            i, att = un[0]
            if state[i] != queued or attempt[i] != att:
                un.popleft()
                continue
            data = payload_of(i, att)
            if data is None:
                send(record(i, att, noop, 0, epoch, 0, 0))
            else:
                off = arena.put(data, task=i, attempt=att, epoch=epoch)
                if off is None and self._reclaim():
                    off = arena.put(data, task=i, attempt=att, epoch=epoch)
                if off is None:
                    return  # the arena is full: the rest waits for results to free room
                self._forget_copy(i)  # (submit did, unless the job was sent again before it)
                payload_at[i] = (att, off)
                kind = P.TASK_SHELL
                if self.follows and i in self.follows:
                    self.follows.discard(i)
                    kind = P.TASK_FOLLOW
                # flags carry the SLA tier: an executor starts its most urgent backlog task first.
                send(record(i, att, kind, core.tier[i], epoch, off, len(data)))
            un.popleft()

    def _forget_copy(self, i: int) -> None:
        """Free the payload of job `i`'s copy sent before, which the engine has settled without a report of
        its own (lost before any executor read it): no record the engine still waits on points at it."""
        copy = self.payload_at.pop(i, None)
        if copy is not None:
            self.objs.arena.release(copy[1])

    def _reclaim(self) -> bool:
        """The ring is full: free the payloads of copies the engine no longer has in flight, lost before any
        executor read them and never sent again (held, skipped or cancelled since). Returns whether any was.

        Only a full ring pays for the scan; a leaked payload is otherwise harmless until the ring comes round
        to it, and then it would stop every dispatch of the run for good.
        """
        core, q, run = self.core, JobState.QUEUED, JobState.RUNNING
        gone = [i for i, (att, _off) in self.payload_at.items()
                if core.attempt[i] != att or (core.state[i] != q and core.state[i] != run)]
        for i in gone:
            self._forget_copy(i)
        return bool(gone)

    def _send(self) -> None:
        q, req = self.sendq, self.objs.req
        if not q:
            return
        self.guard()
        # Spread small batches over the executors so one does not hoard the work. Executors that take nothing
        # ahead (an agent's, `--prefetch 0`) get one task a message: each reads only into a free slot of its
        # own, where a message of several would keep the rest behind its busy slots, never handed back, while
        # another executor may be idle.
        per = max(1, min(self.per_msg, len(q) // max(1, self.sup.alive_count()))) if self.sup.prefetch else 1
        follow = P.TASK_FOLLOW
        while q:
            n = min(per, len(q))
            while n < len(q) and n < self.per_msg and q[n].kind == follow:
                n += 1  # a follower goes with the task it follows (alone at a message's head it is handed back)
            batch = [q[k] for k in range(n)]
            if not req.send_nowait(P.encode_tasks(batch)):
                return  # full: keep the batch for the next turn, never block, never drop
            self.sent_batches += 1
            for _ in batch:
                q.popleft()

    # -- kills ---------------------------------------------------------------------------

    def kill(self, c: Kill) -> None:
        """Stop a job's attempt: SIGTERM now (or at its start), SIGKILL after a grace period."""
        i = c.job
        if i not in self.pids:
            self.pending_kill[i] = (c.attempt, c.graceful)
            return
        killpg(self.pids[i], signal.SIGTERM)
        self.kills.append((time.time() + (KILL_GRACE if c.graceful else 1.0), i, c.attempt, self.pids[i]))
        self.kills.sort()

    def fire_kills(self, now: float) -> None:
        """Send the SIGKILLs that are due, each to the process it was meant for: a job stopped and requeued
        (preempted) runs again at the same attempt, and its new process is not the one that was stopped."""
        while self.kills and self.kills[0][0] <= now:
            _, i, att, pid = self.kills.pop(0)
            if self.core.attempt[i] == att and self.pids.get(i) == pid:
                killpg(pid, signal.SIGKILL)

    def _kill_orphans(self, executor: int) -> None:
        """Jobs of a dead executor may still run, unsupervised: stop them before they are retried."""
        core = self.core
        for i, pid in list(self.pids.items()):
            if core.executor[i] == executor:
                killpg(pid, signal.SIGKILL)
                del self.pids[i]
        # What left the jobs' groups: their cgroups, or every process carrying their marker.
        kill_executor_trees(self.objs.run_id, executor)

    # -- shutdown ------------------------------------------------------------------------

    def spawn_missing(self, count: int) -> None:
        """Start executors 0..count-1 that are not running (adopted ones are kept)."""
        for i in range(count):
            if i not in self.sup.workers:
                self.sup.spawn(i)

    def stop_all(self) -> None:
        """Ask every executor to stop its jobs and exit."""
        self.stopping = True
        self.sup.terminate_all()

    def wake_all(self) -> None:
        """Tell the executors the run is done (the board says so): they exit now, not at their next beat."""
        self.sup.wake_all()

    def wait_all(self, timeout: float) -> None:
        """Wait for the executors to exit, killing the ones that do not in time."""
        self.sup.wait_all(timeout)
