"""Standby scheduler: watches the active one, checks with its executors or agents, takes over.

On the active's host (a SQLite journal) the standby watches the state board's beat and the
journal's lease, and asks the executors' heartbeat board. On another host (a server journal
and a broker) it watches the journal's lease alone and asks the agents over the broker; the
active's executors are out of its reach, so such a run puts its jobs on agents.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wloadctl.core.planfile import load_plan
from wloadctl.errors import NoJournalYet, StoreError, UsageError, WloadError
from wloadctl.ipc.naming import ROLE_BOARD, ROLE_EXECUTORS, object_name
from wloadctl.ipc.protocol import BoardHeader, ExecutorSlot
from wloadctl.ipc.shm import ExecutorBoard, StateBoard
from wloadctl.procs.executor import BEAT_INTERVAL as EXECUTOR_BEAT
from wloadctl.procs.health import pid_alive
from wloadctl.procs.runctx import EventLog
from wloadctl.procs.runner import START_GRACE, UNFINISHED, Claim, RunOptions, RunOutcome, broker_link, continue_run
from wloadctl.procs.supervisor import register_standby
from wloadctl.runplan import run_plan
from wloadctl.store import RunRow, Store, journal_exists, journal_url

if TYPE_CHECKING:
    from wloadctl.core.plan import Plan
    from wloadctl.procs.scheduler import SchedulerLoop
    from wloadctl.remote.link import BrokerLink
    from wloadctl.remote.witness import AgentWitness

RUN_WAIT = 60.0
"""Seconds a standby waits for a running run to appear in its state directory."""
VERIFY_WAIT = 2 * EXECUTOR_BEAT + 0.1
"""Longest wait for every live executor to beat once after the silence was noticed."""
LOCK_WAIT = 0.5
"""Seconds a claim waits for the journal's write lock before it kills the silent one."""
PAIR_BEAT = 1.0
"""Most seconds between a standby's beats on the broker (fewer when its heartbeat interval is shorter)."""
LINK_BACKOFF = 30.0
"""Most seconds between a standby's tries of an unreachable broker before it takes a run over."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the executors say about an active scheduler that went silent."""

    asked: tuple[int | str, ...]
    """Executors that are alive and beat after the silence was noticed (or agents that answered)."""
    hearing: tuple[int | str, ...]
    """Those of them that still hear the active scheduler."""

    @property
    def partitioned(self) -> bool:
        """Some executor still hears the active: the standby is cut off from it."""
        return bool(self.hearing)


def verify(
    slots: Iterable[ExecutorSlot],
    epoch: int,
    since: float,
    now: float,
    timeout: float,
    alive: Callable[[int], bool] = pid_alive,
) -> Verdict:
    """Ask the executors' heartbeat records whether they still hear the active one.

    Args:
        slots: The executor board's slots.
        epoch: The active scheduler's epoch (from the journal).
        since: When the silence was noticed: only slots written after it count, so a
            stuck executor cannot vouch for anybody.
        now: The current time.
        timeout: How recent a beat must be to count as heard.
        alive: Whether a pid lives (injected for tests).

    Returns:
        The executors asked, and those that still hear a scheduler of `epoch` or newer.
    """
    asked: list[int] = []
    hearing: list[int] = []
    for s in slots:
        if not s.pid or s.beat < since or not alive(s.pid):
            continue
        asked.append(s.executor)
        if s.seen_epoch >= epoch and now - s.seen_scheduler_beat <= timeout:
            hearing.append(s.executor)
    return Verdict(tuple(asked), tuple(hearing))


