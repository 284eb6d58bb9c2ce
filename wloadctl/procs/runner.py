"""Starting, resuming and finishing a run: journal, IPC objects, executors, recovery, then the scheduler loop."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import gc
import hashlib
import json
import os
import signal
import socket
import threading
import time
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from wloadctl.core.engine import FOLLOW, SchedulerCore
from wloadctl.core.events import RunStartedEvent
from wloadctl.core.plan import Plan
from wloadctl.core.planfile import load_plan
from wloadctl.core.replay import restore_journaled, run_cancelled
from wloadctl.core.sla import business_date_at, standing_flags
from wloadctl.core.states import JobState
from wloadctl.errors import OtherDateUnfinished, PlanError, StoreError, TransportError, UsageError, WloadError
from wloadctl.hostshare import HostCapacity, HostShare, SlotGovernor
from wloadctl.ipc import ctlsock
from wloadctl.ipc import protocol as P
from wloadctl.ipc.boards import StateBoard
from wloadctl.ipc.naming import ROLE_BOARD, object_name
from wloadctl.ipc.quota import run_shapes
from wloadctl.ipc.segment import shm_free
from wloadctl.ipc.shm import run_is_alive
from wloadctl.paths import (
    ids_path,
    make_state_dir,
    read_journal_note,
    run_dirs,
    state_root,
    summary_path,
    unusable_state_dir,
    write_ids,
    write_journal_note,
    write_summary,
)
from wloadctl.procs.eventlog import EventLog
from wloadctl.procs.health import pid_alive
from wloadctl.procs.jobtree import detect as detect_tree
from wloadctl.procs.jobtree import remove_run_groups, unenforced
from wloadctl.procs.limits import queue_room, quota_full
from wloadctl.procs.localpool import (
    LocalPool,
    drop_result_journals,
    read_results,
    result_journals,
    runs_with_result_journals,
)
from wloadctl.procs.pools import Pools
from wloadctl.procs.prestart import (
    DEFAULT_EXECUTORS,
    DEFAULT_PREFETCH,
    DEFAULT_SLOTS,
    ORPHAN_TIMEOUT,
    Prestarted,
    new_run_id,
)
from wloadctl.procs.recovery import ResultSweeper, reconcile, stopped_with_run
from wloadctl.procs.reports import ReportReader
from wloadctl.procs.runctx import HOOK_WAIT, RunContext
from wloadctl.procs.scheduler import HEALTH_INTERVAL, Fenced, SchedulerLoop
from wloadctl.procs.spawning import remove_dead_spares
from wloadctl.procs.supervisor import RunObjects, clean_stale, live_standby, shm_at_start, shm_full
from wloadctl.procs.userfiles import remove_job_dirs
from wloadctl.runplan import keep_plan, run_plan
from wloadctl.runshape import CoreCopy, shape_of_copy, write_shape
from wloadctl.store import RunRow, Store, journal_exists, journal_url, run_place, without_password
from wloadctl.store.base import JournalUnavailable
from wloadctl.store.facts import RunFacts, run_facts

if TYPE_CHECKING:
    from wloadctl.metrics import SchedulerCollector
    from wloadctl.remote.agentpool import AgentPool
    from wloadctl.remote.broker import BrokerOptions
    from wloadctl.remote.link import BrokerLink

UNFINISHED = ("running", "interrupted", "held")

"""Run statuses that `wloadctl run` resumes rather than starting afresh."""
START_GRACE = 10.0
"""Seconds added to the first lease of a starting scheduler: rebuilding a big run from the
journal takes a while before the loop beats, and a standby must not take that for death."""


@dataclass
class RunOptions:
    """How to run: the command line's choices."""

    state_dir: Path
    executors: int = 2
    slots: int = 4
    business_date: str | None = None
    accept_plan_change: bool = False
    journal_sync: str = "AUTO"
    lease_seconds: float = 1.5
    """Heartbeat timeout: the journal lease lasts this long past each beat; a standby takes
    over only once the board's beat and the lease are both older than its own timeout."""
    heartbeat_interval: float = HEALTH_INTERVAL
    """Seconds between beats of the active scheduler (board beat, lease renewal) and between
    a standby's looks at them."""
    dead_after: float = 5.0
    orphan_timeout: float = ORPHAN_TIMEOUT
    prefetch: int = DEFAULT_PREFETCH
    """Tasks per executor slot an executor may take ahead while its jobs are short (0: never)."""
    executor_cpus: float = 0.0
    """CPUs each executor offers jobs that claim some (0 = no limit)."""
    executor_memory: int = 0
    """MiB each executor offers jobs that claim some (0 = no limit)."""
    exit_when_stalled: bool = False
    """End the run (resumable, status `held`) when only operator-held jobs remain (`--exit-on-hold`);
    otherwise the scheduler stays up and the run goes on when they are released."""
    say: Callable[[str], None] = field(default=lambda _m: None)
    """Where one-line notices go (stale objects removed, resuming, executor restarts)."""
    warn: Callable[[str], None] | None = None
    """Where what must not pass unseen goes, `--quiet` or not (an alert hook that failed); None: as `say`."""
    broker: BrokerOptions | None = None
    """The broker of the agents that run the plan's `pool:`/`agent:` jobs (None: this host only)."""
    agent_timeout: float = 10.0
    """Seconds an agent may be silent before it is LOST and its jobs go back to their policy."""
    run_id: str | None = None
    """The id a new run takes (None: one made when it starts); `wloadctl run` chooses it at its start."""
    prestarted: Prestarted | None = None
    """Executors started ahead of a new run, for its supervisor to take (prestart.py)."""
    metrics: SchedulerCollector | None = None
    """The Prometheus collector of `--metrics` (its server already listens): given the loop once built."""


@dataclass
class RunOutcome:
    """How a run ended."""

    run: RunRow
    plan: Plan
    core: SchedulerCore
    status: str
    """succeeded | failed | cancelled | interrupted."""
    wall: float
    """Seconds this scheduler ran."""
    resumed: bool
    kept: int = 0
    """Jobs left running under their executors by a stop that keeps them (Ctrl-C), for a resume."""
    flags: dict[str, str] = field(default_factory=dict)
    """Jobs flagged LATE or AT_RISK during the run, as the journal has them (what `status` shows)."""

    @property
    def exit_code(self) -> int:
        """0 all succeeded or skipped, 130 the run was stopped (a signal: resumable), 1 otherwise (some job
        failed for good, the run was cancelled, or it ended holding)."""
        return 0 if self.status == "succeeded" else 130 if self.status == "interrupted" else 1


@dataclass
class Claim:
    """A run a standby has just taken over: its new epoch is in the journal already."""

    epoch: int
    """The epoch begin_epoch returned."""
    predecessor: int
    """Pid of the scheduler it replaced (maybe frozen, not dead)."""
    announce: Callable[[EventLog], None]
    """Emits the takeover event, once the new epoch is on the board."""
    agents: int = 0
    """Agents that answered the standby before it took over (recovery waits for that many inventories)."""
    link: BrokerLink | None = None
    """The broker link of the run's agents, opened before the claim (broker_link; None: no jobs on agents)."""
    plan: Plan | None = None
    """The run's plan as the standby read it for that link (None: read it from the journal)."""


