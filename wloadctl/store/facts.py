"""What a run's scheduler worked out of its plan, per job, kept in the journal for readers of one job.

`why` of one job of a stopped run reads the job's state and row without a replay (store/current.py),
but it also says what comes of the whole plan: the job's critical-path rank and its expected and
remaining seconds (core/critical.py: the whole DAG, weighted by the history of earlier runs), and
needs the job's dependencies, tier and the settings that decide what it waits for. Rebuilding
those means loading the plan: seconds at a million jobs. So the scheduler keeps them, as it
worked them out, when it starts or resumes a run: one transaction of blocks of FACT_BLOCK jobs,
and one row for the run (the plan's digest, longest path, declared resources, whether places
apply). A reader takes the block of the job it wants and, for its dependencies' ids and states,
the rows the journal keeps anyway.

A block (little-endian): HEAD (jobs in it, upstream edges), n tier bytes, n uint16 ranks, n
float64 expected seconds, n float64 remaining paths, n + 1 int32 offsets of each job's upstream
row (in the run's upstream rows: the block's own rows start at the first), the block's upstream
rows (int32 job indices, in depends_on order), then a JSON object of the jobs of the block whose
settings `why` reads differ from a plain job's (SPECIAL_FIELDS), by position.
"""

from __future__ import annotations

import json
import struct
import sys
from abc import abstractmethod
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import accumulate, chain, compress, count, repeat
from operator import attrgetter, rshift
from typing import Any

from wloadctl.core.codes import JOB_BITS
from wloadctl.core.critical import rank_bits
from wloadctl.core.plan import DynamicItems, JobSpec
from wloadctl.core.states import DepKind, SlaTier

FACT_BLOCK = 1024
"""Jobs per block of a run's facts."""
FACTS_VERSION = 1
"""Layout of the blocks and of the run's row; a reader takes no other (and reads the plan then)."""
HEAD = struct.Struct("<II")
"""Jobs in a block, upstream edges in it."""
SPECIAL_FIELDS = ("dep_kinds", "confirm", "resources", "pool", "agent", "cpu", "memory", "for_each", "not_before",
                  "condition")
"""The settings of a job `why` reads besides its dependencies and tier (core/explain.py, core/holding.py)."""
_SPECIAL = attrgetter(*SPECIAL_FIELDS)
_PLAIN = _SPECIAL(JobSpec("", None))
_DEPS_OF = attrgetter("depends_on")
_DEFAULTS = {f.name: f.default for f in fields(JobSpec) if f.name in SPECIAL_FIELDS}


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a run's scheduler keeps of its plan: the run's row and its blocks (see the module)."""

    meta: str
    """JSON of the run's row: version, jobs, digest, longest, places, resources, timezone."""
    blocks: dict[int, bytes]
    """Block number -> its bytes."""


@dataclass(frozen=True, slots=True)
class FactsMeta:
    """The run's row of its facts."""

    jobs: int
    """Jobs the facts cover (the plan's, in plan order)."""
    digest: str
    """Digest of the plan they were made of (a changed plan accepted on resume makes them stale)."""
    longest: float
    """The plan's longest remaining path (seconds)."""
    places: bool
    """The plan runs something on agents: every job claims a slot of its place (core/holding.py)."""
    resources: dict[str, int]
    """The plan's declared resources and their capacities."""
    timezone: str | None = None
    """The plan's zone, its jobs' `not_before` times of day are read in (None: local time, or facts kept before
    they held it)."""