class Standby:
    """Watches one run's active scheduler and becomes the active one when it dies."""

    def __init__(self, opts: RunOptions, plan_name: str | None = None, run_id: str | None = None,
                 on_turn: Callable[[SchedulerLoop], None] | None = None) -> None:
        self.opts = opts
        """heartbeat_interval and lease_seconds (the timeout) drive the watch."""
        self.plan_name = plan_name
        """When given, the run must be of this plan."""
        self.run_id = run_id
        """When given, the run to follow (default: the latest running one)."""
        self.far = opts.broker is not None and journal_url() is not None
        """Standing by from another host: the journal's lease and the agents, no board or executors."""
        self.link: BrokerLink | None = None
        """The broker connection agents are asked through (far only)."""
        self.witness: AgentWitness | None = None
        """The agents as witnesses (far only)."""
        self.stop = False
        """Set by SIGINT/SIGTERM: stop watching."""
        self.board: StateBoard | None = None
        """The run's state board, once it exists."""
        self.eboard: ExecutorBoard | None = None
        """The run's executor board, once it exists."""
        self.next_beat = 0.0
        """When this standby next beats on the broker (far only)."""
        self.run_link: BrokerLink | None = None
        """The broker link the run's scheduler will drive its agents through, opened before a claim."""
        self.plan: Plan | None = None
        """The run's plan, read from the journal before a claim (the scheduler it becomes runs it)."""
        self.link_retry = 0.0
        """When the broker may next be tried for a takeover (it did not answer the last try)."""
        self.link_backoff = 0.0
        """Seconds between those tries, doubled at each failure up to LINK_BACKOFF."""
        self.on_turn = on_turn
        """Called at each turn of the run once this standby drives it (progress)."""
        self.outcome: RunOutcome | None = None
        """How the run ended, when this standby took it over and drove it to its end."""

    def serve(self) -> int:
        """Stand by until the run ends (0), or take it over and drive it (exit code).

        Raises:
            UsageError: no running run appeared in time, or it is of another plan.
            WloadError: journal or IPC failures.
        """
        old: dict[int, object] = {
            s: signal.signal(s, self._on_stop) for s in (signal.SIGINT, signal.SIGTERM)
        }
        # Like the active scheduler, a standby outlives a dropped SSH session.
        old[signal.SIGHUP] = signal.signal(signal.SIGHUP, signal.SIG_IGN)
        pidfile: Path | None = None
        beside: Path | None = None
        store: Store | None = None
        try:
            if self.far:
                self._open_witness()
            found = self._wait_for_run()
            if found is None:
                return 0
            store, run = found
            pidfile = register_standby(self.opts.state_dir)
            beside = self._register_beside(store, run)
            claim = self._watch(store, run)
            if claim is None:
                return 0
            pidfile.unlink(missing_ok=True)
            pidfile = None
            if beside is not None:
                beside.unlink(missing_ok=True)
                beside = None
            self._close_witness()
            # From here on this is the active scheduler, with the runner's signals.
            _restore(old)
            row = store.get_run(run.run_id) or run
            self.outcome = continue_run(store, row, self.opts, claim, on_turn=self.on_turn)
            return self.outcome.exit_code
        finally:
            _restore(old)
            for made in (pidfile, beside):
                if made is not None:
                    made.unlink(missing_ok=True)
            self._close_boards()
            self._close_witness()
            if self.run_link is not None:
                self.run_link.close(timeout=2.0)
                self.run_link = None
            if store is not None:
                store.close()

    def _register_beside(self, store: Store, run: RunRow) -> Path | None:
        """From another state directory of the active's own host, be its standby there too (None: not so).

        The active publishes the standby it finds in its state directory (`status` shows its pid);
        a standby of a server journal keeps its own state directory, so it says so in the active's.
        """
        if not self.far:
            return None
        from wloadctl.store.postgres import PostgresStore

        home = store.home_of(run.id) if isinstance(store, PostgresStore) else None
        if home is None or home[0] != socket.gethostname() or not home[1].is_dir():
            return None
        if home[1].resolve() == self.opts.state_dir.resolve():
            return None
        try:
            return register_standby(home[1])
        except OSError:
            return None  # not writable by this user: status goes without the standby's pid

    def _on_stop(self, _sig: int, _frame: object) -> None:
        self.stop = True

    def _open_witness(self) -> None:
        from wloadctl.remote.broker import Subjects
        from wloadctl.remote.link import BrokerLink
        from wloadctl.remote.witness import AgentWitness

        assert self.opts.broker is not None
        self.link = BrokerLink.open(self.opts.broker, name=f"standby-{os.getpid()}")
        self.witness = AgentWitness(self.link, Subjects(self.opts.broker.prefix))

    def _close_witness(self) -> None:
        if self.link is not None:
            self.link.close(timeout=1.0)
        self.link = self.witness = None

    def _running_run(self, store: Store) -> RunRow | None:
        """The run to follow: the one named, else (far) the journal's latest running one, else the latest."""
        if self.run_id is not None:
            return store.get_run(self.run_id)
        if self.far:
            return next((r for r in reversed(store.runs()) if r.status == "running"), None)
        return store.latest_run()

    def _wait_for_run(self) -> tuple[Store, RunRow] | None:
        """The journal and its running run, awaited up to RUN_WAIT (None if stopped)."""
        sd, deadline = self.opts.state_dir, time.time() + RUN_WAIT
        store: Store | None = None
        place = "the journal" if self.far else sd
        where = f"{place} (run {self.run_id})" if self.run_id else place
        said = False
        try:
            while not self.stop:
                if store is None and journal_exists(sd):
                    # From another host the journal is read as a whole (no state directory of ours).
                    try:
                        store = Store.open(None if self.far else sd, create=False, sync=self.opts.journal_sync)
                    except StoreError as e:
                        # The first run makes a server journal's schema: it may not have started yet
                        # (a standby on this host or another waits for it as for a run). A server that
                        # cannot be reached, or refuses, is said at once, as `run` says it.
                        if journal_url() is None or not _no_journal_yet(e) or time.time() > deadline:
                            raise
                run = self._running_run(store) if store is not None else None
                # From another host, a run counts once its scheduler holds it (its first epoch).
                if store is not None and run is not None and run.status == "running" and \
                        (run.epoch > 0 or not self.far):
                    if self.plan_name is not None and run.plan_name != self.plan_name:
                        raise UsageError(
                            f"{sd} runs plan '{run.plan_name}', not '{self.plan_name}'",
                            hint="give the plan of that run, or no plan",
                        )
                    found, store = (store, run), None
                    return found
                if time.time() > deadline:
                    raise UsageError(f"no running run in {where} to stand by for",
                                     hint=_start_hint(run, self.run_id, sd))
                if not said:
                    said = True
                    self.opts.say(f"no running run in {where} yet: waiting up to {RUN_WAIT:g}s for one to stand by "
                                  "for")
                time.sleep(self.opts.heartbeat_interval)
            return None
        finally:
            if store is not None:
                store.close()

    def _watch(self, store: Store, run: RunRow) -> Claim | None:
        """Watch until the run ends (None) or this standby wins a takeover (a claim)."""
        opts, say = self.opts, self.opts.say
        interval, timeout = opts.heartbeat_interval, opts.lease_seconds
        events = EventLog(opts.state_dir / "events.jsonl", run.run_id)
        say(
            f"standing by for run {run.run_id}: active scheduler pid "
            f"{run.scheduler_pid}, epoch {run.epoch}; heartbeat every {interval}s, "
            f"takeover after {timeout}s of silence"
        )
        epoch, watch_from, suspected = -1, time.time(), False
        try:
            while not self.stop:
                time.sleep(interval)
                if self.witness is not None:
                    self.witness.listen()  # the agents' beats, taken as they come (they pile up otherwise)
                now = time.time()
                row = store.get_run(run.run_id)
                if row is None or row.status != "running":
                    status = row.status if row else "gone"
                    say(f"run {run.run_id} is {status}; the standby exits")
                    return None
                if now >= self.next_beat:
                    self._beat(run.run_id, "suspects-partition" if suspected else "standing-by", row.epoch, now)
                if row.epoch != epoch:
                    # A new active (a start, or another standby's takeover) gets a full
                    # timeout from the moment it is seen, whatever its board says yet;
                    # it may have made the run's objects afresh, so they are reopened.
                    epoch, watch_from, suspected = row.epoch, now, False
                    self._close_boards()
                hdr = self._header(run.run_id)
                beat = hdr.beat if hdr is not None and hdr.epoch >= row.epoch else self._far_beat(row)
                silent = now - max(beat, watch_from)
                if silent <= timeout or now <= row.lease_until:
                    if suspected:
                        say(f"scheduler pid {row.scheduler_pid} beats again")
                        suspected = False
                    continue
                if self.far:
                    # A live active beats to the agents every interval: heard within a few counts.
                    verdict = self._ask_agents(run.run_id, row.epoch, min(timeout, 3 * interval))
                    again = store.get_run(run.run_id)
                    if again is None or again.epoch != row.epoch or again.lease_until >= time.time():
                        continue  # it renewed while the agents were asked: slow, not dead
                else:
                    verdict = self._ask_executors(run.run_id, row.epoch, now, timeout)
                hdr = self._header(run.run_id)
                if hdr is not None and hdr.epoch >= row.epoch and hdr.beat > beat:
                    continue  # it beat while the executors were asked: slow, not dead
                if verdict.partitioned:
                    if not suspected:
                        suspected = True
                        events.emit(
                            "partition_suspected",
                            pid=os.getpid(),
                            active_pid=row.scheduler_pid or 0,
                            epoch=row.epoch,
                            silent_for=round(silent, 3),
                            hearing=list(verdict.hearing),
                            asked=list(verdict.asked),
                        )
                        events.flush()
                        who = "agent(s)" if self.far else "executor(s)"
                        say(
                            f"suspected partition: no heartbeat from scheduler pid "
                            f"{row.scheduler_pid} for {silent:.1f}s, but {who} "
                            f"{list(verdict.hearing)} still hear it; not taking over"
                        )
                    continue
                if not self._broker_ready(store, row):
                    continue  # a run it could not drive is not claimed: the lease stays free for whoever can
                claim = self._claim(store, row, silent, verdict)
                if claim is not None:
                    return claim
                watch_from = time.time()
            return None
        finally:
            events.close()

    def _claim(
        self, store: Store, row: RunRow, silent: float, verdict: Verdict
    ) -> Claim | None:
        """Increment the epoch in the journal; None if another scheduler did first."""
        opts, old_pid = self.opts, row.scheduler_pid or 0
        link, self.run_link = self.run_link, None
        lease = time.time() + opts.lease_seconds + START_GRACE
        got: list[int] = []
        errors: list[Exception] = []

        def begin() -> None:
            try:
                got.append(
                    store.begin_epoch(
                        row.id, os.getpid(), lease, expect_epoch=row.epoch
                    )
                )
            except Exception as e:  # handed over to the watching thread below
                errors.append(e)

        # A scheduler frozen inside a journal transaction keeps SQLite's write lock, and
        # nothing but its death releases it: after LOCK_WAIT the silent active is killed
        # (it is a crash like any other: executors and jobs live in their own sessions).
        claimer = threading.Thread(target=begin, name="claim", daemon=True)
        claimer.start()
        claimer.join(LOCK_WAIT)
        # A scheduler of another host is out of reach (and its pid means nothing here): the
        # server ends a frozen writer's transaction itself (see the PostgreSQL store).
        killed = claimer.is_alive() and not self.far and _kill_scheduler(old_pid)
        claimer.join()
        if errors:
            err = errors[0]
            why = err.message if isinstance(err, StoreError) else str(err)
            opts.say(f"could not take run {row.run_id} over ({why}); standing by")
            if link is not None:
                link.close(timeout=2.0)
            return None
        epoch = got[0]
        detected = time.time()
        # Seen from another host, the takeover is this word (the journal says who, this says when).
        self._beat(row.run_id, "took-over", epoch, detected, at=detected, flush=True)

        def announce(events: EventLog) -> None:
            if killed:
                events.emit(
                    "fenced",
                    pid=old_pid,
                    epoch=row.epoch,
                    by_pid=os.getpid(),
                    by_epoch=epoch,
                    how="killed: it froze holding the journal's write lock",
                )
            events.emit(
                "takeover",
                pid=os.getpid(),
                epoch=epoch,
                from_pid=old_pid,
                from_epoch=row.epoch,
                from_alive=pid_alive(old_pid),
                from_killed=killed,
                silent_for=round(silent, 3),
                asked=list(verdict.asked),
                claimed_at=round(detected, 6),
            )
            events.flush()
            opts.say(
                f"took run {row.run_id} over from scheduler pid {old_pid} "
                f"(silent {silent:.1f}s; {len(verdict.asked)} "
                f"{'agent' if self.far else 'executor'}(s) no longer "
                f"hear it{'; killed, it held the journal lock' if killed else ''}): "
                f"epoch {row.epoch} -> {epoch}"
            )
            if self.far:
                _say_local_jobs(store, row, opts)

        return Claim(epoch, old_pid, announce, agents=len(set(verdict.asked)) if self.far else 0, link=link,
                     plan=self.plan if self.plan is not None and self.plan.digest == row.plan_digest else None)

    def _broker_ready(self, store: Store, row: RunRow) -> bool:
        """Open the broker link the run's agents need before the run is claimed (True: open, or none needed).

        A broker that does not answer is tried again, with a backoff, while the run waits: a
        standby that claimed the run and then could not drive it would leave it held by nobody.

        Raises:
            UsageError: the run has jobs on agents and this standby was given no broker.
        """
        if self.run_link is not None:
            return True
        if time.time() < self.link_retry:
            return False
        try:
            if self.plan is None or self.plan.digest != row.plan_digest:
                self.plan = run_plan(store, row)
            self.run_link = broker_link(self.plan, self.opts, row.run_id)
        except UsageError:
            raise
        except WloadError as e:
            first = self.link_backoff == 0.0
            self.link_backoff = min(LINK_BACKOFF, max(1.0, 2 * self.link_backoff))
            self.link_retry = time.time() + self.link_backoff
            if first:
                self.opts.say(f"run {row.run_id} has lost its scheduler, and this standby cannot take it over: "
                              f"{e.message}; it tries the broker again (every {LINK_BACKOFF:g}s at most) and takes "
                              "the run over once it answers")
            return False
        if self.link_backoff:
            self.opts.say(f"the broker answers again: taking run {row.run_id} over")
        self.link_backoff = 0.0
        return True

    def _beat(self, run_id: str, state: str, epoch: int, now: float, at: float | None = None,
              flush: bool = False) -> None:
        """Say on the broker that this standby lives and what it does (far only: a drill of any host reads it)."""
        if self.link is None or not self.link.connected:
            return
        from wloadctl.remote import messages as M
        from wloadctl.remote.broker import Subjects

        assert self.opts.broker is not None
        every = min(PAIR_BEAT, self.opts.heartbeat_interval)
        self.next_beat = now + every
        try:
            self.link.publish(Subjects(self.opts.broker.prefix).pair(run_id), M.PairBeat(
                run_id, "standby", state, socket.gethostname(), os.getpid(), epoch, now, every, at).encode())
            if flush:
                self.link.flush(1.0)
        except WloadError:
            pass  # the broker is away: the journal's lease, not these beats, decides any takeover

    def _far_beat(self, row: RunRow) -> float:
        """When the active of another host was last known alive (0.0 on this host): its last beat heard on the
        broker, or its last renewal of the journal's lease, whichever is later."""
        if not self.far:
            return 0.0
        heard = self.witness.last_beat(row.run_id, row.epoch) if self.witness is not None else 0.0
        # It renews the lease for lease_seconds at each beat (the first lease is longer, START_GRACE).
        renewed = row.lease_until - self.opts.lease_seconds
        return max(heard, min(renewed, time.time()))

    def _close_boards(self) -> None:
        for b in (self.board, self.eboard):
            if b is not None:
                b.close()
        self.board = self.eboard = None

    def _header(self, run_id: str) -> BoardHeader | None:
        if self.far:
            return None  # the active's board is on its own host: the journal's lease tells instead
        if self.board is None:
            try:
                self.board = StateBoard.open(object_name(run_id, ROLE_BOARD))
            except WloadError:
                return None
        try:
            return self.board.read_header()
        except WloadError:
            return None

    def _ask_agents(self, run_id: str, epoch: int, timeout: float) -> Verdict:
        """Ask the agents over the broker whether they still hear the active scheduler."""
        assert self.witness is not None
        got = self.witness.ask(run_id, epoch, timeout)
        return Verdict(got.asked, got.hearing)

    def _ask_executors(
        self, run_id: str, epoch: int, since: float, timeout: float
    ) -> Verdict:
        """Wait until each live executor beat after `since` (or VERIFY_WAIT), ask."""
        if self.eboard is None:
            try:
                self.eboard = ExecutorBoard.open(object_name(run_id, ROLE_EXECUTORS))
            except WloadError:
                return Verdict((), ())
        deadline = since + VERIFY_WAIT
        while True:
            try:
                slots = [
                    s for s in self.eboard.read_all() if s.pid and pid_alive(s.pid)
                ]
            except WloadError:
                slots = []
            now = time.time()
            if all(s.beat > since for s in slots) or now >= deadline or self.stop:
                return verify(slots, epoch, since, now, timeout)
            time.sleep(0.05)


