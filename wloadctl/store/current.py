"""A run's current state beside its journal, and the history of its jobs' durations, for both stores.

Readers do not replay a whole run to answer for one job or for the counts: beside the turns,
in the same transactions, each store keeps the run's current states (one byte per job, in
blocks of turns.STATE_BLOCK jobs) and a turn index (for each block of turns.INDEX_BLOCK jobs, the
turns that moved one of them). A run journaled before they existed is brought into them at its
next write (`_current_changes`). Each turn also journals the durations of the successful attempts
it ends (`took`), from which the next runs of the plan learn how long each job takes
(`expected_history`).

The current states and a run's flat rows (turns.FlatRows: each job's start, end, attempt and
executor as fixed-width arrays, what a sort by those reads) are saved later than the turns that
change them: a busy run moves jobs all over the plan, and rewriting their blocks at every turn
would write gigabytes over a million jobs. The writer keeps both in memory; each turn's
transaction saves a share of the blocks changed longest ago (`LateSaves`), with the transition
every saved block is at, and the one that ends the run saves the rest (`set_status`). A reader
takes the saved blocks and applies the turns after that transition, so a kill -9 loses nothing:
at worst the next reader, or writer, applies about STATES_EVERY (FLAT_EVERY) transitions more.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from statistics import median
from typing import Any

from wloadctl.turns import (
    JOB_FIELD,
    RECORD,
    ROW_BLOCK,
    RUNNING,
    STATE_BLOCK,
    SUCCEEDED,
    TERMINAL_STATES,
    TO_OFFSET,
    FlatRows,
    apply_states,
    index_blocks,
    pack_took,
    records_of,
    rows_from,
    states_of,
    unpack_took,
)

_TIMED = TERMINAL_STATES | {RUNNING}
"""States whose transitions start or end an attempt's duration."""
FLAT_EVERY = 1_000_000
"""About how many transitions a changed block of flat rows waits to be saved (see LateSaves)."""
STATES_EVERY = 100_000
"""The same for a block of current states: what a reader of a run's states (`status` of a run its scheduler
left) applies at most, about 20 ms of records, where each turn of a million-job run rewrote some 260 blocks."""


class LateSaves:
    """The blocks of a writer's copy changed since it last saved them, and which of them a turn saves.

    A turn saves the blocks changed longest ago, its share of them: as many as it has transitions in
    `every`. So a changed block waits about `every` transitions, and the saves are spread over the turns.
    """

    def __init__(self, every: int, changed: Iterable[int] = (), at: int = 0) -> None:
        self.every = every
        self.dirty: dict[int, int] = dict.fromkeys(sorted(changed), at)
        """Block -> the transition its saved row is at, oldest change first (a dict keeps the order keys came in)."""
        self.owed = 0.0
        """The fraction of a block the turns so far owe to the saves."""

    def turn(self, blocks: Iterable[int], before: int, n: int) -> list[int]:
        """A turn of n transitions changed these blocks (its first after transition `before`): the blocks it saves."""
        dirty = self.dirty
        # Blocks not changed before are at the transition before the turn (added after the others: a pass of C).
        dirty.update(dict.fromkeys(set(blocks).difference(dirty), before))
        # The turn's share, carried over in fractions: a turn of a few transitions saves no block.
        owed = self.owed + len(dirty) * n / self.every
        share = int(owed)
        self.owed = owed - share
        due = list(islice(dirty, share))
        for b in due:
            del dirty[b]
        return due

    def at(self) -> int | None:
        """The transition every saved block is at (None: the last turn's last, no changed block being left unsaved)."""
        return next(iter(self.dirty.values()), None)

    def rest(self) -> list[int]:
        """Every block left unsaved (the run's end saves them)."""
        out = list(self.dirty)
        self.dirty.clear()
        return out


