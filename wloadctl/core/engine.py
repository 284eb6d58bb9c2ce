"""The scheduling engine: events in, commands out; readiness, dispatch and retries over the job table.

It calls collaborators that each own one piece of state: Branches (`if`, `until`), FanOut
(loops over output), Timers (retry delays, deadlines, not-before) and Resources (resources and
places). Operator verbs (verbs.py) act on it through the VerbTarget protocol.
"""

from __future__ import annotations

import gc
import heapq
import signal
from collections.abc import Container, Iterable, Iterator, Mapping
from itertools import compress
from operator import not_

from wloadctl.core import codes as C
from wloadctl.core.branches import (
    BRANCH_NOT_TAKEN,
    NOT_FAILED,
    Branches,
    UnusableResult,
    until_reason,
    until_spent,
)
from wloadctl.core.commands import (
    Alert,
    Command,
    Dispatch,
    Kill,
    Persist,
    RunFinished,
)
from wloadctl.core.condition import ConditionError
from wloadctl.core.critical import rank_table
from wloadctl.core.events import (
    ClockJumpedEvent,
    Event,
    ExecutorLostEvent,
    HostClaimsEvent,
    JobAcceptedEvent,
    JobExitedEvent,
    JobsFinishedEvent,
    JobStartedEvent,
    OperatorEvent,
    PlaceCapacityEvent,
    RunStartedEvent,
    SlotsChangedEvent,
    TasksLostEvent,
    TimerFiredEvent,
)
from wloadctl.core.fanout import FanOut
from wloadctl.core.forcing import Forced
from wloadctl.core.holding import HOST_CPU, HOST_MEMORY, LOCAL_PLACE, Needs, Resources
from wloadctl.core.holds import confirm_wait, still_held
from wloadctl.core.jobtable import JobTable, PlanArrays
from wloadctl.core.loops import ITEM_SEP, instances_of, with_instances, without_instances
from wloadctl.core.outputcap import cut_reason, format_size
from wloadctl.core.plan import DynamicItems, JobSpec, Plan
from wloadctl.core.replay import HELD_LOST, LOST_AGAIN, RUN_DOWN, Journaled, follows_reason
from wloadctl.core.sla import (
    TIMER_LATE,
    TIMER_NOT_BEFORE,
    TierSlots,
)
from wloadctl.core.states import TERMINAL, DepKind, JobState, SlaTier
from wloadctl.core.timers import Timers, retry_reason
from wloadctl.core.verbs import apply_verb

S = JobState
_N = len(JobState)
_W, _R, _Q, _RUN = int(S.WAITING), int(S.READY), int(S.QUEUED), int(S.RUNNING)
_OK, _FAIL, _TO, _RW = int(S.SUCCEEDED), int(S.FAILED), int(S.TIMED_OUT), int(S.RETRY_WAIT)
_HELD, _SKIP, _CANC, _UPF = int(S.HELD), int(S.SKIPPED), int(S.CANCELLED), int(S.UPSTREAM_FAILED)
_TERMINAL = bytes(1 if JobState(s) in TERMINAL else 0 for s in range(_N))
_MASK, _GATE_READY, _GATE_EXIT, _GATE_RES = C.MASK, C.GATE_READY, C.GATE_EXIT, C.GATE_RES
_GATE_FORCE, _GATE_DECIDES = C.GATE_FORCE, C.GATE_DECIDES
FAIR_SCAN = 256
"""Ready jobs looked at per pick to find each group's most urgent one (fair share only)."""
MAX_LOST = 3
"""A job whose attempts are lost with their executor this many times fails (it may be what kills them). Losses a
resume finds, with the whole run down, do not count (JobExitedEvent.run_down)."""
FOLLOW = 16
"""Most jobs sent behind one dispatched job as its followers (SchedulerCore.follow)."""

class _CollectorPaused:
    """Holds the cyclic garbage collector off while the core works through a batch.

    The core's bulk work makes no reference cycles: transitions, dispatches and ready keys are
    tuples and ints in lists. But a batch of a whole stage of a 10M-job plan is some hundred
    thousand jobs, and every full collection its allocations trigger walks the turn's growing
    lists again, so the collector's cost grew with jobs x batch size: a fifth of a 10M run.
    Nested uses are free; the collector is turned back on only by the use that turned it off.
    """

    __slots__ = ("was",)

    def __enter__(self) -> None:
        self.was = gc.isenabled()
        if self.was:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was:
            gc.enable()


def _popping(heap: list[int]) -> Iterator[int]:
    """Pop a heap's keys, least first, until it is empty."""
    pop = heapq.heappop
    while heap:
        yield pop(heap)


def unmet_and_block(spec: JobSpec, state: Mapping[int, int] | bytearray, index: Mapping[str, int],
                    branch_skipped: Container[int]) -> tuple[int, int]:
    """A job's unmet dependencies and block (0: none; 1: an upstream failed; 2: a branch or condition
    not taken) from its upstreams' states (by job index).

    Args:
        spec: the job.
        state: job states by index (at least its upstreams').
        index: job index by id (at least its upstreams').
        branch_skipped: jobs a branch skipped.
    """
    unmet = 0
    block = 0
    for k, dep in enumerate(spec.depends_on):
        u = index[dep]
        su = state[u]
        if not _TERMINAL[su]:
            unmet += 1
            continue
        kind = spec.kind_of(k)
        if kind == DepKind.SUCCESS and su == _SKIP and u in branch_skipped:
            block = block or 2
        elif kind == DepKind.SUCCESS and su not in (_OK, _SKIP):
            block = 1
        elif kind == DepKind.FAILURE and su not in (_FAIL, _TO) and block == 0:
            block = 2
    return unmet, block