class StateDirLock:
    """One active scheduler per state directory: an exclusive flock on `scheduler.lock`."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "scheduler.lock"
        make_state_dir(state_dir)
        try:
            self.f: IO[str] = open(self.path, "a+")
        except OSError as e:
            raise unusable_state_dir(state_dir, e) from None

    def acquire(self) -> None:
        """Take the lock or raise UsageError naming the live scheduler."""
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.f.seek(0)
            pid = self.f.read().strip() or "?"
            self.f.close()
            raise UsageError(f"a scheduler (pid {pid}) is already running the run in {self.path.parent}",
                             hint="watch it with `wloadctl status`, or stop it first") from None
        try:
            self.f.seek(0)
            self.f.truncate()
            self.f.write(str(os.getpid()))
            self.f.flush()
        except OSError as e:
            with contextlib.suppress(OSError):
                self.f.close()  # (its flush fails again: the file is closed all the same)
            raise unusable_state_dir(self.path.parent, e) from None

    def release(self) -> None:
        """Drop the lock."""
        self.f.close()


def _file_digest(path: str) -> str:
    """SHA-256 of a plan file's bytes (the Plan.digest a parse would give), without parsing it."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def _say_file_changed(run: RunRow, opts: RunOptions) -> None:
    """A resume given no plan goes on with the plan its run started with: say so when the file it was read from
    has changed since (an operator who edited it may think the edit is taken)."""
    now = _file_digest(run.plan_path) if run.plan_path else ""
    if now and now != run.plan_digest:  # (a file gone or unreadable: the journal's copy is the plan all the same)
        opts.say(f"{run.plan_path} has changed since run {run.run_id} started: the run goes on with the plan it "
                 f"started with (`wloadctl resume {run.plan_path} {run_place(opts.state_dir)} --accept-plan-change` "
                 "takes the change)")


def _plan_for_run(store: Store, run: RunRow, plan_path: str | None, opts: RunOptions,
                  loaded: Plan | None) -> Plan:
    """The plan a resumed run continues with: the journal's copy, or the changed file if accepted."""
    if plan_path is None:
        _say_file_changed(run, opts)
    if plan_path is None or _file_digest(plan_path) == run.plan_digest:
        # Unchanged: the journal's encoded copy is the same plan and needs no YAML parse.
        return loaded if loaded is not None else run_plan(store, run)
    stored = run_plan(store, run)
    text = Path(plan_path).read_bytes()
    fresh = loaded if loaded is not None else load_plan(plan_path)
    if not opts.accept_plan_change:
        raise UsageError(f"{plan_path}: the plan changed since run {run.run_id} started",
                         hint="resume with --accept-plan-change to apply added jobs, or use another --state-dir")
    if store.expansions(run.id):
        raise UsageError(f"{plan_path}: the plan changed since run {run.run_id} started, and the run has made "
                         "for_each instances, whose places a changed plan would move",
                         hint="put the plan back to resume this run, or start a new run in another --state-dir")
    rows = {r[1]: r for r in store.job_rows(run.id)}
    removed = [j for j in rows if j not in fresh.jobs]
    ran = [j for j in removed if rows[j][3] > 0 or rows[j][2] != JobState.WAITING]
    if ran:
        raise PlanError(f"{plan_path}: the changed plan removes job(s) that already ran: {', '.join(ran[:10])}",
                        hint="put them back; only jobs that never ran may be removed")
    if removed:
        raise PlanError(f"{plan_path}: the changed plan removes job(s) {', '.join(removed[:10])}",
                        hint="a running run keeps its jobs; hold or skip them instead")
    # Existing jobs keep their indices; new jobs come after them.
    order = list(stored.jobs) + [j for j in fresh.jobs if j not in stored.jobs]
    plan = dataclasses.replace(fresh, jobs={j: fresh.jobs[j] for j in order})
    added = [(k, j) for k, j in enumerate(order) if j not in stored.jobs]
    # (a job's line in the file is no part of what it does)
    changed = [j for j in stored.jobs if dataclasses.replace(fresh.jobs[j], line=0) !=
               dataclasses.replace(stored.jobs[j], line=0)]
    _refuse_growing_live_board(plan_path, run, plan)
    store.replace_plan(run.id, fresh.digest, text.decode("utf-8", "replace"), _absolute(plan_path), added)
    keep_plan(store, run, plan)
    said = (f"plan change accepted: {len(added)} job(s) added"
            + (f" ({_some(j for _k, j in added)})" if added else "")
            + (f", {len(changed)} changed ({_some(changed)}): what has not run yet runs as the file now says"
               if changed else ""))
    store.record_action(run.id, ctlsock.user_name(os.getuid()), "plan-change", "*", "", said, True)
    opts.say(said)
    return plan


def _some(ids: Iterable[str], most: int = 10) -> str:
    """Up to `most` ids, and how many more."""
    ids = list(ids)
    return ", ".join(ids[:most]) + (f" and {len(ids) - most} more" if len(ids) > most else "")


def _absolute(plan_path: str) -> str:
    """The plan file's path as journaled: absolute, so that a resume from another directory (or a standby) still
    finds it, and the jobs' relative `cwd:` still lead from the plan's folder."""
    return os.path.abspath(plan_path) if plan_path else plan_path


def _refuse_growing_live_board(plan_path: str, run: RunRow, plan: Plan) -> None:
    """Refuse a plan change whose jobs do not fit the state board the run's live executors still hold.

    The board is sized once, when the run's objects are made; while an executor of the run
    lives it keeps them (and the jobs it runs), so a bigger board cannot replace it yet.

    Raises:
        UsageError: the changed plan has more jobs than the live board has room for.
    """
    if not run_is_alive(run.run_id):
        return
    try:
        board = StateBoard.open(object_name(run.run_id, ROLE_BOARD))
    except WloadError:
        return
    try:
        room = board.capacity
    finally:
        board.close()
    need = SchedulerCore(plan, 1).capacity()
    if need > room:
        raise UsageError(f"{plan_path}: the changed plan needs room for {need} jobs and run {run.run_id}, whose "
                         f"executors still run, has room for {room}",
                         hint="resume without --accept-plan-change to go on as journaled, or accept the change "
                              "once the run's executors have ended (`wloadctl status` lists none)")


