"""Executor process (Process B): pulls task records, runs jobs as process groups, reports results and heartbeats."""

from __future__ import annotations

import argparse
import fcntl
import heapq
import os
import select
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from wloadctl.errors import WloadError
from wloadctl.ipc import protocol as P
from wloadctl.ipc.mq import MessageQueue, queue_name
from wloadctl.ipc.shm import (
    ExecutorBoard,
    PayloadArena,
    Segment,
    StateBoard,
    TailRing,
    segment_name,
)
from wloadctl.procs.failpoint import first_strike
from wloadctl.procs.health import process_rss_kb
from wloadctl.procs.jobtree import WARM_IDLE, JobTrees, detect, waiting_warmer
from wloadctl.procs.prestart import AWAIT_FLAG, ORPHAN_TIMEOUT, await_go
from wloadctl.procs.resultlog import NO_SPACE, ResultLog, say
from wloadctl.procs.spawning import (
    LogFile,
    Spawned,
    Spawner,
    cut_log,
    keep_descriptors_from_jobs,
    nul_byte_in,
    reap,
    tail_of,
)
from wloadctl.procs.userfiles import JobFiles

BEAT_INTERVAL = 0.25
"""Seconds between heartbeats on the executor board."""
KILL_GRACE = 3.0
"""Seconds between SIGTERM and SIGKILL when a job's group is stopped for its timeout or its max_output."""
TAIL_BYTES = 4096
"""Output kept in shared memory per finished attempt (the whole output is in the log file)."""
SILENT_START = 5.0
"""Seconds without a beat of its scheduler (or agent) after which an executor starts no task it holds ahead: a
scheduler gone does not see it start, and one that comes back (a resume) finds it unstarted and still held; an
agent's scheduler, which counts the agent lost after its agent timeout (10 s by default), gives its tasks to
others then, so an agent that comes back has its executors hand back what its predecessor took ahead instead
(fence_ahead). An agent's executors wait less (`--silent-start`, agent.AGENT_SILENT_START): that timeout may be
shorter than this, and a task one of them started after it would run beside the copy given to another agent."""
START_SLICE = 0.5
"""Longest a loop turn spends starting jobs: a big backlog on a starved host must not hold back the
heartbeat (the scheduler declares an executor silent for 5 s stuck, and kills it)."""
REPORT_HOLD = 0.005
"""Seconds an acceptance or start report may wait (journaled already) for an exit report to go out with:
a job that ends within them costs the scheduler one turn and one journal commit instead of two. An exit
report waits as long while this executor still holds prefetched tasks (it has work until then): the
exits of several jobs then cost the scheduler one turn, and its answer refills several slots at once."""
FOLLOW_HOLD = 0.05
"""Seconds the reports of a chain's progress here may wait: the end of a job whose only dependent is the
follower this executor starts in its slot (the scheduler was told so: payload `sole`), and that follower's
start. Nothing waits on them at the scheduler (the follower runs already, nothing else is released), so they
go with the next report that is due, at the latest with the start of the chain's last job here (sent at once: the
scheduler reads them while that job runs, not after its end, when the chain's next job waits for its turn): a
chain of short jobs wakes the scheduler, and costs it a turn and a journal commit, once per FOLLOW_HOLD or per
chain rather than once per REPORT_HOLD. Like every report, they are in the results journal before they wait."""
HAND_BACK = 0.05
"""Prefetch is for short jobs: an executor takes tasks ahead only while the last job it ended ran less than
this (seconds) and every job it runs started less than this ago. A task taken ahead that waits longer for
a slot is handed back unstarted, for an executor with a free slot. A job sent ahead thus waits behind a
long one for at most this long, and plans of long jobs are not prefetched at all.
$WLOADCTL_HAND_BACK sets another value."""

FAILPOINT_ENV = "WLOADCTL_FAILPOINT"
"""A crash at the worst moment, on purpose, for fault tests: `after-spawn:JOB:WHO` makes the executor that has
just started job JOB's process SIGKILL itself (WHO `executor`), its parent, the scheduler (`scheduler`), or both
(`both`), before it journals or reports the start. It strikes once per state directory (a file there says it
struck). Unset, it costs one comparison a job."""
_FAILPOINT: tuple[str, str] | None = None
"""(job, who) of FAILPOINT_ENV, read once at the start (see _read_failpoint)."""


def _read_failpoint(text: str | None) -> tuple[str, str] | None:
    if not text or text == "after-verb-commit":  # (the scheduler's own: wloadctl.procs.scheduler)
        return None
    where, _, rest = text.partition(":")
    job, _, who = rest.rpartition(":")
    if where != "after-spawn" or not job or who not in ("executor", "scheduler", "both"):
        print(f"wloadctl executor: {FAILPOINT_ENV}={text!r} is not after-spawn:JOB:executor|scheduler|both; "
              "ignored", file=sys.stderr)
        return None
    return job, who


