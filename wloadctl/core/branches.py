"""Conditional branches and repeat-until loops: which jobs an `if` skips, when an `until` job is done."""

from __future__ import annotations

from wloadctl.core.condition import Condition, parse_condition
from wloadctl.core.plan import JobSpec
from wloadctl.core.states import JobState

S = JobState

UNTIL_AGAIN = "until not met after iteration "
"""How the journal's reason for an `until` job sent round again begins: `...iteration N/MAX`."""
UNTIL_UNJUDGED = "until: "
"""How the reason of an `until` job failed because its condition could not be evaluated begins."""
FRESH_STARTS = ("rerun", "upstream rerun", "listed again by loop ", "reopened: ")
"""How the reasons of transitions that start a job afresh begin (an operator's rerun, a rerun upstream, a loop's
instance listed again, a job an upstream's set-ok or skip reopened): its `until` counts its iterations from none
again, as in a fresh run."""
REOPENED_BY = "reopened: upstream "
"""How the reason of a job reopened by an operator's set-ok or skip of a finished upstream begins (then the
upstream's id and the verb)."""
CONDITION_FALSE = "condition false: "
"""How the reason of a job whose `if` came out false begins (its branch not taken)."""
BRANCH_NOT_TAKEN = "branch not taken: "
"""How the reason of a job skipped because an upstream's branch was not taken begins."""
NOT_FAILED = "condition not met: "
"""How the reason of a job skipped because an upstream it runs on the failure of did not fail begins."""
BRANCH_SKIPS = (CONDITION_FALSE, BRANCH_NOT_TAKEN, NOT_FAILED)
"""How the reasons of the skips a branch makes begin (Branches.branch_skipped): unlike an operator's skip, which
counts as done for dependents, these skip the dependents too; a resume tells them apart by these (core/replay.py)."""


def until_reason(n: int, most: int) -> str:
    """The reason journaled when an `until` job goes round again after its n-th iteration of at most `most`."""
    return f"{UNTIL_AGAIN}{n}/{most}"


UNTIL_SPENT = "max_iterations reached"
"""How the reason of an `until` job that max_iterations ended, its condition never met, starts."""


def until_spent(n: int) -> str:
    """The reason journaled when an `until` job ends SUCCEEDED after its last allowed iteration, its condition
    never met (max_iterations says the job is done then; the operator is told it did not come true)."""
    return f"{UNTIL_SPENT} ({n}) with its until never met"


class UnusableResult(dict[str, object]):
    """What a job's result file holds when it cannot be read as a result (too big, not a JSON object nor
    `key=value` lines): no values, and why. A job whose result a condition or loop reads fails with it: what
    reads it could not be judged (see SchedulerCore._on_exit)."""

    def __init__(self, problem: str) -> None:
        super().__init__()
        self.problem = problem
        """Why it could not be read: "its result file ..."."""


class Branches:
    """Owns `if` and `until`: the parsed conditions, the outcomes they read, the jobs a branch skipped.

    The engine asks it whether a job's `if` holds and whether an `until` job is done, and
    tells it each outcome a condition reads; it changes no job state itself.
    """

    def __init__(self, specs: list[JobSpec], index: dict[str, int], variables: dict[str, object]) -> None:
        self.index = index
        """Job index by id (the engine's; read only, to name the jobs an expression reads)."""
        self.variables = variables
        """The plan's variables, which conditions may read."""
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
                self.watch(c)
            if j.until:
                self.add_until(i, j)

    def watch(self, c: Condition) -> None:
        """Keep the outcomes of the jobs expression `c` reads."""
        self.want.update(self.index[x] for x in c.jobs if x in self.index)

    def afresh(self, i: int) -> None:
        """Job i starts over, as in a fresh run (a rerun): its `until` counts its iterations from none."""
        self.iterations.pop(i, None)

    def add_until(self, i: int, spec: JobSpec) -> None:
        """Job i (its spec given) repeats until its condition holds."""
        assert spec.until
        self.untils[i] = parse_condition(spec.until)
        self.want.add(i)

    def record(self, i: int, exit_code: int | None, result: dict[str, object] | None) -> None:
        """Keep job i's outcome when a condition reads it."""
        if i in self.want:
            self.outcomes[i] = {"exit_code": exit_code, "result": result or {}}

    def holds(self, i: int, state: bytearray) -> tuple[bool, str]:
        """Evaluate job i's `if` on its upstreams' outcomes and the plan's variables.

        Args:
            i: job index (it has an `if`).
            state: JobState value per job.

        Returns:
            Whether it holds, and why not when it does not.

        Raises:
            ConditionError: it cannot be evaluated (it compares values that do not compare): the job fails
                with it, as skipping it would pass it off as a branch not taken.
        """
        c = self.conds[i]
        ok = c.evaluate(self.outcomes_of(c, state), self.variables)
        return ok, "" if ok else f"{CONDITION_FALSE}{c.text}"

    def outcomes_of(self, c: Condition, state: bytearray) -> dict[str, dict[str, object]]:
        """Exit code, result and state of the jobs an expression reads, by id."""
        jobs = {}
        for jid in c.jobs:
            k = self.index.get(jid)
            if k is not None:
                o = dict(self.outcomes.get(k, {}))
                o.setdefault("state", S(state[k]).name)
                jobs[jid] = o
        return jobs

    def until_done(self, i: int, exit_code: int, result: dict[str, object] | None,
                   most: int) -> tuple[bool, int, bool]:
        """An `until` job succeeded: count the iteration and say whether it is done.

        Args:
            i: job index.
            exit_code: the iteration's exit status.
            result: the iteration's result, if it wrote one.
            most: the job's max_iterations.

        Returns:
            (done, iterations so far, met): done when its condition holds (met) or it ran `most` times.

        Raises:
            ConditionError: its condition cannot be evaluated on this iteration's outcome: the job fails
                with it, as going on would repeat it for nothing and ending would pass it off as done.
        """
        n = self.iterations.get(i, 0) + 1
        self.iterations[i] = n
        own = {"result": result or {}, "exit_code": exit_code, "iteration": n}
        met = bool(self.untils[i].evaluate({}, self.variables, own))
        return met or n >= most, n, met