@dataclass(frozen=True, slots=True)
class JobFact:
    """One job's facts."""

    tier: int
    """SLA tier value."""
    rank: int
    """Critical-path rank as the scheduler's ready key has it (0: the longest remaining path)."""
    expected: float
    """Expected seconds."""
    path: float
    """Remaining critical path (seconds of expected work from the job to the end of the plan)."""
    ups: tuple[int, ...]
    """Indices of its upstream jobs, in the order of its depends_on."""
    special: dict[str, Any]
    """Its SPECIAL_FIELDS that differ from a plain job's, as JSON values."""

    def spec(self, job_id: str, up_ids: Mapping[int, str] | None) -> JobSpec:
        """The job's spec as far as `why` reads it (id, dependencies, tier and SPECIAL_FIELDS); without
        its upstreams' ids (None), with no dependencies."""
        sp = self.special
        kinds = sp.get("dep_kinds") if up_ids is not None else None
        return JobSpec(
            job_id, None, () if up_ids is None else tuple(up_ids[u] for u in self.ups),
            dep_kinds=None if kinds is None else tuple(DepKind(k) for k in kinds),
            sla=SlaTier(self.tier), confirm=bool(sp.get("confirm", False)),
            resources=tuple((str(r), int(a)) for r, a in sp.get("resources", ())),
            pool=sp.get("pool"), agent=sp.get("agent"), cpu=float(sp.get("cpu", 0.0)),
            memory=int(sp.get("memory", 0)), not_before=sp.get("not_before"), condition=sp.get("condition"))

    @property
    def loop(self) -> bool:
        """A loop over an upstream's output (its `why` reads the plan: see RunClient.why)."""
        return bool(self.special.get("loop"))


def _le(a: array) -> bytes:
    if sys.byteorder != "little":
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _from_le(code: str, data: bytes | memoryview) -> array:
    a = array(code)
    a.frombytes(data)
    if sys.byteorder != "little":
        a.byteswap()
    return a


def _special_row(values: tuple) -> dict[str, Any]:
    """The SPECIAL_FIELDS of one job that differ from a plain job's, as JSON values."""
    row: dict[str, Any] = {}
    for name, v in zip(SPECIAL_FIELDS, values, strict=True):
        if v == _DEFAULTS[name]:
            continue
        if name == "dep_kinds":
            row[name] = [int(k) for k in v]
        elif name == "resources":
            row[name] = [[r, a] for r, a in v]
        elif name == "for_each":
            if isinstance(v, DynamicItems):
                row["loop"] = True
        else:
            row[name] = v
    return row


