"""Recovery after a scheduler crash: reconcile the journal's in-flight jobs with what the executors did."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from wloadctl.core.events import Event, JobExitedEvent
from wloadctl.core.states import JobState
from wloadctl.errors import StoreError, WloadError
from wloadctl.ipc import protocol as P
from wloadctl.procs.health import pid_alive
from wloadctl.procs.jobtree import kill_job_tree
from wloadctl.procs.localpool import LocalPool, killpg, read_results, result_journals
from wloadctl.procs.pools import Feed
from wloadctl.procs.reports import ReportReader

if TYPE_CHECKING:
    from wloadctl.core.engine import SchedulerCore
    from wloadctl.store import Store
    from wloadctl.store.base import JournalLoss

STOP_VERB = "stop"
"""The journaled action of a stop that stops the run's running jobs (SIGTERM), written before any is signalled."""
STOPPED_WITH_RUN = "interrupted: run stopped"
"""How the end of a job stopped with the run is told (requeued, or held when it may not run twice)."""
SETTLE = 0.3
"""Seconds to let live executors journal what they took from the request queue before it is read (and, at their
next beat, executor.BEAT_INTERVAL, the results a full disk kept waiting)."""
SWEEP_INTERVAL = 1.0
"""Seconds between sweeps for reports a fenced predecessor took from the response queue."""
SWEEP_AFTER_DEATH = 3.0
"""Sweeps stop this long after the predecessor's process is gone (nothing can take reports then)."""


def _decode_prefix(data: bytes) -> tuple[list[P.ResultRecord], int]:
    """The complete messages at the start of a journal's tail, and how many bytes they take.

    A message still being appended is left for the next read.
    """
    pos = 0
    while len(data) - pos >= P.HEADER.size:
        end = pos + P.HEADER.size + P.HEADER.unpack_from(data, pos)[3] * P.RESULT.size
        if end > len(data):
            break
        pos = end
    return P.decode_result_log(data[:pos]), pos


class AttemptReports:
    """What the executors' journals say of attempts in flight, kept per executor.

    A task an executor took ahead and handed back unstarted (an exit with FLAG_RETURNED) went on to
    another executor at the same attempt: the hand-back takes back what its executor said of the
    attempt and says nothing itself, so it never hides, nor passes for, the other executor's reports.

    A job requeued without spending an attempt (preempted, or stopped with the run and resumed) is sent
    again under the same attempt number: what the executors journaled of the copy that was stopped is
    then not the new copy's. An executor's acceptance of an attempt it had already ended starts its
    reports of that attempt afresh, and of several executors' reports of one attempt only those of the
    latest dispatch count (the newest scheduler epoch, then the latest acceptance or start).
    """

    def __init__(self) -> None:
        self.by: dict[tuple[int, int], dict[int, dict[int, P.ResultRecord]]] = {}
        """(job, attempt) -> executor pid -> kind -> record."""
        self.back: dict[tuple[int, int], P.ResultRecord] = {}
        """(job, attempt) -> the latest hand-back of it (see handed_back)."""

    def add(self, pid: int, r: P.ResultRecord) -> None:
        """One record read from the journal of the executor whose pid is `pid` (in the journal's order)."""
        key = (r.task, r.attempt)
        if r.flags & P.FLAG_RETURNED:
            self.by.get(key, {}).pop(pid, None)
            last = self.back.get(key)
            if last is None or (r.epoch, r.ended) >= (last.epoch, last.ended):
                self.back[key] = r
            return
        kinds = self.by.setdefault(key, {}).setdefault(pid, {})
        if r.kind in (P.RES_ACCEPTED, P.RES_STARTED) and P.RES_EXITED in kinds:
            kinds.clear()  # sent to this executor again after the copy it ended
        kinds[r.kind] = r

    def of(self, key: tuple[int, int]) -> dict[int, tuple[int, P.ResultRecord]]:
        """kind -> (executor pid, record) of one attempt, from the executor it was last dispatched to."""
        pids = self.by.get(key)
        if not pids:
            return {}

        def dispatched(pid: int) -> tuple[int, float]:
            recs = pids[pid].values()
            return max(r.epoch for r in recs), max(r.started for r in recs)

        pid = max((p for p in pids if pids[p]), key=dispatched, default=None)
        return {} if pid is None else {kind: (pid, r) for kind, r in pids[pid].items()}

    def handed_back(self, key: tuple[int, int]) -> P.ResultRecord | None:
        """The hand-back of an attempt no executor holds now (`of` says nothing of it): the last word of the
        executors on it, as when a follower went back unstarted behind a long job while no scheduler ran."""
        return None if self.of(key) else self.back.get(key)

    def keep(self, keys: set[tuple[int, int]]) -> None:
        """Forget attempts not in `keys`."""
        self.by = {k: v for k, v in self.by.items() if k in keys}
        self.back = {k: v for k, v in self.back.items() if k in keys}


