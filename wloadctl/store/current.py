"""A run's current state beside its journal, and the history of its jobs' durations, for both stores.

Readers do not replay a whole run to answer for one job or for the counts: beside the turns,
in the same transactions, each store keeps the run's current states (one byte per job, in
blocks of turns.STATE_BLOCK jobs, a turn rewriting only the blocks it changed) and a turn index
(for each block of turns.INDEX_BLOCK jobs, the turns that moved one of them). A run journaled
before they existed is brought into them at its next write (`_current_changes`). Each turn also
journals the durations of the successful attempts it ends (`took`), from which the next runs of
the plan learn how long each job takes (`expected_history`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from statistics import median
from typing import Any

from wloadctl.turns import (
    RUNNING,
    STATE_BLOCK,
    SUCCEEDED,
    TERMINAL_STATES,
    index_blocks,
    last_states,
    pack_took,
    rows_from,
    states_of,
    unpack_took,
)

_TIMED = TERMINAL_STATES | {RUNNING}
"""States whose transitions start or end an attempt's duration."""


class CurrentState:
    """The current-state half of a store (mixed into store.base.Store, which gives columns, runs, job_ids...)."""

    def __init__(self) -> None:
        self._now: dict[int, bytearray] = {}
        """A writer's copy of the current states of the runs it writes turns of (one byte per job)."""
        self._running_since: dict[int, dict[int, float]] = {}
        """Per run, when each job the writer saw start running started (for the durations it journals)."""

    # What Store provides.
    columns: Any
    drop_columns: Any
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

    def _stored_at(self, run: int, idxs: Sequence[int]) -> dict[int, tuple]:
        """Rows kept as rows (see _stored_rows) of these jobs: idx -> (state, attempt, ... reason)."""
        return {}

    @abstractmethod
    def _ids_at(self, run: int, idxs: Sequence[int]) -> dict[int, str]:
        """Ids of these jobs."""

    @abstractmethod
    def _write_current(self, run: int, jobs: int, blocks: dict[int, bytes], index: Sequence[tuple[int, int]]) -> None:
        """Bring a run not yet kept into the current states and turn index (one transaction)."""

    def _current_changes(self, run: int, transitions: Sequence[tuple]) -> tuple[dict[int, bytes], list[int]]:
        """What a turn changes in the current states (block -> its new row) and its turn-index keys.

        The writer keeps the run's states in memory from its first turn on (a store that fails
        to write forgets them: see `_forget_current`); a run journaled before they were kept is
        brought into them first.
        """
        flat = self._now.get(run)
        if flat is None:
            n = self._kept_jobs(run)
            if n is None:
                self._backfill(run)
                n = self._kept_jobs(run) or 0
            flat = self._now[run] = states_of(self._state_rows(run), n)
        last = last_states(transitions)
        if not last:
            return {}, []
        top = max(last)
        if top >= len(flat):
            flat.extend(bytes(top + 1 - len(flat)))
        for i, to in last.items():
            flat[i] = to
        size = STATE_BLOCK
        rows = {b: bytes(flat[b * size:(b + 1) * size]) for b in {i // size for i in last}}
        return rows, index_blocks(last)

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
        self._running_since.pop(run, None)

    def _backfill(self, run: int) -> None:
        cols = self.columns(run)
        n = max(len(cols.state), len(self.job_ids(run)))
        states, size = bytes(cols.state), STATE_BLOCK
        blocks = {b: states[b * size:(b + 1) * size] for b in range((len(states) + size - 1) // size)}
        index = [(key, turn[0][0]) for turn in self._turns(run, 0) if turn
                 for key in index_blocks(r[1] for r in turn)]
        self._write_current(run, n, blocks, index)
        self.drop_columns()

    def current_states(self, run: int) -> bytearray | None:
        """Every job's state (JobState values by index) without replaying the run; None when not kept."""
        n = self._kept_jobs(run)
        return None if n is None else states_of(self._state_rows(run), n)

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

