"""The journal's seam: the interface every store offers, its row type, and the reads both stores share.

A store keeps runs, their plans as loaded, job ids, the loop turns' transitions, operator
actions and alerts. `SqliteStore` (wloadctl/store/sqlite.py) keeps them in one file of a state
directory; `PostgresStore` (wloadctl/store/postgres.py) in a PostgreSQL database that several
runs and installations share. Job rows are never updated in place: they are what replaying a
run's turns gives (`columns`), computed here once for both.

Readers do not replay a whole run to answer for one job or for the counts: see store/current.py;
nor load its plan to say why one job waits: see store/facts.py.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from wloadctl.errors import Fenced, StoreError
from wloadctl.store.audit import ActionRow, ChainReport
from wloadctl.store.audit import verify as verify_chain
from wloadctl.store.current import CurrentState
from wloadctl.store.facts import JobFacts
from wloadctl.turns import JobColumns, rows_from
from wloadctl.urls import without_password

JOURNAL_ENV = "WLOADCTL_JOURNAL"
"""Environment variable naming the journal (a `postgresql://` URL) when `--journal` is not given."""
DB_NAME = "journal.db"
"""The SQLite journal's file name in a state directory."""
SYNC_MODES = ("FULL", "NORMAL", "AUTO")

_LOOKUPS = 64
"""Jobs up to which `transitions_of_jobs` looks an older journal's rows up job by job, rather than read the run's."""
"""Durability of commits (see Store.open)."""


class StaleEpoch(Fenced):
    """A write carried an epoch older than the run's: a newer scheduler holds the lease (fenced).

    A Fenced error, whichever write finds it (a turn, an operator action, an alert): the scheduler
    that made it exits with Fenced's code, never as if it had crashed.
    """


class JournalUnavailable(StoreError):
    """The journal's server stayed unreachable longer than the store waits for it."""


@dataclass(frozen=True, slots=True)
class JournalLoss:
    """How a journal found behind what its run's executors recorded could have lost what it had committed, and
    what gets it back: said in the terms of the journal in use (a file's write-ahead log, a server's database)."""

    cause: str
    """The likely causes, as a question closing a message: "journal.db-wal removed or damaged?"."""
    last_turns: str
    """The likely causes of losing only its last turns (those committed without waiting for the disk)."""
    restore: str
    """What to restore from a backup (or name) to get its records back."""


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run as recorded in the journal."""

    id: int
    """Row id (the `run` column of the other tables)."""
    run_id: str
    """The run's public id (also in its IPC object names)."""
    plan_name: str
    """Name of the plan."""
    plan_path: str
    """Path of the plan file as given at the start."""
    plan_digest: str
    """SHA-256 of the plan text."""
    business_date: str
    """Business date (YYYY-MM-DD) the run is for."""
    started: float
    """When it started."""
    ended: float | None
    """When it ended, if it did."""
    status: str
    """running | succeeded | failed | cancelled | interrupted."""
    epoch: int
    """Scheduler epoch (fencing token), incremented at every scheduler start or takeover."""
    scheduler_pid: int | None
    """Pid of the scheduler that last held the run."""
    lease_until: float
    """Until when the active scheduler's lease runs."""
    settings: str
    """JSON of the run's settings (executors, slots, ...)."""


def default_state_dir(plan_name: str) -> Path:
    """The state directory of a plan when `--state-dir` is not given: under the state root (paths.state_root)."""
    from wloadctl.paths import state_root

    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in plan_name) or "plan"
    if safe in (".", ".."):
        safe = "_" * len(safe)  # the root itself, or its parent: plans refuse these names, stored ones may not
    return state_root() / safe


PG_SERVER_ENV = "WLOADCTL_TEST_PG"
"""PostgreSQL server (URL of any database there) where tests and the benchmark make scratch databases."""
DEFAULT_PG_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
"""The server tried when $WLOADCTL_TEST_PG is not set."""


def pg_server(given: str = "") -> str:
    """The PostgreSQL server for scratch databases: given, $WLOADCTL_TEST_PG, or the local default."""
    return given or os.environ.get(PG_SERVER_ENV) or DEFAULT_PG_SERVER


def journal_url(given: str | None = None) -> str | None:
    """The journal URL in force: the one given, else $WLOADCTL_JOURNAL, else None (SQLite in the state dir)."""
    return given or os.environ.get(JOURNAL_ENV) or None


def run_place(state_dir: Path, journal: str | None = None) -> str:
    """The options that find a run again in a command's hint: `--state-dir DIR`, and `--journal URL` (without
    its password) when the journal in force is a server's (a state directory alone holds none of its runs)."""
    url = journal_url(journal)
    return f"--state-dir {state_dir}" + (f" --journal {without_password(url)}" if url else "")


