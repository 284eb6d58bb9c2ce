"""The journal's form of a loop turn's transitions: one packed record each, and the job rows they add up to.

A turn's transitions are written as one row holding fixed-size binary records plus the few
texts they carry (causes, reasons), so journaling costs about a microsecond per transition
instead of a row insert and a row update each. The job rows (state, attempt, exit status,
times, reason) are what replaying the turns in order gives; `JobColumns` does that.
"""

from __future__ import annotations

import json
import struct
from array import array
from collections.abc import Iterable, Iterator, Sequence

from wloadctl.errors import StoreError

RECORD = struct.Struct("<IBBIhidH")
"""job index, from, to, attempt, executor, exit status (NO_EXIT for none), timestamp, cause number."""
JOB_FIELD = struct.Struct(f"<I{RECORD.size - 4}x")
"""A record's job index alone (the rest skipped), to scan a turn's records for some jobs."""
JOB_TO = struct.Struct(f"<I1xB{RECORD.size - 6}x")
"""A record's job index and the state it moved to (the rest skipped): what current states are made of."""
TO_OFFSET = 5
"""Where a record's `to` state is in it."""
FEW_JOBS = 8
"""Up to this many jobs, a turn's records are searched per job rather than scanned once."""
NO_EXIT = -(2**31)
"""Exit status of a transition that has none."""
TERMINAL_STATES = frozenset((4, 5, 6, 9, 10, 11))
"""JobState values that end a job (its `ended` time is kept)."""
RUNNING = 3
"""JobState.RUNNING's value."""
SUCCEEDED = 4
"""JobState.SUCCEEDED's value."""
_RUNNING = RUNNING
ADDED_AT_MOST = 10_000_000
"""Jobs a turn may name past those a reader knows of (jobs the run added since) before its journal is taken
for corrupt: a damaged job index must not make a reader allocate for billions of jobs."""


def _room_for(known: int, top: int) -> int:
    """The size a reader grows to for job index `top`; raises StoreError when no run adds that many jobs."""
    if top >= 2 * known + ADDED_AT_MOST:
        raise StoreError(f"the run journal is corrupt: a turn names job {top}, the run has {known} jobs",
                         hint="restore it from a backup or move it away; wloadctl never starts afresh over it")
    return top + 1


def pack_turn(transitions: Sequence[tuple]) -> tuple[bytes, str, str]:
    """A turn's transitions as (records, causes JSON, reasons JSON).

    Each transition is (job, from, to, attempt, ts, executor, exit_code, reason, cause).
    Reasons are kept only where there is one: {record number: reason}.
    """
    causes: dict[str, int] = {}
    reasons: dict[int, str] = {}
    pack = RECORD.pack
    out = []
    for k, (i, frm, to, att, ts, ex, code, reason, cause) in enumerate(transitions):
        c = causes.get(cause)
        if c is None:
            c = causes[cause] = len(causes)
        if reason:
            reasons[k] = reason
        out.append(pack(i, frm, to, att, ex, NO_EXIT if code is None else code, ts, c))
    return b"".join(out), json.dumps(list(causes)), json.dumps(reasons) if reasons else ""


def unpack_turn(first: int, recs: bytes, causes: str, reasons: str) -> Iterator[tuple]:
    """(seq, job, from, to, attempt, ts, executor, exit_code, reason, cause) of each record of a turn."""
    names = json.loads(causes)
    why = {int(k): v for k, v in json.loads(reasons).items()} if reasons else {}
    for k, (i, frm, to, att, ex, code, ts, c) in enumerate(RECORD.iter_unpack(recs)):
        yield first + k, i, frm, to, att, ts, ex, None if code == NO_EXIT else code, why.get(k, ""), names[c]


def unpack_jobs(first: int, recs: bytes, causes: str, reasons: str, jobs: Iterable[int]) -> list[tuple]:
    """The records of some jobs only (as unpack_turn gives them), found in the packed records without
    unpacking the others: a job's records start with its index, at a multiple of the record size.

    For more than a few jobs one pass over the turn's records is cheaper than a search per job.
    """
    size = RECORD.size
    at = records_of(recs, jobs)
    if not at:
        return []
    names = json.loads(causes)
    if len(at) <= FEW_JOBS:
        why = {k: _reason_of(reasons, k) for k in at}
    else:
        why = {int(k): v for k, v in json.loads(reasons).items()} if reasons else {}
    out = []
    for k in sorted(at):
        i, frm, to, att, ex, code, ts, c = RECORD.unpack_from(recs, k * size)
        out.append((first + k, i, frm, to, att, ts, ex, None if code == NO_EXIT else code, why.get(k, ""), names[c]))
    return out