def stopped_with_run(store: Store, run: int, core: SchedulerCore, actions: list[tuple]) -> set[int]:
    """The jobs in flight that a stop of the run was stopping when its scheduler died.

    A stop journals its intent (STOP_VERB) before it signals any job, and nothing is sent after
    it: a job the journal shows QUEUED or RUNNING, sent before the latest stop, was being stopped
    with the run. Its end, whatever the executors journaled of it (a signal 15 or 9, a trap's
    exit status, lost), is then the stop's doing, as it is when the stop ends cleanly.

    Args:
        store: the run's journal.
        run: the run's row id.
        core: the core restored from the journal.
        actions: the run's journaled actions (Store.actions).
    """
    stops = [a[0] for a in actions if a[2] == STOP_VERB and a[6]]
    if not stops:
        return set()
    last = max(stops)
    inflight = in_flight(core.state)
    out: set[int] = set()
    for i, transitions in store.transitions_of_jobs(run, inflight).items():
        sent = [t[3] for t in transitions if t[1] == JobState.QUEUED and t[2] == core.attempt[i]]
        if sent and sent[-1] <= last:
            out.add(i)
    return out


def journal_behind(core: SchedulerCore, journals: list[tuple[int, list[P.ResultRecord]]],
                   loss: JournalLoss) -> str | None:
    """What the executors' results journals hold of attempts the run's journal never dispatched.

    The journal commits every dispatch before the executor hears of it, so it is never behind them, but where it
    lost committed turns: a SQLite journal's write-ahead log (journal.db-wal) damaged or removed, a server
    journal's database restored from an older backup, or, for jobs that may run twice (their turns are committed
    without waiting for the disk), a power failure. `loss` says how, in the terms of the journal in use.

    Returns:
        A note when only such jobs ran attempts the journal does not hold (they run again, as after a lost
        executor); None when the journal holds every attempt.

    Raises:
        StoreError: a job that may not run twice did (its turns wait for the disk: the journal lost them), and a
            resume would run it again: nothing is dispatched.
    """
    n, attempt, specs, ids = core.n, core.attempt, core.specs, core.ids
    ahead: set[int] = set()
    unknown = 0
    started = P.RES_STARTED
    for _pid, recs in journals:
        for r in recs:
            # Only starts: an attempt that started is never given back its number (one handed back or lost
            # before its start is, and the journal then holds the number before it).
            if r.kind != started:
                continue
            if r.task >= n:
                unknown += 1
            elif r.attempt > attempt[r.task]:
                ahead.add(r.task)
    if not ahead and not unknown:
        return None
    risky = sorted(i for i in ahead if not specs[i].idempotent)
    if risky or unknown:
        names = ", ".join(ids[i] for i in risky[:5]) + (" ..." if len(risky) > 5 else "")
        what = (f"{len(risky)} job(s) that may not run twice ran attempts it does not hold ({names})" if risky
                else f"{unknown} attempt(s) of jobs it does not have ran")
        raise StoreError(f"the run's journal is behind what its executors recorded: {what}; it lost committed "
                         f"turns ({loss.cause}), and resuming would run them again",
                         hint=f"nothing was dispatched: {loss.restore}; or, to go on from what the journal holds "
                              "(those jobs run again), move the executors' results journals (executors/*.results "
                              "in the state directory) away, then resume")
    return (f"{len(ahead)} job(s) ran attempts the journal does not hold (its last turns were lost: "
            f"{loss.last_turns}): they run again")