def _failpoint(point: tuple[str, str], job: str, state_dir: Path) -> None:
    """Strike FAILPOINT_ENV if this is its job and it has not struck in this state directory yet."""
    if job != point[0] or not first_strike(state_dir):
        return
    if point[1] in ("scheduler", "both"):
        os.kill(os.getppid(), signal.SIGKILL)
    if point[1] in ("executor", "both"):
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(slots=True)
class Running:
    """One job process this executor started and has not reaped yet."""

    rec: P.TaskRecord
    """The task record it came from."""
    proc: Spawned
    """The job's process (leader of its own process group)."""
    pidfd: int
    """A pidfd that becomes readable when the process exits."""
    started: float
    """When it started."""
    began: float
    """When it started, on the monotonic clock."""
    log: LogFile
    """Its output file, kept open until the job is reaped (its size tells if a tail is due); named as the
    attempt's log once it has output."""
    deadline: float | None = None
    """When its timeout expires (monotonic clock)."""
    kill_at: float | None = None
    """When SIGKILL follows the SIGTERM of a stop, for its timeout, its max_output or this executor's end
    (monotonic clock)."""
    timed_out: bool = False
    """Its timeout expired and it was told to stop."""
    max_output: int | None = None
    """Bytes its log may reach (the payload's max_output; None: no cap)."""
    over_output: bool = False
    """Its log passed `max_output` at a beat and it was told to stop."""
    cpu: float = 0.0
    """CPUs it holds on this executor."""
    memory: int = 0
    """MiB it holds on this executor."""
    files: JobFiles | None = None
    """The result and checkpoint directory of a `run_as` job (read back when it ends)."""