class CurrentState:
    """The current-state half of a store (mixed into store.base.Store, which gives columns, runs, job_ids...)."""

    def __init__(self) -> None:
        self._now: dict[int, bytearray] = {}
        """A writer's copy of the current states of the runs it writes turns of (one byte per job)."""
        self._now_late: dict[int, LateSaves] = {}
        """Per run, the blocks of current states changed since the writer last saved them."""
        self._flat: dict[int, FlatRows] = {}
        """A writer's copy of the flat rows of the runs it writes turns of."""
        self._flat_late: dict[int, LateSaves] = {}
        """Per run, the blocks of flat rows changed since the writer last saved them."""
        self._seq: dict[int, int] = {}
        """Per run, the last transition in the writer's copies."""
        self._running_since: dict[int, dict[int, float]] = {}
        """Per run, when each job the writer saw start running started (for the durations it journals)."""

    # What Store provides.
    columns: Any
    drop_columns: Any
    last_seq: Callable[[int], int]
    job_ids: Any
    runs: Any
    _turns: Any

    # -- store-specific parts ---------------------------------------------------------------------

    @abstractmethod
    def _kept_jobs(self, run: int) -> int | None:
        """Number of jobs of a run whose current states and turn index are kept (None: not kept)."""

    @abstractmethod
    def _state_rows(self, run: int) -> Iterable[tuple[int, bytes]]:
        """(block, states) rows of a run's current states."""

    @abstractmethod
    def _index_turns(self, run: int, jobs: Sequence[int]) -> Iterator[list[tuple]]:
        """The records of these jobs in every turn the index lists under their keys, oldest first."""

    @abstractmethod
    def _state_blocks(self, run: int, blocks: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        """(block, states) rows of some blocks of a run's current states."""

    @abstractmethod
    def _flat_blocks_at(self, run: int, blocks: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        """(block, data) rows of some blocks of a run's saved flat rows."""

    @abstractmethod
    def _states_saved(self, run: int) -> int | None:
        """The transition a run's saved current states are at (None: each turn saved the blocks it changed, as
        a journal written before they were saved late)."""

    @abstractmethod
    def _flat_saved(self, run: int) -> int | None:
        """Last transition a run's saved flat rows include (None: not kept: journaled before them)."""

    @abstractmethod
    def _flat_blocks(self, run: int) -> Iterable[tuple[int, bytes]]:
        """(block, data) rows of a run's saved flat rows."""

    @abstractmethod
    def _turn_records(self, run: int, after: int) -> Iterable[tuple[int, bytes]]:
        """(first transition, packed records) of each turn of a run with a transition after `after`, oldest first."""

    @abstractmethod
    def _write_flat(self, run: int, blocks: dict[int, bytes], seq: int) -> None:
        """Save a run's flat rows as they stand at transition `seq` (one transaction, outside turns)."""

    def _stored_at(self, run: int, idxs: Sequence[int]) -> dict[int, tuple]:
        """Rows kept as rows (see _stored_rows) of these jobs: idx -> (state, attempt, ... reason)."""
        return {}

    @abstractmethod
    def _ids_at(self, run: int, idxs: Sequence[int]) -> dict[int, str]:
        """Ids of these jobs."""

    @abstractmethod
    def _write_current(self, run: int, jobs: int, blocks: dict[int, bytes], index: Sequence[tuple[int, int]]) -> None:
        """Bring a run not yet kept into the current states and turn index (one transaction)."""

    def _current_changes(self, run: int, transitions: Sequence[tuple],
                         recs: bytes) -> tuple[dict[int, bytes], list[int], int | None]:
        """What a turn saves of the current states (block -> its row), its turn-index keys, and the transition
        every saved block of states is at after it (None: the turn's last).

        The writer keeps the run's states in memory from its first turn on (a store that fails
        to write forgets them: see `_forget_current`); a run journaled before they were kept is
        brought into them first.

        Args:
            recs: the turn's records as journaled (turns.pack_turn).
        """
        flat = self._now.get(run)
        if flat is None:
            n = self._kept_jobs(run)
            if n is None:
                self._backfill(run)
                n = self._kept_jobs(run) or 0
            flat, saved, seq, changed = self._read_states(run, n)
            self._now[run] = flat
            self._now_late[run] = LateSaves(STATES_EVERY, changed, saved)
            self._seq[run] = seq
        late = self._now_late[run]
        if not transitions:
            return {}, [], late.at()
        apply_states(flat, recs)
        jobs = {t[0] for t in transitions}
        size = STATE_BLOCK
        due = late.turn({i // size for i in jobs}, self._seq[run], len(transitions))
        return {b: bytes(flat[b * size:(b + 1) * size]) for b in due}, index_blocks(jobs), late.at()

    def _flat_changes(self, run: int, recs: bytes, n: int, keys: Sequence[int]) -> tuple[dict[int, bytes], int | None]:
        """Apply a turn to the writer's flat rows: the blocks to save with it, and the transition all saved
        blocks are at (None: the turn's last, when no changed block is left unsaved).

        Args:
            recs: the turn's records as journaled (turns.pack_turn).
            n: how many.
            keys: the turn's turn-index keys (its jobs' blocks: turns.ROW_BLOCK is turns.INDEX_BLOCK).
        """
        flat = self._flat.get(run)
        if flat is None:
            flat = self._flat_copy(run)
        flat.apply(recs)
        late = self._flat_late[run]
        return {b: flat.block(b) for b in late.turn(keys, self._seq[run], n)}, late.at()

    def _flat_copy(self, run: int) -> FlatRows:
        """The writer's copy of a run's flat rows, read at its first turn (a run journaled before they
        were kept is brought into them first)."""
        read = self._read_flat(run)
        if read is None:
            seq = self.last_seq(run)
            flat = FlatRows.from_columns(self.columns(run), self._kept_jobs(run) or 0)
            self._write_flat(run, flat.blocks(), seq)
            self.drop_columns()
            read = flat, seq, seq, set()
        flat, saved, seq, changed = read
        self._flat[run] = flat
        self._seq[run] = max(self._seq.get(run, seq), seq)
        self._flat_late[run] = LateSaves(FLAT_EVERY, changed, saved)
        return flat

    def _unsaved(self, run: int) -> tuple[dict[int, bytes], dict[int, bytes], int]:
        """Every block of the writer's current states and flat rows not saved since it changed, and the
        transition the writer has written last (the run's end saves them all)."""
        states, flat, seq = self._now.get(run), self._flat.get(run), self._seq.get(run, 0)
        size = STATE_BLOCK
        now = {b: bytes(states[b * size:(b + 1) * size]) for b in self._now_late[run].rest()} if states else {}
        rows = {b: flat.block(b) for b in self._flat_late[run].rest()} if flat else {}
        return now, rows, seq

    def _flat_written(self, run: int, seq: int) -> None:
        """A turn ending at transition `seq` committed."""
        if run in self._seq:
            self._seq[run] = max(self._seq[run], seq)

    def _tail(self, run: int, after: int) -> tuple[bytes, int]:
        """The packed records of a run's transitions after `after`, in order, and the last one's number (`after`
        when there is none)."""
        seq = after
        tail: list[bytes] = []
        for first, recs in self._turn_records(run, after):
            skip = max(0, after + 1 - first)  # a turn the save ended inside of (saves end turns)
            tail.append(recs[skip * RECORD.size:])
            seq = max(seq, first + len(recs) // RECORD.size - 1)
        return b"".join(tail), seq

    def _read_states(self, run: int, n: int) -> tuple[bytearray, int, int, set[int]]:
        """A run's current states as saved, with the turns after them applied: (states, the transition the
        saved blocks are at, the last transition in them, the blocks the turns after the save changed)."""
        # The sequence number first: blocks saved after it are newer, and the turns after it,
        # applied again over them, leave each job where its last transition did.
        saved = self._states_saved(run)
        states = states_of(self._state_rows(run), n)
        if saved is None:
            seq = self.last_seq(run)
            return states, seq, seq, set()
        recs, seq = self._tail(run, saved)
        apply_states(states, recs)
        return states, saved, seq, {job // STATE_BLOCK for (job,) in JOB_FIELD.iter_unpack(recs)}

    def _read_flat(self, run: int) -> tuple[FlatRows, int, int, set[int]] | None:
        """A run's flat rows as saved, with the turns after them applied: (rows, the transition the saved
        blocks are at, the last transition in the rows, the blocks the turns after the save changed);
        None when not kept."""
        # The sequence number first: blocks saved after it are newer, and the turns after it,
        # applied again over them, change nothing (FlatRows.apply).
        saved = self._flat_saved(run)
        if saved is None:
            return None
        flat = FlatRows.from_blocks(self._flat_blocks(run), self._kept_jobs(run) or 0)
        recs, seq = self._tail(run, saved)
        flat.apply(recs)
        return flat, saved, seq, set(index_blocks(job for (job,) in JOB_FIELD.iter_unpack(recs)))

    def _durations(self, run: int, transitions: Sequence[tuple]) -> bytes:
        """The successful attempts a turn ends, packed for the history (see pack_took): seconds from
        running to succeeded, of the attempts this writer saw start."""
        since = self._running_since.setdefault(run, {})
        jobs: list[int] = []
        secs: list[float] = []
        # Only starts and ends matter (about half of a turn's transitions), in their order.
        for t in [t for t in transitions if t[2] in _TIMED]:
            if t[2] == RUNNING:
                since[t[0]] = t[4]
            elif (start := since.pop(t[0], None)) is not None and t[2] == SUCCEEDED:
                jobs.append(t[0])
                secs.append(t[4] - start)
        return pack_took(jobs, secs) if jobs else b""

    @abstractmethod
    def _took(self, runs: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        """(run, packed durations) rows of these runs' turns."""

    def expected_history(self, plan_name: str, run: int, ids: Sequence[str], digest: str,
                         runs: int = 5) -> dict[str, float]:
        """Median seconds of each job's successful attempts over the last `runs` runs of the same plan
        (by name) before `run` in this journal (state directory, or namespace and home)."""
        older = [r for r in self.runs() if r.plan_name == plan_name and r.id < run][-runs:]
        if not older:
            return {}
        by_run = {r.id: r for r in older}
        seen: dict[str, list[float]] = {}
        names: dict[int, Sequence[str]] = {}
        for rid, packed in self._took(list(by_run)):
            if rid not in names:
                names[rid] = ids if by_run[rid].plan_digest == digest else self.job_ids(rid)
            known = names[rid]
            for i, sec in unpack_took(packed):
                if i < len(known):
                    seen.setdefault(known[i], []).append(sec)
        return {j: (v[0] if len(v) == 1 else median(v)) for j, v in seen.items()}

    def _forget_current(self, run: int) -> None:
        """Drop the writer's copy of a run's states (a write failed: read them again next time)."""
        self._now.pop(run, None)
        self._now_late.pop(run, None)
        self._flat.pop(run, None)
        self._flat_late.pop(run, None)
        self._seq.pop(run, None)
        self._running_since.pop(run, None)

    def _backfill(self, run: int) -> None:
        cols = self.columns(run)
        n = max(len(cols.state), len(self.job_ids(run)))
        states, size = bytes(cols.state), STATE_BLOCK
        blocks = {b: states[b * size:(b + 1) * size] for b in range((len(states) + size - 1) // size)}
        index = [(key, turn[0][0]) for turn in self._turns(run, 0) if turn
                 for key in index_blocks(r[1] for r in turn)]
        self._write_current(run, n, blocks, index)
        if self._flat_saved(run) is not None:
            self.drop_columns()  # else the flat rows' backfill, next, reads them too

    def current_states(self, run: int) -> bytearray | None:
        """Every job's state (JobState values by index) without replaying the run; None when not kept."""
        n = self._kept_jobs(run)
        return None if n is None else self._read_states(run, n)[0]

    def states_at(self, run: int, idxs: Sequence[int]) -> dict[int, int] | None:
        """The states of some jobs, read from the blocks of current states that hold them; None when not kept."""
        n = self._kept_jobs(run)
        if n is None:
            return None
        size = STATE_BLOCK
        saved = self._states_saved(run)  # first (see _read_states)
        rows = dict(self._state_blocks(run, sorted({i // size for i in idxs})))
        out: dict[int, int] = {}
        for i in idxs:
            if not 0 <= i < n:
                return None
            row = rows.get(i // size, b"")
            out[i] = row[i % size] if i % size < len(row) else 0
        if saved is not None:
            recs, _ = self._tail(run, saved)
            for k in sorted(records_of(recs, out)):
                out[JOB_FIELD.unpack_from(recs, k * RECORD.size)[0]] = recs[k * RECORD.size + TO_OFFSET]
        return out

    def attempts_at(self, run: int, idxs: Sequence[int]) -> dict[int, int] | None:
        """The attempts of some jobs from the saved flat rows, when they include the run's every transition
        (a run whose scheduler stopped and saved them); None otherwise (see rows_of then)."""
        saved = self._flat_saved(run)
        if saved is None or saved != self.last_seq(run):
            return None
        rows = dict(self._flat_blocks_at(run, sorted({i // ROW_BLOCK for i in idxs})))
        return {i: FlatRows.attempt_in(rows.get(i // ROW_BLOCK, b""), i % ROW_BLOCK) for i in idxs}

    def flat_rows(self, run: int) -> FlatRows | None:
        """Every job's start, end, attempt and executor without replaying the run (its saved flat rows and
        the turns after them); None when not kept."""
        read = self._read_flat(run)
        return None if read is None else read[0]

    def rows_of(self, run: int, idxs: Sequence[int]) -> dict[int, tuple]:
        """(state, attempt, executor, exit_code, started, ended, reason) of some jobs, read through the turn
        index without replaying the run (a run not kept yet: from its columns)."""
        if self._kept_jobs(run) is not None:
            return self._rows_at(run, idxs)
        cols = self.columns(run)  # type: ignore[attr-defined]
        cols.grow(max(idxs, default=-1) + 1)
        return {i: cols.row(i, "")[2:] for i in idxs}

    def _rows_at(self, run: int, idxs: Sequence[int]) -> dict[int, tuple]:
        """(state, attempt, executor, exit_code, started, ended, reason) of some jobs of a kept run."""
        return rows_from(idxs, self._stored_at(run, idxs), self._index_turns(run, idxs))