def _say_local_jobs(store: Store, row: RunRow, opts: RunOptions) -> None:
    """Name the jobs of the old active's own host that were in flight: they are retried under their policy.

    The old host's executors are out of reach. Its jobs are treated as those of a crashed
    host: retried under each job's policy, and held for an operator when not idempotent (the
    old host, if it was only cut off, stops them when it finds itself fenced).
    """
    from wloadctl.core.holding import LOCAL_PLACE, place_of
    from wloadctl.core.states import JobState

    specs = run_plan(store, row).jobs
    flying = [r[1] for r in store.job_rows(row.id, exclude_states=[s for s in JobState if s not in
                                                                    (JobState.QUEUED, JobState.RUNNING)])
              if r[1] in specs and place_of(specs[r[1]]) == LOCAL_PLACE]
    if flying:
        more = " ..." if len(flying) > 10 else ""
        opts.say(f"{len(flying)} job(s) of pool local were in flight on the old active's host, out of reach from "
                 f"here: {', '.join(flying[:10])}{more}; retried here under their policy (held when not "
                 "idempotent). Plans meant for HA across hosts run their jobs on agents (pool:/agent:)")


def _no_journal_yet(e: StoreError) -> bool:
    """Whether a server journal answered and holds no journal yet (a run about to start makes it)."""
    return isinstance(e, NoJournalYet)


