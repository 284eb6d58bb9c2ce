"""What the core holds and restores: resources, slots, kills, lost executors, invariants, restore from a journal."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import TYPE_CHECKING

from wloadctl.core import codes as C
from wloadctl.core.commands import Kill
from wloadctl.core.events import ExecutorLostEvent, JobExitedEvent, TasksLostEvent
from wloadctl.core.plan import JobSpec
from wloadctl.core.states import JobState

if TYPE_CHECKING:
    from wloadctl.core.engine import SchedulerCore

S = JobState
LOCAL_PLACE = "pool:local"
"""The place of jobs that run on this host's executors."""


def place_of(spec: JobSpec) -> str:
    """Where a job runs: `agent:NAME` when pinned, `pool:NAME` for a pool of agents, else this host."""
    if spec.agent:
        return f"agent:{spec.agent}"
    if spec.pool:
        return f"pool:{spec.pool}"
    return LOCAL_PLACE


class HoldingMixin:
    """Resources, kills, restore and invariants for SchedulerCore."""

    def _acquire(self: SchedulerCore, i: int, want: tuple[tuple[str, int], ...], key: int) -> bool:
        """Take every resource job i asks for, or none; a job that cannot becomes its resource's waiter."""
        free, waiter = self.res_free, self.res_waiter
        for name, amount in want:
            w = waiter.get(name)
            if free[name] < amount or (w is not None and w < key):
                self.parked[name].append(i)
                if w is None or key < w:
                    waiter[name] = key
                return False
        for name, amount in want:
            free[name] -= amount
            self.res_holders[name].add(i)
            if waiter.get(name) == key:
                del waiter[name]
        return True

    def needs(self: SchedulerCore, i: int) -> tuple[tuple[str, int], ...]:
        """What job i holds while it runs: its declared resources, and a slot of its place when places apply."""
        claims = self.claims
        if claims:
            c = claims.get(i)
            if c is not None:
                return c
        return self.specs[i].resources

    def _build_places(self: SchedulerCore, specs: list) -> None:
        """Every job claims a slot of its place: this host, a pool of agents, or one agent."""
        self._add_place(LOCAL_PLACE, self.slots)
        for i, j in enumerate(specs):
            self._claim_place(i, j)

    def _claim_place(self: SchedulerCore, i: int, spec: JobSpec) -> None:
        place = place_of(spec)
        if place not in self.capacity_of:
            self._add_place(place, 0)
        self.claims[i] = (*spec.resources, (place, 1))
        self.gate[i] |= 2 | 4  # engine._GATE_EXIT | engine._GATE_RES: dispatch acquires, the exit releases

    def _add_place(self: SchedulerCore, place: str, slots: int) -> None:
        self.capacity_of[place] = slots
        self.res_free[place] = slots
        self.res_holders[place] = set()
        self.parked[place] = []

    def set_capacity(self: SchedulerCore, place: str, slots: int) -> None:
        """A place now offers `slots`: the run's slots follow, and jobs waiting for it compete again."""
        if place not in self.capacity_of:
            self._add_place(place, 0)
        delta = slots - self.capacity_of[place]
        if not delta:
            return
        self.capacity_of[place] = slots
        self.res_free[place] += delta
        self.slots += delta
        self.tiers.resize(self.slots)
        if delta > 0:
            parked = self.parked[place]
            for p in parked:
                if self.state[p] == C.R:
                    heapq.heappush(self.ready, self.key_base[p] | p)
            parked.clear()
            self.res_waiter.pop(place, None)

    def _preempt_for_critical(self: SchedulerCore) -> None:
        """A critical job is ready but no slot is free: stop the least urgent preemptible job to make room."""
        ready = self.ready
        while ready and self.state[ready[0] & 0xFFFFFFFF] != C.R:
            heapq.heappop(ready)
        if not ready or self.tier[ready[0] & 0xFFFFFFFF] != 0:
            return
        if any(req and r.startswith("preempted") for r, req in self.kill_reason.values()):
            return  # one preemption at a time: its slot goes to the critical job first
        cands = [
            v
            for v in self.preemptible_running
            if self.state[v] == C.RUN and self.tier[v] > 0 and v not in self.kill_reason
        ]
        if not cands:
            return
        victim = max(cands, key=lambda v: (self.tier[v], v))
        critical = self.ids[ready[0] & 0xFFFFFFFF]
        self.kill(victim, f"preempted for critical job {critical}", graceful=True, requeue=True)

    def _release(self: SchedulerCore, i: int) -> None:
        self.busy -= 1
        self.tiers.in_use[self.tier[i]] -= 1
        self.executor[i] = -1
        self.preemptible_running.discard(i)
        if self.group_of is not None:
            self.group_use[self.group_of[i]] -= 1
        for name, amount in self.needs(i):
            self.res_free[name] += amount
            self.res_holders[name].discard(i)
            parked = self.parked[name]
            for p in parked:
                if self.state[p] == C.R:
                    heapq.heappush(self.ready, self.key_base[p] | p)
            parked.clear()
            self.res_waiter.pop(name, None)  # the parked jobs compete again, most urgent first

    # -- queries -------------------------------------------------------------------------

    def restore(self: SchedulerCore, rows: Iterable[tuple[int, int, int]], now: float) -> None:
        """Load states from a journal before RunStartedEvent: (job, state, attempt) rows.

        QUEUED and RUNNING jobs keep their slot: the shell reconciles them with the
        executors and feeds their exits (or losses) as events.
        """
        state, counts = self.state, self.counts
        for i, st, att in rows:
            counts[state[i]] -= 1
            state[i] = st
            counts[st] += 1
            self.attempt[i] = att
        self.busy = counts[C.Q] + counts[C.RUN]
        self.now = now
        for i in range(self.n):
            st = state[i]
            if st == C.W or st == C.HELD:
                self.recompute(i)
            elif st == C.RW:
                self.timers.wait_retry(i, now, self.attempt[i])
            elif st == C.R:
                heapq.heappush(self.ready, self.key_base[i] | i)
            if st == C.Q or st == C.RUN:
                self.tiers.in_use[self.tier[i]] += 1
                if self.group_of is not None:
                    self.group_use[self.group_of[i]] += 1
            if (st == C.Q or st == C.RUN) and (self.specs[i].resources or i in self.claims):
                for name, amount in self.needs(i):
                    self.res_free[name] -= amount
                    self.res_holders[name].add(i)
        self._cause = "restore"
        # Jobs whose upstreams finished while the journal lagged: resolve them now.
        for i in range(self.n):
            if state[i] == C.W and self.block[i]:
                failed = self.block[i] == 1
                self.set_state(
                    i, C.UPF if failed else C.SKIP, reason="upstream failed" if failed else "condition not met"
                )
                self._resolve(i)

    def validate(self: SchedulerCore) -> None:
        """Check the core's invariants; raise AssertionError naming the first broken one."""
        counts = [0] * C.N_STATES
        for s in self.state:
            counts[s] += 1
        assert counts == self.counts, f"state counts drifted: {counts} != {self.counts}"
        active = counts[C.Q] + counts[C.RUN]
        assert active == self.busy, f"busy={self.busy} but {active} jobs are queued or running"
        assert self.busy >= 0, "more slots released than taken"
        for name, cap in self.capacity_of.items():
            held = sum(a for j in self.res_holders[name] for r, a in self.needs(j) if r == name)
            assert held + self.res_free[name] == cap, (
                f"resource {name} leaks: {held} held + {self.res_free[name]} free != {cap}"
            )
        assert len(self.down) == self.down_start[self.n], "edge table inconsistent"
        assert len(self.downs) == self.n, "dependents tuples out of step with the jobs"
        for d in self.down:
            assert 0 <= d < self.n, f"edge to unknown job index {d}"

    def kill(self: SchedulerCore, i: int, reason: str, graceful: bool = False, requeue: bool = False) -> None:
        """Ask the shell to stop job i's running attempt; its exit is then classified with `reason`.

        Args:
            i: job index.
            reason: recorded as the attempt's end reason.
            graceful: SIGTERM first, SIGKILL after a grace period.
            requeue: put it back to READY without counting the attempt (preemption, shutdown).
        """
        self.kill_reason[i] = (reason, requeue)
        self._other.append(Kill(i, self.attempt[i], graceful))

    def _on_executor_lost(self: SchedulerCore, ev: ExecutorLostEvent) -> None:
        ex, state, executor = ev.executor, self.state, self.executor
        for i in range(self.n):
            if executor[i] == ex and (state[i] == C.Q or state[i] == C.RUN):
                self._on_exit(JobExitedEvent(i, self.attempt[i], ex, -1, ev.now, lost=True, cause_id=ev.cause_id))

    def unaccepted(self: SchedulerCore) -> tuple[tuple[int, int], ...]:
        """QUEUED jobs no executor has accepted yet: (job, attempt) pairs."""
        state, executor, attempt = self.state, self.executor, self.attempt
        return tuple((i, attempt[i]) for i in range(self.n) if state[i] == C.Q and executor[i] < 0)

    def _on_tasks_lost(self: SchedulerCore, ev: TasksLostEvent) -> None:
        """Requeue jobs still QUEUED, unaccepted, at the same attempt: like any job lost before it started,
        they run again without spending an attempt."""
        for i, att in ev.jobs:
            if self.state[i] == C.Q and self.executor[i] < 0 and self.attempt[i] == att:
                self._on_exit(JobExitedEvent(i, att, -1, -1, ev.now, lost=True, cause_id=ev.cause_id))