def reconcile(pool: LocalPool, feed: Feed, adopt: bool, loss: JournalLoss,
              mine: Callable[[int], bool] = lambda _i: True, stopped: Collection[int] = (),
              warn: Callable[[str], None] | None = None) -> list[str]:
    """Settle every job the journal shows QUEUED or RUNNING, before dispatching anything.

    Results the executors journaled are applied; attempts still held by live (adopted)
    executors stay theirs; attempts whose executor is gone are lost: requeued when they
    never started, otherwise retried under the job's policy (or held when not idempotent),
    a loss of the whole run that counts as none of the job's (JobExitedEvent.run_down).
    Jobs a stop of the run was stopping (`stopped`) end as they would have had the stop
    finished: requeued, or held when they may not run twice, not failed.

    Args:
        pool: the local pool (its core has been restored from the journal).
        feed: where the events go (the core).
        adopt: the previous scheduler's executors may still be alive and were kept.
        loss: how the run's journal could have lost turns, and what to restore (`Store.loss`).
        mine: whether a job runs on this host (jobs of agents are the agent pool's to recover).
        stopped: jobs in flight that a stop of the run was stopping (stopped_with_run).
        warn: where the finding that jobs the journal lost run again goes, when it must not pass unseen
            (among the notes when None).

    Returns:
        One line per notable finding, for the operator.
    """
    # A pool reads its tasks through a Book; the scheduler's local pool reads the scheduler's core, whose kill
    # reasons this sets for the jobs a stop of the run was stopping.
    core = cast("SchedulerCore", pool.core)
    notes: list[str] = []
    alive: set[int] = set()
    if adopt:
        # Task records the dead scheduler sent but no executor took are dropped here and
        # re-sent below, under this scheduler's epoch.
        found, dropped = pool.reattach()
        alive = pool.executor_pids(found)
        if found:
            notes.append(f"reattached to {len(found)} executor(s) still running: {sorted(found)}")
        if dropped:
            notes.append(f"dropped {dropped} unsent task record(s) of the previous scheduler")
        time.sleep(SETTLE)
    # Read after the settle: an executor alive writes at its next beat the records a full disk kept waiting (the
    # ends of jobs whose reports the previous scheduler took but could not journal, which it sends no more).
    journals = executor_results(pool.state_dir, pool.objs.run_id)
    ahead = journal_behind(core, journals, loss)
    if ahead and warn is not None:
        warn(ahead)
    elif ahead:
        notes.insert(0, ahead)
    settled = settle_in_flight(pool, core, feed, journals, alive, mine, stopped)
    return notes + ([settled.line()] if settled is not None else [])


class Settler(Protocol):
    """What settle_in_flight asks of the pool whose jobs it settles (LocalPool; JournalSettler without one)."""

    def replay(self, r: P.ResultRecord, cause: str) -> Event:
        """A report read from an executor's journal, booked as if received, as its event."""

    def own(self, i: int) -> None:
        """Job i's copy in flight is settled here: a predecessor's report of it is not applied."""

    def kill_lost(self, started: P.ResultRecord, executor_pid: int) -> None:
        """Stop what may live on of a started job whose executor is gone."""