class SchedulerCore(JobTable):
    """All scheduling decisions of one run, with no I/O: feed events, flush commands.

    Job-indexed state lives in the JobTable's flat arrays so a million-job plan stays small and fast.
    """

    def __init__(self, plan: Plan, slots: int, *, seed: int = 0,
                 reserve: dict[SlaTier, float] | None = None, history: Mapping[str, float] | None = None,
                 arrays: PlanArrays | None = None) -> None:
        super().__init__(plan, arrays)
        specs, n = self.specs, self.n
        self.expected, self.path, self.key_base = rank_table(specs, self.downs, self.key_base, history)
        """Expected seconds and remaining critical path of each job (core/critical.py); keys ranked by it."""
        self.longest_path = max(self.path, default=0.0)
        """The plan's longest remaining path (seconds): a lower bound of its makespan."""
        self.branches = branches = Branches(specs, self.index, plan.variables)
        """`if` and `until`: conditions, the outcomes they read, jobs a branch skipped."""
        self.fanout = FanOut(specs, self.index)
        """Loops over output: which have expanded, and the expansions to journal."""
        for c in self.fanout.loops.values():
            branches.watch(c)
        self.gate = bytearray(n)
        """Per job, the _GATE_* bits of the paths that must look at it (0 for most jobs)."""
        for i in branches.conds.keys() | self.fanout.loops.keys():
            self.gate[i] |= _GATE_READY
        for i in branches.want | branches.untils.keys():
            self.gate[i] |= _GATE_EXIT
        for i, j in enumerate(specs):
            if j.resources:
                self.gate[i] |= _GATE_EXIT | _GATE_RES
        self.slots = slots
        """Total executor slots."""
        self.tiers = TierSlots(slots, reserve, self.tier)
        """Slots reserved per SLA tier and used per tier."""
        self.busy = 0
        """Jobs QUEUED or RUNNING (each holds a slot)."""
        self.resources = Resources(plan.resources)
        """Resources and places: what each offers, is free, is held, and who waits for it."""
        self._build_groups(plan, specs)
        if any(j.pool or j.agent for j in specs):
            # Every job claims a slot of its place: this host, a pool of agents, or one agent.
            self.resources.add_place(LOCAL_PLACE, self.slots)
            self.resources.places = True
            for i, j in enumerate(specs):
                self._claim(i, j)
        self.preemptible_running: set[int] = set()
        """Running jobs marked preemptible (candidates to make room for critical work)."""
        self.ready: list[int] = []
        """Min-heap of ready keys (see ready_key); stale entries are skipped on pop."""
        self.timers = Timers(seed)
        """Retry delays, deadlines, not-before times and lateness."""
        self.attempt_base: dict[int, int] = {}
        """Attempts made before an operator's retry/rerun, not counted against the policy."""
        self.lost_count: dict[int, int] = {}
        """How many attempts of each job were lost with their executor."""
        self.kill_reason: dict[int, tuple[str, bool]] = {}
        """Jobs asked to stop, with why and whether to requeue them (preemption, shutdown) rather than fail."""
        self.cancelled = False
        """The run was cancelled: nothing new starts."""
        self.paused = False
        """Dispatch is paused (the scheduler is stopping); states still change."""
        self.finished_sent = False
        self.started = False
        """The run has started (RunStartedEvent): jobs are judged and dispatched. A core rebuilt from a stopped
        run's journal for an operator's verb never starts: it has not the outcomes conditions read."""
        self.to_confirm: list[int] = [i for i, j in enumerate(specs) if j.confirm]
        """Confirmation jobs (`confirm: true`) not yet HELD for an operator's approve (held at the run's start)."""
        self.holds: dict[int, str] = {}
        """Jobs an operator's hold (not released) or a confirmation (not approved) holds, with what held them in
        words: one that leaves HELD meanwhile (an upstream failed, the run was cancelled) comes back HELD when
        reopened (core/holds.py)."""
        self.forcing: dict[int, Forced] = {}
        """WAITING jobs an operator's skip or set-ok ends, without running them, once their upstreams have ended
        (core/forcing.py); each has the _GATE_FORCE bit, so the paths that would make it READY look at it."""
        self._dispatch: list[tuple[int, int]] = []
        self._other: list[Command] = []
        self.follow = 0
        """Followers sent behind each job dispatched while nothing else is ready (0: none; the shell turns it
        on for its local executors): a chain of jobs, each the next's only unmet upstream, QUEUED at once in
        one message to one executor, which starts each the moment the one before it exits 0 and hands the
        rest back otherwise. A chain of short jobs then pays one round trip through the scheduler per chain,
        not one per job."""
        self.following: dict[int, int] = {}
        """Followers whose upstream has not been seen to succeed: follower -> the job it follows. Each is
        QUEUED and counted busy, but holds no slot until then (its upstream's slot becomes its own)."""
        self.leader: dict[int, int] = {}
        """The same pairs the other way: job -> its follower."""
        self._follow: set[int] = set()
        self.held_lost: dict[int, int] = {}
        """Jobs held because their executor or agent was lost while they ran (idempotent: false), with that
        attempt: if the node comes back and reports the attempt succeeded, that is the job's outcome."""
        self.handed_back: set[int] = set()
        """Jobs once sent as followers and handed back unstarted (the job they followed ran long): they are not
        sent so again, each time at a new attempt number, but dispatched once their upstream has succeeded."""

    # -- the one entry point -----------------------------------------------------------

    def handle(self, event: Event) -> list[Command]:
        """Apply one event and return the commands it produced."""
        self.feed(event)
        return self.flush()

    def feed(self, event: Event) -> None:
        """Apply one event, keeping its commands for the next flush (one flush per loop turn)."""
        with _CollectorPaused():
            self._feed(event)

    def _feed(self, event: Event) -> None:
        self.now = event.now
        self._cause = event.cause_id
        if isinstance(event, JobsFinishedEvent):
            self._on_finished(event)
        elif isinstance(event, JobExitedEvent):
            self._on_exit(event)
        elif isinstance(event, JobStartedEvent):
            self._on_start(event)
        elif isinstance(event, JobAcceptedEvent):
            if self.state[event.job] == _Q and self.attempt[event.job] == event.attempt:
                self.executor[event.job] = event.executor
        elif isinstance(event, ExecutorLostEvent):
            self._on_executor_lost(event)
        elif isinstance(event, TasksLostEvent):
            self._on_tasks_lost(event)
        elif isinstance(event, TimerFiredEvent):
            self._on_timer()
        elif isinstance(event, ClockJumpedEvent):
            self.timers.shift_retries(event.by)
            self._on_timer()  # deadlines the jump passed are flagged now
        elif isinstance(event, RunStartedEvent):
            self._on_run_started()
        elif isinstance(event, SlotsChangedEvent):
            if self.resources.places:
                self.set_capacity(LOCAL_PLACE, event.slots)  # this host's slots, beside the agents'
            else:
                self.slots = event.slots
                self.tiers.resize(event.slots)
        elif isinstance(event, PlaceCapacityEvent):
            self.set_capacity(event.place, event.slots)
        elif isinstance(event, HostClaimsEvent):
            self._on_host_claims(event)
        elif isinstance(event, OperatorEvent):
            self._other.append(apply_verb(self, event))
        else:  # pragma: no cover - the Event union is closed
            raise TypeError(f"unknown event {type(event).__name__}")

    def flush(self) -> list[Command]:
        """Fill free slots, then return everything decided since the last flush.

        Order matters: Persist comes first so the shell journals transitions before any
        dispatch, kill or alert makes them visible outside the scheduler.
        """
        with _CollectorPaused():
            self._fill()
            if self.follow and self._dispatch and not self.ready:
                self._add_followers()
        out: list[Command] = []
        fanout = self.fanout
        if self._tx or fanout.added:
            out.append(Persist(self._tx, fanout.added))
            self._tx = []
            fanout.added = []
        out.extend(self._other)
        self._other = []
        if self._dispatch:
            out.append(Dispatch(self._dispatch, frozenset(self._follow)) if self._follow else Dispatch(self._dispatch))
            self._dispatch = []
            self._follow = set()
        if not self.finished_sent and self.is_finished():
            self.finished_sent = True
            out.append(RunFinished(ok=self.counts[_OK] + self.counts[_SKIP] == self.n))
        return out

    # -- transitions ---------------------------------------------------------------------

    def _make_ready(self, i: int) -> None:
        self.set_state(i, _R)
        heapq.heappush(self.ready, self.key_base[i] | i)

    def enqueue(self, i: int) -> None:
        """Put READY job i on the ready queue (its key: tier, priority, plan order)."""
        heapq.heappush(self.ready, self.key_base[i] | i)

    # -- event handlers ------------------------------------------------------------------

    def _on_run_started(self) -> None:
        self.started = True
        state, unmet, block = self.state, self.unmet, self.block
        moot: list[int] = []
        for i in self.to_confirm:
            if state[i] == _W:
                self.holds[i] = confirm_wait(self.ids[i])
                self.set_state(i, _HELD, reason=self.holds[i])
                if not unmet[i] and not block[i] and self.gate[i] & _GATE_READY:
                    self._judge_confirming(i, moot)
        self.to_confirm = []
        if moot:
            self._resolve_many(moot)
        specs = self.specs
        # Only jobs with no unmet upstream can start: found without a Python step for each of a million jobs.
        for i in compress(range(self.n), map(not_, unmet)):
            if state[i] == _W and not block[i]:
                if specs[i].item is not None and (loop := self.awaits_list(i)) is not None:
                    self._wait_for_list(i, loop)  # (a rerun instance whose loop reads its list again)
                    continue
                if self.gate[i] & _GATE_DECIDES:
                    skipped: list[int] = []
                    self._gated_ready(i, skipped)
                    if skipped:
                        self._resolve_many(skipped)
                    continue
                self._make_ready(i)

    def _on_timer(self) -> None:
        timers, state = self.timers, self.state
        for i, mark in timers.due(self.now):
            st = state[i]
            if mark >= 0:
                if st == _RW and self.attempt[i] == mark:
                    timers.retry_due.pop(i, None)
                    self._make_ready(i)
            elif mark == TIMER_NOT_BEFORE:
                if st == _R:
                    heapq.heappush(self.ready, self.key_base[i] | i)
            elif st != _OK and st != _SKIP:
                flag = timers.flag(i, mark == TIMER_LATE, st)
                if flag is not None:
                    self._other.append(flag)

    def set_times(self, deadlines: dict[int, float], not_before: dict[int, float], add: bool = False) -> None:
        """Give the core the absolute deadlines and not-before times of jobs (computed by the shell).

        Args:
            deadlines: absolute deadline by job.
            not_before: absolute earliest start by job.
            add: add to the times already given instead of replacing them.
        """
        self.timers.set_times(deadlines, not_before, self.specs, add)

    def next_timer(self) -> float | None:
        """When the core next needs a TimerFiredEvent, or None."""
        return self.timers.next_due(self.state, self.attempt)

    def _on_start(self, ev: JobStartedEvent) -> None:
        i = ev.job
        if self.state[i] == _Q and self.attempt[i] == ev.attempt:
            if i in self.following:
                self._inherit(i)  # its executor started it: the job it follows exited 0 there
            self.executor[i] = ev.executor
            self.set_state(i, _RUN, executor=ev.executor)
            if self.specs[i].preemptible:
                self.preemptible_running.add(i)
        elif self.state[i] == _RUN and self.attempt[i] == ev.attempt and self.executor[i] < 0:
            # Restored RUNNING from the journal (which keeps no executor), its start read again from the journal
            # of the executor running it (recovery): that executor's loss is now this job's too.
            self.executor[i] = ev.executor
            if self.specs[i].preemptible:
                self.preemptible_running.add(i)

    def _on_finished(self, ev: JobsFinishedEvent) -> None:
        """Plain exits in bulk (the common case at scale): successes take a fast path."""
        state, attempt, tx_append = self.state, self.attempt, self._tx.append
        executor, tier, in_use, gate = self.executor, self.tier, self.tiers.in_use, self.gate
        kill_reason, now, cause = self.kill_reason, ev.now, ev.cause_id
        leader, following = self.leader, self.following
        q_, run_, ok_, slow = _Q, _RUN, _OK, _GATE_EXIT
        done: list[int] = []
        append = done.append
        was_queued = 0
        for i, att, ex, code in ev.results:
            st = state[i]
            if attempt[i] != att or (st != q_ and st != run_):
                continue  # stale or repeated: this attempt's end is already recorded
            if code or gate[i] & slow or (kill_reason and i in kill_reason):
                self._on_exit(JobExitedEvent(i, att, ex, code, now, cause_id=cause))
                continue
            if following and i in following:
                self._inherit(i)
            if leader and i in leader:
                self._inherit(leader[i])  # its follower takes its slot, and is started already or about to be
            in_use[tier[i]] -= 1
            executor[i] = -1
            # QUEUED/RUNNING -> SUCCEEDED is always legal: the hot path skips the table lookup.
            state[i] = ok_
            if st == q_:
                was_queued += 1
            tx_append((i, st, ok_, att, now, ex, 0, "", cause))
            append(i)
        if done:
            counts = self.counts
            self.busy -= len(done)
            counts[_Q] -= was_queued
            counts[_RUN] -= len(done) - was_queued
            counts[_OK] += len(done)
            if self.timers.lateness:
                self._deadlines_met(done)
            self._resolve_many(done)

    def _deadlines_met(self, jobs: list[int]) -> None:
        """Jobs that just succeeded: those flagged AT_RISK made their deadline (flagged MET)."""
        lateness, other = self.timers.lateness, self._other
        for i in jobs:
            if i in lateness and (flag := self.timers.met(i, self.now)) is not None:
                other.append(flag)

    def _on_exit(self, ev: JobExitedEvent) -> None:
        i = ev.job
        st = self.state[i]
        if st == _HELD and self.held_lost.get(i) == ev.attempt and not ev.lost:
            self._late_exit(i, ev)
            return
        if self.attempt[i] != ev.attempt or (st != _Q and st != _RUN):
            return  # a stale or repeated report: the journal already has this attempt's end
        self._release(i)
        ex = ev.executor
        if self.following and i in self.following:
            if ev.lost:
                # Handed back or lost unstarted: it waits again for the job it followed, whatever that did.
                self._unfollow(i, ev)
                return
            self._inherit(i)  # its executor tried to start it: the job it follows exited 0 there
        if not ev.lost:
            self.branches.record(i, None if ev.signal else ev.exit_code, ev.result)
        unusable = ev.result.problem if isinstance(ev.result, UnusableResult) else None
        if ev.exit_code == 0 and not ev.signal and not ev.timed_out and not ev.lost and not ev.spawn_failed and \
                unusable is None and not ev.output_cut:
            kill = self.kill_reason.pop(i, None)
            if kill is not None and not kill[1] and i in self.branches.untils:
                # An operator's kill of an `until` loop, heard after its iteration had exited 0: the loop stops
                # (the next iteration would start, and the kill be lost).
                used = self.attempt[i] - self.attempt_base.get(i, 0)
                why = f"{kill[0]} (its iteration had exited 0: the loop starts no other)"
                self.set_state(i, _FAIL, reason=why, executor=ex, exit_code=0)
                self._other.append(Alert(i, _FAIL, used, why, 0))
                self.resolve(i)
                return
            done = ""
            if i in self.branches.untils:
                again, done = self._again_until(i, ev)
                if again:
                    return
            if i in self.leader:
                self._inherit(self.leader[i])
            self.set_state(i, _OK, reason=done, executor=ex, exit_code=0)
            if self.timers.lateness:
                self._deadlines_met([i])
            self.resolve(i)
            return
        # Its follower, if any, is handed back by the executor (or lost with it): _unfollow settles it.
        self.leader.pop(i, None)
        spec = self.specs[i]
        policy = spec.retry
        kill = self.kill_reason.pop(i, None)
        killed = kill[0] if kill else None
        if kill is not None and kill[1] and st == _RUN and not spec.idempotent:
            # Stopped with the run while it ran: what it did may not be done twice (idempotent: false).
            self.set_state(i, _HELD, reason=f"{killed}: it may not run twice (idempotent: false), an operator decides",
                           executor=ex)
            return
        if (kill is not None and kill[1]) or (ev.lost and st == _Q and (spec.idempotent or not ev.unheard)):
            # Preempted, stopped with the run, or lost before it ever started: not the
            # job's fault, so it is requeued without using up an attempt. (One that may not run twice, lost
            # with an agent before its start could be heard, may have started: it is held below.)
            if kill is not None and kill[1]:
                # The stopped copy ran (or may have): its next copy takes a new attempt number, not counted,
                # so that copy keeps its log and result, and nothing it reports late (a result, the kill
                # sent after the grace) can be read as the next copy's: (job, attempt, epoch) names one copy.
                self.attempt_base[i] = self.attempt_base.get(i, 0) + 1
            else:
                self.attempt[i] -= 1
            self._make_ready_from(i, reason=killed or (
                f"handed back unstarted by executor {ex}: its slots stayed busy" if ev.returned
                else "requeued: executor lost before its start was heard (it may have started; it may run twice)"
                if ev.unheard else "requeued: executor lost before start"))
            if self.cancelled:
                self.set_state(i, _CANC, reason="run cancelled")  # it never started: it does not now
            return
        if ev.lost and (killed is None or not spec.idempotent):
            # (An operator's kill of a job lost with its node is done: the job does not run again. One that may
            # not run twice is held all the same: it may still run on the node, which may come back.)
            why, retryable = "executor lost", policy.on_lost
            if not spec.idempotent:
                self.set_state(i, _HELD, reason=HELD_LOST, executor=ex)
                self.held_lost[i] = self.attempt[i]
                return
            lost = self.lost_count.get(i, 0)
            if policy.on_lost and (ev.run_down or lost < MAX_LOST):
                # The infrastructure failed, not the job: run it again at once, without
                # spending its retry budget (but not forever: a job that keeps killing its
                # executor while a scheduler watches fails after MAX_LOST losses). A loss a
                # resume finds went with the whole run (a crash of the host): not counted.
                if ev.run_down:
                    why_again = f"{RUN_DOWN}{self.attempt[i]}), its executor lost with it; running it again"
                else:
                    self.lost_count[i] = lost + 1
                    why_again = f"{LOST_AGAIN}{self.attempt[i]}; running it again"
                self.attempt_base[i] = self.attempt_base.get(i, 0) + 1
                self._make_ready_from(i, reason=why_again)
                if self.cancelled:
                    # Nothing starts in a cancelled run: left READY it would keep the run from ever ending.
                    self.set_state(i, _CANC, reason="run cancelled")
                return
            if policy.on_lost:
                why = (f"executor lost ({lost + 1} losses under this job: the first {MAX_LOST} ran it again at once, "
                       "a later one counts as its failure; it may be what kills its executor)")
        elif killed is not None:
            why, retryable = killed, False
        elif ev.timed_out:
            why, retryable = f"timed out after {spec.timeout:g}s", policy.on_timeout
            if ev.signal == signal.SIGKILL:
                # (its end came the grace period later: told, so that the time it ran does not read as a mistake)
                why += ": it went on after SIGTERM and was killed (SIGKILL) once its grace period was over"
            if ev.output_cut:  # (its output passed the cap too, before the timeout's stop had ended it)
                cap = spec.max_output
                why += f"; its log was cut at max_output {format_size(cap)}" if cap else "; its log was cut"
        elif ev.output_cut:
            why, retryable = cut_reason(spec.max_output, ev.signal, ev.exit_code), policy.on_max_output
        elif ev.spawn_failed:
            why, retryable = "could not start: " + (ev.tail.strip().splitlines() or ["?"])[-1], False
        elif ev.signal:
            why, retryable = f"killed by signal {ev.signal}", policy.on_signal
        elif unusable is not None and ev.exit_code == 0:
            # What reads its result (an `if`, an `until`, a loop) could not be judged on it.
            why, retryable = f"exited 0, but {unusable}", True
        else:
            why, retryable = f"exit status {ev.exit_code}", policy.retries_exit(ev.exit_code)
        used = self.attempt[i] - self.attempt_base.get(i, 0)
        code = None if ev.signal else ev.exit_code
        if retryable and used <= policy.count and not self.cancelled:
            delay = self.timers.retry_delay(spec, self.tier[i], used)
            due = self.now + delay
            self.set_state(i, _RW, reason=retry_reason(why, used, policy.count, delay), executor=ex, exit_code=code)
            self.timers.wait_retry(i, due, self.attempt[i])
            return
        final = _TO if ev.timed_out else _FAIL
        self.set_state(i, final, reason=why, executor=ex, exit_code=code)
        self._other.append(Alert(i, final, used, why, code))
        self.resolve(i)

    def _late_exit(self, i: int, ev: JobExitedEvent) -> None:
        """The end of an attempt held when its node was lost (see held_lost): the node came back with it. An exit 0
        is the job's success; any other end leaves it held for the operator, who now knows how it ended."""
        del self.held_lost[i]
        if ev.exit_code == 0 and not ev.signal and not ev.timed_out and not ev.spawn_failed and not ev.output_cut:
            self.branches.record(i, 0, ev.result)
            # Stamped with when it is heard: the job was held until now, whenever it had ended.
            ago = f" ({ev.now - ev.ended:.0f}s before)" if ev.ended and ev.now - ev.ended >= 1 else ""
            self.set_state(i, _OK, reason=f"its node came back: attempt {ev.attempt} had succeeded{ago}",
                           executor=ev.executor, exit_code=0)
            self.resolve(i)

    def _again_until(self, i: int, ev: JobExitedEvent) -> tuple[bool, str]:
        """An `until` job succeeded: run it again unless its condition holds or it ran enough times.

        Returns:
            (settled here: run again, failed or cancelled; the reason of its success otherwise: "" when its
            condition came true, else that max_iterations ended it).
        """
        most = self.specs[i].max_iterations
        try:
            done, n, met = self.branches.until_done(i, ev.exit_code, ev.result, most)
        except ConditionError as e:
            self._fail_unjudged(i, f"until: {e}", executor=ev.executor, exit_code=ev.exit_code)
            self.resolve(i)
            return True, ""
        if done:
            self.holds.pop(i, None)  # (a hold asked for after this iteration: there is no other to hold)
            return False, "" if met else until_spent(n)
        if self.cancelled:  # no iteration starts in a cancelled run
            self.set_state(i, _R, reason=until_reason(n, most), executor=ev.executor)
            self.set_state(i, _CANC, reason="run cancelled")
            self.resolve(i)
            return True, ""
        # Another iteration is not a retry: it does not spend the retry budget.
        self.attempt_base[i] = self.attempt_base.get(i, 0) + 1
        if i in self.holds:  # an operator's hold asked for during the iteration: the next waits for a release
            self.set_state(i, _R, reason=until_reason(n, most), executor=ev.executor)
            self.set_state(i, _HELD, reason=f"{self.holds[i]} after iteration {n}/{most}")
            return True, ""
        self._make_ready_from(i, reason=until_reason(n, most))
        return True, ""

    @property
    def want(self) -> set[int]:
        """Jobs whose outcome (exit status, result file) some condition reads."""
        return self.branches.want

    @property
    def outcomes(self) -> dict[int, dict[str, object]]:
        """Outcome of each wanted job (the shell restores them from the journal)."""
        return self.branches.outcomes

    def _make_ready_from(self, i: int, reason: str) -> None:
        self.set_state(i, _R, reason=reason)
        heapq.heappush(self.ready, self.key_base[i] | i)

    # -- followers -----------------------------------------------------------------------

    def _add_followers(self) -> None:
        """Behind each job dispatched this turn, the chain of jobs that can start only after it (see `follow`)."""
        out: list[tuple[int, int]] = []
        state, attempt, tier, in_use = self.state, self.attempt, self.tier, self.tiers.in_use
        following, leader, follow, ids = self.following, self.leader, self._follow, self.ids
        tx_append, now, cause = self._tx.append, self.now, self._cause
        added = 0
        for i, att in self._dispatch:
            out.append((i, att))
            u = i
            for _ in range(self.follow):
                d = self._next_in_chain(u)
                if d is None:
                    break
                a = attempt[d] + 1
                attempt[d] = a
                state[d] = _Q
                why = follows_reason(ids[u])
                self.reasons[d] = why
                tx_append((d, _W, _Q, a, now, -1, None, why, cause))
                in_use[tier[d]] += 1
                following[d] = u
                leader[u] = d
                follow.add(d)
                out.append((d, a))
                added += 1
                u = d
        if added:
            self._dispatch = out
            self.busy += added
            self.counts[_W] -= added
            self.counts[_Q] += added

    def releases_only_follower(self, u: int) -> bool:
        """Whether job u's end releases nothing but its follower: u has no other dependent, so the report of
        its end (and of its follower's start) can wait at the executor without holding anything back."""
        return self.down_start[u + 1] - self.down_start[u] == 1

    def _next_in_chain(self, u: int) -> int | None:
        """The dependent of u that may follow it: u is its only unmet upstream, by a plain success edge, and
        nothing else decides when it starts (no condition, loop, resource, not-before time, `until` on u), and
        u runs a process (a no-op ends as its executor takes it: there is nothing to follow)."""
        gate, specs = self.gate, self.specs
        if gate[u] & _GATE_EXIT or specs[u].type == "noop":
            return None
        state, unmet, block, down, kinds = self.state, self.unmet, self.block, self.down, self.down_kind
        not_before, key_base = self.timers.not_before, self.key_base
        best = -1
        for pos in range(self.down_start[u], self.down_start[u + 1]):
            d = down[pos]
            if state[d] != _W or unmet[d] != 1 or block[d] or gate[d] or (kinds is not None and kinds[pos]):
                continue
            if specs[d].type == "noop" or (not_before and d in not_before) or d in self.handed_back:
                continue
            if best < 0 or key_base[d] < key_base[best]:
                best = d
        return best if best >= 0 else None

    def _inherit(self, d: int) -> None:
        """The job follower d follows succeeded (or d's executor started d, which it does only then): d counts
        it as done and holds its slot."""
        u = self.following.pop(d, None)
        if u is None:
            return
        if self.leader.get(u) == d:
            del self.leader[u]
        self.unmet[d] -= 1

    def _unfollow(self, d: int, ev: JobExitedEvent) -> None:
        """Follower d came back unstarted (handed back, or lost with its executor): it takes the state its
        upstreams call for now, its attempt not counted. Its next dispatch takes a new attempt number (not
        this one again, as a task handed back from a backlog does): whatever an executor recorded of this
        one can then never be read as the next one's."""
        u = self.following.pop(d)
        if self.leader.get(u) == d:
            del self.leader[u]
        self.kill_reason.pop(d, None)  # a kill asked for while it waited: it never ran
        self.set_state(d, _W, reason=f"handed back unstarted behind {self.ids[u]}")
        self.attempt_base[d] = self.attempt_base.get(d, 0) + 1
        if ev.returned:  # (lost with its executor, it follows again: the job it followed ran no longer than any)
            self.handed_back.add(d)
        self.recompute(d)
        if self.cancelled:
            self.set_state(d, _CANC, reason="run cancelled")
        elif self.block[d]:
            self._blocked(u, d, [])
            self.resolve(d)
        elif self.unmet[d] == 0:
            if self.gate[d] & _GATE_DECIDES:
                stack: list[int] = []
                self._gated_ready(d, stack)
                if stack:
                    self._resolve_many(stack)
            else:
                self._make_ready(d)

    def resolve(self, i: int) -> None:
        """Job i reached a terminal state: update its dependents' counters, cascading without recursion."""
        if i in self.timers.lateness and self.state[i] in (_OK, _SKIP):
            # Flagged AT_RISK, and done with before its deadline (an operator's skip or set-ok among the ways).
            said = self.reasons.get(i, "")
            how = said.split(":")[0].split(" (")[0] if said.startswith(("set ok", "skipped")) else "finished"
            if (flag := self.timers.met(i, self.now, how)) is not None:
                self._other.append(flag)
        self._resolve_many([i])

    def _resolve_many(self, roots: list[int]) -> None:
        """Jobs that reached a terminal state: update their dependents' counters, cascading without recursion.

        A success whose edges are all plain (the common case) takes a tight loop; anything
        else (a failure, a skip, a dependency kind, a gated dependent) the general one.
        """
        state, unmet, block, down, start = self.state, self.unmet, self.block, self.down, self.down_start
        kinds, gate, downs = self.down_kind, self.gate, self.downs
        counts, attempt, now, cause = self.counts, self.attempt, self.now, self._cause
        tx_append, ready, key_base, heappush = self._tx.append, self.ready, self.key_base, heapq.heappush
        fresh: list[int] = []
        add_fresh = fresh.append
        w_, r_, ok_, held_, gated = _W, _R, _OK, _HELD, _GATE_DECIDES
        if kinds is None and not self.cancelled:
            stack = []
            for u in roots:
                if state[u] != ok_:
                    stack.append(u)
                    continue
                for d in downs[u]:
                    sd = state[d]
                    if sd != w_:
                        if sd == held_:
                            unmet[d] -= 1  # a success changes nothing else for a held job...
                            if block[d]:
                                self._blocked(u, d, stack)  # ...unless another upstream had failed
                            elif not unmet[d] and gate[d] & gated:
                                self._judge_confirming(d, stack)  # ...or its `if` makes its approve moot
                        continue
                    left = unmet[d] - 1
                    unmet[d] = left
                    if block[d]:
                        self._blocked(u, d, stack)  # waiting with a failed or untaken upstream
                        continue
                    if left:
                        continue
                    if gate[d] & gated:
                        self._gated_ready(d, stack)
                        continue
                    # WAITING -> READY is always legal: the hot path skips the table lookup.
                    state[d] = r_
                    tx_append((d, w_, r_, attempt[d], now, -1, None, "", cause))
                    add_fresh(key_base[d] | d)
        else:
            stack = roots
        branch_skipped = self.branches.branch_skipped
        while stack:
            u = stack.pop()
            su = state[u]
            branch = su == _SKIP and u in branch_skipped
            ok = su == _OK or (su == _SKIP and not branch)
            failed = su == _FAIL or su == _TO
            for pos in range(start[u], start[u + 1]):
                d = down[pos]
                sd = state[d]
                if sd != _W and sd != _HELD:
                    continue
                unmet[d] -= 1
                kind = kinds[pos] if kinds is not None else 0
                if kind == 0:
                    if branch:
                        block[d] = block[d] or 2
                    elif not ok:
                        block[d] = 1
                elif kind == 1:
                    if not failed and not block[d]:
                        block[d] = 2
                if block[d]:
                    self._blocked(u, d, stack)
                elif unmet[d] == 0 and sd == _HELD:
                    if gate[d] & _GATE_READY:
                        self._judge_confirming(d, stack)
                elif unmet[d] == 0 and sd == _W:
                    if self.cancelled and d not in self.fanout.expanded:  # (a loop ends with its instances)
                        self.set_state(d, _CANC, reason="run cancelled")
                        continue
                    if gate[d] & _GATE_DECIDES:
                        self._gated_ready(d, stack)
                        continue
                    state[d] = _R
                    tx_append((d, _W, _R, attempt[d], now, -1, None, "", cause))
                    add_fresh(key_base[d] | d)
        # Every job made READY here went to `fresh`.
        counts[_W] -= len(fresh)
        counts[_R] += len(fresh)
        if len(fresh) > 64 and len(fresh) * 4 > len(ready):
            ready.extend(fresh)  # many at once: one linear heapify beats a push each
            heapq.heapify(ready)
        else:
            for key in fresh:
                heappush(ready, key)

    def _blocked(self, u: int, d: int, stack: list[int]) -> None:
        """Job d, just counted upstream u as ended, is blocked: it ends UPSTREAM_FAILED or SKIPPED (then resolved).

        One an operator skipped or set ok while its upstreams ran waits for the last of them instead, then ends as
        the operator said (core/forcing.py): an upstream's failure does not undo the operator's word."""
        if self.forcing and d in self.forcing:
            if not self.unmet[d]:
                self.end_forced(d)
                stack.append(d)
            return
        su = self.state[u]
        if self.block[d] == 1 and d in self.fanout.expanded and self.specs[u].item is not None and \
                self.ids[u].startswith(self.ids[d] + "@"):
            # One of a loop's own instances failed: the loop fails (a `failure` dependency on it runs), once
            # its other instances have ended too (a `done` dependency means the whole loop has).
            if self.unmet[d] > 0:
                return
            failed = [v for v in instances_of(self.specs[d], self.specs, self.index)
                      if self.state[v] not in (_OK, _SKIP)]
            if all(self.state[v] == _CANC for v in failed):
                self.set_state(d, _CANC, reason="run cancelled: its instances that had not started were cancelled")
                stack.append(d)
                return
            names = ", ".join(self.ids[v] for v in failed[:5]) + (" ..." if len(failed) > 5 else "")
            self.set_state(d, _FAIL, reason=f"instance {names} {S(self.state[failed[0]]).name}" if len(failed) == 1
                           else f"{len(failed)} instances did not succeed: {names}")
        elif self.block[d] == 1:
            if su == _OK or su == _SKIP:
                # Blocked before u ended (an upstream reopened after it failed, or set ok, ends last): the
                # upstream named is the one that blocks it.
                u = self._blocker(d, u)
                su = self.state[u]
            held = f"; {still_held(self.holds[d], ended=True)}" if self.holds and d in self.holds else ""
            self.set_state(d, _UPF, reason=f"upstream {self.ids[u]} {S(su).name}{held}")
        else:
            branch = su == _SKIP and u in self.branches.branch_skipped
            why = f"{BRANCH_NOT_TAKEN}{self.ids[u]} skipped" if branch else \
                f"{NOT_FAILED}{self.ids[u]} did not fail"
            self.branches.branch_skipped.add(d)
            self.set_state(d, _SKIP, reason=why)
        stack.append(d)

    def _blocker(self, d: int, u: int) -> int:
        """The first upstream whose end blocks job d (a success dependency that ended otherwise); u if none."""
        spec, state, index = self.specs[d], self.state, self.index
        for k, dep in enumerate(spec.depends_on):
            v = index[dep]
            if _TERMINAL[state[v]] and state[v] != _OK and state[v] != _SKIP and spec.kind_of(k) == DepKind.SUCCESS:
                return v
        return u

    def _gated_ready(self, d: int, stack: list[int]) -> None:
        """Job d has nothing left to wait for, but an `if`, a loop over output or an operator's pending skip or
        set-ok decides what happens to it (the operator's word first: the job does not run, whatever its `if`)."""
        if self.forcing and d in self.forcing:
            self.end_forced(d)
            stack.append(d)
            return
        branches = self.branches
        if d in branches.conds:
            try:
                holds, why = branches.holds(d, self.state)
            except ConditionError as e:
                self._fail_unjudged(d, f"if: {e}")
                stack.append(d)
                return
            if not holds:
                branches.branch_skipped.add(d)
                self.set_state(d, _SKIP, reason=why)
                stack.append(d)
                return
        if d in self.fanout.loops:
            self.reach_loop(d)
            return
        self._make_ready(d)

    def _judge_confirming(self, d: int, stack: list[int]) -> None:
        """HELD job d has nothing left to wait for: when it waits only for its confirmation and its `if` is false,
        it is SKIPPED at once (nothing would run to approve), its wait kept for whatever reopens it.

        An operator's hold is the operator's to end: such a job stays HELD, as one whose `if` cannot be evaluated
        does (its approve judges it again, and fails it then).
        """
        if not self.started or self.holds.get(d) != confirm_wait(self.ids[d]) or d not in self.branches.conds:
            return
        try:
            holds, why = self.branches.holds(d, self.state)
        except ConditionError:
            return
        if not holds:
            self.branches.branch_skipped.add(d)
            self.set_state(d, _SKIP, reason=f"{why}; no confirmation asked")
            stack.append(d)

    def afresh(self, i: int) -> None:
        """Job i starts over, as in a fresh run (an operator's rerun, or one upstream of it): an `until` counts
        its iterations from none again. (Its reopening transition says so in the journal: a resume counts them
        from there, core/replay.py.)"""
        self.branches.afresh(i)

    def let_go(self, i: int) -> None:
        """WAITING job i has nothing left to wait for (an operator's retry, rerun or release): it goes on as it
        would in a fresh run, its `if` judged again on the outcomes and variables of now (SKIPPED when false,
        FAILED when it cannot be evaluated), never run on an old verdict or on none.

        Before the run has started (a verb on a stopped run's journal, which has not the outcomes conditions
        read) a job with an `if` stays WAITING: the run's start judges it when it is resumed.
        """
        if self.state[i] == _R:
            self.enqueue(i)
            return
        loop = self.awaits_list(i)
        if loop is not None:
            self._wait_for_list(i, loop)
            return
        if not self.gate[i] & _GATE_DECIDES:
            self._make_ready(i)
            return
        if not self.started and i not in self.forcing:
            return
        stack: list[int] = []
        self._gated_ready(i, stack)
        if stack:
            self._resolve_many(stack)

    def hold_again(self, i: int, why: str = "") -> None:
        """Job i, reopened (or ended) while an operator's hold or a confirmation holds it, is HELD again: it runs
        only once released (approved). `why`: what reopened it (its WAITING step says so when it had ended)."""
        if self.state[i] == _HELD:
            return
        if _TERMINAL[self.state[i]]:
            self.set_state(i, _W, reason=why)
        self.recompute(i)
        self.set_state(i, _HELD, reason=still_held(self.holds[i]) + (f" ({why})" if why else ""))

    def force_later(self, i: int, forced: Forced) -> None:
        """An operator's skip or set-ok of job i (WAITING or HELD), one of whose upstreams has not ended: it stays
        (or goes back to) WAITING, its transition saying what waits, and ends as `forced` says once its last
        upstream has ended (end_forced). One asked again replaces the one before."""
        self.set_state(i, _W, reason=forced.pending())  # (WAITING -> WAITING: the journal and the console read it)
        self.forcing[i] = forced
        self.gate[i] |= _GATE_FORCE

    def drop_force(self, i: int) -> Forced | None:
        """Job i's pending skip or set-ok is called off (or its job ended otherwise); it, if there was one."""
        forced = self.forcing.pop(i, None)
        if forced is not None:
            self.gate[i] &= 0xFF ^ _GATE_FORCE
        return forced

    def end_forced(self, i: int) -> None:
        """Job i's upstreams have all ended: its pending skip or set-ok ends it, unrun (the caller resolves it)."""
        forced = self.drop_force(i)
        assert forced is not None
        state, index = self.state, self.index
        bad = [dep for dep in self.specs[i].depends_on if state[index[dep]] != _OK and state[index[dep]] != _SKIP]
        self.set_state(i, forced.to, reason=forced.ended(bad))

    def _fail_unjudged(self, i: int, why: str, executor: int = -1, exit_code: int | None = None) -> None:
        """Job i fails because an expression that decides it (`if`, `until`, a loop's list) cannot be evaluated;
        the caller resolves it."""
        self.set_state(i, _FAIL, reason=why, executor=executor, exit_code=exit_code)
        self._other.append(Alert(i, _FAIL, self.attempt[i] - self.attempt_base.get(i, 0), why, exit_code))

    # -- loops over output ---------------------------------------------------------------

    @property
    def room(self) -> int | None:
        """Most jobs the shell can show (its state board's size); None = no limit."""
        return self.fanout.room

    @room.setter
    def room(self, value: int | None) -> None:
        self.fanout.room = value

    def capacity(self) -> int:
        """Most jobs this run may hold: its jobs now, plus every instance its loops over output may still make."""
        return self.fanout.capacity(self.specs)

    def reach_loop(self, d: int) -> None:
        """Loop parent d has nothing left to wait for: expand it, or end it when its instances have ended."""
        fanout = self.fanout
        made = fanout.expanded.get(d)
        if made is not None:
            self.set_state(d, _OK, reason=f"all {made} instance(s) finished")
            self.resolve(d)
            return
        spec = self.specs[d]
        loop = spec.for_each
        assert isinstance(loop, DynamicItems)
        if not self.started:
            # A core rebuilt from a stopped run's journal (an operator's verb) has not the results the list is read
            # from: it stays WAITING, and the run's start reads the list when the run is resumed.
            self.reasons[d] = f"reads its list ({loop.expr}) when the run is resumed"
            return
        try:
            outcomes = self.branches.outcomes_of(fanout.loops[d], self.state)
            items, instances = fanout.instances(spec, outcomes, self.plan.variables, self.index, self.specs)
        except ConditionError as e:
            self._fail_unjudged(d, f"for_each: {e}")  # (its rerun instances waiting for the list end with it)
            self.resolve(d)
            return
        rerun = fanout.waiting.pop(d, set())
        listed = {inst.id for inst in instances}
        for r in sorted(rerun):
            if self.state[r] == _W and self.ids[r] not in listed:
                self.set_state(r, _SKIP, reason=f"dropped by loop {spec.id}: its list read again ({loop.expr}) does "
                                                f"not list {self.ids[r]}")
        if not instances:
            # A loop over no items has done all its work: it succeeds, and what waits for its success runs.
            self.set_state(d, _OK, reason=f"for_each: {loop.expr} gave 0 items: nothing to run")
            self.resolve(d)
            return
        first = self.n
        again: list[int] = []
        for inst in instances:
            k = self.index.get(inst.id)
            if k is None:
                self._append_job(inst, d)
            else:  # an instance of the loop's earlier list, listed again: it waits for it again
                self.specs[k] = self.plan.jobs[inst.id] = inst
                again.append(k)
        if again:
            self.set_dependents({k: (d,) for k in again})
        parent = with_instances(spec, instances)
        self.specs[d] = parent
        self.plan.jobs[spec.id] = parent
        fanout.expanded_to(d, first, items, self.n - first)
        self.reasons[d] = f"waiting for its {len(instances)} instance(s)"
        for k in again:
            if _TERMINAL[self.state[k]]:
                self.attempt_base[k] = self.attempt[k]
                self.branches.afresh(k)
                if k in self.holds:  # (held when the loop read its list again: held still)
                    self.hold_again(k, f"listed again by loop {spec.id}")
                    continue
                self._make_ready_from(k, reason=f"listed again by loop {spec.id}")
            elif k in rerun and self.state[k] == _W:  # it waited for this list (reopened, or rerun by an operator)
                if k in self.holds:  # (held when the loop read its list again: held still)
                    self.hold_again(k, f"listed again by loop {spec.id}")
                    continue
                self._make_ready_from(k, reason=f"listed again by loop {spec.id}")
        self.recompute(d)  # (an instance listed again may still run: the loop waits for it)
        for k in range(first, self.n):
            self._make_ready(k)

    def read_list_again(self, d: int) -> list[int]:
        """Loop over output d makes its instances again, from the list it reads once its upstreams have ended
        (an upstream it reads runs again with its dependents).

        It no longer waits for the instances it made: their ends are history, and one running ends on its own.
        Those that had not succeeded (failed, or not started) wait for the list, as an instance an operator reruns
        meanwhile does: they run again if it lists them, and are SKIPPED, dropped by it, if not (reach_loop), so
        their reason is what the list did, never what it might do.

        Returns:
            The instances whose state changed.
        """
        spec = self.specs[d]
        mine = instances_of(spec, self.specs, self.index)
        base = without_instances(spec, {self.ids[k] for k in mine})
        self.specs[d] = self.plan.jobs[spec.id] = base
        self.set_dependents({k: () for k in mine})
        self.fanout.read_again(d, self.n)
        reopened = [k for k in mine if self.state[k] not in (_OK, _SKIP, _Q, _RUN)]
        for k in reopened:
            self.drop_force(k)  # (an operator's skip or set-ok that waited: the list decides now)
            if _TERMINAL[self.state[k]] or self.state[k] == _RW:
                # (as an upstream's rerun reopens a job: the attempts before it are not its retries' to count)
                self.attempt_base[k] = self.attempt[k]
            self.timers.retry_due.pop(k, None)
            self.branches.afresh(k)
            self.set_state(k, _W, reason=f"loop {spec.id} reads its list again: it runs if listed again")
            self._wait_for_list(k, d)
        self.recompute(d)
        self.reasons[d] = "reads its list again once its upstreams have ended"
        return reopened

    def awaits_list(self, k: int) -> int | None:
        """The loop whose list instance k waits for, else None: k is an instance of a loop over output that reads
        its list again (an upstream it reads runs again), so k, rerun, runs once that list names its item, as a
        plain job waits for an upstream that is rerun."""
        if self.specs[k].item is None:
            return None
        p = self.index.get(self.ids[k].partition(ITEM_SEP)[0])
        if p is None or p not in self.fanout.loops or p in self.fanout.expanded or _TERMINAL[self.state[p]]:
            return None
        return p

    def _wait_for_list(self, k: int, p: int) -> None:
        """WAITING instance k waits for loop p to read its list again (reach_loop lets it go or skips it)."""
        self.fanout.waiting.setdefault(p, set()).add(k)
        self.reasons[k] = f"waiting for loop {self.ids[p]} to read its list again: it runs if listed"
        # From now on a loop may end with instances waiting for it: every transition is watched for that
        # (until then, as in almost every run, a transition pays for no check).
        self.set_state = self._set_state_watching  # type: ignore[method-assign]

    def _set_state_watching(self, i: int, to: int, reason: str = "", executor: int = -1,
                            exit_code: int | None = None) -> None:
        """set_state once an instance waits for a loop to read its list again: a loop that ends without reading
        it ends the instances rerun that waited for it (reach_loop lets them go or skips them when it reads it)."""
        JobTable.set_state(self, i, to, reason, executor, exit_code)
        if i in self.fanout.waiting and _TERMINAL[to]:
            self._loop_ended_unread(i)

    def _loop_ended_unread(self, d: int) -> None:
        """Loop d ended without reading its list: the instances waiting for it end as a plain job waiting for an
        upstream that ended so would (UPSTREAM_FAILED after a failure, CANCELLED, else SKIPPED)."""
        st = self.state[d]
        to = _UPF if st in (_FAIL, _TO, _UPF) else _CANC if st == _CANC else _SKIP
        for k in sorted(self.fanout.waiting.pop(d)):
            if self.state[k] == _W:
                self.drop_force(k)
                self.set_state(k, to, reason=f"loop {self.ids[d]} ended {S(st).name} without reading its list again")

    def _append_job(self, spec: JobSpec, parent: int) -> None:
        """Add one job after all others, WAITING, whose only dependent is `parent`."""
        k = self._append_row(spec, parent)
        self.tiers.admit(self.tier[k])
        if self.group_of is not None:
            self.group_of.append(self.group_of[parent])
        self.gate.append((_GATE_EXIT if spec.until or spec.resources else 0) | (_GATE_RES if spec.resources else 0))
        if self.resources.places or self.resources.host:
            self._claim(k, spec)
        if spec.until:
            self.branches.add_until(k, spec)
        self.timers.inherit(k, parent, self.specs)

    def recompute(self, d: int) -> None:
        """Recount job d's unmet dependencies and blocks from its upstreams' current states."""
        self.unmet[d], self.block[d] = unmet_and_block(self.specs[d], self.state, self.index,
                                                       self.branches.branch_skipped)

    # -- dispatch ------------------------------------------------------------------------

    def _fill(self) -> None:
        if self.cancelled or self.paused:
            return
        lent = len(self.following)  # followers are counted busy, but hold no slot yet
        free = self.slots - self.busy + lent
        ready = self.ready
        if free > 0 and ready:
            stash: dict[int, list[int]] = {}
            source: Iterable[int]
            if self.group_of is not None:
                source = iter(lambda: self._next_fair(stash), None)
            elif free >= len(ready):
                # Room for every ready job: one sort (a sorted list is a heap) beats a pop each.
                source = sorted(ready)
                ready.clear()
            else:
                source = _popping(ready)
            free = self._start_from(source, free)
            for keys in stash.values():
                for k in keys:
                    heapq.heappush(ready, k)
            self.busy = self.slots - free + lent
        if free <= 0 and ready and self.preemptible_running:
            self._preempt_for_critical()

    def _start_from(self, source: Iterable[int], free: int) -> int:
        """Dispatch ready jobs in the order `source` gives their keys while slots are free; return those left.

        A key not taken (no slot left, slots reserved for more urgent tiers) goes back to the heap,
        with the rest of a sorted list.
        """
        ready, state, tier, gate, tiers = self.ready, self.state, self.tier, self.gate, self.tiers
        not_before, now = self.timers.not_before, self.now
        if (type(source) is list and free - len(source) >= tiers.total_reserved and not not_before
                and self.group_of is None):
            return free - self._start_all(source)
        attempt, tx_append, cause = self.attempt, self._tx.append, self._cause
        dispatch, in_use, reserved = self._dispatch.append, tiers.in_use, tiers.total_reserved
        res, specs = self.resources, self.specs
        group_of = self.group_of
        r_, q_, res_, mask = _R, _Q, _GATE_RES, _MASK
        had = free
        for key in source:
            i = key & mask
            if state[i] != r_:
                continue
            t = tier[i]
            if free <= 0 or (free <= reserved and t and not tiers.may_start(t, free)):
                # No slot, or what is left is this tier or less urgent and the rest is reserved.
                heapq.heappush(ready, key)
                if type(source) is list:
                    ready.extend(source[source.index(key) + 1 :])  # once, when the batch stops short
                    heapq.heapify(ready)
                break
            if not_before and i in not_before and now < not_before[i]:
                continue  # its not-before timer puts it back
            if gate[i] & res_ and not res.acquire(i, res.needs(i, specs[i].resources), key):
                continue
            att = attempt[i] + 1
            attempt[i] = att
            # READY -> QUEUED is always legal: the hot path skips the table lookup.
            state[i] = q_
            tx_append((i, r_, q_, att, now, -1, None, "", cause))
            dispatch((i, att))
            in_use[t] += 1
            free -= 1
            if group_of is not None:
                self.group_use[group_of[i]] += 1
        counts = self.counts
        counts[_R] -= had - free  # one slot taken per job sent
        counts[_Q] += had - free
        return free

    def _start_all(self, keys: list[int]) -> int:
        """Dispatch every READY job of a sorted list of keys; return how many were sent.

        The bulk case (a stage's worth of jobs made ready at once): there is a slot for every key
        even after the reserved ones, no job waits for a not-before time and there are no groups, so
        only each job's state and resources are left to check.
        """
        state, tier, gate, in_use = self.state, self.tier, self.gate, self.tiers.in_use
        attempt, tx_append, cause, now = self.attempt, self._tx.append, self._cause, self.now
        dispatch, res, specs = self._dispatch.append, self.resources, self.specs
        r_, q_, res_, mask = _R, _Q, _GATE_RES, _MASK
        sent = len(self._dispatch)
        for key in keys:
            i = key & mask
            if state[i] != r_:
                continue
            if gate[i] & res_ and not res.acquire(i, res.needs(i, specs[i].resources), key):
                continue
            att = attempt[i] + 1
            attempt[i] = att
            # READY -> QUEUED is always legal: the hot path skips the table lookup.
            state[i] = q_
            tx_append((i, r_, q_, att, now, -1, None, "", cause))
            dispatch((i, att))
            in_use[tier[i]] += 1
        sent = len(self._dispatch) - sent
        counts = self.counts
        counts[_R] -= sent
        counts[_Q] += sent
        return sent

    def _build_groups(self, plan: Plan, specs: list) -> None:
        self.group_of: bytearray | None = None
        """Fair-share group index of each job (0 = no group), or None when the plan has no groups."""
        self.group_weight: list[float] = [1.0]
        """Weight of each group index."""
        self.group_use: list[int] = [0]
        """Slots each group holds now."""
        if not plan.groups:
            return
        names = list(plan.groups)
        self.group_weight = [1.0] + [max(1e-6, float(plan.groups[g])) for g in names]
        self.group_use = [0] * len(self.group_weight)
        at = {g: k + 1 for k, g in enumerate(names)}
        self.group_of = bytearray(at.get(j.group, 0) if j.group else 0 for j in specs)

    def _next_fair(self, stash: dict[int, list[int]]) -> int | None:
        """The next ready key under fair share: most urgent tier first, then the group furthest below its share."""
        ready, state, gof = self.ready, self.state, self.group_of
        assert gof is not None
        scanned = 0
        while ready and scanned < FAIR_SCAN and len(stash) < len(self.group_weight):
            key = heapq.heappop(ready)
            scanned += 1
            if state[key & _MASK] == _R:
                stash.setdefault(gof[key & _MASK], []).append(key)  # popped in order: each list is sorted
        if not stash:
            return None
        top = min(keys[0] >> C.TIER_SHIFT for keys in stash.values())
        use, weight = self.group_use, self.group_weight
        g = min((g for g, keys in stash.items() if keys[0] >> C.TIER_SHIFT == top),
                key=lambda g: (use[g] / weight[g], stash[g][0]))
        key = stash[g].pop(0)
        if not stash[g]:
            del stash[g]
        return key

    # -- what running jobs hold ----------------------------------------------------------

    def needs(self, i: int) -> Needs:
        """What job i holds while it runs: its declared resources, and a slot of its place when places apply."""
        return self.resources.needs(i, self.specs[i].resources)

    def _claim(self, i: int, spec: JobSpec) -> None:
        if self.resources.claim(i, spec):
            self.gate[i] |= _GATE_EXIT | _GATE_RES  # dispatch acquires, the exit releases

    def _on_host_claims(self, ev: HostClaimsEvent) -> None:
        """The run's share of the host's cpu and memory changed; the first share makes claims count."""
        res = self.resources
        if not res.host:
            state = self.state
            for i in res.share_host(self.specs, lambda i: state[i] == _Q or state[i] == _RUN):
                self.gate[i] |= _GATE_EXIT | _GATE_RES
        res.host_returns = ev.contended
        for name, amount in ((HOST_CPU, ev.cpu), (HOST_MEMORY, ev.memory)):
            self._requeue(res.set_capacity(name, amount)[1])

    def set_capacity(self, place: str, slots: int) -> None:
        """A place now offers `slots`: the run's slots follow, and jobs waiting for it compete again."""
        delta, woken = self.resources.set_capacity(place, slots)
        if not delta:
            return
        self.slots += delta
        self.tiers.resize(self.slots)
        self._requeue(woken)

    def _requeue(self, jobs: list[int]) -> None:
        """Jobs parked on a resource compete again: those still READY go back to the ready queue."""
        state, ready, key_base = self.state, self.ready, self.key_base
        for p in jobs:
            if state[p] == _R:
                heapq.heappush(ready, key_base[p] | p)

    def _release(self, i: int) -> None:
        self.busy -= 1
        self.tiers.in_use[self.tier[i]] -= 1
        self.executor[i] = -1
        self.preemptible_running.discard(i)
        if self.group_of is not None:
            self.group_use[self.group_of[i]] -= 1
        self._requeue(self.resources.release(i, self.needs(i)))

    def _preempt_for_critical(self) -> None:
        """A critical job is ready but no slot is free: stop the least urgent preemptible job to make room."""
        ready = self.ready
        while ready and self.state[ready[0] & _MASK] != _R:
            heapq.heappop(ready)
        if not ready or self.tier[ready[0] & _MASK] != 0:
            return
        if any(req and r.startswith("preempted") for r, req in self.kill_reason.values()):
            return  # one preemption at a time: its slot goes to the critical job first
        cands = [
            v
            for v in self.preemptible_running
            if self.state[v] == _RUN and self.tier[v] > 0 and v not in self.kill_reason and self.specs[v].idempotent
        ]
        if not cands:
            return
        victim = max(cands, key=lambda v: (self.tier[v], v))
        critical = self.ids[ready[0] & _MASK]
        self.kill(victim, f"preempted for critical job {critical}", graceful=True, requeue=True)

    def kill(self, i: int, reason: str, graceful: bool = False, requeue: bool = False) -> None:
        """Ask the shell to stop job i's running attempt; its exit is then classified with `reason`.

        Args:
            i: job index.
            reason: recorded as the attempt's end reason.
            graceful: SIGTERM first, SIGKILL after a grace period.
            requeue: put it back to READY without counting the attempt (preemption, shutdown).
        """
        self.kill_reason[i] = (reason, requeue)
        self._other.append(Kill(i, self.attempt[i], graceful))

    def _on_executor_lost(self, ev: ExecutorLostEvent) -> None:
        ex, state, executor = ev.executor, self.state, self.executor
        for i in range(self.n):
            if executor[i] == ex and (state[i] == _Q or state[i] == _RUN):
                self._on_exit(JobExitedEvent(i, self.attempt[i], ex, -1, ev.now, lost=True, unheard=ev.unheard,
                                             cause_id=ev.cause_id))

    def _on_tasks_lost(self, ev: TasksLostEvent) -> None:
        """Requeue jobs still QUEUED, unaccepted, at the same attempt: like any job lost before it started,
        they run again without spending an attempt (held, if they may not run twice and may have started)."""
        for i, att in ev.jobs:
            if self.state[i] == _Q and self.executor[i] < 0 and self.attempt[i] == att:
                self._on_exit(JobExitedEvent(i, att, -1, -1, ev.now, lost=True, unheard=ev.unheard,
                                             cause_id=ev.cause_id))

    # -- restore and invariants ----------------------------------------------------------

    def restore(self, rows: Iterable[tuple[int, int, int]], now: float,
                retry_due: Mapping[int, float] | None = None, journaled: Journaled | None = None) -> None:
        """Load states from a journal before RunStartedEvent: (job, state, attempt) rows.

        QUEUED and RUNNING jobs keep their slot: the shell reconciles them with the
        executors and feeds their exits (or losses) as events. A job in RETRY_WAIT becomes
        READY when its journaled delay ends (`retry_due`, by job; now for a job not in it).
        Whether the run was cancelled is its journaled actions' to say (replay.run_cancelled), not its states'.

        What the journaled transitions say beyond the states (`journaled`, core/replay.py) is taken as the live
        core had it: the jobs a branch skipped (their dependents are skipped too, not run), the followers (one
        handed back or lost comes back as a follower: _unfollow), the losses of each job's executors (MAX_LOST)
        and the jobs held for a node that was lost (its late success is theirs: _late_exit).
        """
        j = journaled or Journaled()
        state, counts = self.state, self.counts
        seen: set[int] = set()
        self.branches.branch_skipped.update(j.branch_skipped)
        self.lost_count.update(j.lost)
        for i, st, att in rows:
            seen.add(i)
            counts[state[i]] -= 1
            state[i] = st
            counts[st] += 1
            self.attempt[i] = att
        self.busy = counts[_Q] + counts[_RUN]
        self.now = now
        for i, forced in j.forced.items():
            if state[i] == _W:  # (an operator's skip or set-ok still waiting for the job's upstreams)
                self.forcing[i] = forced
                self.gate[i] |= _GATE_FORCE
        # A confirmation job the journal has a state for was held (or approved) already.
        self.to_confirm = [i for i in self.to_confirm if i not in seen]
        self._cause = "restore"
        self._reopen_loops()
        for i in range(self.n):
            st = state[i]
            if st == _W or st == _HELD:
                self.recompute(i)
                if st == _W and self.specs[i].item is not None and (loop := self.awaits_list(i)) is not None:
                    self._wait_for_list(i, loop)
                continue
            if not _TERMINAL[st] and self.unmet[i]:
                # In flight or ready: counted from its upstreams' states as a waiting job is (one held once its
                # executor is found lost would otherwise wait, for a skip or set-ok, for upstreams that ended).
                self.recompute(i)
            if st == _RW:
                self.timers.wait_retry(i, retry_due.get(i, now) if retry_due else now, self.attempt[i])
            elif st == _R:
                heapq.heappush(self.ready, self.key_base[i] | i)
            if st == _Q or st == _RUN:
                self.tiers.in_use[self.tier[i]] += 1
                if self.group_of is not None:
                    self.group_use[self.group_of[i]] += 1
            if (st == _Q or st == _RUN) and (self.specs[i].resources or i in self.resources.claims):
                self.resources.hold(i, self.needs(i))
        self.held_lost.update((i, a) for i, a in j.held_lost.items() if state[i] == _HELD and self.attempt[i] == a)
        self._restore_followers(j.follows)
        # Jobs whose upstreams finished while the journal lagged: resolve them now. (A loop one of whose
        # instances failed ends once the others have: SchedulerCore._blocked.)
        for i in range(self.n):
            if state[i] == _W and self.block[i] and not (i in self.fanout.expanded and self.unmet[i]):
                if i in self.forcing:
                    if not self.unmet[i]:  # (the operator's word, not the failure, ends it: _blocked)
                        self.end_forced(i)
                        self.resolve(i)
                    continue
                failed = self.block[i] == 1
                self.set_state(
                    i, _UPF if failed else _SKIP, reason="upstream failed" if failed else "condition not met"
                )
                self.resolve(i)

    def _reopen_loops(self) -> None:
        """A loop found ended while one of its instances has not (an instance a changed plan added to a loop over
        a list) waits for it again, and so do its dependents that have not started: a loop ends with its
        instances."""
        state = self.state
        for d in self.fanout.expanded:
            if not _TERMINAL[state[d]]:
                continue
            left = [k for k in instances_of(self.specs[d], self.specs, self.index) if not _TERMINAL[state[k]]]
            if not left:
                continue
            names = ", ".join(self.ids[k] for k in left[:5]) + (" ..." if len(left) > 5 else "")
            self.set_state(d, _W, reason=f"waiting for its instance(s) {names}, not run yet")
            self.attempt_base[d] = self.attempt[d]
            for k in self.downstream(d):
                if state[k] == _R:
                    self.set_state(k, _W, reason=f"waiting for loop {self.ids[d]} again")

    def _restore_followers(self, follows: Mapping[int, int]) -> None:
        """QUEUED jobs with an upstream not yet ended are followers (see `follow`): each follows the one
        QUEUED or RUNNING upstream it has; its executor starts it or hands it back.

        `follows` (job -> the job it follows, by the journal) names them all, among them those whose upstream
        no longer runs: one that failed (or waits for a retry, or ended otherwise but in success) left its
        follower following it, as the live core does, to come back unstarted and wait again (_unfollow); one
        that succeeded let it go (its executor starts it)."""
        state, index = self.state, self.index
        for i in range(self.n):
            if state[i] != _Q or not self.specs[i].depends_on:
                continue
            self.recompute(i)
            u = follows.get(i)
            if u is not None and state[u] != _Q and state[u] != _RUN:
                if state[u] != _OK:
                    self.following[i] = u
                    if _TERMINAL[state[u]]:
                        self.unmet[i] += 1  # (counted met only when it is let go: _inherit)
                continue
            if not self.unmet[i]:
                continue
            if u is not None and self.leader.get(u, i) == i:
                self.following[i] = u
                self.leader[u] = i
                continue
            for dep in self.specs[i].depends_on:
                u = index[dep]
                if state[u] == _Q or state[u] == _RUN:
                    self.following[i] = u
                    self.leader[u] = i
                    break

    def validate(self) -> None:
        """Check the core's invariants; raise AssertionError naming the first broken one."""
        self.check_table()
        active = self.counts[_Q] + self.counts[_RUN]
        assert active == self.busy, f"busy={self.busy} but {active} jobs are queued or running"
        assert self.busy >= 0, "more slots released than taken"
        for d, u in self.following.items():
            assert self.state[d] == _Q, f"follower {self.ids[d]} is {S(self.state[d]).name}, not QUEUED"
            assert self.leader.get(u, d) == d, f"{self.ids[u]} leads two followers"
        for i in self.forcing:
            assert self.state[i] == _W and self.gate[i] & _GATE_FORCE, (
                f"{self.ids[i]} has a pending skip/set-ok but is {S(self.state[i]).name}")
        self.resources.check(self.needs)