@dataclass
class Executor:
    """The executor's loop and the jobs it holds."""

    run_id: str
    """Run whose queues it serves."""
    index: int
    """Its executor index (its slot on the executor board)."""
    slots: int
    """Jobs it runs at once."""
    state_dir: Path
    """Where its results journal lives."""
    orphan_timeout: float = ORPHAN_TIMEOUT
    """Exit when idle and no scheduler has beaten for this long."""
    prefetch: int = 0
    """Tasks per slot it may hold beyond those it runs."""
    cpus: float = 0.0
    """CPUs this executor offers to jobs that claim some (0 = no limit)."""
    memory: int = 0
    """MiB this executor offers to jobs that claim some (0 = no limit)."""
    running: dict[int, Running] = field(default_factory=dict)
    """Jobs running now, by pidfd."""
    heard: float = field(default_factory=time.monotonic)
    """When its scheduler was last heard (a new beat on the board of its epoch), on the monotonic clock."""
    backlog: list[tuple[int, int, float, P.TaskRecord, P.Payload]] = field(default_factory=list)
    """Accepted tasks waiting for a free slot: (tier flags, arrival, when taken on the monotonic clock, task,
    payload)."""
    follow: dict[tuple[int, int], tuple[P.TaskRecord, P.Payload, float]] = field(default_factory=dict)
    """Followers (P.TASK_FOLLOW) by the (task, attempt) they follow: each starts the moment that one exits 0
    here and is handed back unstarted otherwise, or once that one has run `hand_back` (with when it started,
    on the monotonic clock; inf until then)."""
    returned: int = 0
    """Tasks taken ahead and handed back unstarted (see HAND_BACK)."""
    hand_back: float = HAND_BACK
    """Seconds that make a job short enough to take tasks ahead of it (see HAND_BACK); 0: `prefetch` tasks per
    slot are taken ahead whatever the jobs' lengths and never handed back (an agent's executors, with prefetch
    0: what the agent takes ahead waits in its node's request queue for whichever executor has a slot free)."""
    last_run: float = float("inf")
    """How long the last job this executor reaped ran (none yet: too long to prefetch behind)."""
    outbox: list[P.ResultRecord] = field(default_factory=list)
    """Results journaled but not yet sent (held, or the response queue was full)."""
    report_due: float = 0.0
    """When the oldest held report in the outbox must go out (0: none held)."""
    urgent: bool = False
    """The outbox holds a rejection, or the start of a chain's last job here (FOLLOW_HOLD): send it now."""
    exits: bool = False
    """The outbox holds an exit report: sent now when no prefetched task waits here, else held."""
    rsp_full: bool = False
    """The last send found the response queue full."""
    warm_until: float = 0.0
    """Keep-warm writes go on until then with no job running (monotonic clock; see jobtree.WARM_IDLE)."""
    more_to_start: bool = False
    """The last turn's time for starting jobs ran out with startable ones left (the next poll does not wait)."""
    unjournaled: list[P.ResultRecord] = field(default_factory=list)
    """Results not yet written to the results journal."""
    _seq: int = 0
    """Arrival order of backlog tasks."""
    spawner: Spawner = field(default_factory=Spawner)
    """Starts the jobs' processes."""
    poller: select.poll = field(default_factory=select.poll)
    """Waits on the request queue, the response queue and every job's pidfd."""
    silent_start: float = SILENT_START
    """Seconds without a beat of its scheduler (or agent) after which it starts no task it holds (SILENT_START)."""
    fence_ahead: bool = False
    """Start a task held ahead only while no newer epoch is on the board: one of an older epoch is handed back
    unstarted instead (an agent's executors: an agent started again cannot vouch for what the one before took
    ahead, which its run may have given to another agent meanwhile)."""
    epoch: int = 0
    done: int = 0
    stop: bool = False
    look: bool = False
    """The scheduler asked this executor to read the board now (SIGUSR1: the run is done), not at its next beat."""
    wake_fd: int = -1
    """Read end of the pipe a caught signal writes to (signal.set_wakeup_fd): a signal ends the wait at once."""

    def open(self) -> None:
        """Open the run's queues and segments (the scheduler created them)."""
        rid = self.run_id
        self.req = MessageQueue.open(queue_name(rid, "req"))
        self.rsp = MessageQueue.open(queue_name(rid, "rsp"))
        self.arena = PayloadArena(Segment.open(segment_name(rid, "arena")))
        self.tails = TailRing(Segment.open(segment_name(rid, "tail")))
        self.board = StateBoard.open(segment_name(rid, "board"))
        self.eboard = ExecutorBoard.open(segment_name(rid, "exec"))
        self.per_msg = P.results_per_message(self.rsp.max_message_size)
        jdir = self.state_dir / "executors"
        jdir.mkdir(parents=True, exist_ok=True)
        # Every result is written here before it is sent: a scheduler that crashed after
        # receiving it but before journaling it finds it again on restart.
        self.journal = ResultLog(jdir / f"{rid}-{self.index}-{os.getpid()}.results", f"executor {self.index}")
        keep_descriptors_from_jobs()
        # Before the first job: what jobs leave behind must be re-parented here, not to init.
        self.trees = JobTrees(rid, self.index, detect(rid))
        self.spawner.home_group = self.trees.home_group()
        self.warm_until = time.monotonic() + WARM_IDLE  # its first job is on its way
        self.spawner.enter = self.trees.enter

    # -- the loop ------------------------------------------------------------------------

    def serve(self) -> None:
        """Run until told to stop, the run is done, or the scheduler is gone for good."""
        poller = self.poller
        req_fd, rsp_fd, wake_fd = self.req.fd, self.rsp.fd, self.wake_fd
        if wake_fd >= 0:
            poller.register(wake_fd, select.POLLIN)
        rsp_on = False
        req_on = False
        # The loop waits on the monotonic clock: a wall clock set back must not stop the beats
        # (the scheduler would declare this executor dead), nor one set forward time jobs out.
        next_beat = 0.0
        self.heard = time.monotonic()
        sched_beat = 0.0
        while True:
            now = time.monotonic()
            want_req = not self.stop and len(self.backlog) + len(self.running) < self._room(now)
            if want_req != req_on:
                if want_req:
                    poller.register(req_fd, select.POLLIN)
                else:
                    poller.unregister(req_fd)
                req_on = want_req
            if self.rsp_full != rsp_on:
                rsp_on = not rsp_on
                if rsp_on:
                    poller.register(rsp_fd, select.POLLOUT)
                else:
                    poller.unregister(rsp_fd)
            # A full response queue is waited for through POLLOUT: a report that is due then must not
            # turn the wait into a busy loop of failed sends (it takes the CPU the scheduler drains with).
            due = min(next_beat, self._next_deadline(),
                      self.report_due if self.outbox and not self.rsp_full else next_beat,
                      self._hand_back_due())
            warm = self.trees.warm_every if self.running or now < self.warm_until else 0.0
            if warm:
                due = min(due, self.trees.last_move + warm)
            timeout = 0.0 if self.more_to_start else max(0.0, due - now)
            for fd, _ev in poller.poll(timeout * 1000):
                if fd == req_fd:
                    self._take()
                elif fd in self.running:
                    self._reap(fd)
                elif fd == wake_fd:
                    _drain(wake_fd)
            now = time.monotonic()
            self._start_backlog()
            if self.follow or (self.backlog and self.prefetch and len(self.running) >= self.slots):
                self._hand_back(now)
            self._check_timeouts(now)
            self._flush(now)
            if warm and (self.running or now < self.warm_until):
                self.trees.keep_warm(now)
            if now >= next_beat or self.look:
                if now >= next_beat:
                    next_beat = now + BEAT_INTERVAL
                self.look = False
                hdr = self._header()
                if hdr is not None:
                    if hdr.epoch > self.epoch:
                        self.epoch = hdr.epoch
                    # Only the newest epoch's beats count as hearing the active scheduler: a
                    # standby reads `seen_scheduler_beat` before it decides to take over.
                    if hdr.epoch == self.epoch and hdr.beat != sched_beat:
                        sched_beat, self.heard = hdr.beat, now
                    # Reports the response queue has no room for do not hold it back once the run is done:
                    # they are in its results journal (_flush journals first), and no scheduler reads the
                    # queue any more. (A resume that found every job finished ends without a turn, leaving
                    # the reports sent to the scheduler it replaced to fill the queue.)
                    if hdr.done and hdr.epoch == self.epoch and not self.running and not self.backlog \
                            and (not self.outbox or self.rsp_full):
                        break
                self._beat(time.time(), sched_beat)
                # (what it holds ahead is not started without a scheduler: SILENT_START)
                if now - self.heard > self.orphan_timeout and not self.running:
                    break
            # Told to stop, it waits for its reports to be sent, unless the response queue is full while no
            # scheduler beats: no one reads it then (a scheduler killed -9), and the reports are in its results
            # journal (_flush journals first), which a resume or an offline cancel reads.
            if self.stop and not self.running and (
                    not self.outbox or (self.rsp_full and now - self.heard > self.silent_start)):
                break

    def _header(self) -> P.BoardHeader | None:
        try:
            return self.board.read_header()
        except WloadError:
            return None

    def _room(self, now: float) -> int:
        """Tasks this executor may hold now: one per slot, and more per slot while its jobs are short ones
        (the last one it ended, and each it runs so far, under `hand_back`): as many as start within
        `hand_back` at the last job's pace, at most `prefetch` (ahead_per_slot)."""
        limit = self.hand_back
        if limit <= 0:
            return (1 + self.prefetch) * self.slots  # takes ahead whatever the jobs' lengths
        if not self.prefetch or any(now - r.began >= limit for r in self.running.values()):
            return self.slots
        return (1 + ahead_per_slot(self.prefetch, limit, self.last_run)) * self.slots

    def _hand_back_due(self) -> float:
        """When the oldest task taken ahead has waited HAND_BACK while every slot is busy (inf: none waits;
        a task that waits with a slot free waits for cpu or memory room, as the first in line should)."""
        if self.hand_back <= 0:
            return float("inf")
        due = min(f[2] for f in self.follow.values()) + self.hand_back if self.follow else float("inf")
        if not self.backlog or not self.prefetch or len(self.running) < self.slots:
            return due
        return min(due, min(b[2] for b in self.backlog) + self.hand_back)

    def _hand_back(self, now: float) -> None:
        """Hand back, unstarted, the tasks that waited HAND_BACK for a slot here (an executor with a free slot
        takes them; the scheduler requeues them at the same attempt), and the followers whose leader has run
        HAND_BACK (they wait for it at the scheduler)."""
        if now < self._hand_back_due():
            return
        for key, f in list(self.follow.items()):
            if key in self.follow and now - f[2] >= self.hand_back:
                del self.follow[key]
                self._return(f[0])  # its upstream runs long: it waits for it at the scheduler, where it can be held
        if not self.backlog or not self.prefetch or len(self.running) < self.slots:
            return
        keep: list[tuple[int, int, float, P.TaskRecord, P.Payload]] = []
        for b in self.backlog:
            if now - b[2] < self.hand_back:
                keep.append(b)
                continue
            self._return(b[3])
        heapq.heapify(keep)
        self.backlog = keep
        self.urgent = True  # another executor may be idle for want of them: they go now

    def _return(self, rec: P.TaskRecord) -> None:
        """Hand a task back unstarted, with its followers (the scheduler requeues a task at the same attempt, and
        gives a follower a new one: SchedulerCore._unfollow)."""
        stamp = time.time()
        while True:
            self.returned += 1
            self._emit(P.ResultRecord(P.RES_EXITED, P.FLAG_LOST | P.FLAG_RETURNED, self.index, rec.task,
                                      rec.attempt, 0, 0, rec.epoch, 0, 0.0, stamp, 0, 0))
            f = self.follow.pop((rec.task, rec.attempt), None)
            if f is None:
                return
            rec = f[0]

    def _drop_followers(self, rec: P.TaskRecord) -> None:
        """Task `rec` will not exit 0 here: the tasks that follow it go back unstarted."""
        f = self.follow.pop((rec.task, rec.attempt), None) if self.follow else None
        if f is not None:
            self._return(f[0])

    def _next_deadline(self) -> float:
        t = float("inf")
        for r in self.running.values():
            if r.kill_at is not None:
                t = min(t, r.kill_at)
            elif r.deadline is not None:
                t = min(t, r.deadline)
        return t

    def _take(self) -> None:
        """Receive task records while there is room; no-op tasks complete at once."""
        # A takeover publishes its epoch on the board before it dispatches anything: reading
        # it here, not only at the next beat, fences a woken predecessor's records at once.
        try:
            epoch = self.board.read_epoch()  # the epoch alone: the rest of the header is read at the beat
        except WloadError:
            epoch = 0
        if epoch > self.epoch:
            self.epoch = epoch
        room = self._room(time.monotonic())
        while len(self.backlog) + len(self.running) < room:
            data = self.req.recv_nowait()
            if data is None:
                return
            now = time.time()
            recs = P.decode_tasks(data)
            # What was taken is recorded before anything else is done with it: if this
            # executor dies from here on, its journal, not a guess, tells the scheduler
            # which tasks it held.
            taken = [P.ResultRecord(P.RES_ACCEPTED, 0, self.index, rec.task, rec.attempt, 0, 0, rec.epoch, 0,
                                    now, 0.0, 0, 0) for rec in recs if rec.epoch >= self.epoch]
            for k in range(0, len(taken), self.per_msg):
                self.journal.write(P.encode_results(taken[k : k + self.per_msg]))
            accepted: list[P.ResultRecord] = []
            # The record before in this message, while it may still exit 0 here (what a follower follows).
            prev: P.TaskRecord | None = None
            for rec in recs:
                before, prev = prev, None
                if rec.epoch < self.epoch:
                    self._emit(P.ResultRecord(P.RES_REJECTED, 0, self.index, rec.task, rec.attempt, 0, 0,
                                              rec.epoch, 0, now, now, 0, 0))
                    continue
                self.epoch = rec.epoch
                if rec.kind == P.TASK_NOOP:
                    self.done += 1
                    self._emit(P.ResultRecord(P.RES_EXITED, 0, self.index, rec.task, rec.attempt, 0, 0,
                                              rec.epoch, 0, now, now, 0, 0))
                    continue
                try:
                    payload = P.decode_payload(self.arena.get_for(rec))
                except WloadError as e:
                    # Never run what another record's payload says: report a failed start.
                    self._spawn_failed(rec, f"cannot read the task's payload: {e.message}")
                    continue
                if rec.kind == P.TASK_FOLLOW:
                    after = payload.extra.get("after") if payload.extra else None
                    accepted.append(P.ResultRecord(P.RES_ACCEPTED, 0, self.index, rec.task, rec.attempt, 0, 0,
                                                   rec.epoch, 0, now, 0.0, 0, 0))
                    if before is None or after != f"{before.task}:{before.attempt}":
                        self._return(rec)  # not behind the task it follows: the scheduler waits for that one
                        continue
                    # Its wait counts from the start of the one it follows (_spawn), not behind the whole chain.
                    self.follow[(before.task, before.attempt)] = (rec, payload, float("inf"))
                    prev = rec
                    continue
                prev = rec
                # Most urgent SLA tier first (the record's flags carry it), then arrival order:
                # a critical task sent after a prefetched low one still starts first.
                self._seq += 1
                heapq.heappush(self.backlog, (rec.flags, self._seq, time.monotonic(), rec, payload))
                accepted.append(P.ResultRecord(P.RES_ACCEPTED, 0, self.index, rec.task, rec.attempt, 0, 0,
                                               rec.epoch, 0, now, 0.0, 0, 0))
            # Acceptances are journaled already (above): they only need sending.
            for a in accepted:
                self._send_only(a)
            self._start_backlog()

    def _start_backlog(self) -> None:
        now = time.monotonic()
        until = now + START_SLICE
        self.more_to_start = False
        if self.backlog and now - self.heard > self.silent_start:
            return  # (its scheduler's next beat, or the one that takes the run over, lets them start)
        while self.backlog and len(self.running) < self.slots:
            if time.monotonic() >= until:
                self.more_to_start = True  # the loop beats, then comes back at once for the rest
                return
            _tier, _seq, _taken, rec, payload = self.backlog[0]
            if self.fence_ahead and rec.epoch < self._board_epoch():
                # (read again before each start: a newer epoch may be published while a turn starts jobs)
                heapq.heappop(self.backlog)
                self._return(rec)
                continue
            cpu, mem = _claim(payload)
            if (self.cpus and cpu > self.cpus) or (self.memory and mem > self.memory):
                heapq.heappop(self.backlog)
                self._refuse(rec, f"needs cpu {cpu:g} and memory {mem} MiB; an executor offers cpu "
                                  f"{self.cpus:g} and memory {self.memory} MiB")
                self._drop_followers(rec)
                continue
            used_cpu = sum(r.cpu for r in self.running.values())
            used_mem = sum(r.memory for r in self.running.values())
            if (self.cpus and used_cpu + cpu > self.cpus) or (self.memory and used_mem + mem > self.memory):
                return  # first in line waits for room, so a big job is not overtaken forever
            heapq.heappop(self.backlog)
            self._spawn(rec, payload)

    def _board_epoch(self) -> int:
        """The newest epoch on the board (this executor's own when the board cannot be read now)."""
        try:
            self.epoch = max(self.epoch, self.board.read_epoch())
        except WloadError:
            pass
        return self.epoch

    def _refuse(self, rec: P.TaskRecord, why: str) -> None:
        now = time.time()
        off, length = self.tails.write(self.index, rec.task, rec.attempt, why.encode())
        self._emit(P.ResultRecord(P.RES_EXITED, P.FLAG_SPAWN_FAILED | P.FLAG_TAIL, self.index, rec.task,
                                  rec.attempt, 0, 126, rec.epoch, 0, now, now, off, length))

    def _spawn(self, rec: P.TaskRecord, p: P.Payload) -> None:
        # (an instance whose loop item cannot be given safely carries why in `unfit`: it never runs)
        unfit = p.extra.get("unfit") if p.extra else None
        unfit = unfit or nul_byte_in(p.command, p.env, p.cwd)
        if unfit is not None:
            self._spawn_failed(rec, unfit)  # before argv_for, whose PATH look-up would raise on it too
            return
        now = time.time()
        spawner = self.spawner
        env = spawner.env_for(p.env)
        if env is spawner.base_env:
            env = dict(env)  # the job's marker is added to it below: never to the shared base
        argv = spawner.argv_for(p.command, env)
        log: LogFile | None = None
        cpu, mem = _claim(p)
        run_as = p.extra.get("run_as") if p.extra else None
        join = self.trees.prepare(rec.task, rec.attempt, env, cpu, mem, bool(p.extra and p.extra.get("enforce")))
        files: JobFiles | None = None
        try:
            if run_as:
                # The run's folders are not the user's: the job writes in a directory of its own.
                files = JobFiles.make(run_as, env, self.run_id)
            log = _open_log(spawner, p.log_path, lend=run_as is None)
            # On record before the process exists: an executor killed between the start and its journaling of
            # the start leaves this, and the job, which may have started, is not taken for one that never did.
            self.unjournaled.append(P.ResultRecord(P.RES_ACCEPTED, P.FLAG_STARTING, self.index, rec.task,
                                                   rec.attempt, 0, 0, rec.epoch, 0, now, 0.0, 0, 0))
            self._journal()
            proc = spawner.spawn(argv, env, p.cwd, log.fd, run_as=run_as, join=join)
            if _FAILPOINT is not None:
                _failpoint(_FAILPOINT, p.job, self.state_dir)
        except (OSError, ValueError) as e:
            # (ValueError: what Python refuses to hand to exec, as a NUL byte nul_byte_in missed.)
            if log is not None:
                spawner.return_log(log)
            if files is not None:
                files.discard()
            self.trees.end(rec.task, rec.attempt, 0)  # its group, made or taken for it, is free again
            if isinstance(e, UnicodeEncodeError):
                # A lone surrogate that stands for no byte of a file name (U+D800 to U+DC7F, U+DD00 up), e.g. a
                # loop's item from an upstream's result: no argument, variable or path can carry it.
                bad = e.object[e.start:e.end] if isinstance(e.object, str) else ""
                code = f" (U+{ord(bad[0]):04X})" if bad else ""
                self._spawn_failed(rec, f"its command, environment or working directory holds a lone surrogate{code},"
                                        " which is not text: no program can be given it")
            elif p.cwd and not os.path.isdir(p.cwd):
                self._spawn_failed(rec, f"cannot start in its working directory {p.cwd}: no such directory here")
            else:
                self._spawn_failed(rec, f"cannot start {argv[0] if argv[0] != '/bin/sh' else 'shell'}: "
                                        f"{getattr(e, 'strerror', None) or e}")
            return
        pidfd = os.pidfd_open(proc.pid)
        self.trees.leaders.add(proc.pid)
        began = time.monotonic()
        r = Running(rec, proc, pidfd, now, began, log, began + p.timeout if p.timeout else None,
                    max_output=p.max_output, cpu=cpu, memory=mem, files=files)
        if self.follow:
            f = self.follow.get((rec.task, rec.attempt))
            if f is not None:
                self.follow[(rec.task, rec.attempt)] = (f[0], f[1], began)  # its follower waits from now
        self.running[pidfd] = r
        self.poller.register(pidfd, select.POLLIN)
        quiet = rec.kind == P.TASK_FOLLOW and _sole(p)
        if quiet and (rec.task, rec.attempt) not in self.follow:
            # The chain's last job here: what it held goes now, so the scheduler takes it in while this job
            # runs, and has only this job's end left to read when the chain's next job is due.
            quiet, self.urgent = False, True
        self._emit(P.ResultRecord(P.RES_STARTED, 0, self.index, rec.task, rec.attempt, 0, 0, rec.epoch,
                                  proc.pid, now, 0.0, 0, 0), quiet=quiet)

    def _spawn_failed(self, rec: P.TaskRecord, msg: str) -> None:
        self._drop_followers(rec)
        now = time.time()
        off, length = self.tails.write(self.index, rec.task, rec.attempt, msg.encode())
        self._emit(P.ResultRecord(P.RES_EXITED, P.FLAG_SPAWN_FAILED | P.FLAG_TAIL, self.index, rec.task,
                                  rec.attempt, 0, 127, rec.epoch, 0, now, now, off, length))

    def _reap(self, pidfd: int) -> None:
        r = self.running.pop(pidfd)
        self.poller.unregister(pidfd)
        rc = reap(r.proc)
        ended = time.monotonic()
        self.warm_until = ended + WARM_IDLE
        self.last_run = ended - r.began
        os.close(pidfd)
        now = time.time()
        if r.timed_out or r.over_output:
            _killpg(r.proc.pid, signal.SIGKILL)  # stragglers of the group go too
        # Whatever the job left, in its group or out of it, ends with it.
        self.trees.leaders.discard(r.proc.pid)
        self.trees.end(r.rec.task, r.rec.attempt, r.proc.pid)
        if r.files is not None:
            r.files.collect()  # before the exit report: the scheduler reads the result when it gets it
        sig = -rc if rc < 0 else 0
        code = 128 + sig if sig else rc
        # Cut before the tail is read, which then ends with the line that says so. (Stopped, as the job's reason
        # tells it, when it ended by a signal: one seen past its cap only as it exited on its own was not.)
        cut = r.max_output is not None and cut_log(r.log, r.max_output, r.over_output and sig != 0)
        named = self.spawner.publish_log(r.log)
        tail = tail_of(r.log.fd, r.log.path, TAIL_BYTES) if named else b""
        self.spawner.return_log(r.log)
        off, length = self.tails.write(self.index, r.rec.task, r.rec.attempt, tail) if tail else (0, 0)
        flags = (P.FLAG_TIMED_OUT if r.timed_out else 0) | (P.FLAG_TAIL if tail else 0) | \
            (P.FLAG_OUTPUT_CUT if cut else 0)
        self.done += 1
        f = self.follow.pop((r.rec.task, r.rec.attempt), None) if self.follow else None
        succeeded = f is not None and code == 0 and not r.timed_out and not cut and not self.stop and \
            not self._paused()
        self._emit(P.ResultRecord(P.RES_EXITED, flags, self.index, r.rec.task, r.rec.attempt, sig, code,
                                  r.rec.epoch, r.proc.pid, r.started, now, off, length),
                   quiet=succeeded and _sole(f[1]))  # type: ignore[index]
        if f is not None:
            if succeeded:
                # Its successor starts now, in the slot this job leaves, ahead of every other task here. This
                # end goes on record in the same write as the successor's "starting" (_spawn journals what waits
                # before any start), so a kill -9 after the successor starts does not run this job again.
                self._seq += 1
                heapq.heappush(self.backlog, (-1, self._seq, time.monotonic(), f[0], f[1]))
            else:
                self._return(f[0])

    def _check_timeouts(self, now: float) -> None:
        """Stop jobs past their timeout (`now` and the deadlines are on the monotonic clock)."""
        for r in self.running.values():
            if r.kill_at is not None and now >= r.kill_at:
                _killpg(r.proc.pid, signal.SIGKILL)
                r.kill_at = now + KILL_GRACE
            elif r.deadline is not None and not r.timed_out and not r.over_output and now >= r.deadline:
                r.timed_out = True
                _killpg(r.proc.pid, signal.SIGTERM)
                r.kill_at = now + KILL_GRACE

    def _check_output(self, now: float) -> None:
        """Stop the jobs whose log has passed their max_output, as a timeout stops a job: SIGTERM to its group now,
        SIGKILL after KILL_GRACE (`now` on the monotonic clock). Each is cut back to its cap once it is reaped.

        Read at each beat: between two beats a job writes what it can in BEAT_INTERVAL, and the cut gives that
        back when it ends. One that goes on writing after its SIGTERM, past twice its cap, is killed (SIGKILL) at
        that beat, not after the grace: at disk speed a grace of KILL_GRACE is gigabytes."""
        for r in self.running.values():
            cap = r.max_output
            if cap is None or (r.kill_at is not None and not r.over_output):
                continue  # (no cap, or it is being stopped already: its timeout, or this executor's stop)
            try:
                size = os.fstat(r.log.fd).st_size
            except OSError:
                continue
            if r.over_output:
                if size > 2 * cap:
                    _killpg(r.proc.pid, signal.SIGKILL)
            elif size > cap:
                r.over_output = True
                _killpg(r.proc.pid, signal.SIGTERM)
                r.kill_at = now + KILL_GRACE

    def _emit(self, rec: P.ResultRecord, quiet: bool = False) -> None:
        """Journal (at the next flush) and send a report; `quiet`: a chain's progress here (FOLLOW_HOLD)."""
        self.outbox.append(rec)
        self.unjournaled.append(rec)
        if rec.kind == P.RES_REJECTED:
            self.urgent = True
        elif quiet:
            self._due(FOLLOW_HOLD)
        else:
            if rec.kind == P.RES_EXITED:
                self.exits = True
            self._due(REPORT_HOLD)

    def _send_only(self, rec: P.ResultRecord) -> None:
        """Queue a report that is in the journal already."""
        self.outbox.append(rec)
        self._due(REPORT_HOLD)

    def _due(self, hold: float) -> None:
        """A report held here may wait `hold` seconds from now (the outbox goes when its earliest is due)."""
        due = time.monotonic() + hold
        if not self.report_due or due < self.report_due:
            self.report_due = due

    def _flush(self, now: float) -> None:
        """Journal every pending result, then send them unless they may still wait for an exit report.

        A full queue keeps the rest for the next turn.
        """
        self._journal()
        out = self.outbox
        # An exit is told at once when nothing waits here to start: the scheduler may have work for the slot.
        # Tasks waiting here (taken ahead, or following the job that ended) start without it, so the reports
        # wait a moment (REPORT_HOLD) and go in one message.
        urgent = self.urgent or (self.exits and not self.backlog and not self.follow)
        if not out or (not urgent and not self.rsp_full and now < self.report_due):
            return
        if len(out) > 1:
            # An acceptance sent with the same task's start (or end) says nothing the start does not:
            # the scheduler learns the executor from either, and the journal here has both.
            later = {(r.task, r.attempt) for r in out if r.kind != P.RES_ACCEPTED}
            if later:
                out[:] = [r for r in out if r.kind != P.RES_ACCEPTED or (r.task, r.attempt) not in later]
        sent = 0
        while sent < len(out):
            batch = out[sent : sent + self.per_msg]
            if not self.rsp.send_nowait(P.encode_results(batch)):
                break
            sent += len(batch)
        del out[:sent]
        self.rsp_full = bool(out)
        if not out:
            self.urgent = self.exits = False
            self.report_due = 0.0

    def _paused(self) -> bool:
        """The scheduler starts nothing new now (the run was cancelled, or it is stopping): followers go back."""
        return self.board.read_paused() in (P.PAUSE_CANCELLED, P.PAUSE_STOPPING)

    def _journal(self) -> None:
        """Write every result not yet in the results journal."""
        if self.unjournaled:
            for k in range(0, len(self.unjournaled), self.per_msg):
                self.journal.write(P.encode_results(self.unjournaled[k : k + self.per_msg]))
            self.unjournaled.clear()

    def _beat(self, now: float, sched_beat: float) -> None:
        self.trees.tidy()
        if self.journal.waiting:
            self.journal.flush()
        # A running job's output becomes readable at its log path within a beat of its first byte.
        for r in self.running.values():
            if not r.log.named:
                self.spawner.publish_log(r.log)
        self._check_output(time.monotonic())
        tasks = tuple((r.rec.task, r.rec.attempt) for r in self.running.values())[:16]
        self.eboard.write(self.index, P.ExecutorSlot(
            executor=self.index, pid=os.getpid(), state=1, beat=now, load1=os.getloadavg()[0],
            rss_kb=process_rss_kb(), running=len(self.running), slots=self.slots, jobs_done=self.done,
            seen_epoch=self.epoch, seen_scheduler_beat=sched_beat, running_tasks=tasks))

    def shutdown(self) -> None:
        """Stop every job still running (SIGTERM, then SIGKILL) and close what was opened."""
        for r in list(self.running.values()):
            _killpg(r.proc.pid, signal.SIGTERM)
        deadline = time.time() + KILL_GRACE
        for r in list(self.running.values()):
            waiter = select.poll()
            waiter.register(r.pidfd, select.POLLIN)
            if not waiter.poll(max(0.0, deadline - time.time()) * 1000):
                _killpg(r.proc.pid, signal.SIGKILL)
            reap(r.proc)
            self.trees.end(r.rec.task, r.rec.attempt, r.proc.pid)
            if r.files is not None:
                r.files.collect()
            os.close(r.pidfd)
            if r.max_output is not None:
                cut_log(r.log, r.max_output, stopped=True)  # (stopped with the others, if not for its output)
            self.spawner.publish_log(r.log)
            os.close(r.log.fd)
        self.running.clear()
        self.spawner.close_logs()
        self.trees.close()
        for q in (self.req, self.rsp):
            q.close()
        for s in (self.arena, self.tails, self.board, self.eboard):
            s.close()
        self.journal.close()


