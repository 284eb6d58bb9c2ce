"""A run's shape beside its id list: what the console needs of the plan, as flat arrays.

The scheduler writes it when it starts a run (or resumes one), from the arrays its core has
built already: each job's SLA tier, its dependencies both ways as compressed rows, its expected
seconds and remaining critical path (core/critical.py), and the deadlines as written. A console
attaching to a run of a million jobs reads it in a few reads instead of parsing the plan.

Layout (little-endian): a header (HEADER), then n tier bytes, n + 1 int32 offsets of each job's
line in the id list file (paths.ids_path; the last is where the list's first n lines end), the
upstream rows (n + 1 int32 offsets, then the int32 contents), the downstream rows likewise, n
float64 expected seconds, n float64 remaining paths, and a JSON text {"timezone": ...,
"deadlines": {index: text}, "windows": {index: seconds}, "loops": [index], "once": [index]}.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import sys
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wloadctl.core.codes import RANK_MAX
from wloadctl.core.sla import RISK_WINDOW, risk_window
from wloadctl.paths import find_id, ids_path

MAGIC = b"WLSH"
"""First bytes of a shape file."""
VERSION = 1
"""Layout version; a reader refuses any other."""
HEADER = struct.Struct("<4sHHIII")
"""magic, version, reserved, jobs, edges, bytes of the JSON text."""


@dataclass
class RunShape:
    """What a shape file holds, as arrays by job index (plan order)."""

    tier: bytearray
    """SLA tier value per job."""
    id_starts: array
    """Where each job's line starts in the run's id list file (n + 1 offsets, in bytes)."""
    up_off: array
    """Upstream row offsets: job i's dependencies are up[up_off[i]:up_off[i + 1]]."""
    up: array
    """Upstream row contents."""
    down_off: array
    """Downstream row offsets."""
    down: array
    """Downstream row contents."""
    expected: array
    """Expected seconds per job."""
    path: array
    """Remaining critical path per job (seconds of expected work from it to the end)."""
    deadlines: dict[int, str]
    """Deadlines as written in the plan, by job index."""
    timezone: str | None = None
    """The plan's time zone (deadlines are read on its clock)."""
    windows: dict[int, float] = field(default_factory=dict)
    """At-risk windows (core/sla.risk_window) of jobs with a deadline, where a timeout widens them past
    RISK_WINDOW."""
    loops: frozenset[int] = frozenset()
    """Jobs with an `until`: an operator's hold takes them between two iterations too (core/verbs.py)."""
    once: frozenset[int] | None = None
    """Jobs that may not run twice (idempotent: false): a stop of the run holds those it stops running
    for an operator (core/engine.py). None: not known (a shape file written before it was kept)."""

    def __post_init__(self) -> None:
        self.longest = max(self.path, default=0.0)
        """The longest remaining path (seconds)."""

    def __len__(self) -> int:
        return len(self.tier)

    def rank(self, i: int) -> int:
        """Job i's critical-path rank as its ready key has it (0: the longest remaining path)."""
        longest = self.longest
        if longest <= 0.0:
            return RANK_MAX
        return RANK_MAX - int(self.path[i] * (RANK_MAX / longest))

    def critical_path(self) -> list[int]:
        """The chain of the longest remaining path: from the job with the longest one, each time
        to its dependent with the longest one, to the end of the plan."""
        n = len(self.tier)
        if not n:
            return []
        path, off, down = self.path, self.down_off, self.down
        i = path.index(self.longest)
        out = [i]
        while off[i + 1] > off[i]:
            i = max(down[off[i]:off[i + 1]], key=path.__getitem__)
            out.append(i)
        return out


def shape_path(state_dir: Path, run_id: str) -> Path:
    """Where a run's shape file is (beside its id list)."""
    return ids_path(state_dir, run_id).with_suffix(".shape")