def start_or_resume(plan_path: str | None, opts: RunOptions, resume_only: bool = False,
                    on_turn: Callable[[SchedulerLoop], None] | None = None,
                    loaded: Plan | None = None) -> RunOutcome:
    """Run a plan headless to completion in this process (the scheduler), resuming an unfinished run.

    Args:
        plan_path: the plan file (None: resume the state directory's run with its own plan).
        opts: how to run.
        resume_only: refuse to start a new run.
        on_turn: progress callback.
        loaded: the plan file already parsed by the caller (it is not parsed twice).

    Raises:
        PlanError: the plan is invalid.
        UsageError: nothing to resume, another scheduler is live, or the plan changed.
        WloadError: IPC or journal failures.
    """
    plan = loaded
    fresh = plan_path is not None and not resume_only and not journal_exists(opts.state_dir)
    if plan is None and fresh and plan_path is not None:
        plan = load_plan(plan_path)  # a new run: a bad plan fails before anything is created
    early: tuple[str, BrokerLink | None] | None = None
    if fresh and plan is not None:
        # A new run in a directory without a journal: what refuses it (a bad plan, above, a full queue quota or
        # /dev/shm, its broker) refuses it before its journal and lock are made there.
        _room_for(plan, opts)
        rid = opts.run_id or new_run_id()
        early = (rid, broker_link(plan, opts, rid))
    lock = StateDirLock(opts.state_dir)
    try:
        lock.acquire()
    except BaseException:
        if early is not None and early[1] is not None:
            early[1].close(timeout=5.0)
        raise
    store = None
    maker: _CoreMaker | None = None
    link: BrokerLink | None = None
    try:
        store = Store.open(opts.state_dir, sync=opts.journal_sync)
        prev = store.latest_run()
        unfinished = bool(prev and prev.status in UNFINISHED)
        if plan is None and plan_path is not None and not (
                unfinished and prev is not None and _file_digest(plan_path) == prev.plan_digest):
            plan = load_plan(plan_path)  # a new run, or a changed plan: parse (and validate) the file
        same = plan is None or (prev is not None and prev.plan_name == plan.name)
        resumed = unfinished and same
        if resume_only and not resumed:
            if unfinished and prev is not None and plan is not None:
                # A plan of another name is another plan: a change of the run's plan keeps its name.
                raise UsageError(f"{plan_path}: plan '{plan.name}' is not the plan of unfinished run {prev.run_id} "
                                 f"in {opts.state_dir} ('{prev.plan_name}')",
                                 hint="a changed plan keeps the run's plan name; or resume with "
                                      f"`wloadctl resume {run_place(opts.state_dir)}` alone")
            elsewhere = store.unfinished_elsewhere(plan.name if plan is not None else None)
            if elsewhere:
                other, home = elsewhere[-1]
                raise UsageError(f"no unfinished run to resume in {opts.state_dir}; the journal's unfinished run "
                                 f"{other.run_id} of plan '{other.plan_name}' ({other.business_date}, {other.status}) "
                                 f"was started in {home or 'another state directory'}",
                                 hint="resume it from that state directory (`wloadctl resume --state-dir DIR` on its "
                                      "host)")
            # A run the journal lost (its write-ahead log removed before a checkpoint) is the one to resume: say
            # so, as a new run there does, rather than that there is none or that an older one ended.
            _refuse_lost_runs(store, opts.state_dir)
            if prev is not None and (plan is None or prev.plan_name == plan.name):
                # Its last run ended: say how, and how one of its jobs runs again (a rerun reopens the run).
                when = f" at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(prev.ended))}" if prev.ended else ""
                raise UsageError(f"no unfinished run to resume in {opts.state_dir}: its last run {prev.run_id} of plan "
                                 f"'{prev.plan_name}' ended {prev.status}{when}",
                                 hint=f"start a new one with `wloadctl run PLAN {run_place(opts.state_dir)}`, or run "
                                      f"jobs of that one again with `wloadctl rerun JOB {run_place(opts.state_dir)}` "
                                      "then resume")
            raise UsageError(f"no unfinished run to resume in {opts.state_dir}",
                             hint=f"start one with `wloadctl run PLAN {run_place(opts.state_dir)}`")
        if prev and prev.status in UNFINISHED:
            _refuse_live_lease(store, prev, opts.state_dir)
        if prev and prev.status in UNFINISHED and plan is not None and prev.plan_name != plan.name:
            raise UsageError(f"{opts.state_dir} holds unfinished run {prev.run_id} of plan '{prev.plan_name}'",
                             hint=f"resume it with `wloadctl resume {run_place(opts.state_dir)}`, or use another "
                                  "--state-dir")
        if resumed and opts.business_date and prev is not None and opts.business_date != prev.business_date:
            # Another date's batch is not this one's: resumed under the new date's name, the new date never runs.
            raise OtherDateUnfinished(
                f"{opts.state_dir} holds unfinished run {prev.run_id} of business date {prev.business_date}: "
                f"no run of {opts.business_date} starts before it has ended", prev.run_id, prev.business_date,
                hint=f"finish it with `wloadctl resume {run_place(opts.state_dir)}` (or cancel it), then start "
                     f"{opts.business_date}'s")
        if resumed:
            assert prev is not None
            settings = json.loads(prev.settings or "{}")
            plan = _plan_for_run(store, prev, plan_path, opts, plan)
            run = prev
            try:
                link = broker_link(plan, opts, run.run_id)
            except UsageError as e:
                if opts.broker is not None or not settings.get("broker"):
                    raise
                # The hints printed at a stop name the state directory alone: the run knows its broker.
                from wloadctl.remote.broker import DEFAULT_PREFIX

                prefix = settings.get("prefix")
                given = f"--broker {settings['broker']}" + (f" --prefix {prefix}" if prefix and prefix != DEFAULT_PREFIX
                                                            else "")
                raise UsageError(e.message, hint=f"the run was started with {given}: give it to the resume too "
                                                 "(with its credentials, if any)") from None
            opts.say(f"resuming run {run.run_id} of plan '{plan.name}' (business date {run.business_date})")
            if opts.executors <= 0:
                opts.executors = int(settings.get("executors", DEFAULT_EXECUTORS))
            if opts.slots <= 0:
                opts.slots = int(settings.get("slots", DEFAULT_SLOTS))
        else:
            assert plan is not None
            opts.executors = opts.executors if opts.executors > 0 else DEFAULT_EXECUTORS
            opts.slots = opts.slots if opts.slots > 0 else DEFAULT_SLOTS
            if early is None:
                _room_for(plan, opts)
            _refuse_lost_runs(store, opts.state_dir)
            if early is not None:
                rid, link = early
                early = None
            else:
                # So is a plan with jobs on agents whose broker is not given or does not answer.
                rid = opts.run_id or new_run_id()
                link = broker_link(plan, opts, rid)
            # The plan is whole and valid here. Its core is built in a thread while the journal is
            # written (SQLite writes the jobs without the interpreter lock); the loop, and so the
            # first dispatch, waits for both, and the journal's commit comes first. The history of
            # the plan's earlier runs is read now: the new run is not one of them.
            history = store.expected_history(plan.name, _EVERY_RUN, list(plan.jobs), plan.digest)
            maker = _CoreMaker(plan, _core_slots(opts), _FIRST_EPOCH, history)
            started = time.time()
            # Today where the plan's times of day are (its not-before times and deadlines), as `trigger` names it.
            bdate = opts.business_date or business_date_at(started, plan.timezone)
            for other, home in store.unfinished_elsewhere(plan.name, bdate):
                # One batch a business date: a second run of it, from another directory, would run its jobs again.
                raise UsageError(f"the journal holds unfinished run {other.run_id} of plan '{plan.name}' for business "
                                 f"date {bdate} ({other.status}), started in {home or 'another state directory'}: "
                                 "no second run of that date starts",
                                 hint="resume it from that state directory (`wloadctl resume --state-dir DIR` on "
                                      "its host), or give another --business-date")
            # Every job's row is journaled before anything runs; the plan's own copy (its text, 150 MB for
            # a million jobs one key a line, and its encoded form) follows the first dispatch (_PlanCopy).
            run = store.create_run(rid, plan.name, _absolute(plan.path), plan.digest, "", plan.jobs.keys(), bdate,
                                   started, json.dumps(_settings(opts)))
            # What the executors of this directory's finished runs journaled for a recovery is no longer needed.
            drop_result_journals(opts.state_dir, lambda r: _finished(store, r))
        if plan.limits == "enforce":
            # Jobs run here without the limits their plan asks for: said once, at the start, not found by each.
            claims = {c for j in plan.jobs.values() if not (j.pool or j.agent)
                      for c, v in (("memory", j.memory), ("cpu", j.cpu)) if v}
            if claims and (told := unenforced(claims, detect_tree(run.run_id))) is not None:
                opts.say(told)
        if resumed or not ids_path(opts.state_dir, run.run_id).exists():
            try:
                write_ids(opts.state_dir, run.run_id, list(plan.jobs))
            except OSError as e:
                raise StoreError(f"cannot write the run's job list {ids_path(opts.state_dir, run.run_id)}: "
                                 f"{e.strerror or e}",
                                 hint="free space on the state directory's disk (or make it writable), then "
                                      f"`wloadctl resume {run_place(opts.state_dir)}`") from None
        # (a run resumed after a crash in its first second may have no copy yet: it gets one now)
        copy = _PlanCopy(run, plan, opts) if not resumed or not store.has_plan_copy(run.id) else None
        return _drive(store, run, plan, opts, resumed, on_turn, maker=maker, copy=copy, link=link)
    finally:
        if link is not None:
            link.close(timeout=5.0)
        if early is not None and early[1] is not None:
            early[1].close(timeout=5.0)  # (refused after it was opened: not taken as the run's)
        if maker is not None:
            maker.close()  # joined, and the collector back on, whatever happened
        if store is not None:
            store.close()
        lock.release()