def _open_log(spawner: Spawner, path: str, lend: bool) -> LogFile:
    """The job's output file (lent until it has output, see `Spawner.lend_log`; else opened at its log at
    once, as for a job run as another user: the file is chowned to them); on a full disk its output goes
    nowhere, and it runs and reports all the same.

    Raises:
        OSError: the log cannot be opened for another reason.
    """
    try:
        return spawner.lend_log(path) if lend else LogFile(spawner.open_log(path), path, path, True)
    except OSError as e:
        if e.errno not in NO_SPACE:
            raise
        say(f"cannot open log {path}: no space left on device; the job runs without a log")
        fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        if fd < 3:
            low, fd = fd, fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(low)
        return LogFile(fd, os.devnull, path, True)


def _sole(p: P.Payload) -> bool:
    """The job a follower follows has no other dependent (the scheduler says so in the follower's payload)."""
    return bool(p.extra) and p.extra.get("sole") == "1"


def _claim(p: P.Payload) -> tuple[float, int]:
    """CPUs and MiB a job's payload claims."""
    if not p.extra:
        return 0.0, 0
    return float(p.extra.get("cpu", 0) or 0), int(p.extra.get("memory", 0) or 0)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def ahead_per_slot(prefetch: int, hand_back: float, last_run: float) -> int:
    """Tasks per slot to take ahead after a job that ran `last_run` seconds: as many as would start,
    one after another, within `hand_back` (so that none waits long enough to be handed back), at most
    `prefetch`; none after a long job, or before any job has ended (`last_run` infinite)."""
    if prefetch <= 0 or last_run >= hand_back:
        return 0
    return prefetch if last_run <= 0 else min(prefetch, int(hand_back / last_run))