def settle_in_flight(pool: Settler, core: SchedulerCore, feed: Feed, journals: list[tuple[int, list[P.ResultRecord]]],
                     alive: Collection[int] = (), mine: Callable[[int], bool] = lambda _i: True,
                     stopped: Collection[int] = ()) -> Settled | None:
    """Settle the jobs the journal shows QUEUED or RUNNING from what the executors' results journals say of them
    (see reconcile): an end journaled there is applied; an attempt held by a live executor (its pid in `alive`)
    is left to it; any other is lost with its executor, which the whole run lost with it (no scheduler ran): it
    runs again under its policy without counting as a loss of the job's (JobExitedEvent.run_down), or is held
    when it may not run twice, what may live on of it stopped first.

    Returns:
        How many were settled how (None: none was in flight).
    """
    inflight = [i for i in in_flight(core.state) if mine(i)]
    if not inflight:
        return None
    want = {(i, core.attempt[i]) for i in inflight}
    seen = AttemptReports()
    for pid, records in journals:
        for r in records:
            if (r.task, r.attempt) in want:
                seen.add(pid, r)
    applied = lost = kept = returned = 0
    halted = 0
    # Hand-backs first: a follower goes back only while the job it follows runs on (or once it failed), so the
    # core takes it back as a follower (_unfollow) before that job's end, as it would have live.
    inflight.sort(key=lambda i: seen.handed_back((i, core.attempt[i])) is None)
    for i in inflight:
        att = core.attempt[i]
        if i in stopped:
            # (kept while its executor, told to stop, still lives: its end, when it comes, is the stop's)
            core.kill_reason[i] = (STOPPED_WITH_RUN, True)
            halted += 1
        recs = seen.of((i, att))
        if P.RES_EXITED in recs:
            if P.RES_STARTED in recs and core.state[i] == JobState.QUEUED:
                # Its start first, as the scheduler would have heard it: the job ran (its history has the run,
                # and one stopped with the run that may not run twice is held, not requeued as never started).
                feed(pool.replay(recs[P.RES_STARTED][1], "recovery"))
            feed(pool.replay(recs[P.RES_EXITED][1], "recovery"))
            pool.own(i)  # the same report may wait in the response queue: not applied again
            applied += 1
            continue
        back = seen.handed_back((i, att))
        if back is not None:
            # Handed back unstarted while no scheduler ran (a follower behind a long job): requeued as such,
            # and its report, still in the response queue, is not applied to the copy sent next.
            feed(pool.replay(back, "recovery"))
            pool.own(i)
            returned += 1
            continue
        started = recs.get(P.RES_STARTED)
        accepted = recs.get(P.RES_ACCEPTED)
        holder = started or accepted
        if holder is not None:
            feed(pool.replay(holder[1], "recovery"))
        if holder is not None and holder[0] in alive and pid_alive(holder[0]):
            kept += 1
            continue
        # Its executor died while starting it (FLAG_STARTING), before it journaled the start: it may have started.
        starting = started is None and accepted is not None and bool(accepted[1].flags & P.FLAG_STARTING)
        copy = started if started is not None else accepted if starting else None
        if copy is not None:
            # Its executor is gone but the job's process group may live on: stopped first.
            pool.kill_lost(copy[1], copy[0])
        feed(JobExitedEvent(i, att, holder[1].executor if holder else -1, -1, time.time(), lost=True,
                            unheard=starting, run_down=True, cause_id="recovery"))
        if started is None:
            pool.own(i)  # requeued at the same attempt: a late report of the copy lost must not settle the next
        lost += 1
    return Settled(len(inflight), applied, kept, returned, lost, halted)


class Settled(NamedTuple):
    """How settle_in_flight settled the jobs in flight (counts of jobs)."""

    inflight: int
    """Jobs the journal showed QUEUED or RUNNING."""
    applied: int
    """Their end, journaled by their executor, applied."""
    kept: int
    """Left to the live executor that runs them."""
    returned: int
    """Handed back unstarted by their executor (requeued)."""
    lost: int
    """Lost with their executor."""
    halted: int
    """Of them, jobs a stop of the run was stopping."""

    def line(self) -> str:
        """The line a resume tells of them."""
        back_note = f", {self.returned} handed back unstarted (requeued)" if self.returned else ""
        return (f"recovered {self.inflight} in-flight job(s): {self.applied} finished while the scheduler was "
                f"down, {self.kept} still running on live executors{back_note}, {self.lost} lost (requeued, retried "
                "under policy, or held when they may not run twice)"
                + (f"; {self.halted} of them were being stopped with the run, and end as stopped with it"
                   if self.halted else ""))


class JournalSettler:
    """settle_in_flight's pool for a run no scheduler runs (an operator's verb on its journal, wloadctl.client):
    records become events through the one ReportReader, and what may live on of a lost job is stopped, as a
    resume would stop it."""

    def __init__(self, run_id: str, reader: ReportReader) -> None:
        self.run_id = run_id
        """The run (names its executors' job groups and markers)."""
        self.reader = reader
        """Records to events."""

    def replay(self, r: P.ResultRecord, cause: str) -> Event:
        """The event of a record read from an executor's journal."""
        ev = self.reader.event(r, cause)
        assert ev is not None, f"record kind {r.kind} has no event"
        return ev

    def own(self, i: int) -> None:
        """Nothing to book: no pool here, and no response queue is read."""

    def kill_lost(self, started: P.ResultRecord, executor_pid: int) -> None:
        """Stop the process group of a started job whose executor is gone, and what left the group with it."""
        killpg(started.pid, signal.SIGKILL)
        kill_job_tree(self.run_id, started.executor, executor_pid, started.task, started.attempt)


def executor_results(state_dir: Path, run_id: str) -> list[tuple[int, list[P.ResultRecord]]]:
    """(executor pid, its records) of every results journal the run's executors left in the state directory."""
    return [(pid, read_results(path)) for _ex, pid, path in result_journals(state_dir, run_id)]


