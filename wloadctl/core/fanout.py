"""`for_each` over an upstream's output: instances made at run time, once the list is known.

The looped job stays in the DAG as the loop's parent. When its upstreams have finished it
does not run: the core reads the list from their outcomes, appends one job per item (they
become READY at once) and makes the parent wait for all of them. When they have all ended,
the parent ends: SUCCEEDED, or UPSTREAM_FAILED through the usual rules when an instance
failed, so the parent's dependents wait for the whole loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wloadctl.core import codes as C
from wloadctl.core.commands import Alert
from wloadctl.core.condition import Condition, ConditionError, parse_condition
from wloadctl.core.loops import make_instance, output_items, with_instances
from wloadctl.core.plan import DynamicItems, JobSpec
from wloadctl.core.states import JobState

if TYPE_CHECKING:
    from wloadctl.core.engine import SchedulerCore

S = JobState
MAX_ID_LENGTH = 200
"""Longest instance id a `for_each` over output may make (items are data, not names)."""


class FanOutMixin:
    """Run-time `for_each` expansion for SchedulerCore."""

    def _build_loops(self: SchedulerCore, specs: list[JobSpec]) -> None:
        self.loops: dict[int, Condition] = {}
        """Jobs looping over an upstream's output, with the expression giving the list."""
        self.expanded: dict[int, int] = {}
        """Loop parents already expanded, with their number of instances."""
        self.added: list[tuple[int, int, tuple[str, ...]]] = []
        """Expansions since the last flush: (parent, index of its first instance, items)."""
        self.room: int | None = None
        """Most jobs the shell can show (its state board's size); None = no limit."""
        for i, j in enumerate(specs):
            if isinstance(j.for_each, DynamicItems):
                c = parse_condition(j.for_each.expr)
                self.loops[i] = c
                self.branches.watch(c)
                # A plan rebuilt from a journal holds the instances it made already: the
                # parent waits for them (they come last in its depends_on).
                made = sum(1 for d in j.depends_on if d.startswith(j.id + "@") and self.specs[self.index[d]].item)
                if made:
                    self.expanded[i] = made

    def capacity(self: SchedulerCore) -> int:
        """Most jobs this run may hold: its jobs now, plus every instance its loops over output may still make."""
        spare = 0
        for i in self.loops:
            if i not in self.expanded:
                loop = self.specs[i].for_each
                assert isinstance(loop, DynamicItems)
                spare += loop.max_items
        return self.n + spare

    def _reach_loop(self: SchedulerCore, d: int) -> None:
        """Loop parent d has nothing left to wait for: expand it, or end it when its instances have ended."""
        made = self.expanded.get(d)
        if made is not None:
            self.set_state(d, C.OK, reason=f"all {made} instance(s) finished")
            self._resolve(d)
            return
        spec = self.specs[d]
        loop = spec.for_each
        assert isinstance(loop, DynamicItems)
        try:
            items = output_items(spec, self.branches.outcomes_of(self.loops[d], self.state), self.plan.variables)
            instances = [make_instance(spec, item, depends_on=()) for item in items]
            for inst in instances:
                if inst.id in self.index:
                    raise ConditionError(f"instance '{inst.id}' clashes with another job")
                if len(inst.id) > MAX_ID_LENGTH:
                    raise ConditionError(f"instance id '{inst.id[:40]}...' is longer than {MAX_ID_LENGTH} characters")
            if self.room is not None and self.n + len(instances) > self.room:
                raise ConditionError(f"{len(instances)} instances do not fit: the run has room for "
                                     f"{self.room - self.n} more job(s)")
        except ConditionError as e:
            why = f"for_each: {e}"
            self.set_state(d, C.FAIL, reason=why)
            self._other.append(Alert(d, C.FAIL, 0, why))
            self._resolve(d)
            return
        if not instances:
            self.set_state(d, C.SKIP, reason=f"for_each: {loop.expr} is empty, nothing to run")
            self._resolve(d)
            return
        first = self.n
        for inst in instances:
            self._append_job(inst, d)
        parent = with_instances(spec, instances)
        self.specs[d] = parent
        self.plan.jobs[spec.id] = parent
        self.unmet[d] = len(instances)
        self.expanded[d] = len(instances)
        self.reasons[d] = f"waiting for its {len(instances)} instance(s)"
        self.added.append((d, first, items))
        for k in range(first, self.n):
            self._make_ready(k)

    def _append_job(self: SchedulerCore, spec: JobSpec, parent: int) -> None:
        """Add one job after all others, WAITING, whose only dependent is `parent`."""
        from wloadctl.core.codes import ready_key

        k = self.n
        self.n = k + 1
        self.specs.append(spec)
        self.ids.append(spec.id)
        self.index[spec.id] = k
        self.plan.jobs[spec.id] = spec
        self.state.append(C.W)
        self.attempt.append(0)
        self.unmet.append(0)
        self.block.append(0)
        self.executor.append(-1)
        self.tier.append(int(spec.sla))
        self.key_base.append(ready_key(spec.sla, spec.priority, 0))
        self.down.append(parent)
        self.down_start.append(len(self.down))
        self.downs.append((parent,))
        if self.down_kind is not None:
            self.down_kind.append(0)
        if self.group_of is not None:
            self.group_of.append(self.group_of[parent])
        self.counts[C.W] += 1
        # engine._GATE_EXIT (2) for until and resources, _GATE_RES (4) for resources
        self.gate.append((2 if spec.until or spec.resources else 0) | (4 if spec.resources else 0))
        if self.claims:
            self._claim_place(k, spec)
        if spec.until:
            self.branches.add_until(k, spec)
        self.timers.inherit(k, parent, self.specs)