def _journal_behind(note: str, warn: Callable[[str], None], events: EventLog) -> None:
    """Jobs the journal lost (its last turns) run again: said even under `--quiet`, and kept in the run's events,
    since nothing else of the run then shows that they ran twice."""
    warn(note)
    events.emit("journal_behind", note=note)


def _said_to(events: EventLog, opts: RunOptions) -> Callable[[str, dict[str, object]], None]:
    """Where the local pool's reports go: the run's events; an executor lost is told on the operator's
    terminal too (its jobs are retried or held: `status` and `history` say which)."""

    def say(event: str, fields: dict[str, object]) -> None:
        events.emit_fields(event, fields)
        if event == "executor_lost":
            opts.say(f"executor {fields.get('executor')} lost ({fields.get('reason')}): what ran on it runs again, "
                     "or is held when it may not run twice")

    return say


def _finished(store: Store, run_id: str) -> bool:
    """Whether the journal holds this run as finished (a run it does not know is not judged finished)."""
    row = store.get_run(run_id)
    return row is not None and row.status not in UNFINISHED


def _refuse_lost_runs(store: Store, state_dir: Path) -> None:
    """Refuse a new run in a directory whose executors recorded a run its journal does not have.

    A journal is never without the runs whose jobs it dispatched (each is created before its executors start):
    one that lost them (a SQLite journal's write-ahead log removed or damaged before a checkpoint, a server
    journal's database dropped and made anew, or another journal named than the runs went to) would have the
    new run do every job again, those that may not run twice too.

    Raises:
        StoreError: such a run's executors' results journals are there.
    """
    unknown = sorted(r for r in runs_with_result_journals(state_dir) if store.get_run(r) is None)
    # (one whose executors started nothing does no harm: nothing of it would run twice)
    lost = [r for r in unknown if any(rec.kind == P.RES_STARTED for _ex, _pid, path in result_journals(state_dir, r)
                                      for rec in read_results(path))]
    if not lost:
        return
    loss = store.loss
    restore = loss.restore
    # The directory names the server journal its last run went to: another journal given is the story then.
    note, url = read_journal_note(state_dir), journal_url()
    if note is not None and note != (without_password(url) if url is not None else None):
        restore = f"its runs were journaled in {note}: give --journal {note}"
    raise StoreError(f"{state_dir} holds what the executors of run {lost[0]} recorded"
                     + (f" (and of {len(lost) - 1} other run(s))" if len(lost) > 1 else "")
                     + f", but its journal {store.where} has no such run: the journal lost its records ({loss.cause}),"
                       " and a new run would do every job again",
                     hint=f"{restore}; to start afresh here on purpose, move {state_dir / 'executors'} away")


def _settings(opts: RunOptions) -> dict[str, object]:
    """What a run keeps of how it was started: a resume uses it, `logs` finds the broker of agents' jobs."""
    # (cwd: where its jobs without a cwd: of their own run, whoever resumes it from wherever)
    out: dict[str, object] = {"executors": opts.executors, "slots": opts.slots, "cwd": os.getcwd()}
    if opts.broker is not None:
        out.update(broker=opts.broker.shown(), prefix=opts.broker.prefix)
    return out


def _refuse_live_lease(store: Store, run: RunRow, state_dir: Path) -> None:
    """Refuse to start a scheduler while another one (maybe a standby that took over) holds the run.

    A holder of this host is judged by its pid; one of another host (a server journal's holder)
    cannot be, and holds the run until its lease runs out.

    Raises:
        UsageError: the run's lease is in force and another scheduler holds it.
    """
    pid = run.scheduler_pid
    if run.status != "running" or run.lease_until <= time.time() or not pid:
        return
    host = store.holder_host(run.id)
    if host is not None and host != socket.gethostname():
        until = time.strftime("%H:%M:%S", time.localtime(run.lease_until))
        raise UsageError(f"scheduler pid {pid} on {host} holds the lease of run {run.run_id} (epoch {run.epoch}, "
                         f"its lease runs until {until} and is renewed while it lives)",
                         hint="watch it with `wloadctl status`; a standby, not a resume, takes over if it dies")
    if pid != os.getpid() and pid_alive(pid):
        raise UsageError(f"scheduler pid {pid} holds the lease of run {run.run_id} in {state_dir} "
                         f"(epoch {run.epoch})", hint="watch it with `wloadctl status`, or stop it first")


