"""`for_each` loops in the core: over an upstream's output, instances made at run time, once the list is known.

The looped job stays in the DAG as the loop's parent. When its upstreams have finished it
does not run: the core reads the list from their outcomes, appends one job per item (they
become READY at once) and makes the parent wait for all of them. When they have all ended,
the parent ends: SUCCEEDED, or FAILED when an instance failed (SchedulerCore._blocked), so the
parent's dependents wait for the whole loop. A loop over a list or `vars.NAME` has its instances
from the start (core/loops.expand_for_each): its parent is an expanded loop from the first.

A rerun with its downstream of what a loop over output reads makes the loop forget its list
(SchedulerCore.read_list_again): once its upstreams have ended again it reads the list anew, runs
the instances of items it had made before again, makes those of new items, and waits for these alone.
An instance an operator reruns meanwhile, and one of the old list that had not succeeded, waits for that list
(SchedulerCore.awaits_list) as a job waits for an upstream that is rerun: it runs if the list names its item, and is
SKIPPED, dropped by it, if not.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

from wloadctl.core.commands import Expansion
from wloadctl.core.condition import Condition, ConditionError, parse_condition
from wloadctl.core.loops import instance_ids, instances_of, make_instance, output_items
from wloadctl.core.plan import DynamicItems, JobSpec

MAX_ID_LENGTH = 200
"""Longest instance id a `for_each` over output may make (items are data, not names)."""


class FanOut:
    """Owns the loops over output: their expressions, which have expanded, and the expansions to journal.

    The engine asks it for a loop's instances once the jobs it reads have ended, then adds
    them as jobs and tells it the loop expanded.
    """

    def __init__(self, specs: list[JobSpec], index: dict[str, int]) -> None:
        self.loops: dict[int, Condition] = {}
        """Loop parents, with the expression giving their list (a list given in the plan: its text, which reads
        nothing)."""
        self.expanded: dict[int, int] = {}
        """Loop parents already expanded, with their number of instances."""
        self.added: list[Expansion] = []
        """Expansions since the last flush."""
        self.waiting: dict[int, set[int]] = {}
        """Loops that read their list again, with their instances an operator reran meanwhile: each waits for
        the list and runs if it names its item (SchedulerCore.awaits_list)."""
        self.room: int | None = None
        """Most jobs the shell can show (its state board's size); None = no limit."""
        for i, j in enumerate(specs):
            if isinstance(j.for_each, DynamicItems):
                self.loops[i] = parse_condition(j.for_each.expr)
                # A plan rebuilt from a journal holds the instances it made already: the
                # parent waits for them (they come last in its depends_on).
                made = len(instances_of(j, specs, index))
                if made:
                    self.expanded[i] = made
            elif j.for_each is not None:
                # A loop over a list: expanded when the plan was read.
                text = j.for_each if isinstance(j.for_each, str) else f"[{', '.join(j.for_each)}]"
                self.loops[i] = Condition(text, ast.Expression(ast.Constant(None)), frozenset())
                self.expanded[i] = len(instances_of(j, specs, index))

    def capacity(self, specs: list[JobSpec]) -> int:
        """Most jobs a run may hold: its jobs now (`specs`), plus every instance its loops may still make."""
        spare = 0
        for i in self.loops:
            if i not in self.expanded:
                loop = specs[i].for_each
                assert isinstance(loop, DynamicItems)
                spare += loop.max_items
        return len(specs) + spare

    def instances(self, spec: JobSpec, outcomes: dict[str, dict[str, object]], variables: dict[str, object],
                  index: Mapping[str, int], specs: Sequence[JobSpec]) -> tuple[tuple[str, ...], list[JobSpec]]:
        """The items and instance specs of loop parent `spec`, from the outcomes of the jobs it reads.

        Args:
            spec: the loop parent's spec.
            outcomes: outcomes of the jobs its expression reads, by id.
            variables: the plan's variables.
            index: job index by id of every job the run holds now.
            specs: the spec of every job the run holds now, by index (an id an earlier list of the loop gave an
                item stays that item's: loops.instance_ids).

        Returns:
            The items, and one instance spec per item (none depends on anything). An instance of the
            loop's earlier list that is listed again is in it too (its id is in `index`): it runs again.

        Raises:
            ConditionError: the list cannot be read, an instance id is too long, or the new instances
                do not fit in the room the shell has.
        """
        items = output_items(spec, outcomes, variables)
        ids = instance_ids(spec.id, items, lambda iid: specs[index[iid]].item if iid in index else None)
        instances = [make_instance(spec, item, depends_on=(), iid=iid) for item, iid in zip(items, ids, strict=True)]
        for inst in instances:
            if len(inst.id) > MAX_ID_LENGTH:
                raise ConditionError(f"instance id '{inst.id[:40]}...' is longer than {MAX_ID_LENGTH} characters")
        # (an id `<loop>@<item>` is made by this loop alone: job ids of a plan hold no `@`)
        n, new = len(index), sum(inst.id not in index for inst in instances)
        if self.room is not None and n + new > self.room:
            raise ConditionError(f"{new} instances do not fit: the run has room for "
                                 f"{self.room - n} more job(s)")
        return items, instances

    def expanded_to(self, parent: int, first: int, items: tuple[str, ...], made: int) -> None:
        """Loop `parent` made one instance per item: `made` new jobs from index `first`, the rest instances of an
        earlier list of it, listed again."""
        self.expanded[parent] = len(items)
        self.added.append(Expansion(parent, first, items, made))

    def read_again(self, parent: int, n: int) -> None:
        """Loop `parent` (of a run of `n` jobs) forgets its list: it reads it again once its upstreams have ended
        (journaled as an expansion of no items)."""
        del self.expanded[parent]
        self.added.append(Expansion(parent, n, (), 0))


def expansion_rows(added: Sequence[Expansion], ids: Sequence[str]) -> list[tuple[str, int, tuple[str, ...],
                                                                                   list[str]]]:
    """Expansions as the journal takes them (Store.write_turn's `added`): (looped job id, index of its first new
    instance, items, ids of the new instances)."""
    return [(ids[e.parent], e.first, e.items, list(ids[e.first : e.first + e.made])) for e in added]