class ResultSweeper:
    """Finds, in the executors' result journals, reports a woken predecessor took from the response queue.

    A scheduler frozen mid-drain (SIGSTOP) and woken after a takeover may receive records
    meant for its successor before it notices it is fenced. Executors journal every report
    before they send it, so while the predecessor lives the successor compares what it
    holds in flight with what the executors list as running, and reads the journals for
    each attempt whose report is overdue: one still QUEUED, or RUNNING but no longer listed
    by its executor, at two sweeps in a row.
    """

    def __init__(self, pool: LocalPool, ids: list[str], predecessor: int, emit: Callable[..., None]) -> None:
        self.pool = pool
        """The local pool whose executors' journals are read."""
        self.ids = ids
        """Job ids by index (for the event log)."""
        self.predecessor = predecessor
        """Pid of the fenced scheduler; sweeps stop once it is gone."""
        self.emit = emit
        """Event log line (event, job, attempt, **fields)."""
        self.offsets: dict[Path, int] = {}
        """Bytes of each result journal already read."""
        self.found = AttemptReports()
        """Reports read for attempts in flight."""
        self.suspects: set[tuple[int, int]] = set()
        """Attempts whose report looked overdue at the last sweep."""
        self.next = 0.0
        """When the next sweep is due."""
        self.gone_at: float | None = None
        """When the predecessor was first seen gone."""
        self.recovered = 0
        """Reports recovered from the journals so far."""

    def sweep(self, feed: Feed, now: float) -> bool:
        """Sweep if one is due; return False once the predecessor is long gone (no more sweeps needed)."""
        if now < self.next:
            return True
        self.next = now + SWEEP_INTERVAL
        if not pid_alive(self.predecessor):
            self.gone_at = self.gone_at or now
            if now - self.gone_at > SWEEP_AFTER_DEATH:
                return False
        core = self.pool.core
        try:
            slots = [s for s in self.pool.objs.eboard.read_all() if s.pid and pid_alive(s.pid)]
        except WloadError:
            return True  # a slot caught mid-write: the next sweep reads it
        listed = {t for s in slots for t in s.running_tasks}
        # A slot lists at most MAX_RUNNING_TASKS jobs: a longer list is cut and proves nothing.
        complete = {s.executor for s in slots if s.running <= P.MAX_RUNNING_TASKS}
        suspects: set[tuple[int, int]] = set()
        for i in in_flight(core.state):
            key = (i, core.attempt[i])
            if core.state[i] == JobState.RUNNING and (key in listed or core.executor[i] not in complete):
                continue
            suspects.add(key)
        overdue = suspects & self.suspects
        self.suspects = suspects
        if overdue:
            self._read(suspects)
            for key in sorted(overdue):
                self._apply(feed, key)
        return True

    def _read(self, keep: set[tuple[int, int]]) -> None:
        """Read what the journals gained since the last read, keeping reports of attempts in `keep`."""
        for _ex, pid, path in result_journals(self.pool.state_dir, self.pool.objs.run_id):
            start = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    data = f.read()
            except OSError:
                continue
            records, used = _decode_prefix(data)
            self.offsets[path] = start + used
            for r in records:
                if (r.task, r.attempt) in keep and not self.pool.stale(r):
                    self.found.add(pid, r)
        self.found.keep(keep)

    def _apply(self, feed: Feed, key: tuple[int, int]) -> None:
        """Feed the core what the journals say about one overdue attempt."""
        pool = self.pool
        core, (i, att) = pool.core, key
        recs = self.found.of(key)
        fed = []
        for kind in (P.RES_ACCEPTED, P.RES_STARTED, P.RES_EXITED):
            if kind not in recs:
                continue
            r = recs[kind][1]
            st = core.state[i]
            if kind == P.RES_ACCEPTED and not (st == JobState.QUEUED and core.executor[i] < 0):
                continue
            if kind == P.RES_STARTED and st != JobState.QUEUED:
                continue
            if kind == P.RES_EXITED and st not in (JobState.QUEUED, JobState.RUNNING):
                continue
            feed(pool.replay(r, "sweep"))
            fed.append(kind)
        if fed:
            self.recovered += len(fed)
            self.emit("report_recovered", self.ids[i], att, kinds=fed)


def in_flight(state: bytearray) -> list[int]:
    """Indices of QUEUED and RUNNING jobs (a C-speed scan: in flight is a few jobs among many)."""
    out: list[int] = []
    for st in (JobState.QUEUED, JobState.RUNNING):
        needle = bytes((st,))
        k = state.find(needle)
        while k >= 0:
            out.append(k)
            k = state.find(needle, k + 1)
    return out