def continue_run(store: Store, run: RunRow, opts: RunOptions, claim: Claim,
                 on_turn: Callable[[SchedulerLoop], None] | None = None) -> RunOutcome:
    """Drive a run this process has just claimed from a failed scheduler, reattaching to its executors
    (`on_turn`: called at each turn of its loop, for progress).

    Raises:
        Fenced: yet another scheduler took the run over meanwhile.
        WloadError: IPC or journal failures.
    """
    settings = json.loads(run.settings or "{}")
    opts.executors = opts.executors if opts.executors > 0 else int(settings.get("executors", DEFAULT_EXECUTORS))
    opts.slots = opts.slots if opts.slots > 0 else int(settings.get("slots", DEFAULT_SLOTS))
    plan = claim.plan if claim.plan is not None else run_plan(store, run)
    try:
        return _drive(store, run, plan, opts, True, on_turn, claim, link=claim.link)
    finally:
        if claim.link is not None:
            claim.link.close(timeout=5.0)


_EVERY_RUN = 1 << 62
"""A run id after every run of a journal: the history before it is that of all runs so far."""
_FIRST_EPOCH = 1
"""The epoch the first scheduler of a new run takes (its row starts at 0)."""


def _core_slots(opts: RunOptions) -> int:
    """The core's slots at the start: every executor slot (the pool adds the tasks executors take ahead
    while jobs are short, LocalPool._pace)."""
    return opts.executors * opts.slots


class _PlanCopy:
    """The journal's copy of a new run's plan, written after the loop's first turn (or as the run ends).

    Until then a reader of the run (a resume after a crash in its first second, `status`) reads the plan
    file, if it is still the file the run started with (runplan.run_plan).
    """

    def __init__(self, run: RunRow, plan: Plan, opts: RunOptions) -> None:
        self.run = run
        self.plan: Plan | None = plan
        self.opts = opts

    def save(self, store: Store) -> None:
        """Write the copy, once (from the thread that drives the run's journal)."""
        plan, self.plan = self.plan, None
        if plan is None:
            return
        try:
            kept = store.keep_plan_file(self.run.id, plan.path, plan.digest)
            if kept:
                keep_plan(store, self.run, plan)
        except OSError as e:
            self.opts.say(f"cannot read {plan.path} again to keep its copy in the journal ({e.strerror}): "
                          "a resume needs the file as it was")
        except StoreError as e:
            self.opts.say(f"cannot keep the plan's copy in the journal ({e}): a resume needs the plan file")
        else:
            if not kept:
                self.opts.say(f"{plan.path} changed since the run started: the journal keeps no copy of the plan, "
                              "a resume needs the file as it was")


class _CoreMaker(threading.Thread):
    """Builds a new run's core in a thread, beside the journal's writes, for `_drive_with` to take."""

    def __init__(self, plan: Plan, slots: int, seed: int, history: dict[str, float]) -> None:
        super().__init__(name="run-core", daemon=True)
        self.plan = plan
        self.slots = slots
        self.seed = seed
        self.history = history
        self.made: SchedulerCore | None = None
        self.error: BaseException | None = None
        # The collector would walk the plan's million objects at each of the thread's collections.
        self.collecting = gc.isenabled()
        gc.disable()
        self.start()

    def run(self) -> None:
        try:
            self.made = SchedulerCore(self.plan, self.slots, seed=self.seed, history=self.history)
        except BaseException as e:  # raised again where the core is wanted
            self.error = e

    def result(self, slots: int, seed: int) -> SchedulerCore | None:
        """The core, once built, if it was built for these slots and seed (else None: build it again).

        The collector is on again afterwards.
        """
        self.close()
        made, self.made = self.made, None
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return made if (self.slots, self.seed) == (slots, seed) else None

    def close(self) -> None:
        """Wait for the thread, and turn the collector back on (the plan's and the core's objects frozen
        out of its sight first: the first collection would otherwise walk all of them)."""
        self.join()
        if self.collecting:
            self.collecting = False
            gc.freeze()
            gc.enable()


def _drive(store: Store, run: RunRow, plan: Plan, opts: RunOptions, resumed: bool,
           on_turn: Callable[[SchedulerLoop], None] | None, claim: Claim | None = None,
           maker: _CoreMaker | None = None, copy: _PlanCopy | None = None,
           link: BrokerLink | None = None) -> RunOutcome:
    """Drive the run; `link` is the broker_link the caller opened for it (and closes)."""
    return _drive_with(store, run, plan, opts, resumed, on_turn, claim, link, time.time(), maker, copy)


class _ShapeWriter:
    """Writes the run's shape beside its id list, so a console attaches without parsing the plan, and
    makes the facts the journal keeps of the plan for `why` (store/facts.py).

    The core's arrays are copied at once (milliseconds); working out the upstream rows and writing
    the file (seconds at a million jobs) happens on a thread of its own beside dispatch, so the
    first jobs do not wait for it. A console that attaches before the file is there reads the plan.
    The facts are made on the same thread and journaled by the loop's (save_facts), which owns the
    journal's connection; a reader that comes before them rebuilds the run's core.
    """

    def __init__(self, opts: RunOptions, run: RunRow, plan: Plan, core: SchedulerCore) -> None:
        copy = CoreCopy.of(core)
        self.opts = opts
        """How the run runs (where notices go)."""
        self.run = run
        """The run."""
        self.facts: RunFacts | None = None
        """The run's facts once made, until the loop's thread journals them."""
        self.thread = threading.Thread(target=self._write, args=(copy, plan, core.resources.places, core.index,
                                                                 core.take_up_rows()),
                                       name="run-shape", daemon=True)
        """The thread that writes the file (started by `begin`)."""

    def begin(self) -> None:
        """Start the thread, once: after the loop's first turn, whose dispatch it would slow (it holds
        the interpreter lock for seconds at a million jobs)."""
        if self.thread.ident is None:
            self.thread.start()

    def _write(self, copy: CoreCopy, plan: Plan, places: bool, index: dict[str, int],
               up_rows: tuple[array, array] | None) -> None:
        try:
            write_shape(self.opts.state_dir, self.run.run_id, shape_of_copy(copy, None, plan.timezone, up_rows))
        except OSError as e:
            self.opts.say(f"cannot write the run's shape file ({e}): consoles will read the plan")
        # The core's index only grows (loops over output add jobs after the copy's): the copy's ids are in it.
        self.facts = run_facts(copy.specs, copy.ids, copy.tier, copy.expected, copy.path, self.run.plan_digest,
                               plan.resources, places, index, plan.timezone, up_rows)

    def save_facts(self, store: Store) -> None:
        """Journal the run's facts once they are made (in the thread that drives the run's journal)."""
        facts, self.facts = self.facts, None
        if facts is None:
            return
        try:
            store.keep_facts(self.run.id, facts)
        except StoreError as e:
            self.opts.say(f"cannot keep the plan's facts in the journal ({e}): `why` will read the plan")

    def join(self) -> None:
        """Wait for the file (a run that ends leaves a whole shape file, never a half-written one)."""
        self.begin()
        self.thread.join()