def _le(a: array) -> bytes:
    if sys.byteorder != "little":
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def write_shape(state_dir: Path, run_id: str, shape: RunShape) -> None:
    """Write a run's shape file (atomically: a reader sees the old file or the new one)."""
    path = shape_path(state_dir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"timezone": shape.timezone,
                       "deadlines": {str(k): v for k, v in shape.deadlines.items()},
                       "windows": {str(k): v for k, v in shape.windows.items()},
                       "loops": sorted(shape.loops),
                       "once": None if shape.once is None else sorted(shape.once)}).encode()
    tmp = path.with_suffix(f".shape.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, 0, len(shape.tier), len(shape.up), len(text)))
        f.write(shape.tier)
        for a, code in ((shape.id_starts, "i"), (shape.up_off, "i"), (shape.up, "i"), (shape.down_off, "i"),
                        (shape.down, "i"), (shape.expected, "d"), (shape.path, "d")):
            f.write(_le(a if a.typecode == code else array(code, a)))
        f.write(text)
    tmp.replace(path)


def read_shape(state_dir: Path, run_id: str) -> RunShape | None:
    """A run's shape, or None when it has no shape file or one of another layout (read the plan then)."""
    try:
        data = shape_path(state_dir, run_id).read_bytes()
    except OSError:
        return None
    if len(data) < HEADER.size:
        return None
    magic, version, _r, n, edges, tlen = HEADER.unpack_from(data)
    want = HEADER.size + n + 4 * (3 * (n + 1) + 2 * edges) + 16 * n + tlen
    if magic != MAGIC or version != VERSION or len(data) != want:
        return None
    view = memoryview(data)
    at = HEADER.size
    tier = bytearray(view[at:at + n])
    at += n
    parts: list[array] = []
    for code, count in (("i", n + 1), ("i", n + 1), ("i", edges), ("i", n + 1), ("i", edges), ("d", n), ("d", n)):
        a = array(code)
        size = a.itemsize * count
        a.frombytes(view[at:at + size])
        if sys.byteorder != "little":
            a.byteswap()
        parts.append(a)
        at += size
    meta = json.loads(bytes(view[at:at + tlen]))
    deadlines = {int(k): str(v) for k, v in (meta.get("deadlines") or {}).items()}
    windows = {int(k): float(v) for k, v in (meta.get("windows") or {}).items()}
    id_starts, up_off, up, down_off, down, expected, path = parts
    return RunShape(tier, id_starts, up_off, up, down_off, down, expected, path, deadlines, meta.get("timezone"),
                    windows, frozenset(int(i) for i in meta.get("loops") or ()),
                    None if meta.get("once") is None else frozenset(int(i) for i in meta["once"]))


_OFFSET = struct.Struct("<i")
"""One offset of the id list's lines in a shape file."""


def index_of_id(state_dir: Path, run_id: str, job: str) -> int | None:
    """A job's index in a run's id list (None: not there, or no list), found without reading the list into
    memory or counting the lines before it: the list is searched where it lies, and the line found is
    placed by the shape's offsets of the lines (a binary search). Without a shape that has the line, the
    lines are counted (paths.find_id)."""
    key = job.encode() + b"\n"
    try:
        with open(ids_path(state_dir, run_id), "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as ids:
            at = 0 if ids[:len(key)] == key else ids.find(b"\n" + key) + 1
            if at == 0 and ids[:len(key)] != key:
                return None
    except (OSError, ValueError):  # no list, or an empty one
        return None
    found = _line_in_shape(state_dir, run_id, at)
    return found if found is not None else find_id(state_dir, run_id, job)


def _line_in_shape(state_dir: Path, run_id: str, at: int) -> int | None:
    """The index of the id list's line starting at byte `at`, by the shape file's offsets (None: no shape
    file of this layout, or none of its lines starts there)."""
    try:
        with open(shape_path(state_dir, run_id), "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as shape:
            if len(shape) < HEADER.size:
                return None
            magic, version, _r, n, _edges, _tlen = HEADER.unpack_from(shape)
            base = HEADER.size + n
            if magic != MAGIC or version != VERSION or len(shape) < base + 4 * (n + 1):
                return None
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) // 2
                if _OFFSET.unpack_from(shape, base + 4 * mid)[0] < at:
                    lo = mid + 1
                else:
                    hi = mid
            return lo if lo < n and _OFFSET.unpack_from(shape, base + 4 * lo)[0] == at else None
    except (OSError, ValueError):
        return None


def shape_of_core(core: object, deadlines: Mapping[int, str], timezone: str | None) -> RunShape:
    """A run's shape from its scheduler core's arrays (tier, downstream rows, expected, path)."""
    return shape_of_copy(CoreCopy.of(core), deadlines, timezone)


@dataclass(frozen=True, slots=True)
class CoreCopy:
    """What a run's shape is made of, copied out of a scheduler core in a few milliseconds.

    The copy lets the shape be worked out beside the loop that keeps changing the core (a loop
    over output appends jobs): every part of it covers the same first `n` jobs.
    """

    ids: list[str]
    """Job ids."""
    tier: bytearray
    """SLA tier of each job."""
    down_off: array
    """Row offsets of each job's dependents."""
    down: array
    """Dependents, row after row."""
    expected: array
    """Expected seconds of each job."""
    path: array
    """Expected seconds from each job's start to the end of the plan."""
    specs: list[Any]
    """The jobs' specs (for their deadlines, at-risk windows, `until` loops and `idempotent: false`)."""

    @classmethod
    def of(cls, core: object) -> CoreCopy:
        """Copy a core's arrays (run in the thread that drives the core)."""
        c: Any = core
        n = int(c.n)
        down_off = array("i", c.down_start[:n + 1])
        return cls(c.ids[:n], bytearray(c.tier[:n]), down_off, array("i", c.down[:down_off[n]]),
                   array("d", c.expected[:n]), array("d", c.path[:n]), c.specs[:n])


def shape_of_copy(copy: CoreCopy, deadlines: Mapping[int, str] | None, timezone: str | None,
                  up_rows: tuple[array, array] | None = None) -> RunShape:
    """A run's shape from a copy of its core (deadlines: the copy's own when None).

    `up_rows`: the loader's upstream rows of the same jobs (offsets, indices, each row in `depends_on`
    order, as Dag.from_rows takes them), when at hand; else they are the copy's dependents turned round
    (a step a job and an edge: a second of CPU at a million jobs, beside dispatch).
    """
    from itertools import accumulate

    from wloadctl.core.dag import transpose

    n = len(copy.ids)
    if deadlines is None:
        deadlines = {i: s.deadline for i, s in enumerate(copy.specs) if s.deadline}
    id_starts = array("i", [0])
    id_starts.extend(accumulate(len(j.encode()) + 1 for j in copy.ids))
    if up_rows is not None and len(up_rows[0]) == n + 1 and up_rows[0][n] == len(up_rows[1]) == len(copy.down):
        up_off, up = up_rows
    else:
        up_off, up = transpose(n, copy.down_off, copy.down)
    windows = {i: w for i in deadlines if i < n and (w := risk_window(copy.specs[i].timeout)) > RISK_WINDOW}
    loops = frozenset(i for i, s in enumerate(copy.specs) if s.until)
    once = frozenset(i for i, s in enumerate(copy.specs) if not s.idempotent)
    return RunShape(copy.tier, id_starts, up_off, up, copy.down_off, copy.down, copy.expected, copy.path,
                    dict(deadlines), timezone, windows, loops, once)