def journal_exists(state_dir: Path | None, journal: str | None = None) -> bool:
    """Whether a journal may hold runs for this state directory (a server journal always may)."""
    return journal_url(journal) is not None or (state_dir is not None and (state_dir / DB_NAME).exists())


class Store(CurrentState, JobFacts, ABC):
    """The journal of runs: what every caller (scheduler, standby, client, bench) uses.

    Writes of a scheduler carry its epoch: after `begin_epoch` the store holds it, and every
    write it makes is refused with StaleEpoch once a newer scheduler took the run.
    """

    readonly: bool = False
    """Opened for reading only."""
    auto_sync: bool = False
    """Whether turns choose their durability (see open's `sync`)."""
    epoch: int | None = None
    """The epoch this store's writes carry (set by begin_epoch; None: unfenced, e.g. offline verbs)."""
    on_outage: Callable[[bool, str], None] | None = None
    """Told when a server journal becomes unreachable (True) and when it is back (False), with the
    one-line notice: a scheduler shows its pause in the event log and on the board."""
    stop_waiting: Callable[[], str | None] | None = None
    """Asked between reconnection attempts to a server journal: a reason to give up now (a scheduler told to
    stop by a signal), or None to go on waiting."""

    def __init__(self) -> None:
        self._columns: dict[int, JobColumns] = {}
        """Job rows per run as last replayed (see columns)."""
        CurrentState.__init__(self)

    @classmethod
    def open(cls, state_dir: str | Path | None, *, create: bool = True, readonly: bool = False,
             sync: str = "FULL", journal: str | None = None, say: Callable[[str], None] | None = None) -> Store:
        """Open the journal of a run: SQLite in the state directory, or the PostgreSQL journal in force.

        Args:
            state_dir: the run's state directory (None: a server journal read from anywhere).
            create: create the journal (directory and file, or the database schema) if missing.
            readonly: open for reading (status, logs); never writes.
            sync: FULL: every commit survives power loss. NORMAL: a crash of the process. AUTO: loop
                turns that touch a job declared not idempotent, and everything else written (runs,
                operator actions, alerts), are FULL; other turns NORMAL.
            journal: `postgresql://USER@HOST[:PORT]/DB[?namespace=NAME]` (default: $WLOADCTL_JOURNAL).
            say: where one-line notices go (a server journal lost and found again).

        Raises:
            StoreError: missing journal (when not creating), unreadable, corrupt, newer schema.
            UsageError: a journal URL that is not postgresql://USER@HOST[:PORT]/DB.
        """
        url = journal_url(journal)
        if url is None:
            if state_dir is None:
                raise StoreError("no journal given", hint="give --state-dir DIR or --journal postgresql://...")
            from wloadctl.store.sqlite import SqliteStore

            return SqliteStore.open(state_dir, create=create, readonly=readonly, sync=sync)
        from wloadctl.store.postgres import PostgresStore

        return PostgresStore.connect(url, None if state_dir is None else Path(state_dir), create=create,
                                     readonly=readonly, sync=sync, say=say)

    @property
    @abstractmethod
    def where(self) -> str:
        """The journal's location for messages (a file, or a URL without its password)."""

    @property
    @abstractmethod
    def loss(self) -> JournalLoss:
        """How this journal could have lost records it committed, and what to restore (for the refusals of a run
        or resume whose executors recorded more than it holds)."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs and the lease -----------------------------------------------------------------

    @abstractmethod
    def create_run(self, run_id: str, plan_name: str, plan_path: str, plan_digest: str, plan_text: str,
                   job_ids: Iterable[str], business_date: str, now: float, settings: str = "{}") -> RunRow:
        """Record a new run and its jobs (all WAITING) in one transaction."""

    @abstractmethod
    def get_run(self, run_id: str) -> RunRow | None:
        """The run with this public id."""

    @abstractmethod
    def runs(self) -> list[RunRow]:
        """Every run of the state directory, oldest first."""

    @abstractmethod
    def latest_run(self) -> RunRow | None:
        """The most recent run of the state directory (of the namespace, for a server journal opened without one)."""

    def unfinished_elsewhere(self, plan_name: str | None, business_date: str | None = None) -> list[tuple[RunRow, str]]:
        """Unfinished runs (of this plan, of this business date, when given) that other state directories started
        in this journal, with their homes (host:directory): none in a SQLite journal, which has one."""
        return []

    @abstractmethod
    def plan_text(self, run: int) -> str:
        """The plan text as loaded at the run's start."""

    @abstractmethod
    def plan_blob(self, run: int) -> str | None:
        """The plan as loaded, in its compact encoded form (None when not kept)."""

    @abstractmethod
    def set_plan_blob(self, run: int, blob: str) -> None:
        """Keep the plan's encoded form beside its text."""

    @abstractmethod
    def has_plan_copy(self, run: int) -> bool:
        """Whether the journal holds the run's plan, as text or encoded (a new run writes it after its first turn)."""

    @abstractmethod
    def keep_plan_file(self, run: int, path: str, digest: str) -> bool:
        """Keep the plan file's text for a run created without it (its copy follows the first dispatch), if the
        file's SHA-256 is `digest`; False, and nothing kept, if it is not.

        Raises:
            OSError: the file cannot be read.
        """

    @abstractmethod
    def replace_plan(self, run: int, digest: str, text: str, path: str,
                     new_job_ids: Sequence[tuple[int, str]]) -> None:
        """Accept a changed plan on resume: store its text and add rows for its new jobs."""

    @abstractmethod
    def begin_epoch(self, run: int, pid: int, lease: float, expect_epoch: int | None = None) -> int:
        """Take the run for a scheduler: increment its epoch (compare-and-set) and return the new epoch.

        The store's later writes carry the new epoch.

        Raises:
            StoreError: `expect_epoch` was given and another scheduler moved the epoch first.
        """

    @abstractmethod
    def renew_lease(self, run: int, epoch: int, lease: float) -> bool:
        """Extend the lease of the scheduler holding `epoch`; False if it was fenced off."""

    def make_room(self) -> None:
        """Give back the disk space the journal holds beyond its data, after a write was refused for want of
        space and before it is retried (a SQLite journal's write-ahead log); a server journal has none."""

    def holder_host(self, run: int) -> str | None:
        """Host of the scheduler holding the run's lease (None: this host; a SQLite journal has one host)."""
        return None

    @abstractmethod
    def set_status(self, run: int, status: str, ended: float | None) -> None:
        """Record the run's status (and end time).

        Raises:
            StaleEpoch: this store's epoch is no longer the run's.
        """

    # -- jobs and turns ---------------------------------------------------------------------

    @abstractmethod
    def expansions(self, run: int) -> list[tuple[str, tuple[str, ...]]]:
        """The run's `for_each` loops over output expanded so far, in order: (looped job id, items)."""

    @abstractmethod
    def job_ids(self, run: int) -> list[str]:
        """Job ids by index."""

    @abstractmethod
    def _job_index(self, run: int, job_id: str) -> int | None:
        """Index of one job."""

    @abstractmethod
    def _stored_rows(self, run: int) -> tuple[int, Iterable[tuple]]:
        """(number of jobs, rows (idx, state, attempt, executor, exit_code, started, ended, reason) kept
        as rows rather than as turns)."""

    @abstractmethod
    def _turns(self, run: int, after: int) -> Iterator[list[tuple]]:
        """The records of each turn of a run with a transition after `after`, oldest first."""

    def _legacy_transitions(self, run: int, idx: int | None, after: int, limit: int) -> list[tuple]:
        """Transitions kept one row each by older journals: (seq, idx, from, to, attempt, ts, executor,
        exit_code, reason, cause) of one job (idx) or all after `after`."""
        return []

    @abstractmethod
    def last_seq(self, run: int) -> int:
        """Sequence number of the run's latest transition (0 if none)."""

    @abstractmethod
    def write_turn(self, run: int, transitions: Sequence[tuple], epoch: int | None = None,
                   added: Sequence[tuple[str, int, Sequence[str], Sequence[str]]] = (),
                   durable: bool = True, actions: Sequence[ActionRow] = ()) -> None:
        """Journal one loop turn's transitions, the jobs it added and its operator actions, in one transaction.

        Each transition is (job, from, to, attempt, ts, executor, exit_code, reason, cause).
        `added` holds the `for_each` loops expanded in the turn: (looped job id, index of its first
        instance, items, instance ids). `actions` are the audit rows of the verbs whose transitions
        these are (see record_actions): committed with them, so no crash keeps a verb's effect
        without its record; a turn with actions is always durable. With auto_sync,
        `durable=False` lets the commit skip its flush to disk (it still survives a crash of the
        process).

        Raises:
            StaleEpoch: the run moved to a newer epoch than `epoch` (or the store's): nothing written.
            StoreError: the write failed; nothing of the turn is written.
        """

    # -- reading a run --------------------------------------------------------------------------

    def job_states(self, run: int) -> list[tuple[int, int, int]]:
        """(index, state, attempt) of every job not in its initial state."""
        cols = self.columns(run)
        cols.grow(len(self.job_ids(run)))
        state, attempt = cols.state, cols.attempt
        return [(i, state[i], attempt[i]) for i in range(len(state)) if state[i] or attempt[i]]

    def job_rows(self, run: int, exclude_states: Sequence[int] = (), limit: int = -1) -> list[tuple]:
        """(idx, job_id, state, attempt, executor, exit_code, started, ended, reason) of every job.

        With a limit, a kept run answers from its current states without replaying it.
        """
        if limit >= 0:
            states = self.current_states(run)
            if states is not None:
                skip = set(exclude_states)
                idxs: list[int] = []
                for s in range(32):
                    if s in skip:
                        continue
                    k = states.find(s)
                    found = 0
                    while k >= 0 and found < limit:
                        idxs.append(k)
                        found += 1
                        k = states.find(s, k + 1)
                idxs = sorted(idxs)[:limit]
                rows = self._rows_at(run, idxs)
                ids = self._ids_at(run, idxs)
                return [(i, ids[i], *rows[i]) for i in idxs]
        every = self.job_ids(run)
        cols = self.columns(run)
        cols.grow(len(every))
        skip = set(exclude_states)
        out: list[tuple] = []
        state = cols.state
        for i, jid in enumerate(every):
            if state[i] in skip:
                continue
            if 0 <= limit <= len(out):
                break
            out.append(cols.row(i, jid))
        return out

    def state_counts(self, run: int) -> list[tuple[int, int]]:
        """(state, number of jobs) of a run."""
        states = self.current_states(run)
        if states is not None:
            return [(s, c) for s in range(32) if (c := states.count(s))]
        cols = self.columns(run)
        cols.grow(len(self.job_ids(run)))
        state = cols.state
        return [(s, state.count(s)) for s in sorted(set(state))]

    def job_index(self, run: int, job_id: str) -> int | None:
        """Index of one job (None: no such job)."""
        return self._job_index(run, job_id)

    def ids_at(self, run: int, idxs: Sequence[int]) -> dict[int, str]:
        """Ids of these jobs."""
        return self._ids_at(run, idxs)

    def job_row(self, run: int, job_id: str, idx: int | None = None) -> tuple | None:
        """One job's row (see job_rows); `idx` when the caller knows the job's index."""
        i = self._job_index(run, job_id) if idx is None else idx
        if i is None:
            return None
        if self._kept_jobs(run) is not None:
            return (i, job_id, *self._rows_at(run, [i])[i])
        cols = self.columns(run)
        cols.grow(i + 1)
        return cols.row(i, job_id)

    def columns(self, run: int) -> JobColumns:
        """Every job's row of a run as columns: the stored rows, then every turn journaled since.

        Kept between calls and brought up to date with only the turns written since the last one.
        """
        cached = self._columns.get(run)
        if cached is None:
            n, rows = self._stored_rows(run)
            cached = JobColumns(n)
            for row in rows:
                cached.set_row(*row)
            self._columns[run] = cached
        for turn in self._turns(run, cached.seq):
            cached.apply(turn)
        return cached

    def drop_columns(self) -> None:
        """Forget the job rows kept by `columns` (a scheduler reads them once, at a resume)."""
        self._columns.clear()

    def transitions_of(self, run: int, idx: int) -> list[tuple]:
        """(from, to, attempt, ts, executor, exit_code, reason, cause) of one job, in order."""
        old = [r[2:] for r in self._legacy_transitions(run, idx, 0, -1)]
        turns = self._index_turns(run, [idx]) if self._kept_jobs(run) is not None else self._turns(run, 0)
        return old + [r[2:] for turn in turns for r in turn if r[1] == idx]

    def transitions_of_jobs(self, run: int, idxs: Iterable[int]) -> dict[int, list[tuple]]:
        """The transitions of each of some jobs (as transitions_of gives them), read in one pass."""
        out: dict[int, list[tuple]] = {i: [] for i in sorted(set(idxs))}
        if not out:
            return out
        # Rows an older journal kept one per transition: a look-up per job for a few jobs, one read of the run's for
        # many (a resume reads every job that has run and not ended, and every SKIPPED one).
        legacy = ((r for i in out for r in self._legacy_transitions(run, i, 0, -1)) if len(out) <= _LOOKUPS
                  else self._legacy_transitions(run, None, 0, -1))
        for r in legacy:
            if r[1] in out:
                out[r[1]].append(r[2:])
        turns = self._index_turns(run, list(out)) if self._kept_jobs(run) is not None else self._turns(run, 0)
        for turn in turns:
            for r in turn:
                if r[1] in out:
                    out[r[1]].append(r[2:])
        return out

    def job_story(self, run: int, job_id: str, idx: int | None = None) -> tuple[tuple, list[tuple]] | None:
        """One job's row and its transitions (see job_row and transitions_of), read once; None: no such job."""
        i = self._job_index(run, job_id) if idx is None else idx
        if i is None:
            return None
        if self._kept_jobs(run) is None:
            row = self.job_row(run, job_id, i)
            assert row is not None
            return row, self.transitions_of(run, i)
        records = [r for turn in self._index_turns(run, [i]) for r in turn]
        row = rows_from([i], self._stored_at(run, [i]), [records])[i]
        return (i, job_id, *row), [r[2:] for r in self._legacy_transitions(run, i, 0, -1)] + [r[2:] for r in records]

    def columns_at(self, run: int, until: float) -> JobColumns:
        """Every job's row as it stood at time `until` (epoch seconds): the journal replayed up to then.

        Rows a journal keeps as rows rather than as turns (jobs an accepted plan change added)
        carry no time and start from their initial state.
        """
        cols = JobColumns(len(self.job_ids(run)))
        old = [r for r in self._legacy_transitions(run, None, 0, -1) if r[5] <= until]
        if old:
            cols.apply(old)
        for turn in self._turns(run, 0):
            recs = [r for r in turn if r[5] <= until]
            if recs:
                cols.apply(recs)
        return cols

    def transitions_since(self, run: int, seq: int, limit: int = 100_000) -> list[tuple]:
        """(seq, idx, from, to, attempt, ts, executor, exit_code, reason) after `seq`, oldest first.

        Readers (the console) follow a live run with this instead of re-reading every job.
        """
        out = [r[:9] for r in self._legacy_transitions(run, None, seq, limit)]
        for turn in self._turns(run, seq):
            out.extend(r[:9] for r in turn)
            if len(out) >= limit:
                break
        return out[:limit]

    # -- operator actions and alerts ----------------------------------------------------------

    def record_action(self, run: int, user: str, verb: str, job: str, reason: str, outcome: str, applied: bool,
                      ts: float | None = None) -> None:
        """Append one operator action to the audit trail, chained to the run's previous one."""
        self.record_actions(run, [(ts or time.time(), user, verb, job, reason, outcome, applied)])

    @abstractmethod
    def record_actions(self, run: int, rows: Sequence[ActionRow]) -> None:
        """Append operator actions to the audit trail in one durable transaction, chained in order after
        the run's last one (the chain computed here, with one read of the run's last hash).

        Raises:
            StaleEpoch: this store's epoch is no longer the run's (nothing written).
            StoreError: the write failed (nothing written).
        """

    @abstractmethod
    def actions(self, run: int, job: str | None = None) -> list[tuple]:
        """(ts, user, verb, job, reason, outcome, applied) of the run's actions, optionally of one job."""

    @abstractmethod
    def audit_rows(self, run: int | None = None) -> list[tuple]:
        """(seq, run, ts, user, verb, job, reason, outcome, applied, prev_hash, hash) by run and seq."""

    def verify_audit(self, run: int | None = None) -> ChainReport:
        """Check the audit trail's hash chain (of one run, or of every run); report the first broken link."""
        return verify_chain(self.audit_rows(run))

    @abstractmethod
    def record_alert(self, run: int, ts: float, job: str, tier: str, state: str, attempts: int, reason: str,
                     log_path: str) -> None:
        """Append one alert (a job failed for good)."""

    @abstractmethod
    def alerts(self, run: int) -> list[tuple]:
        """(ts, job, tier, state, attempts, reason, log_path) of the run's alerts."""

    # -- remote agents ------------------------------------------------------------------------

    @abstractmethod
    def agent_index(self, run: int, name: str, first: int) -> int:
        """The executor index of the run's agent `name`, given it now if it has none: one past the run's
        highest, and at least `first`, in one transaction (no two names of a run ever get one index, even
        from two schedulers of the run at once). Every scheduler of the run, on any host, reads the same.

        Raises:
            StaleEpoch: the name had no index yet and this store's epoch is no longer the run's (nothing written).
        """

    @abstractmethod
    def agent_names(self, run: int) -> dict[int, str]:
        """Executor index -> name of each agent the run's schedulers numbered ({} for a journal from before)."""

    def _stale(self, run: int, now_epoch: int | None, held: int) -> StaleEpoch:
        """The refusal of a write carrying epoch `held` when the run is at `now_epoch`."""
        return StaleEpoch(f"fenced: run {run} of {self.where} is at epoch {now_epoch}, this writer holds {held}",
                          by_epoch=now_epoch or 0)