def broker_link(plan: Plan, opts: RunOptions, run_id: str) -> BrokerLink | None:
    """The broker connection a plan with jobs on agents needs (None when every job runs here).

    It is opened before anything of the run is made or claimed: a broker that is not given or does
    not answer refuses a start, and keeps a standby from taking a run it could not drive.

    Raises:
        UsageError: jobs name a pool or an agent and no broker was given.
        TransportError: the broker does not answer.
    """
    away = [j.id for j in plan.jobs.values() if j.pool or j.agent]
    if not away:
        if opts.broker is not None:
            opts.say(f"broker {opts.broker.shown()} not used: no job of the plan runs on agents (pool:/agent:)")
        return None
    if opts.broker is None:
        raise UsageError(f"{plan.path or plan.name}: job(s) {', '.join(away[:5])}"
                         f"{' ...' if len(away) > 5 else ''} run on agents (pool:/agent:), and no broker was "
                         "given", hint="pass --broker nats://HOST:4222 or set WLOADCTL_BROKER")
    from wloadctl.remote.broker import Subjects, ensure_streams
    from wloadctl.remote.link import BrokerLink

    link = BrokerLink.open(opts.broker, name=f"scheduler-{run_id}")
    try:
        # Before anything of the run is made: a server without JetStream is refused here, in one line.
        ensure_streams(link, Subjects(opts.broker.prefix))
    except BaseException:
        link.close(timeout=2.0)
        raise
    opts.say(f"broker {opts.broker.shown()}: jobs with pool:/agent: run on agents")
    return link


def _drive_with(store: Store, run: RunRow, plan: Plan, opts: RunOptions, resumed: bool,
                on_turn: Callable[[SchedulerLoop], None] | None, claim: Claim | None,
                link: BrokerLink | None, t0: float, maker: _CoreMaker | None = None,
                copy: _PlanCopy | None = None) -> RunOutcome:
    if claim is None:
        for line in clean_stale_lines():
            opts.say(line)
        # expect_epoch: a standby that took over since the run was read wins, and this one stops.
        epoch = store.begin_epoch(run.id, os.getpid(), t0 + opts.lease_seconds + START_GRACE,
                                  expect_epoch=run.epoch)
    else:
        epoch = claim.epoch
    run = store.get_run(run.run_id) or run
    url = journal_url()
    if url is not None:
        write_journal_note(opts.state_dir, without_password(url))
    # Closing figures of an earlier stop would outlive a crash of this scheduler: gone while it runs.
    summary_path(opts.state_dir, run.run_id).unlink(missing_ok=True)
    # A new run's core was built beside its journal's writes (for the epoch it takes now).
    core = maker.result(_core_slots(opts), epoch) if maker is not None else None
    if core is None:
        history = store.expected_history(plan.name, run.id, list(plan.jobs), run.plan_digest)
        # The cyclic collector would walk the plan's million objects again and again while the core
        # allocates its own: off until the core is built, then both are frozen out of its sight.
        collecting = gc.isenabled()
        gc.disable()
        try:
            core = SchedulerCore(plan, _core_slots(opts), seed=epoch, history=history)
        finally:
            if collecting:
                gc.enable()
    shape = _ShapeWriter(opts, run, plan, core)
    # The plan and the core's arrays live as long as the run: keep the cyclic collector from
    # walking millions of their objects again at every collection.
    gc.freeze()
    adopt = resumed and run_is_alive(run.run_id)
    # The state board is sized once: room for the instances loops over output may still make.
    objs = RunObjects.open(run.run_id) if adopt else _fresh_objects(run.run_id, core.capacity(), opts)
    core.room = objs.board.capacity
    _fence_board(objs, epoch, t0 + opts.lease_seconds + START_GRACE, opts.state_dir)
    events = EventLog(opts.state_dir / "events.jsonl", run.run_id)
    if claim is not None:
        claim.announce(events)
    ctx = RunContext(run, plan, opts.state_dir, epoch, events, opts.executors, opts.slots, opts.lease_seconds,
                     say=opts.say, warn=opts.warn or opts.say)
    reader = ReportReader(core.want, _tail_reader(objs), lambda i, a: ctx.result_of(core.ids[i], a))
    remote = _agent_pool(link, core, ctx, epoch, opts, events, store, resumed) if link is not None else None
    local = LocalPool.start(core, objs, reader, _payloads(ctx, core), lambda: loop._check_fenced(), epoch,
                            opts.state_dir, executors=opts.executors, slots=opts.slots,
                            say=_said_to(events, opts),
                            serves=(lambda i: not remote.remote_of(i)) if remote is not None else None,
                            dead_after=opts.dead_after, orphan_timeout=opts.orphan_timeout,
                            cpus=opts.executor_cpus, memory=opts.executor_memory, prefetch=opts.prefetch,
                            prestarted=opts.prestarted, workdir=_start_dir(run, opts))
    if remote is None and not core.resources.places and core.group_of is None:
        # Chains of short jobs go to the executors a chain at a time (SchedulerCore.follow): one executor's
        # queue message carries them, so no other pool, placement or fair share may split them.
        def chains(short: bool) -> None:
            core.follow = FOLLOW if short else 0

        local.chains = chains

    def turned(lp: SchedulerLoop) -> None:
        shape.begin()
        if copy is not None:
            copy.save(store)
        shape.save_facts(store)
        if on_turn is not None:
            on_turn(lp)

    loop = SchedulerLoop(ctx, core, store, objs, Pools([local] if remote is None else [local, remote]),
                         on_turn=turned,
                         exit_when_stalled=opts.exit_when_stalled, beat_interval=opts.heartbeat_interval,
                         say=opts.say)
    # A server journal lost mid-run: the loop waits in the store; the event log and the board say so.
    store.on_outage = loop.journal_outage
    # A signal while it waits stops the wait (nothing can be journaled: the run is resumable from what was).
    store.stop_waiting = lambda: "stopped while waiting for it" if loop.stop_requested else None
    if opts.metrics is not None:
        opts.metrics.loop = loop
    if claim is not None and adopt:
        loop.sweeper = ResultSweeper(local, core.ids, claim.predecessor, events.emit)
    loop.governor = _governor(run, plan, core, lambda: [w.pid for w in local.sup.workers.values()])
    local.paced = loop.governor is None  # a host share sets the core's slots itself
    stop_signals = _install_signals(loop)
    status = "interrupted"
    kept = 0
    fenced: Fenced | None = None
    try:
        core.set_times(*ctx.times(core))
        if resumed:
            actions = restore_journaled(store, run.id, core, t0)
            _restore_outcomes(store, run, ctx, core)
            core.cancelled = run_cancelled(actions)
            notes = reconcile(local, core.feed, adopt, store.loss, mine=local.serves,
                              stopped=stopped_with_run(store, run.id, core, actions),
                              warn=lambda note: _journal_behind(note, ctx.warn, events))
            if remote is not None:
                notes += remote.recover(core.feed, expect=claim.agents if claim is not None else 0,
                                        renew=loop.keep_lease)
            for n in notes:
                opts.say(n)
            store.drop_columns()  # every job's row, read for the resume: not kept for the whole run
            loop.restored = bytes(core.state)
        events.emit("scheduler_start", pid=os.getpid(), epoch=epoch, resumed=resumed)
        local.spawn_missing(opts.executors)
        if opts.prestarted is not None:
            opts.prestarted.close()  # those not taken (a resume, other settings) end now, not with the run
        if loop.governor is not None:  # the host's share before the first dispatch
            loop.governor.beat(core, time.time())
        core.feed(RunStartedEvent(time.time(), cause_id="resume" if resumed else "start"))
        finished = loop.run()
        if finished is not None:
            # (jobs a cancel stopped, and no failure: a cancelled run, even once a rerun of some of them ran)
            failed = core.counts[JobState.FAILED] + core.counts[JobState.TIMED_OUT] + \
                core.counts[JobState.UPSTREAM_FAILED]
            status = "succeeded" if finished.ok else ("cancelled" if core.cancelled or not failed else "failed")
        elif loop.stalled:
            status = "held"
            held = [i for i in range(core.n) if core.state[i] == JobState.HELD]
            confirm = [core.ids[i] for i in held if core.specs[i].confirm]
            others = [core.ids[i] for i in held if not core.specs[i].confirm]
            how = " and ".join(part for part in (
                f"release {_some(others)}" if others else "",
                f"approve {_some(confirm)} (waiting for confirmation)" if confirm else "") if part)
            opts.say(f"run stalled: {len(held)} held job(s) need an operator: {how}; "
                     f"then `wloadctl resume {run_place(opts.state_dir)}`")
        else:
            # Ctrl-C: what runs here goes on under its executors, whose queues and segments stay
            # for the resume that reattaches to them; a SIGTERM stops and requeues it.
            kept = loop.jobs_here() if loop.keep_jobs else 0
            if not kept:
                loop.drain_after_stop(grace=8.0)
    except Fenced as e:
        fenced = e
        raise
    except JournalUnavailable:
        # As for a full disk: the journal cannot record running jobs stopped and requeued (stopped, their exits
        # would read as failures to the resume), so they run on under their executors for it to pick up.
        kept = loop.jobs_here()
        if kept:
            opts.say(f"{kept} job(s) here run on under their executors: the resume picks them up")
        raise
    finally:
        # Signals stay caught (they only ask the finished loop to stop) until the cleanup
        # is done: a SIGTERM here must not leave the run's queues and segments behind.
        try:
            # Whatever ended the loop, a scheduler that lost its epoch must not journal the
            # run's status, publish `done`, stop executors or remove the run's objects.
            fenced = fenced or _lost_epoch(store, run, epoch)
            if fenced is not None:
                _stand_down(loop, local, remote, fenced)
            else:
                ended = time.time()
                # A reader of the stopped run finds the plan's copy and facts (see _PlanCopy, _ShapeWriter).
                if copy is not None:
                    copy.save(store)
                shape.join()
                shape.save_facts(store)
                try:
                    store.set_status(run.id, status, ended if status not in UNFINISHED else None)
                    # (`seq`: the journal's transition these figures are at; a verb journaled since makes them stale)
                    write_summary(opts.state_dir, run.run_id, {"status": status, "counts": list(core.counts),
                                                               "seq": store.last_seq(run.id)})
                    events.emit_fields("scheduler_stop", {"status": status, **({"kept_running": kept} if kept else {})})
                finally:
                    if kept:  # executors, queues and segments stay for the resume that reattaches
                        _wait_for_hooks(ctx)
                        objs.close()
                    else:
                        loop.publish_final()
                        if status in ("interrupted", "held"):
                            local.stop_all()
                        else:
                            local.wake_all()
                        local.wait_all(timeout=10.0)
                        _wait_for_hooks(ctx)
                        objs.remove()
                        remove_run_groups(run.run_id)
                        remove_job_dirs(run.run_id)
                        remove_dead_spares(run_dirs(opts.state_dir, run.run_id)[0])
                    events.close()
        finally:
            store.on_outage = store.stop_waiting = None
            _restore_signals(stop_signals)
            if loop.governor is not None:
                loop.governor.leave()
            shape.join()
    if fenced is not None:
        raise fenced
    return RunOutcome(store.get_run(run.run_id) or run, plan, core, status, time.time() - t0, resumed, kept,
                      standing_flags(store.alerts(run.id)))