def run_facts(specs: Sequence[JobSpec], ids: Sequence[str], tier: Sequence[int], expected: Sequence[float],
              path: Sequence[float], digest: str, resources: Mapping[str, int], places: bool,
              index: Mapping[str, int] | None = None, timezone: str | None = None,
              up_rows: tuple[array, array] | None = None) -> RunFacts:
    """A run's facts from its scheduler's core (specs, tiers, expected seconds and paths by job index; the
    core's index of ids, when given, saves making one; the loader's upstream rows of the same jobs, when given,
    save looking every upstream id up again: two million lookups at a million jobs, each missing the caches).

    Every step runs over all jobs at once through C-level map: a million jobs take a few seconds of
    CPU, on the thread that writes the run's shape beside dispatch.
    """
    n = len(ids)
    if up_rows is not None and len(up_rows[0]) == n + 1 and up_rows[0][n] == len(up_rows[1]):
        up_off, up = up_rows
    else:
        if index is None:
            index = dict(zip(ids, range(n), strict=True))
        lens = list(map(len, map(_DEPS_OF, specs)))
        up = array("i", map(index.__getitem__, chain.from_iterable(map(_DEPS_OF, specs))))
        up_off = array("i", [0])
        up_off.extend(accumulate(lens))
    rank = array("H", map(rshift, rank_bits(path), repeat(JOB_BITS)))
    # Most jobs are plain: the few that are not are found without a Python step per job.
    special = {i: _special_row(_SPECIAL(specs[i]))
               for i in compress(count(), map(_PLAIN.__ne__, map(_SPECIAL, specs)))}
    exp, pth, tiers = array("d", expected), array("d", path), bytes(tier)
    blocks: dict[int, bytes] = {}
    for b in range((n + FACT_BLOCK - 1) // FACT_BLOCK):
        lo, hi = b * FACT_BLOCK, min(n, (b + 1) * FACT_BLOCK)
        first, last = up_off[lo], up_off[hi]
        offs = up_off[lo:hi + 1]  # where the rows start in the run's rows: the block's own start at offs[0]
        extra = {str(i - lo): special[i] for i in range(lo, hi) if i in special} if special else {}
        blocks[b] = b"".join((HEAD.pack(hi - lo, last - first), tiers[lo:hi], _le(rank[lo:hi]), _le(exp[lo:hi]),
                              _le(pth[lo:hi]), _le(offs), _le(up[first:last]),
                              json.dumps(extra, separators=(",", ":")).encode()))
    meta = {"version": FACTS_VERSION, "jobs": n, "digest": digest, "longest": max(path, default=0.0),
            "places": places, "resources": dict(resources), "timezone": timezone}
    return RunFacts(json.dumps(meta), blocks)


def read_block(data: bytes, block: int, want: Iterable[int]) -> dict[int, JobFact]:
    """The facts of the jobs `want` (job indices in this block) of one block's bytes."""
    n, edges = HEAD.unpack_from(data)
    view = memoryview(data)
    at = HEAD.size
    tier = view[at:at + n]
    at += n
    parts: list[array] = []
    for code, items in (("H", n), ("d", n), ("d", n), ("i", n + 1), ("i", edges)):
        size = array(code).itemsize * items
        parts.append(_from_le(code, view[at:at + size]))
        at += size
    rank, exp, pth, offs, up = parts
    extra = json.loads(bytes(view[at:]))
    base, first = block * FACT_BLOCK, offs[0]
    out: dict[int, JobFact] = {}
    for i in want:
        k = i - base
        out[i] = JobFact(tier[k], rank[k], exp[k], pth[k], tuple(up[offs[k] - first:offs[k + 1] - first]),
                         extra.get(str(k), {}))
    return out


class JobFacts:
    """The facts half of a store (mixed into store.base.Store)."""

    @abstractmethod
    def _write_facts(self, run: int, meta: str, blocks: dict[int, bytes]) -> None:
        """Replace a run's facts (its row and every block) in one transaction."""

    @abstractmethod
    def _facts_meta(self, run: int) -> str | None:
        """The JSON of a run's facts row (None: none kept)."""

    @abstractmethod
    def _fact_blocks(self, run: int, blocks: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        """(block, data) of some blocks of a run's facts."""

    def keep_facts(self, run: int, facts: RunFacts) -> None:
        """Keep what the run's scheduler worked out of its plan (replacing what an earlier start kept)."""
        self._write_facts(run, facts.meta, facts.blocks)

    def facts_meta(self, run: int) -> FactsMeta | None:
        """The run's facts row; None when the run has none kept (or of another layout)."""
        text = self._facts_meta(run)
        if text is None:
            return None
        meta = json.loads(text)
        if meta.get("version") != FACTS_VERSION:
            return None
        return FactsMeta(meta["jobs"], meta["digest"], meta["longest"], meta["places"],
                         {str(k): int(v) for k, v in meta["resources"].items()}, meta.get("timezone"))

    def job_facts(self, run: int, idxs: Sequence[int]) -> tuple[FactsMeta, dict[int, JobFact]] | None:
        """The run's facts row and the facts of these jobs; None when the run has none kept (or of another
        layout), or they do not cover every one of the jobs."""
        meta = self.facts_meta(run)
        if meta is None or any(not 0 <= i < meta.jobs for i in idxs):
            return None
        by_block: dict[int, list[int]] = {}
        for i in idxs:
            by_block.setdefault(i // FACT_BLOCK, []).append(i)
        out: dict[int, JobFact] = {}
        for b, data in self._fact_blocks(run, sorted(by_block)):
            out.update(read_block(bytes(data), b, by_block[b]))
        if len(out) != len(set(idxs)):
            return None
        return meta, out
