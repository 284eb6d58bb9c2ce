"""A plan's dependency graph on integer indices: order, cycles, lineage, levels."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from wloadctl.core.plan import Plan
from wloadctl.errors import CycleError

if TYPE_CHECKING:
    import networkx as nx  # type: ignore[import-untyped]


def csr_from_lists(lists: Iterable[Sequence[int]]) -> tuple[array[int], array[int]]:
    """Pack per-node neighbour lists into compressed rows.

    Args:
        lists: for each node in order, the indices of its neighbours.

    Returns:
        (offsets, flat): node i's neighbours are flat[offsets[i]:offsets[i + 1]].
    """
    offsets = array("i", [0])
    flat = array("i")
    for row in lists:
        flat.extend(row)
        offsets.append(len(flat))
    return offsets, flat


def transpose(
    n: int, offsets: array[int], flat: array[int]
) -> tuple[array[int], array[int]]:
    """Reverse every edge of a compressed-row graph (upstream rows -> downstream rows).

    Args:
        n: the number of nodes.
        offsets: row offsets, n + 1 of them.
        flat: row contents.

    Returns:
        (offsets, flat) of the reversed graph; each row keeps ascending node order.
    """
    counts = Counter(flat)
    out_off = array("i", bytes(4 * (n + 1)))
    total = 0
    for i in range(n):
        out_off[i] = total
        total += counts.get(i, 0)
    out_off[n] = total
    fill = array("i", out_off)
    out = array("i", bytes(4 * total))
    for v in range(n):
        for k in range(offsets[v], offsets[v + 1]):
            u = flat[k]
            out[fill[u]] = v
            fill[u] += 1
    return out_off, out


def reverse_kahn(
    n: int, up_off: array[int], up: array[int]
) -> tuple[list[int], bytearray]:
    """Kahn's algorithm run from the sinks, so it needs only the upstream rows.

    Args:
        n: the number of nodes.
        up_off: upstream row offsets.
        up: upstream row contents.

    Returns:
        (order, left): `order` lists the nodes each after all its dependents
        (reverse it for a topological order); `left[i]` is 1 for a node that
        could not be ordered, which happens exactly when it lies on a cycle or
        upstream of one.
    """
    outdeg = array("i", bytes(4 * n))
    for u, count in Counter(up).items():
        outdeg[u] = count
    order = [i for i in range(n) if not outdeg[i]]
    # The list grows while it is walked: it is the queue itself.
    for v in order:
        for k in range(up_off[v], up_off[v + 1]):
            u = up[k]
            outdeg[u] -= 1
            if not outdeg[u]:
                order.append(u)
    left = bytearray(n)
    if len(order) < n:
        left = bytearray(b"\x01") * n
        for v in order:
            left[v] = 0
    return order, left


def cycle_in(n: int, up_off: array[int], up: array[int], left: bytearray) -> list[int]:
    """One cycle among the nodes reverse_kahn left over, in dependency order.

    Every left-over node has a dependent that is also left over, so walking
    from dependent to dependent must come back to a node already seen.

    Returns:
        [a, b, ..., a] where each node depends on the next, starting with the
        cycle's earliest node.
    """
    down: dict[int, int] = {}
    for v in range(n):
        if left[v]:
            for k in range(up_off[v], up_off[v + 1]):
                u = up[k]
                if left[u] and u not in down:
                    down[u] = v
    start = left.index(1)
    seen: dict[int, int] = {}
    path: list[int] = []
    node = start
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = down[node]
    loop = path[seen[node] :]
    # The walk went from upstream to dependent; a cycle report reads "depends on".
    loop.reverse()
    first = loop.index(min(loop))
    loop = loop[first:] + loop[:first]
    return [*loop, loop[0]]


class Dag:
    """A plan's dependencies as compressed integer rows (small at a million jobs).

    Edges point from a job to what it depends on (upstream); the downstream
    rows are built on first use.
    """

    def __init__(self, plan: Plan) -> None:
        """Build the graph of `plan` (dependencies on unknown jobs are ignored)."""
        ids = list(plan.jobs)
        index = {job: i for i, job in enumerate(ids)}
        rows = (
            [index[d] for d in spec.depends_on if d in index and d != spec.id]
            for spec in plan.jobs.values()
        )
        self._setup(ids, index, *csr_from_lists(rows))

    @classmethod
    def from_rows(
        cls,
        ids: Sequence[str],
        index: Mapping[str, int],
        up_off: array[int],
        up: array[int],
        down: tuple[array[int], array[int]] | None = None,
    ) -> Dag:
        """Build from ready-made upstream rows (the plan loader has them already).

        Args:
            ids: job ids by index.
            index: index by job id. It may be shared with a holder that adds jobs
                later (a console's model): jobs past the rows are not in the graph.
            up_off: upstream row offsets (len(ids) + 1).
            up: upstream row contents.
            down: the downstream rows (offsets, contents) when they are at hand.

        Returns:
            The graph, sharing the given arrays.
        """
        dag = cls.__new__(cls)
        dag._setup(ids, index, up_off, up)
        dag._down = down
        return dag

    def _setup(
        self, ids: Sequence[str], index: Mapping[str, int], up_off: array[int], up: array[int]
    ) -> None:
        self.ids = ids
        """Job ids by index (plan order)."""
        self.index = index
        """Index by job id."""
        self.up_off = up_off
        """Upstream row offsets: node i's upstream is up[up_off[i]:up_off[i + 1]]."""
        self.up = up
        """Upstream row contents."""
        self._down: tuple[array[int], array[int]] | None = None

    def __len__(self) -> int:
        return len(self.up_off) - 1

    def __contains__(self, job: object) -> bool:
        i = self.index.get(job)  # type: ignore[call-overload]
        return i is not None and i < len(self.up_off) - 1

    @property
    def edge_count(self) -> int:
        """The number of dependencies."""
        return len(self.up)

    def _downstream(self) -> tuple[array[int], array[int]]:
        if self._down is None:
            self._down = transpose(len(self), self.up_off, self.up)
        return self._down

    def rows(self, downstream: bool) -> tuple[array[int], array[int]]:
        """The compressed rows (offsets, contents) of every job's dependencies, or of its dependents."""
        return self._downstream() if downstream else (self.up_off, self.up)

    def _at(self, job: str) -> int:
        i = self.index.get(job)
        if i is None or i >= len(self):
            raise KeyError(f"unknown job '{job}'")
        return i

    def upstream_of(self, job: str) -> list[str]:
        """The jobs `job` depends on directly."""
        i = self._at(job)
        return [self.ids[u] for u in self.up[self.up_off[i] : self.up_off[i + 1]]]

    def downstream_of(self, job: str) -> list[str]:
        """The jobs that depend on `job` directly."""
        off, down = self._downstream()
        i = self._at(job)
        return [self.ids[v] for v in down[off[i] : off[i + 1]]]

    def find_cycle(self) -> list[str] | None:
        """One cycle as [a, b, ..., a] (each depends on the next), or None."""
        n = len(self)
        order, left = reverse_kahn(n, self.up_off, self.up)
        if len(order) == n:
            return None
        return [self.ids[i] for i in cycle_in(n, self.up_off, self.up, left)]

    def _order(self) -> list[int]:
        n = len(self)
        order, left = reverse_kahn(n, self.up_off, self.up)
        if len(order) < n:
            path = cycle_text([self.ids[i] for i in cycle_in(n, self.up_off, self.up, left)])
            raise CycleError(
                f"dependency cycle: {path}", hint="each job depends on the next"
            )
        order.reverse()
        return order

    def topo_order(self) -> list[str]:
        """Every job after all the jobs it depends on.

        Raises:
            CycleError: the graph has a cycle (its path is in the message).
        """
        ids = self.ids
        return [ids[i] for i in self._order()]

    def _walk(
        self, start: int, off: array[int], flat: array[int], depth: int
    ) -> dict[int, int]:
        """Breadth-first distances from `start`, up to `depth` steps (-1: all)."""
        dist = {start: 0}
        frontier = [start]
        step = 0
        while frontier and step != depth:
            step += 1
            nxt = []
            for v in frontier:
                for k in range(off[v], off[v + 1]):
                    u = flat[k]
                    if u not in dist:
                        dist[u] = step
                        nxt.append(u)
            frontier = nxt
        return dist

    def ancestors(self, job: str) -> set[str]:
        """Every job `job` depends on, directly or not."""
        dist = self._walk(self._at(job), self.up_off, self.up, -1)
        return {self.ids[i] for i in dist if dist[i]}

    def descendants(self, job: str) -> set[str]:
        """Every job that depends on `job`, directly or not."""
        off, down = self._downstream()
        dist = self._walk(self._at(job), off, down, -1)
        return {self.ids[i] for i in dist if dist[i]}

    def below(self, starts: Iterable[int]) -> list[int]:
        """Every job downstream of any of `starts`, found in one walk of the graph.

        A verb on thousands of jobs asks this once: a walk per job would cross the
        same downstream jobs again for each of them.

        Args:
            starts: job indices (those past the graph, made since it was read, are left out).

        Returns:
            The indices of the jobs below them, in no set order; `starts` themselves
            are left out, even when one lies below another.
        """
        off, down = self._downstream()
        n = len(self)
        seen = bytearray(n)
        todo = [i for i in starts if 0 <= i < n]
        for i in todo:
            seen[i] = 1
        out: list[int] = []
        while todo:
            v = todo.pop()
            for u in down[off[v] : off[v + 1]]:
                if not seen[u]:
                    seen[u] = 1
                    out.append(u)
                    todo.append(u)
        return out

    def neighborhood(self, job: str, up: int = 2, down: int = 2) -> dict[str, int]:
        """The jobs within `up` levels above and `down` levels below `job`.

        Args:
            job: the centre.
            up: how many dependency steps upstream to include.
            down: how many steps downstream to include.

        Returns:
            Job id -> signed distance: negative upstream, 0 for `job`, positive
            downstream. A job both above and below (only in a cycle) keeps its
            upstream place.
        """
        i = self._at(job)
        off, flat = self._downstream()
        out = {self.ids[v]: d for v, d in self._walk(i, off, flat, down).items()}
        for u, d in self._walk(i, self.up_off, self.up, up).items():
            out[self.ids[u]] = -d
        return out

    def edges_among(self, jobs: Iterable[str]) -> list[tuple[str, str]]:
        """The (upstream, downstream) pairs whose two ends are both in `jobs`."""
        chosen = {self.index[j] for j in jobs if j in self}
        out = []
        for v in sorted(chosen):
            for k in range(self.up_off[v], self.up_off[v + 1]):
                if self.up[k] in chosen:
                    out.append((self.ids[self.up[k]], self.ids[v]))
        return out

    def levels(self) -> dict[str, int]:
        """Each job's depth: 0 without dependencies, else 1 + its deepest upstream's.

        Raises:
            CycleError: the graph has a cycle.
        """
        level = array("i", bytes(4 * len(self)))
        up_off, up = self.up_off, self.up
        for v in self._order():
            deepest = -1
            for k in range(up_off[v], up_off[v + 1]):
                if level[up[k]] > deepest:
                    deepest = level[up[k]]
            level[v] = deepest + 1
        return dict(zip(self.ids[: len(level)], level, strict=True))

    def critical_path(self, durations: dict[str, float] | None = None) -> list[str]:
        """The longest chain of dependent jobs by total duration.

        Args:
            durations: seconds per job id; missing jobs count 1 (so without any
                durations this is the longest chain by job count).

        Returns:
            The chain in run order (first job first); empty for an empty plan.

        Raises:
            CycleError: the graph has a cycle.
        """
        n = len(self)
        if n == 0:
            return []
        weight = [1.0] * n
        if durations:
            for job, seconds in durations.items():
                i = self.index.get(job)
                if i is not None and i < n:
                    weight[i] = float(seconds)
        finish = [0.0] * n
        before = array("i", [-1]) * n
        up_off, up = self.up_off, self.up
        for v in self._order():
            best, via = 0.0, -1
            for k in range(up_off[v], up_off[v + 1]):
                u = up[k]
                if finish[u] > best:
                    best, via = finish[u], u
            finish[v] = best + weight[v]
            before[v] = via
        node = max(range(n), key=finish.__getitem__)
        path = []
        while node != -1:
            path.append(self.ids[node])
            node = before[node]
        path.reverse()
        return path


def to_networkx(plan: Plan) -> nx.DiGraph:
    """The plan as a networkx graph, for analysis of small plans (console, lineage).

    Nodes are job ids with `sla`, `priority`, `type` and `line` attributes;
    edges run from upstream to dependent with a `kind` attribute
    (success, failure or done).

    Args:
        plan: the plan.

    Returns:
        A new DiGraph.
    """
    # networkx is imported here: it takes a noticeable part of a second to
    # import, and only the analysis views need it.
    import networkx as nx

    graph = nx.DiGraph(name=plan.name)
    for spec in plan.jobs.values():
        graph.add_node(
            spec.id,
            sla=spec.sla.label,
            priority=spec.priority,
            type=spec.type,
            line=spec.line,
        )
    for spec in plan.jobs.values():
        for i, dep in enumerate(spec.depends_on):
            if dep in plan.jobs:
                graph.add_edge(dep, spec.id, kind=spec.kind_of(i).name.lower())
    return graph


CYCLE_SHOWN = 6
"""Jobs of a long cycle named at each of its ends (the rest are counted)."""


def cycle_text(loop: list[str]) -> str:
    """A cycle [a, b, ..., a] as `a -> b -> ... -> a`; a long one names its first and last jobs and counts the
    rest (a cycle through every job of a big plan would be a line of megabytes)."""
    if len(loop) <= 2 * CYCLE_SHOWN + 1:
        return " -> ".join(loop)
    hidden = len(loop) - 2 * CYCLE_SHOWN
    return (" -> ".join(loop[:CYCLE_SHOWN]) + f" -> ... {hidden:,} more ... -> " + " -> ".join(loop[-CYCLE_SHOWN:])
            + f" ({len(loop) - 1:,} jobs)")