def _start_dir(run: RunRow, opts: RunOptions) -> str | None:
    """The directory the run was started from, where its jobs without a cwd: run (said when it is gone)."""
    start = json.loads(run.settings or "{}").get("cwd")
    if start is not None and not os.path.isdir(start):
        opts.say(f"the run's directory {start} is gone: its jobs without a cwd: run in {os.getcwd()}")
    return start


def _governor(run: RunRow, plan: Plan, core: SchedulerCore, executors: Callable[[], list[int]]) -> SlotGovernor | None:
    """The run's share of the host's slots, cpu and memory when `wloadctl host` set a host capacity."""
    root = state_root()
    if HostCapacity.read(root) is None:
        return None
    return SlotGovernor(HostShare(root, run.run_id, plan.name, plan.share, core.slots), executors)


def _agent_pool(link: BrokerLink, core: SchedulerCore, ctx: RunContext, epoch: int, opts: RunOptions,
                events: EventLog, store: Store, resumed: bool) -> AgentPool:
    """The pool of agents the run's pool:/agent: jobs go to, listening already.

    The agents are numbered in the journal (the loop's thread, this one, owns the store); a resumed run
    numbered before that has its numbers from the state directory's agents file.
    """
    from wloadctl.remote.agentpool import AgentPool
    from wloadctl.remote.agents import node_names
    from wloadctl.remote.broker import Subjects

    assert opts.broker is not None
    reader = ReportReader(core.want, lambda _r: "", lambda i, a: ctx.result_of(core.ids[i], a))
    pool = AgentPool(core, link, Subjects(opts.broker.prefix), ctx.run_id, epoch, reader, _payloads(ctx, core),
                     opts.state_dir, core.specs, timeout=opts.agent_timeout, say=events.emit_fields,
                     beat=min(1.0, opts.heartbeat_interval), note=opts.say, store=store, run_row=ctx.run.id,
                     legacy=node_names(opts.state_dir) if resumed else None)
    pool.start()
    return pool


def _tail_reader(objs: RunObjects) -> Callable[[P.ResultRecord], str]:
    """Reads the output tail a record points at in the run's tail ring."""

    def tail(r: P.ResultRecord) -> str:
        try:
            raw = objs.tails.read(r.tail_offset, r.tail_length, r.task, r.attempt)
        except WloadError:
            return ""
        return raw.decode("utf-8", "replace") if raw else ""

    return tail


def _payloads(ctx: RunContext, core: SchedulerCore) -> Callable[[int, int], bytes | None]:
    """Encoded payload of (job, attempt) for the local executors; None for a no-op job."""
    specs, following, attempts = core.specs, core.following, core.attempt

    def payload(i: int, attempt: int) -> bytes | None:
        spec = specs[i]
        if spec.type == "noop":
            return None
        p = ctx.payload(spec, attempt)
        u = following.get(i)
        if u is not None:
            p.extra["after"] = f"{u}:{attempts[u]}"  # the executor checks it against the record before
            if core.releases_only_follower(u):
                p.extra["sole"] = "1"  # the reports of u's end and this start may wait there (FOLLOW_HOLD)
        return P.encode_payload(p)

    return payload


