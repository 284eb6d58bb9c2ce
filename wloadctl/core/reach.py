"""What an operator verb reaches beyond the jobs it names: their descendants, a loop's instances.

Four eyes reads it (core/foureyes.py): a verb needs a second person when any job it would act on says so in its own
`four_eyes:`, not only the jobs named; the retry and rerun verbs read the descendants too (core/verbs.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Protocol

from wloadctl.core.fanout import FanOut
from wloadctl.core.loops import instances_of
from wloadctl.core.plan import JobSpec

REACHES_INSTANCES = frozenset({"retry", "rerun"})
"""Verbs that, on a loop, act on its instances (hold, skip and set-ok of a loop act on the loop alone:
core/verbs.py refuses them while its instances have not all ended)."""


class Graph(Protocol):
    """What `reached` reads of a core: the jobs' specs and ids, their dependents, the loops that made instances."""

    specs: list[JobSpec]
    fanout: FanOut

    @property
    def index(self) -> Mapping[str, int]:
        """Job id -> index."""

    def downstream(self, i: int) -> list[int]:
        """The jobs that depend directly on job i."""


def descendants(core: Graph, *roots: int) -> list[int]:
    """Every job downstream of the `roots`, nearest first, in one walk (the roots themselves not among them)."""
    seen = set(roots)
    order: list[int] = []
    todo = deque(roots)
    while todo:
        u = todo.popleft()
        for d in core.downstream(u):
            if d not in seen:
                seen.add(d)
                order.append(d)
                todo.append(d)
    return order


def reached(core: Graph, verb: str, jobs: Sequence[int], downstream: bool = False) -> list[int]:
    """Every job `verb` on `jobs` would act on, those named first.

    The jobs named (ids, and every job a glob matched), the instances of a loop named (a retry or rerun of a loop is
    one of its instances), and for `rerun --downstream` every job downstream of them, whatever its state now: the
    request a second person approves is applied later, when more of them may have run. (A job a retry, rerun,
    skip or set-ok reopens after an upstream failure blocked it is not counted: it had not run since that upstream
    last ran, and runs once, as it would have.)

    Args:
        core: the run's core.
        verb: the verb.
        jobs: the job indices it names.
        downstream: `rerun --downstream`.

    Returns:
        Job indices, without repeats.
    """
    out = dict.fromkeys(jobs)
    if verb in REACHES_INSTANCES:
        for i in jobs:
            if i in core.fanout.expanded:
                out.update(dict.fromkeys(instances_of(core.specs[i], core.specs, core.index)))
    if downstream and verb == "rerun":
        # One walk from all of them (`rerun '*' --downstream` names every job: a walk each would be quadratic).
        out.update(dict.fromkeys(descendants(core, *out)))
    return list(out)