def hand_back_seconds() -> float:
    """HAND_BACK, or $WLOADCTL_HAND_BACK when it is a positive number of seconds."""
    try:
        v = float(os.environ.get("WLOADCTL_HAND_BACK", ""))
    except ValueError:
        return HAND_BACK
    return v if v > 0 else HAND_BACK


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m wloadctl.procs.executor`."""
    ap = argparse.ArgumentParser(prog="wloadctl-executor")
    ap.add_argument("--run", required=True)
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--orphan-timeout", type=float, default=ORPHAN_TIMEOUT)
    ap.add_argument("--cpus", type=float, default=0.0)
    ap.add_argument("--prefetch", type=int, default=0)
    ap.add_argument("--memory", type=int, default=0)
    ap.add_argument("--hand-back", type=float, default=None)
    ap.add_argument("--fence-ahead", action="store_true")
    ap.add_argument("--silent-start", type=float, default=SILENT_START)
    ap.add_argument(AWAIT_FLAG, action="store_true", help="started ahead of the run: wait to be taken (prestart.py)")
    a = ap.parse_args(argv)
    global _FAILPOINT
    _FAILPOINT = _read_failpoint(os.environ.get(FAILPOINT_ENV))
    if a.await_go and not await_go(Path(a.state_dir), a.index, waiting_warmer()):
        return 0
    ex = Executor(a.run, a.index, a.slots, Path(a.state_dir), a.orphan_timeout, cpus=a.cpus, memory=a.memory,
                  prefetch=a.prefetch, hand_back=hand_back_seconds() if a.hand_back is None else a.hand_back,
                  fence_ahead=a.fence_ahead, silent_start=a.silent_start)
    # Ctrl-C belongs to the scheduler; SIGTERM means: stop taking work, stop jobs, exit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_term(_s: int, _f: object) -> None:
        ex.stop = True
        for r in ex.running.values():
            _killpg(r.proc.pid, signal.SIGTERM)
            if r.kill_at is None:  # a job that ignores SIGTERM is killed after the grace (_check_timeouts)
                r.kill_at = time.monotonic() + KILL_GRACE

    def on_look(_s: int, _f: object) -> None:
        ex.look = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_look)
    # A caught signal writes to this pipe, which the loop polls: SIGTERM and SIGUSR1 end its wait
    # at once (a signal alone would not: the wait resumes after the handler, PEP 475).
    ex.wake_fd, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    try:
        ex.open()
    except WloadError as e:
        print(f"wloadctl executor {a.index}: {e.one_line()}", file=sys.stderr)
        return 3
    try:
        ex.serve()
    finally:
        ex.shutdown()
    return 0


def _drain(fd: int) -> None:
    """Empty the signal wake-up pipe."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


if __name__ == "__main__":
    code = main()
    # Everything is closed and written (shutdown); the interpreter's own teardown, 10 ms the scheduler would wait
    # for at the end of every run, has nothing left to do.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