def _restore_outcomes(store: Store, run: RunRow, ctx: RunContext, core: SchedulerCore) -> None:
    """Give the core the outcomes of finished jobs that conditions and loops read (they are not journaled)."""
    if not core.want:
        return
    for i, _job, state, attempt, _ex, code, *_rest in store.job_rows(run.id):
        if i in core.want and state in (JobState.SUCCEEDED, JobState.FAILED, JobState.TIMED_OUT) and attempt:
            core.outcomes[i] = {"exit_code": code, "result": ctx.result_of(core.ids[i], attempt)}


def _lost_epoch(store: Store, run: RunRow, epoch: int) -> Fenced | None:
    """A Fenced error if the journal moved past this scheduler's epoch, else None."""
    try:
        row = store.get_run(run.run_id)
    except WloadError:
        return None  # the journal cannot say; the caller's own error tells the story
    if row is None or row.epoch == epoch:
        return None
    return Fenced(f"fenced: scheduler pid {row.scheduler_pid} took run {run.run_id} over at epoch "
                  f"{row.epoch} (this scheduler held epoch {epoch})", row.scheduler_pid or 0, row.epoch)


SUCCESSOR_SEEN = 10.0
"""Longest a fenced scheduler waits for a successor whose host has its own host's name to show on its board."""


def _fence_board(objs: RunObjects, epoch: int, lease_until: float, state_dir: Path) -> None:
    """Publish this scheduler's epoch on the board at once, before recovery and dispatch.

    Executors adopt the board's epoch when they next take work, so from here on they
    refuse the records of any older scheduler, even one frozen mid-send that wakes up.
    The job states stay as the predecessor left them until the loop publishes its own.
    """
    try:
        old = objs.board.read_header()
    except WloadError:
        old = P.BoardHeader()
    objs.board.publish(dataclasses.replace(
        old, epoch=epoch, scheduler_pid=os.getpid(), beat=time.time(), lease_until=lease_until,
        standby_pid=live_standby(state_dir)))


def _stand_down(loop: SchedulerLoop, local: LocalPool, remote: AgentPool | None, fenced: Fenced) -> None:
    """Leave a run another scheduler took over: nothing published, stopped, removed or journaled.

    The run's queues, segments and executors now serve the successor, and the journal's
    status is its to write; only this process's own handles are closed.
    """
    # (The error itself, raised on from here, is what tells the operator: said once, by the command.)
    loop.ctx.events.emit("fenced", pid=os.getpid(), epoch=loop.ctx.epoch, by_pid=fenced.by_pid,
                         by_epoch=fenced.by_epoch, how="exited: it found a newer epoch")
    if remote is not None:
        remote.release()
        remote.stood_down()
    loop.ctx.reap_hooks()
    if _successor_elsewhere(loop):
        # A successor on another host took the run: nothing on this host is its own. What ran
        # here is retried there under its policy, so it must not go on here.
        local.stop_all()
        local.wait_all(timeout=10.0)
        loop.objs.remove()
    else:
        loop.objs.close()
    loop.ctx.events.close()


def _successor_elsewhere(loop: SchedulerLoop, wait: float = SUCCESSOR_SEEN) -> bool:
    """Whether the scheduler that took the run over runs on another host (its holder, in a server journal).

    A host of this one's name is this host only if the successor publishes on this host's board (it does
    so as it takes the run over, before its recovery): two machines, or two containers, may share a
    name and nothing else.
    """
    try:
        host = loop.store.holder_host(loop.ctx.run.id)
    except WloadError:
        return False  # the journal cannot say: leave everything as it is
    if host is None:
        return False
    if host != socket.gethostname():
        return True
    # (Not by its pid: the journal has it as its own pid namespace numbers it, and a host's namespace
    # numbers its first processes alike.)
    deadline = time.time() + wait
    while True:
        try:
            if loop.objs.board.read_epoch() > loop.ctx.epoch:
                return False
        except WloadError:
            pass
        if time.time() >= deadline:
            return True
        time.sleep(0.05)


def _room_for(plan: Plan, opts: RunOptions) -> None:
    """Refuse a new run in one line before anything of it exists when this host's queue quota or /dev/shm
    cannot hold it (crashed runs' queues go first: they hold quota nobody uses).

    Raises:
        UsageError: no room.
    """
    for line in clean_stale_lines():
        opts.say(line)
    shapes = run_shapes(len(plan.jobs))
    # (made for a moment: the kernel's count holds queues no listing shows, which refused the run only after
    # its journal was made, leaving an interrupted run that never started)
    queue_room(shapes.charge, probe=shapes, probe_id=opts.run_id or f"probe-{os.getpid()}")
    if 0 < shm_free() < shm_at_start(len(plan.jobs)):
        raise shm_full(f"a run of plan '{plan.name}'", shm_at_start(len(plan.jobs)))


def clean_stale_lines() -> list[str]:
    """Remove IPC objects of crashed runs; one line per run cleaned."""
    lines: list[str] = []
    clean_stale(lines.append)
    return lines


def _fresh_objects(run_id: str, n_jobs: int, opts: RunOptions) -> RunObjects:
    # Names of this very run may be left by a crash of all its processes: the epoch is
    # ours and nothing of the run lives, so they go before the run's objects are made.
    from wloadctl.ipc.shm import remove_run_objects

    gone = remove_run_objects(run_id)
    if gone:
        opts.say(f"removed {len(gone)} stale IPC object(s) of run {run_id} left by a crash")
    try:
        return RunObjects.create(run_id, n_jobs)
    except TransportError as e:
        if "ulimit -q" in e.message:  # another run took the room since the check: say it the same way
            raise quota_full(need=run_shapes(n_jobs).charge) from None
        raise


def _wait_for_hooks(ctx: RunContext) -> None:
    """The run has ended: give its on_failure hooks still running up to HOOK_WAIT seconds to end, then stop them
    (at once on Ctrl-C or SIGTERM). The caller restores the signal handlers afterwards."""
    if not ctx.hooks:
        return
    asked: list[int] = []
    # (Caught before the wait is said: a signal sent on reading that line stops the hooks.)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _f: asked.append(s))
    jobs = sorted(set(ctx.hooks.values()))
    ctx.say(f"waiting up to {HOOK_WAIT:.0f}s for {len(ctx.hooks)} on_failure alert hook(s) still running "
            f"(for job(s) {_some(jobs)}); Ctrl-C or SIGTERM stops them")
    ctx.reap_hooks(wait=HOOK_WAIT, last=True, stopped=lambda: bool(asked))


def _install_signals(loop: SchedulerLoop) -> dict[int, object]:
    old: dict[int, object] = {}

    def stop(sig: int, _f: object) -> None:
        # Ctrl-C leaves running jobs to their executors for a resume; SIGTERM stops them.
        loop.request_stop(keep_jobs=sig == signal.SIGINT)

    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, stop)
    # A dropped SSH session must not kill a night's run: the scheduler ignores hangups.
    old[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return old


def _restore_signals(old: dict[int, object]) -> None:
    for sig, h in old.items():
        signal.signal(sig, h)  # type: ignore[arg-type]

