"""The job table of a run: job-indexed flat arrays, the dependency edges, state counts and checked transitions."""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from operator import attrgetter, sub

from wloadctl.core.codes import RANK_FIELD, ready_key
from wloadctl.core.plan import JobSpec, Plan
from wloadctl.core.states import LEGAL, JobState
from wloadctl.errors import InvalidTransition

S = JobState
_N = len(JobState)
_W, _R, _Q, _RUN = int(S.WAITING), int(S.READY), int(S.QUEUED), int(S.RUNNING)
_OK, _RW, _HELD, _SKIP = int(S.SUCCEEDED), int(S.RETRY_WAIT), int(S.HELD), int(S.SKIPPED)
_DEPS_OF = attrgetter("depends_on")
_TIER_PRIORITY = attrgetter("sla", "priority")


@dataclass(frozen=True, slots=True)
class PlanArrays:
    """What a job table derives from its plan alone, made once for one table.

    A new run's scheduler makes these in a thread while the run's journal is written (SQLite works
    without the interpreter lock), then builds its core from them.
    """

    plan: Plan
    """The plan they were made of."""
    specs: list[JobSpec]
    """Job specs by index (plan order)."""
    ids: list[str]
    """Job ids by index."""
    index: dict[str, int]
    """Job index by id."""
    tier: bytearray
    """SLA tier value per job."""
    key_base: array
    """Ready-queue key of each job without its index or rank."""
    down_start: array
    """CSR offsets of the dependents of each job."""
    down: array
    """CSR targets: dependent job indices."""
    downs: list[tuple[int, ...]]
    """The dependents of each job as one tuple."""
    down_kind: bytearray | None
    """DepKind per CSR edge, or None when every edge is SUCCESS."""
    upstreams: list[int]
    """How many upstream jobs each job has."""
    up_rows: tuple[array, array] | None = None
    """The loader's upstream rows (offsets, then upstream indices in `depends_on` order) when the table is made
    of its edges; None otherwise."""


def plan_arrays(plan: Plan) -> PlanArrays:
    """The job-indexed arrays and dependency edges of a plan.

    Nearly every step runs over all jobs or all edges at once through C-level map and one sort: a
    million-job plan has two million edges, and a Python statement per edge is a second before
    the first dispatch (the one such loop left counts dependents, see below).
    """
    specs = list(plan.jobs.values())
    n = len(specs)
    ids: list[str]
    ups: Sequence[int]
    edges = plan.edges
    if edges is not None and edges.for_jobs(plan.jobs):
        # The loader resolved every edge already: a lookup per edge again would miss the caches
        # millions of times (most of the build at ten million jobs).
        ids, index, ups, up_off = edges.take()
        lens = list(map(sub, up_off[1:], up_off[:-1]))
        up_rows: tuple[array, array] | None = (up_off, ups)
    else:
        up_rows = None
        ids = [j.id for j in specs]
        index = {jid: i for i, jid in enumerate(ids)}
        lens = list(map(len, map(_DEPS_OF, specs)))
        ups = list(map(index.__getitem__, chain.from_iterable(map(_DEPS_OF, specs))))
    # A plan has a few (tier, priority) pairs: each one's key is made once, and C-level maps give every job its own.
    pairs = list(map(_TIER_PRIORITY, specs))
    bases = {pair: ready_key(pair[0], pair[1], 0) for pair in set(pairs)}
    key_base = array("q", map(bases.__getitem__, pairs))
    n_edges = len(ups)
    # Edges by upstream job, each upstream's dependents in plan order (a stable sort).
    order = sorted(range(n_edges), key=ups.__getitem__)
    # Dependents of job i start after every edge whose upstream comes before i: a running sum of
    # dependents per job. One pass over the edges; a binary search per job into the sorted edges
    # was a cache miss per probe, and grew faster than the plan.
    per_job = array("i", bytes(4 * n))
    for u in ups:
        per_job[u] += 1
    counts = array("i", accumulate(per_job, initial=0))
    downer = list(chain.from_iterable(map(repeat, range(n), lens)))
    targets = list(map(downer.__getitem__, order))
    kinds: bytearray | None = None
    if any(j.dep_kinds is not None for j in specs):
        of_edge = bytearray(n_edges)
        at = 0
        for j in specs:
            if j.dep_kinds is not None:
                of_edge[at : at + len(j.dep_kinds)] = bytes(int(k) for k in j.dep_kinds)
            at += len(j.depends_on)
        kinds = bytearray(map(of_edge.__getitem__, order))
    downs: list[tuple[int, ...]] = list(
        map(tuple, map(targets.__getitem__, map(slice, counts[:-1], counts[1:])))) if n else []
    return PlanArrays(plan, specs, ids, index, bytearray(int(j.sla) for j in specs), key_base, counts,
                      array("i", targets), downs, kinds, lens, up_rows)


