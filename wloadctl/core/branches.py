"""Conditional branches and repeat-until loops of the core: which jobs an `if` skips, when an `until` job runs again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wloadctl.core.condition import Condition, ConditionError, parse_condition
from wloadctl.core.events import JobExitedEvent
from wloadctl.core.states import JobState

if TYPE_CHECKING:
    from wloadctl.core.engine import SchedulerCore

S = JobState


class BranchesMixin:
    """`if` and `until` for SchedulerCore."""

    def _build_conditions(self: SchedulerCore, specs: list) -> None:
        self.conds: dict[int, Condition] = {}
        """Parsed `if` conditions by job."""
        self.untils: dict[int, Condition] = {}
        """Parsed `until` conditions by job."""
        self.want: set[int] = set()
        """Jobs whose outcome (exit status, result file) some condition reads."""
        self.outcomes: dict[int, dict[str, object]] = {}
        """Outcome of each wanted job: exit_code, state, result."""
        self.branch_skipped: set[int] = set()
        """Jobs SKIPPED because their branch was not taken: unlike an operator's skip, this propagates."""
        self.iterations: dict[int, int] = {}
        """Completed iterations of each `until` job."""
        for i, j in enumerate(specs):
            if j.condition:
                c = parse_condition(j.condition)
                self.conds[i] = c
                self.want.update(self.index[x] for x in c.jobs if x in self.index)
            if j.until:
                self.untils[i] = parse_condition(j.until)
                self.want.add(i)

    def condition_holds(self: SchedulerCore, i: int) -> tuple[bool, str]:
        """Evaluate job i's `if` on its upstreams' outcomes and the plan's variables."""
        c = self.conds[i]
        try:
            ok = c.evaluate(self._outcomes_of(c), self.plan.variables)
        except ConditionError as e:
            return False, f"condition could not be evaluated: {e}"
        return ok, "" if ok else f"condition false: {c.text}"

    def _outcomes_of(self: SchedulerCore, c: Condition) -> dict[str, dict[str, object]]:
        """Exit code, result and state of the jobs an expression reads, by id."""
        jobs = {}
        for jid in c.jobs:
            k = self.index.get(jid)
            if k is not None:
                o = dict(self.outcomes.get(k, {}))
                o.setdefault("state", S(self.state[k]).name)
                jobs[jid] = o
        return jobs

    def _again_until(self: SchedulerCore, i: int, ev: JobExitedEvent) -> bool:
        """An `until` job succeeded: run it again unless its condition holds or it ran enough times."""
        n = self.iterations.get(i, 0) + 1
        self.iterations[i] = n
        own = {"result": ev.result or {}, "exit_code": ev.exit_code, "iteration": n}
        try:
            done = self.untils[i].evaluate({}, self.plan.variables, own)
        except ConditionError:
            done = False
        if done or n >= self.specs[i].max_iterations:
            return False
        # Another iteration is not a retry: it does not spend the retry budget.
        self.attempt_base[i] = self.attempt_base.get(i, 0) + 1
        self._make_ready_from(i, reason=f"until not met after iteration {n}/{self.specs[i].max_iterations}")
        return True