def _kill_scheduler(pid: int) -> bool:
    """SIGKILL a silent scheduler; False if the pid is gone or is not a scheduler."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    # The journal's pid may have been reused since: only a wloadctl process is killed.
    if not any(b"wloadctl" in a for a in argv) or not pid_alive(pid):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    return True


def _restore(old: dict[int, object]) -> None:
    """Put back the signal handlers saved in `old`, once (it is emptied)."""
    for sig, h in old.items():
        signal.signal(sig, h)  # type: ignore[arg-type]
    old.clear()


def run_standby(plan_path: str | None, opts: RunOptions, run_id: str | None = None,
                on_turn: Callable[[SchedulerLoop], None] | None = None) -> tuple[int, RunOutcome | None]:
    """`wloadctl scheduler --standby`: take the run over if its scheduler dies.

    Args:
        plan_path: When given, the run must be of this plan (the journal's copy runs).
        opts: Where the run is and how to watch it (heartbeat_interval; lease_seconds
            is the timeout). With a broker and a server journal the standby may be on
            another host: its state directory holds its local files only.
        run_id: The run to follow (default: the latest running one).
        on_turn: After a takeover, called at each turn of the loop this process drives (progress).

    Returns:
        0 and None when the run ended under another scheduler; after a takeover, the run's
        exit code and how it ended.

    Raises:
        UsageError: no running run to stand by for.
        WloadError: journal or IPC failures.
    """
    plan_name = load_plan(plan_path).name if plan_path else None
    standby = Standby(opts, plan_name, run_id, on_turn)
    code = standby.serve()
    return code, standby.outcome


def _start_hint(run: RunRow | None, named: str | None, state_dir: Path) -> str:
    """What to do when no run to stand by for came: resume the stopped one, or start one."""
    if run is None and named is not None:
        return f"the journal holds no run {named}: `wloadctl runs` lists the runs"
    if run is not None and run.status in UNFINISHED:
        return (f"run {run.run_id} is {run.status}, with no scheduler: resume it "
                f"(`wloadctl resume --state-dir {state_dir}`), then stand by for it")
    return "start the run first: `wloadctl run PLAN --state-dir DIR`"