class JobTable:
    """The jobs of one run as flat arrays indexed by job, so a million-job plan stays small and fast.

    It owns what every part of the core reads: states and their counts, attempts, dependency
    edges (CSR and per-job tuples), and the one checked way to change a state, which records
    the transition for the next Persist. The scheduling engine builds on it.
    """

    def __init__(self, plan: Plan, arrays: PlanArrays | None = None) -> None:
        """Build the table of `plan`, from `arrays` when they were made of this plan beforehand."""
        made = arrays if arrays is not None and arrays.plan is plan else plan_arrays(plan)
        specs = made.specs
        self.plan = plan
        """The plan being run."""
        self.specs = specs
        """Job specs by index (plan order)."""
        self.ids: list[str] = made.ids
        """Job ids by index."""
        self.index: dict[str, int] = made.index
        """Job index by id."""
        n = len(specs)
        self.n = n
        """Number of jobs."""
        self.state = bytearray(n)
        """JobState value per job (all WAITING at first)."""
        self.attempt = array("i", bytes(4 * n))
        """Attempts started so far per job."""
        self.block = bytearray(n)
        """0: nothing blocks; 1: an upstream it needed failed; 2: a condition on an upstream is false."""
        self.executor = array("h", [-1]) * n if n else array("h")
        """Executor running each job, -1 if none."""
        self.tier = made.tier
        """SLA tier value per job."""
        self.key_base = made.key_base
        """Ready-queue key of each job without its index (key = key_base[i] | i)."""
        self.down_start = made.down_start
        """CSR offsets: dependents of job i are down[down_start[i]:down_start[i+1]]."""
        self.down = made.down
        """CSR targets: dependent job indices."""
        self.downs: list[tuple[int, ...]] = made.downs
        """The same edges as one tuple of dependents per job: the bulk path walks them several times faster."""
        self.down_kind = made.down_kind
        """DepKind per CSR edge, or None when every edge is SUCCESS."""
        self.unmet = array("i", made.upstreams)
        """Upstreams not yet finished, per job."""
        self.up_rows = made.up_rows
        """The loader's upstream rows of the first jobs (see PlanArrays.up_rows) until `take_up_rows` hands them
        over: the run's facts are made of them, without a lookup of every upstream id again."""
        self.counts = [0] * _N
        """Jobs per state value."""
        self.counts[_W] = n
        self.reasons: dict[int, str] = {}
        """Last reason recorded per job (held, failed, ...), for `why` and status."""
        self.now = 0.0
        """Time of the event being applied."""
        self._cause = ""
        self._tx: list[tuple] = []

    def take_up_rows(self) -> tuple[array, array] | None:
        """The loader's upstream rows (offsets, indices) of the table's first jobs, handed over once (None: the
        table was not made of the loader's edges, or they were taken)."""
        rows, self.up_rows = self.up_rows, None
        return rows

    def upstream(self, i: int) -> list[int]:
        """Indices of job i's dependencies."""
        index = self.index
        return [index[d] for d in self.specs[i].depends_on]

    def downstream(self, i: int) -> list[int]:
        """Indices of the jobs that depend directly on job i."""
        return list(self.down[self.down_start[i] : self.down_start[i + 1]])

    def set_state(
        self, i: int, to: int, reason: str = "", executor: int = -1, exit_code: int | None = None
    ) -> None:
        """Move job i to state `to`, checking the transition table, and record the transition.

        Raises:
            InvalidTransition: the table does not allow the change.
        """
        frm = self.state[i]
        if not LEGAL[frm * _N + to]:
            raise InvalidTransition(
                f"{S(frm).name} -> {S(to).name} is not allowed (event {self._cause or 'unknown'})",
                job=self.ids[i],
            )
        self.state[i] = to
        c = self.counts
        c[frm] -= 1
        c[to] += 1
        if reason:
            self.reasons[i] = reason
        self._tx.append((i, frm, to, self.attempt[i], self.now, executor, exit_code, reason, self._cause))

    def _append_row(self, spec: JobSpec, parent: int) -> int:
        """Add one job after all others, WAITING, whose only dependent is `parent`; returns its index."""
        k = self.n
        self.n = k + 1
        self.specs.append(spec)
        self.ids.append(spec.id)
        self.index[spec.id] = k
        self.plan.jobs[spec.id] = spec
        self.state.append(_W)
        self.attempt.append(0)
        self.unmet.append(0)
        self.block.append(0)
        self.executor.append(-1)
        self.tier.append(int(spec.sla))
        # An instance of a loop ranks as its loop does on the critical path.
        self.key_base.append(ready_key(spec.sla, spec.priority, 0) | (self.key_base[parent] & RANK_FIELD))
        self.down.append(parent)
        self.down_start.append(len(self.down))
        self.downs.append((parent,))
        if self.down_kind is not None:
            self.down_kind.append(0)
        self.counts[_W] += 1
        return k

    def set_dependents(self, changes: Mapping[int, tuple[int, ...]]) -> None:
        """Give jobs new dependents (a loop that makes its instances again takes some back, lets others go).

        The edges are copied once, in slices between the jobs that change: this is an operator's
        rare move, not the hot path. A new edge is a plain `success` one.

        Args:
            changes: the full new dependents of each job that changes, by job index.
        """
        start, down, kinds = self.down_start, self.down, self.down_kind
        new_start, new_down = array("i"), array("i")
        new_kinds = None if kinds is None else bytearray()
        prev = shift = 0  # the first job not copied yet; how far its edges move
        for u in [*sorted(changes), self.n]:
            new_start.extend(start[prev:u] if not shift else array("i", (x + shift for x in start[prev:u])))
            new_down.extend(down[start[prev] : start[u]])
            if new_kinds is not None and kinds is not None:
                new_kinds.extend(kinds[start[prev] : start[u]])
            if u == self.n:
                break
            deps = changes[u]
            new_start.append(start[u] + shift)
            new_down.extend(deps)
            if new_kinds is not None and kinds is not None:
                kept = dict(zip(down[start[u] : start[u + 1]], kinds[start[u] : start[u + 1]], strict=True))
                new_kinds.extend(kept.get(d, 0) for d in deps)
            shift += len(deps) - (start[u + 1] - start[u])
            self.downs[u] = tuple(deps)
            prev = u + 1
        new_start.append(len(new_down))
        self.down_start, self.down, self.down_kind = new_start, new_down, new_kinds

    def unaccepted(self) -> tuple[tuple[int, int], ...]:
        """QUEUED jobs no executor has accepted yet: (job, attempt) pairs."""
        state, executor, attempt = self.state, self.executor, self.attempt
        return tuple((i, attempt[i]) for i in range(self.n) if state[i] == _Q and executor[i] < 0)

    def check_table(self) -> None:
        """Check the table's invariants: counts match the states, edges point only at known jobs."""
        counts = [0] * _N
        for s in self.state:
            counts[s] += 1
        assert counts == self.counts, f"state counts drifted: {counts} != {self.counts}"
        assert len(self.down) == self.down_start[self.n], "edge table inconsistent"
        assert len(self.downs) == self.n, "dependents tuples out of step with the jobs"
        for d in self.down:
            assert 0 <= d < self.n, f"edge to unknown job index {d}"

    def is_finished(self) -> bool:
        """True when no job can change state without an operator (HELD jobs keep a run open)."""
        c = self.counts
        live = c[_W] + c[_R] + c[_Q] + c[_RUN] + c[_RW] + c[_HELD]
        return live == 0

    def is_stalled(self) -> bool:
        """True when nothing can move without an operator: no work in flight or due, yet jobs are HELD."""
        c = self.counts
        return c[_HELD] > 0 and c[_R] + c[_Q] + c[_RUN] + c[_RW] == 0

    def outcome_ok(self) -> bool:
        """True when every job succeeded or was skipped."""
        return self.counts[_OK] + self.counts[_SKIP] == self.n