def records_of(recs: bytes, jobs: Iterable[int]) -> list[int]:
    """The numbers of the records of some jobs in packed records, found without unpacking the others: a job's
    records start with its index, at a multiple of the record size (for more than a few jobs, one pass over
    the records is cheaper than a search per job)."""
    size = RECORD.size
    wanted = jobs if isinstance(jobs, (set, frozenset)) else set(jobs)
    if len(wanted) > FEW_JOBS and len(recs) > size * FEW_JOBS:
        return [k for k, (i,) in enumerate(JOB_FIELD.iter_unpack(recs)) if i in wanted]
    at: list[int] = []
    for job in wanted:
        key = job.to_bytes(4, "little")
        k = recs.find(key)
        while k >= 0:
            if k % size == 0:
                at.append(k // size)
                k = recs.find(key, k + size)
            else:
                k = recs.find(key, k + 1)
    return at


def apply_states(states: bytearray, recs: bytes) -> None:
    """Set each job's state in `states` (one byte per job) to where its last record in `recs` moved it (packed
    records, in order), growing it for jobs the run added since it was read."""
    try:
        for i, to in JOB_TO.iter_unpack(recs):
            states[i] = to
    except IndexError:
        top = max(job for (job,) in JOB_FIELD.iter_unpack(recs))
        states.extend(bytes(_room_for(len(states), top) - len(states)))
        for i, to in JOB_TO.iter_unpack(recs):
            states[i] = to


def _reason_of(reasons: str, k: int) -> str:
    """Record k's reason in a turn's reasons JSON, decoded alone: a turn that failed a million jobs' dependents
    holds tens of megabytes of them.

    pack_turn writes {record: reason} with json.dumps' separators, so a key is `"k": ` after `{` or `, `;
    inside a reason every quote is escaped, so that text, after those, is a key.
    """
    if not reasons:
        return ""
    key = f'"{k}": '
    at = reasons.find(key)
    while at > 0 and reasons[at - 1] not in "{ ":
        at = reasons.find(key, at + 1)
    if at <= 0:
        return ""
    value, _end = _DECODER.raw_decode(reasons, at + len(key))
    return str(value)


class JobColumns:
    """Every job's row, kept as columns and brought up to date by replaying turns.

    It applies a turn the way the journal's job rows always changed: per job, the turn's last
    state and attempt; executor and exit status when the turn gave one; the turn's last reason;
    `started` when it started running; `ended` when it ended (cleared when it is no longer ended).
    """

    def __init__(self, n: int) -> None:
        self.state = bytearray(n)
        """JobState value per job."""
        self.attempt = array("I", bytes(4 * n))
        """Attempts so far per job."""
        self.executor = array("h", [-1]) * n
        """Executor of the latest attempt (-1: none)."""
        self.exit_code: dict[int, int] = {}
        """Last exit status of jobs that have one."""
        self.started: dict[int, float] = {}
        """When each job's latest attempt started running."""
        self.ended: dict[int, float] = {}
        """When each ended job ended."""
        self.reason: dict[int, str] = {}
        """Latest reason of jobs that have one."""
        self.seq = 0
        """Last transition applied."""

    def grow(self, n: int) -> None:
        """Make room for jobs up to index n-1 (jobs a run added)."""
        more = n - len(self.state)
        if more > 0:
            self.state.extend(bytes(more))
            self.attempt.extend(array("I", bytes(4 * more)))
            self.executor.extend(array("h", [-1]) * more)

    def set_row(self, i: int, state: int, attempt: int, executor: int, code: int | None, started: float | None,
                ended: float | None, reason: str) -> None:
        """Take one job's row as stored (journals written before turns, accepted plan changes)."""
        self.state[i] = state
        self.attempt[i] = attempt
        self.executor[i] = executor
        if code is not None:
            self.exit_code[i] = code
        if started is not None:
            self.started[i] = started
        if ended is not None:
            self.ended[i] = ended
        if reason:
            self.reason[i] = reason

    def apply(self, records: Iterable[tuple]) -> None:
        """Apply one turn's records (as unpack_turn gives them)."""
        last: dict[int, list] = {}
        for seq, i, _f, to, att, ts, ex, code, reason, _c in records:
            row = last.get(i)
            if row is None:
                row = last[i] = [to, att, ex, code, reason, None, None]
            else:
                row[0], row[1], row[4] = to, att, reason or row[4]
                if ex >= 0:
                    row[2] = ex
                if code is not None:
                    row[3] = code
            if to == _RUNNING:
                row[5] = ts
            elif to in TERMINAL_STATES:
                row[6] = ts
            self.seq = seq
        if last and max(last) >= len(self.state):
            self.grow(_room_for(len(self.state), max(last)))
        state, attempt, executor = self.state, self.attempt, self.executor
        for i, (to, att, ex, code, reason, started, ended) in last.items():
            state[i] = to
            attempt[i] = att
            if ex >= 0:
                executor[i] = ex
            if code is not None:
                self.exit_code[i] = code
            if reason:
                self.reason[i] = reason
            else:
                self.reason.pop(i, None)
            if started is not None:
                self.started[i] = started
            if to in TERMINAL_STATES:
                if ended is not None:
                    self.ended[i] = ended
            else:
                self.ended.pop(i, None)

    def row(self, i: int, job_id: str) -> tuple:
        """(idx, job_id, state, attempt, executor, exit_code, started, ended, reason) of job i."""
        return (i, job_id, self.state[i], self.attempt[i], self.executor[i], self.exit_code.get(i),
                self.started.get(i), self.ended.get(i), self.reason.get(i, ""))


STATE_BLOCK = 1024
"""Jobs per row of a run's current states (one byte each): a turn rewrites only the rows of the jobs it moved."""
INDEX_BLOCK = 64
"""Jobs per key of the turn index: the turns that moved any job of a block are found without reading the others."""
_INDEX_SHIFT = INDEX_BLOCK.bit_length() - 1


def index_blocks(jobs: Iterable[int]) -> list[int]:
    """The turn-index keys of these jobs."""
    return sorted({i >> _INDEX_SHIFT for i in jobs})


def states_of(blocks: Iterable[tuple[int, bytes]], n: int) -> bytearray:
    """Every job's state from the rows of current states (jobs of no row are WAITING)."""
    out = bytearray(n)
    for b, states in blocks:
        first = b * STATE_BLOCK
        part = states[: max(0, n - first)]
        out[first:first + len(part)] = part
    return out


def rows_from(idxs: Iterable[int], stored: dict[int, tuple], turns: Iterable[list[tuple]]) -> dict[int, tuple]:
    """(state, attempt, executor, exit_code, started, ended, reason) of some jobs: their stored rows, then
    the records of theirs in the turns given (oldest first; records of other jobs are passed over)."""
    want = {i: k for k, i in enumerate(idxs)}
    cols = JobColumns(len(want))
    for i, k in want.items():
        row = stored.get(i)
        if row is not None:
            cols.set_row(k, *row)
    for records in turns:
        mine = [(r[0], want[r[1]], *r[2:]) for r in records if r[1] in want]
        if mine:
            cols.apply(mine)
    return {i: cols.row(k, "")[2:] for i, k in want.items()}


def pack_took(jobs: Sequence[int], seconds: Sequence[float]) -> bytes:
    """Successful attempts' durations as one blob: the job indices (uint32), then their seconds (float32)."""
    return array("I", jobs).tobytes() + array("f", seconds).tobytes()


def unpack_took(blob: bytes) -> Iterator[tuple[int, float]]:
    """(job index, seconds) pairs of a pack_took blob."""
    half = len(blob) // 2
    jobs, secs = array("I"), array("f")
    jobs.frombytes(blob[:half])
    secs.frombytes(blob[half:])
    return zip(jobs, secs, strict=True)


_DECODER = json.JSONDecoder()
"""Decodes one JSON value where it starts in a text (see _reason_of)."""
_ATTEMPT = struct.Struct("=i")
"""An attempt count in a block of flat rows (the arrays' own layout)."""
ROW_BLOCK = INDEX_BLOCK
"""Jobs per row of a run's flat rows (see FlatRows): a save rewrites only the rows of the jobs moved since the
last (the turn index's keys are these blocks)."""
NOT_YET = float("nan")
"""A flat row's time that is not there (never started; not ended)."""
_ENDS = bytes(1 if v in TERMINAL_STATES else 0 for v in range(256))
"""1 for each terminal state value (a byte table is read faster than a set is searched)."""


class FlatRows:
    """Every job's start, end, attempt and executor as fixed-width arrays (24 bytes a job), the form
    the journal keeps beside the current states so a reader sorts a million jobs without a replay
    (store/current.py says when they are saved).

    They are what JobColumns gives for the same turns: `started` is when the latest attempt started
    running, `ended` when the job reached the terminal state it is in (NOT_YET for both when there
    is none), `executor` the latest one given (-1: none).
    """

    def __init__(self, n: int = 0) -> None:
        self.started = array("d", [NOT_YET]) * n
        """When each job's latest attempt started running (NOT_YET: never)."""
        self.ended = array("d", [NOT_YET]) * n
        """When each job reached its terminal state (NOT_YET: it is not in one)."""
        self.attempt = array("i", bytes(4 * n))
        """Attempts so far per job."""
        self.executor = array("i", [-1]) * n
        """Executor of the latest attempt (-1: none)."""

    def __len__(self) -> int:
        return len(self.attempt)

    def grow(self, n: int) -> None:
        """Make room for jobs up to index n-1 (jobs a run added)."""
        more = n - len(self.attempt)
        if more > 0:
            self.started.extend(array("d", [NOT_YET]) * more)
            self.ended.extend(array("d", [NOT_YET]) * more)
            self.attempt.extend(array("i", bytes(4 * more)))
            self.executor.extend(array("i", [-1]) * more)

    def apply(self, recs: bytes) -> None:
        """Apply packed records (RECORD each, as a turn journals them), in order.

        Each field ends as the job's last record leaves it, so records already applied, applied again
        in order with those after them, change nothing (a reader's snapshot may be newer than the
        sequence number it came with).
        """
        try:
            self._apply(recs)
        except IndexError:  # a job the run added since: applied again from the start
            self.grow(_room_for(len(self), max(job for (job,) in JOB_FIELD.iter_unpack(recs))))
            self._apply(recs)

    def _apply(self, recs: bytes) -> None:
        started, ended, attempt, executor = self.started, self.ended, self.attempt, self.executor
        nan, running, ends = NOT_YET, _RUNNING, _ENDS
        for i, _f, to, att, ex, _x, ts, _c in RECORD.iter_unpack(recs):
            if to == running:
                started[i] = ts
                ended[i] = nan
            else:
                ended[i] = ts if ends[to] else nan
            attempt[i] = att
            if ex >= 0:
                executor[i] = ex

    def block(self, b: int) -> bytes:
        """Block b as the journal keeps it: its jobs' starts, ends, attempts and executors, one array after
        the other (the last block of a run may be shorter)."""
        s, e = b * ROW_BLOCK, (b + 1) * ROW_BLOCK
        return (self.started[s:e].tobytes() + self.ended[s:e].tobytes() + self.attempt[s:e].tobytes()
                + self.executor[s:e].tobytes())

    def blocks(self) -> dict[int, bytes]:
        """Every block that holds more than its jobs' initial rows."""
        out: dict[int, bytes] = {}
        blank = FlatRows(ROW_BLOCK).block(0)
        for b in range((len(self) + ROW_BLOCK - 1) // ROW_BLOCK):
            data = self.block(b)
            if data != blank[: len(data)]:
                out[b] = data
        return out

    @staticmethod
    def attempt_in(data: bytes, k: int) -> int:
        """The attempts of the k-th job of a block as the journal keeps it (0 for a job past its end: a block
        not saved holds initial rows)."""
        length = len(data) // 24
        if k >= length:
            return 0
        return int(_ATTEMPT.unpack_from(data, 16 * length + 4 * k)[0])

    @classmethod
    def from_blocks(cls, blocks: Iterable[tuple[int, bytes]], n: int) -> FlatRows:
        """The flat rows of n jobs from the journal's blocks (jobs of no block keep their initial row)."""
        rows = cls(n)
        cols = [memoryview(a).cast("B") for a in (rows.started, rows.ended, rows.attempt, rows.executor)]
        for b, data in blocks:
            k = min(len(data) // 24, n - b * ROW_BLOCK)
            if k <= 0:
                continue
            first, at = b * ROW_BLOCK, 0
            length = len(data) // 24
            for col, width in zip(cols, (8, 8, 4, 4), strict=True):
                col[first * width:(first + k) * width] = data[at:at + k * width]
                at += length * width
        return rows

    @classmethod
    def from_columns(cls, cols: JobColumns, n: int) -> FlatRows:
        """The flat rows of JobColumns (a run journaled before they were kept)."""
        rows = cls(max(n, len(cols.state)))
        m = len(cols.state)
        rows.attempt[:m] = array("i", cols.attempt)
        rows.executor[:m] = array("i", cols.executor)
        for i, ts in cols.started.items():
            rows.started[i] = ts
        for i, ts in cols.ended.items():
            rows.ended[i] = ts
        return rows

    def row(self, i: int) -> tuple[int, int, float | None, float | None]:
        """(attempt, executor, started, ended) of job i (None: not there)."""
        s, e = self.started[i], self.ended[i]
        return self.attempt[i], self.executor[i], (s if s == s else None), (e if e == e else None)
