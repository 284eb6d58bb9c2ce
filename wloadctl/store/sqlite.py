"""The embedded journal: SQLite in WAL mode, one file in the state directory (the only module importing sqlite3)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from itertools import count, repeat
from pathlib import Path

from wloadctl.errors import NoJournalYet, StoreError, StoreFull
from wloadctl.paths import read_journal_note
from wloadctl.store.audit import GENESIS, ActionRow, action_hash, chained
from wloadctl.store.base import DB_NAME, JournalLoss, RunRow, Store
from wloadctl.store.sqlschema import AUDIT_TRIGGERS, SCHEMA, SCHEMA_VERSION
from wloadctl.turns import index_blocks, pack_turn, unpack_jobs, unpack_turn

JOURNAL_PATH_BYTES = 504
"""The longest path of journal.db SQLite opens (its file names, with -journal after, stay within 512 bytes)."""
EMPTY_JOURNAL_STALE = 60.0
"""Seconds after which a journal file still without tables is no run's first moment but a file left empty."""


SQLITE_FULL = 13
"""SQLite's primary result code for a write refused for want of disk space."""


SPAN_SHIFT = 14
"""Turn-index keys begin with the span of their turn, its first transition's number >> SPAN_SHIFT (16,384)."""
WAL_CHECKPOINT = 8192
"""Pages (of 4 KiB) the write-ahead log of a writer grows to before it is checkpointed into the database."""
WAL_SHARE_OF_FREE = 4
"""On a small disk the log is checkpointed sooner: at most this fraction (1/N) of the space free at open."""
WAL_CHECKPOINT_MIN = 64
"""Pages the log may always grow to before a checkpoint, however small the disk."""
CHECKPOINT_WAIT_MS = 100
"""Milliseconds a checkpoint after a full disk waits for readers (the loop must not stall on a console)."""


def _starter_gone(d: Path) -> int | None:
    """The pid of the scheduler that last took state directory d's lock (scheduler.lock names it) when that
    process is gone (None: alive, or none named): an empty journal it left is being made by no one."""
    from wloadctl.procs.health import pid_alive

    try:
        pid = int((d / "scheduler.lock").read_text(encoding="utf-8").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return None if pid_alive(pid) else pid


def _runs_recorded_by_executors(d: Path) -> list[str]:
    """The runs whose executors journaled a job's start in state directory d, sorted (one whose executors
    started nothing may be a start cut short)."""
    from wloadctl.ipc.protocol import RES_STARTED
    from wloadctl.procs.localpool import read_results, result_journals, runs_with_result_journals

    return [r for r in sorted(runs_with_result_journals(d))
            if any(rec.kind == RES_STARTED for _ex, _pid, p in result_journals(d, r) for rec in read_results(p))]


def write_error(e: sqlite3.Error, path: Path) -> StoreError:
    """The StoreError of a failed write: StoreFull when the disk is full (the write may be retried).

    A scheduler's loop retries a StoreFull by itself (and says so); one that reaches the command line
    ended the command: its hint says how to go on.

    Args:
        e: what SQLite raised.
        path: the journal file.
    """
    code = getattr(e, "sqlite_errorcode", 0) or 0
    if code & 0xFF == SQLITE_FULL or "disk is full" in str(e):
        return StoreFull(f"could not write the journal {path}: no space left on device in {path.parent}",
                         hint="free space there and run the command again (a run stopped so goes on with"
                              f" `wloadctl resume --state-dir {path.parent}`)")
    return StoreError(f"could not write the journal {path}: {e}")


def full_at_start(path: Path) -> StoreFull:
    """A full disk before the run has begun: nothing retries then, the command ends."""
    return StoreFull(f"could not write the journal {path}: no space left on device in {path.parent}",
                     hint="free space there and start again: nothing of the run has started")


def _checkpoint_pages(d: Path) -> int:
    """The write-ahead log's checkpoint threshold in a directory: WAL_CHECKPOINT, less on a small disk.

    A log let grow to WAL_CHECKPOINT pages (32 MiB) on a disk of a few MiB fills it by itself, and a
    checkpoint then has no room to copy it out: the journal could never be written again.
    """
    try:
        st = os.statvfs(d)
    except OSError:
        return WAL_CHECKPOINT
    return max(WAL_CHECKPOINT_MIN, min(WAL_CHECKPOINT, st.f_bavail * st.f_frsize // 4096 // WAL_SHARE_OF_FREE))


def _in_use(path: Path) -> bool:
    """Whether a journal has a write-ahead log with frames, or its index (-shm), beside it: a writer is or was
    there (a live one keeps both; the last to close cleanly removes them) and its last commits may be there."""
    try:
        if path.with_name(path.name + "-wal").stat().st_size:
            return True
    except FileNotFoundError:
        pass
    return path.with_name(path.name + "-shm").exists()


def _open_readonly(path: Path) -> sqlite3.Connection:
    """A reading connection to a journal, also where its directory cannot be written (a read-only mount).

    A journal in WAL mode is opened with a -shm file beside it, which SQLite cannot make in a directory it
    cannot write ("unable to open database file"). Such a journal with no -wal frames nor -shm there is at
    rest (closed by its last writer), and is read with immutable=1 (no locks, no -shm). A journal a writer
    may hold is never read so: SQLite would not see its changes, or could see a page half way through a
    checkpoint; it is named as readable from a writable copy.
    """
    def connect(flags: str) -> sqlite3.Connection:
        conn = sqlite3.connect(f"file:{path}?{flags}", uri=True, timeout=10, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except BaseException:
            conn.close()
            raise
        return conn

    try:
        return connect("mode=ro")
    except sqlite3.OperationalError:
        if os.access(path.parent, os.W_OK):
            raise
    if _in_use(path):
        raise StoreError(f"run journal {path} cannot be read where it is: this user cannot write its directory,"
                         " and its write-ahead log (-wal, -shm) is read only with the writes SQLite makes there",
                         hint="copy the state directory somewhere writable and read the copy")
    return connect("mode=ro&immutable=1")


def _rollback(c: sqlite3.Connection) -> None:
    """End a failed write's transaction, if SQLite has not ended it already (it rolls back by itself when the disk
    is full: a ROLLBACK then would raise "no transaction is active" over the error that matters)."""
    if c.in_transaction:
        c.execute("ROLLBACK")


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring an older journal's schema up to SCHEMA_VERSION, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    if version < 2:
        conn.execute("ALTER TABLE runs ADD COLUMN plan_blob TEXT")
    if version < 3:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS expansions (seq INTEGER PRIMARY KEY, run INTEGER NOT NULL,"
            " job_id TEXT NOT NULL, first_idx INTEGER NOT NULL, items TEXT NOT NULL)"
        )
    if version < 4:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS turns (seq INTEGER PRIMARY KEY, run INTEGER NOT NULL, n INTEGER NOT NULL,"
            " recs BLOB NOT NULL, causes TEXT NOT NULL, reasons TEXT NOT NULL)"
        )
        conn.execute("CREATE INDEX IF NOT EXISTS turns_run ON turns (run, seq)")
        # A run's row is rewritten at every lease renewal: the plan (megabytes) moves out of it.
        conn.execute("CREATE TABLE IF NOT EXISTS plans (run INTEGER PRIMARY KEY, text TEXT NOT NULL, blob TEXT)")
        conn.execute("INSERT OR IGNORE INTO plans (run, text, blob) SELECT id, plan_text, plan_blob FROM runs")
        conn.execute("UPDATE runs SET plan_text = '', plan_blob = NULL")
        # Job rows already hold where the old transitions led; the old transitions stay
        # readable (history) in their own table, and new turns number on after them.
    if version < 5:
        # The current states and the turn index; a run's are made at its next write (Store._backfill).
        conn.execute("CREATE TABLE IF NOT EXISTS now_runs (run INTEGER PRIMARY KEY, jobs INTEGER NOT NULL)")
        conn.execute("CREATE TABLE IF NOT EXISTS now_states (run INTEGER NOT NULL, block INTEGER NOT NULL,"
                     " states BLOB NOT NULL, PRIMARY KEY (run, block)) WITHOUT ROWID")
        conn.execute("CREATE TABLE IF NOT EXISTS turn_jobs (run INTEGER NOT NULL, block INTEGER NOT NULL,"
                     " seq INTEGER NOT NULL, PRIMARY KEY (run, block, seq)) WITHOUT ROWID")
        conn.execute("CREATE TABLE IF NOT EXISTS took (run INTEGER NOT NULL, seq INTEGER NOT NULL, blob BLOB NOT NULL,"
                     " PRIMARY KEY (run, seq)) WITHOUT ROWID")
    if version < 6:
        # Actions already written stay unchained (no hash); new ones chain from there.
        have = {row[1] for row in conn.execute("PRAGMA table_info(actions)")}
        for col in ("prev_hash", "hash"):
            if col not in have:
                conn.execute(f"ALTER TABLE actions ADD COLUMN {col} TEXT NOT NULL DEFAULT ''")
        for stmt in AUDIT_TRIGGERS:
            conn.execute(stmt)
    if version < 7:
        # The flat rows; a run's are made at its next write (CurrentState._flat_copy).
        if "flat_seq" not in {row[1] for row in conn.execute("PRAGMA table_info(now_runs)")}:
            conn.execute("ALTER TABLE now_runs ADD COLUMN flat_seq INTEGER")
        # A rowid table: a block's 1,536 bytes fit in its page, where WITHOUT ROWID would give each one
        # an overflow page of its own (about 1,000 bytes fit there).
        conn.execute("CREATE TABLE IF NOT EXISTS now_rows (run INTEGER NOT NULL, block INTEGER NOT NULL,"
                     " data BLOB NOT NULL, PRIMARY KEY (run, block))")
    if version < 8:
        # What a run's scheduler works out of its plan (store/facts.py); a run gets them at its next start.
        conn.execute("CREATE TABLE IF NOT EXISTS fact_runs (run INTEGER PRIMARY KEY, meta TEXT NOT NULL)")
        conn.execute("CREATE TABLE IF NOT EXISTS job_facts (run INTEGER NOT NULL, block INTEGER NOT NULL,"
                     " data BLOB NOT NULL, PRIMARY KEY (run, block))")
    if version < 9:
        # The current states move to a rowid table too: a block's 1,024 bytes overflowed a WITHOUT ROWID
        # page, and each turn rewrote most blocks (an overflow page and the freelist's pages with each).
        conn.execute("CREATE TABLE now_states_v9 (run INTEGER NOT NULL, block INTEGER NOT NULL,"
                     " states BLOB NOT NULL, PRIMARY KEY (run, block))")
        conn.execute("INSERT INTO now_states_v9 (run, block, states) SELECT run, block, states FROM now_states")
        conn.execute("DROP TABLE now_states")
        conn.execute("ALTER TABLE now_states_v9 RENAME TO now_states")
        # The turn index is keyed by span first: a turn's keys go into the few pages of the latest span,
        # not one page in each of its blocks' runs of keys across the whole index.
        conn.execute("CREATE TABLE turn_jobs_v9 (run INTEGER NOT NULL, span INTEGER NOT NULL, block INTEGER NOT NULL,"
                     " seq INTEGER NOT NULL, PRIMARY KEY (run, span, block, seq)) WITHOUT ROWID")
        conn.execute(f"INSERT INTO turn_jobs_v9 (run, span, block, seq) SELECT run, seq >> {SPAN_SHIFT}, block, seq"
                     " FROM turn_jobs")
        conn.execute("DROP TABLE turn_jobs")
        conn.execute("ALTER TABLE turn_jobs_v9 RENAME TO turn_jobs")
    if version < 10:
        # The numbering of a run's agents moves into the journal (it was a file of the scheduler's state
        # directory, agents.json, which readers still fall back to for the runs numbered there before).
        conn.execute("CREATE TABLE IF NOT EXISTS agents (run INTEGER NOT NULL, idx INTEGER NOT NULL,"
                     " name TEXT NOT NULL, PRIMARY KEY (run, idx), UNIQUE (run, name)) WITHOUT ROWID")
    if version < 11:
        # A job's actions (history JOB, the console's detail) without a walk of every action of the run: a glob
        # verb journals a row per job it names, thousands at once.
        conn.execute("CREATE INDEX IF NOT EXISTS actions_job ON actions (run, job, seq)")
    if version < 12:
        # Current states are saved late, as the flat rows are (store/current.py); NULL: each turn saved them.
        if "states_seq" not in {row[1] for row in conn.execute("PRAGMA table_info(now_runs)")}:
            conn.execute("ALTER TABLE now_runs ADD COLUMN states_seq INTEGER")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    conn.execute("COMMIT")


class SqliteStore(Store):
    """The journal of the runs in one state directory."""

    def __init__(self, path: Path, conn: sqlite3.Connection, *, readonly: bool) -> None:
        super().__init__()
        self.path = path
        """The database file."""
        self.conn = conn
        """The open connection (owned by this object)."""
        self.readonly = readonly
        """Opened for reading only."""
        self.auto_sync = False
        """Whether turns choose their durability (see open's `sync`)."""
        self._relaxed = False
        """The connection commits with synchronous=NORMAL now (auto_sync, after a turn that allowed it)."""
        self._has_turns = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'turns'").fetchone() is not None
        self._has_now = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'now_runs'").fetchone() is not None
        self._has_flat = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'now_rows'").fetchone() is not None
        self._has_states_seq = self._has_now and any(
            row[1] == "states_seq" for row in conn.execute("PRAGMA table_info(now_runs)"))
        """The current states are saved late (schema 12; a reader of an older journal finds them saved each turn)."""
        self._has_facts = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'fact_runs'").fetchone() is not None
        self._by_span = any(row[1] == "span" for row in conn.execute("PRAGMA table_info(turn_jobs)"))
        """The turn index is keyed by span (schema 9; a reader of an older journal finds it keyed by block)."""

    @classmethod
    def open(cls, state_dir: str | Path | None, *, create: bool = True, readonly: bool = False,
             sync: str = "FULL", journal: str | None = None, say: object = None) -> SqliteStore:
        """Open (or create) the journal of a state directory (`journal` and `say` serve server journals only).

        Args:
            state_dir: the run's state directory.
            create: create the directory and database if missing.
            readonly: open for reading (status, logs); never writes.
            sync: durability of commits. FULL: every commit survives power loss. NORMAL: a crash of the
                process. AUTO: loop turns that touch a job declared not idempotent, and everything else
                written (runs, operator actions, alerts), are FULL; other turns NORMAL, so after a power
                loss the last moments of idempotent work may be done again, which is what they allow.

        Raises:
            StoreError: missing (when not creating), unreadable, corrupt or truncated database.
        """
        if state_dir is None:
            raise StoreError("no state directory given for the journal", hint="give --state-dir DIR")
        d = Path(state_dir)
        path = d / DB_NAME
        size = len(os.fsencode(path.absolute()))
        if size > JOURNAL_PATH_BYTES:
            raise StoreError(f"state directory {d} is too deep for its run journal: the journal's path would be "
                             f"{size} bytes, SQLite takes {JOURNAL_PATH_BYTES}",
                             hint="give --state-dir a shorter path")
        if not path.exists():
            if not create:
                url = read_journal_note(d)
                if url is not None:
                    raise NoJournalYet(f"no run journal in {d}: its runs are journaled in {url}",
                                       hint=f"add --journal {url} (or set WLOADCTL_JOURNAL)")
                raise NoJournalYet(
                    f"no run journal in {d}", hint=f"start a run there with `wloadctl run PLAN --state-dir {d}`"
                )
            d.mkdir(parents=True, exist_ok=True)
        elif path.stat().st_size and path.stat().st_size < 100:
            raise StoreError(
                f"run journal {path} is truncated ({path.stat().st_size} bytes)",
                hint="restore it from a backup or move it away to start afresh",
            )
        conn: sqlite3.Connection | None = None
        try:
            if readonly:
                conn = _open_readonly(path)
            else:
                conn = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.create_function("wl_action_hash", 8, action_hash, deterministic=True)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if not readonly:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {'FULL' if sync == 'AUTO' else sync}")
                # A loop turn rewrites a few hundred of the same pages (current states, turn index): a checkpoint
                # every WAL_CHECKPOINT pages rather than SQLite's 1,000 copies each such page back, and syncs
                # the files, once per several turns instead of about once per turn.
                conn.execute(f"PRAGMA wal_autocheckpoint = {_checkpoint_pages(d)}")
                if version == 0:
                    # In one transaction: a reader opening the journal meanwhile finds it empty (no run yet) or
                    # whole, never tables without a schema version; a second writer waits, then finds it made.
                    try:
                        conn.executescript(f"BEGIN IMMEDIATE;\n{SCHEMA}\nPRAGMA user_version = {SCHEMA_VERSION};\n"
                                           "COMMIT;")
                    except BaseException:
                        _rollback(conn)
                        raise
                    version = SCHEMA_VERSION
                elif version < SCHEMA_VERSION:
                    _migrate(conn, version)
                    version = SCHEMA_VERSION
            if version == 0:
                # A writer has made the file and not yet its tables (its first moment), or the file is empty.
                with contextlib.suppress(OSError):
                    if time.time() - path.stat().st_mtime > EMPTY_JOURNAL_STALE:
                        raise StoreError(f"run journal {path} is empty and has been for over "
                                         f"{EMPTY_JOURNAL_STALE:.0f}s: no run is starting there",
                                         hint="move it away to start afresh there")
                gone = _starter_gone(d)
                lost = _runs_recorded_by_executors(d) if gone is not None else []
                if lost:
                    # Not a start cut short: a journal that lost its runs, which `run` refuses to do again.
                    raise StoreError(f"run journal {path} is empty, but {d} holds what the executors of run {lost[0]}"
                                     " recorded: the journal lost its records (its write-ahead log journal.db-wal "
                                     "removed or damaged?)",
                                     hint="restore journal.db and journal.db-wal from a backup; to start afresh "
                                          f"here on purpose, move {d / 'executors'} away")
                if gone is not None:
                    raise StoreError(f"run journal {path} is empty: the scheduler that was making it (pid {gone}) is "
                                     "gone, so no run is starting there",
                                     hint=f"`wloadctl run PLAN --state-dir {d}` starts a run there afresh")
                raise NoJournalYet(f"no run recorded in {d} yet: its journal is being made",
                                   hint="a run is starting there; try again in a moment")
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"run journal {path} has schema {version}, newer than this wloadctl ({SCHEMA_VERSION})",
                    hint="upgrade wloadctl",
                )
            # The full check reads the whole file: writers (a scheduler starting or resuming) pay it
            # once; readers (status, the console) rely on SQLite's own errors, reported as StoreError.
            if not readonly and path.exists() and path.stat().st_size:
                ok = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
                if ok != "ok":
                    raise StoreError(
                        f"run journal {path} is corrupt: {' '.join(str(ok).split())}",
                        hint="restore it from a backup or move it away to start afresh",
                    )
            conn.execute("SELECT count(*) FROM runs").fetchone()
        except BaseException as e:
            if conn is not None:
                conn.close()
            if not isinstance(e, sqlite3.DatabaseError):
                raise
            if isinstance(write_error(e, path), StoreFull):
                raise full_at_start(path) from None
            write = 0 if readonly else os.W_OK
            if "readonly" in str(e) or not os.access(d, os.R_OK | os.X_OK | write) \
                    or (path.exists() and not os.access(path, os.R_OK | write)):
                # The file is whole: this user may not read it, or write where a writer must.
                raise StoreError(
                    f"run journal {path} cannot be {'read' if readonly else 'written'} by this user: {e}",
                    hint="run as the user that owns the state directory, or give this one access to it",
                ) from None
            raise StoreError(
                f"run journal {path} is unreadable or corrupt: {e}",
                hint="restore it from a backup or move it away; wloadctl never starts afresh over it",
            ) from None
        store = cls(path, conn, readonly=readonly)
        store.auto_sync = sync == "AUTO"
        return store

    @property
    def where(self) -> str:
        """The database file."""
        return str(self.path)

    @property
    def loss(self) -> JournalLoss:
        """A file journal loses committed turns with its write-ahead log."""
        return JournalLoss(cause="its write-ahead log journal.db-wal removed or damaged?",
                           last_turns="a power failure, or a damaged journal.db-wal?",
                           restore="restore journal.db and journal.db-wal from a backup")

    def make_room(self) -> None:
        """Copy the write-ahead log into the database and truncate it to nothing (a TRUNCATE checkpoint).

        The log holds every page a run rewrote since the last checkpoint, several times over: on a
        small disk it is most of the space there. A checkpoint needs room only for the database's
        pages, and gives the log's back; a retried write then fits where it did not. It is tried
        without waiting long for readers (a console's read) and fails harmlessly on a disk still full.
        """
        if self.readonly or self.conn.in_transaction:
            return
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.DatabaseError:
            pass
        finally:
            self.conn.execute("PRAGMA busy_timeout = 10000")

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    # -- runs -------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        plan_name: str,
        plan_path: str,
        plan_digest: str,
        plan_text: str,
        job_ids: Iterable[str],
        business_date: str,
        now: float,
        settings: str = "{}",
    ) -> RunRow:
        """Record a new run and its jobs (all WAITING) in one transaction."""
        self._durable()
        c = self.conn
        try:
            c.execute("BEGIN IMMEDIATE")
            cur = c.execute(
                "INSERT INTO runs (run_id, plan_name, plan_path, plan_digest, plan_text, business_date, started,"
                " status, settings)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?)",
                (run_id, plan_name, plan_path, plan_digest, "", business_date, now, settings),
            )
            rid = int(cur.lastrowid or 0)  # (never 0: the insert made a row)
            # The plan lives in its own row: the run's row is rewritten at every lease renewal.
            c.execute("INSERT INTO plans (run, text) VALUES (?, ?)", (rid, plan_text))
            ids = list(job_ids)
            _insert_jobs(c, rid, ids)
            c.execute("INSERT INTO now_runs (run, jobs, flat_seq, states_seq) VALUES (?, ?, 0, 0)", (rid, len(ids)))
            c.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            _rollback(c)
            if isinstance(write_error(e, self.path), StoreFull):
                raise full_at_start(self.path) from None
            raise StoreError(f"could not record the run in {self.path}: {e}") from None
        row = self.get_run(run_id)
        assert row is not None
        return row

    def _run(self, sql: str, args: Sequence[object]) -> RunRow | None:
        r = self.conn.execute(
            "SELECT id, run_id, plan_name, plan_path, plan_digest, business_date, started, ended, status,"
            " epoch, scheduler_pid, lease_until, settings FROM runs " + sql,
            args,
        ).fetchone()
        return RunRow(*r) if r else None

    def get_run(self, run_id: str) -> RunRow | None:
        """The run with this public id."""
        return self._run("WHERE run_id = ?", (run_id,))

    def latest_run(self) -> RunRow | None:
        """The most recent run of the state directory."""
        return self._run("ORDER BY id DESC LIMIT 1", ())

    def runs(self) -> list[RunRow]:
        """Every run of the state directory, oldest first."""
        return [RunRow(*r) for r in self.conn.execute(
            "SELECT id, run_id, plan_name, plan_path, plan_digest, business_date, started, ended, status,"
            " epoch, scheduler_pid, lease_until, settings FROM runs ORDER BY id")]

    def plan_text(self, run: int) -> str:
        """The plan text as loaded at the run's start."""
        row = self.conn.execute("SELECT text FROM plans WHERE run = ?", (run,)).fetchone() if self._has_turns \
            else None
        if row is None:
            row = self.conn.execute("SELECT plan_text FROM runs WHERE id = ?", (run,)).fetchone()
        text = row[0]
        return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)

    def plan_blob(self, run: int) -> str | None:
        """The plan as loaded, in its compact encoded form (None for journals written before it existed)."""
        row = self.conn.execute("SELECT blob FROM plans WHERE run = ?", (run,)).fetchone() if self._has_turns \
            else None
        if row is None:
            row = self.conn.execute("SELECT plan_blob FROM runs WHERE id = ?", (run,)).fetchone()
        return row[0] if row else None

    def set_plan_blob(self, run: int, blob: str) -> None:
        """Keep the plan's encoded form beside its text."""
        self.conn.execute("UPDATE plans SET blob = ? WHERE run = ?", (blob, run))

    def has_plan_copy(self, run: int) -> bool:
        """See Store.has_plan_copy (journals of older versions kept the text in the run's row)."""
        if not self._has_turns:
            return True
        row = self.conn.execute("SELECT blob IS NOT NULL OR text <> '' FROM plans WHERE run = ?", (run,)).fetchone()
        return bool(row and row[0])

    def keep_plan_file(self, run: int, path: str, digest: str) -> bool:
        """See Store.keep_plan_file. The file goes into its row a piece at a time (a million-job plan's text is
        150 MB: held whole, with SQLite's copies of it, it was the scheduler's peak memory); the row then
        holds the text's UTF-8 bytes, which plan_text decodes."""
        size = os.path.getsize(path)
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("UPDATE plans SET text = zeroblob(?) WHERE run = ?", (size, run))
            h = hashlib.sha256()
            with open(path, "rb") as f, c.blobopen("plans", "text", run) as blob:
                while (piece := f.read(1 << 20)) and blob.tell() + len(piece) <= size:  # (a file that grew: not it)
                    blob.write(piece)
                    h.update(piece)
                whole = not piece and blob.tell() == size
            if not whole or h.hexdigest() != digest:
                c.execute("ROLLBACK")
                return False
            c.execute("COMMIT")
            return True
        except sqlite3.DatabaseError as e:
            _rollback(c)
            if isinstance(write_error(e, self.path), StoreFull):
                raise write_error(e, self.path) from None
            raise StoreError(f"could not keep the plan's text in {self.path}: {e}") from None
        except BaseException:
            _rollback(c)
            raise

    def replace_plan(self, run: int, digest: str, text: str, path: str, new_job_ids: Sequence[tuple[int, str]]) -> None:
        """Accept a changed plan on resume: store its text and add rows for its new jobs."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.execute(
            "UPDATE runs SET plan_digest = ?, plan_path = ? WHERE id = ?", (digest, path, run)
        )
        c.execute("UPDATE plans SET text = ?, blob = NULL WHERE run = ?", (text, run))
        c.executemany("INSERT INTO jobs (run, idx, job_id) VALUES (?, ?, ?)", ((run, i, j) for i, j in new_job_ids))
        if new_job_ids:
            top = max(i for i, _ in new_job_ids) + 1
            c.execute("UPDATE now_runs SET jobs = max(jobs, ?) WHERE run = ?", (top, run))
        c.execute("COMMIT")

    def begin_epoch(self, run: int, pid: int, lease: float, expect_epoch: int | None = None) -> int:
        """Take the run for a scheduler: increment its epoch (one writer wins) and return the new epoch.

        Raises:
            StoreError: `expect_epoch` was given and another scheduler moved the epoch first.
        """
        self._durable()
        c = self.conn
        try:
            c.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise StoreError(
                f"the journal {self.path} stays locked: {e}", hint="another scheduler holds it (maybe frozen)"
            ) from None
        try:
            cur = c.execute("SELECT epoch FROM runs WHERE id = ?", (run,)).fetchone()[0]
            if expect_epoch is not None and cur != expect_epoch:
                raise StoreError(f"another scheduler took the run first (epoch {cur}, expected {expect_epoch})")
            c.execute(
                "UPDATE runs SET epoch = ?, scheduler_pid = ?, lease_until = ?, status = 'running', ended = NULL"
                " WHERE id = ?",
                (cur + 1, pid, lease, run),
            )
            c.execute("COMMIT")
        except BaseException:
            _rollback(c)
            raise
        self.epoch = int(cur) + 1
        return self.epoch

    def renew_lease(self, run: int, epoch: int, lease: float) -> bool:
        """Extend the lease of the scheduler holding `epoch`; False if it was fenced off.

        Raises:
            StoreFull: no space left for the write (the lease stays as it was).
            StoreError: another failed write.
        """
        try:
            cur = self.conn.execute("UPDATE runs SET lease_until = ? WHERE id = ? AND epoch = ?",
                                    (lease, run, epoch))
        except sqlite3.DatabaseError as e:
            raise write_error(e, self.path) from None
        return cur.rowcount == 1

    def set_status(self, run: int, status: str, ended: float | None) -> None:
        """Record the run's status (and end time), and save the flat rows this writer changed since it
        last did (the run's end is when the console reads them: see store/current.py).

        Raises:
            StoreFull: no space left for the write.
            StoreError: another failed write, or a newer epoch holds the run.
        """
        self._durable()
        now, rows, seq = self._unsaved(run)
        c = self.conn
        try:
            c.execute("BEGIN IMMEDIATE")
            if self.epoch is None:
                changed = c.execute("UPDATE runs SET status = ?, ended = ? WHERE id = ?", (status, ended, run)).rowcount
            else:
                changed = c.execute("UPDATE runs SET status = ?, ended = ? WHERE id = ? AND epoch = ?",
                                    (status, ended, run, self.epoch)).rowcount
            if now and changed == 1:
                self._save_states(run, now, seq)
            if rows and changed == 1:
                self._save_flat(run, rows, seq)
            c.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            self._forget_current(run)
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise write_error(e, self.path) from None
        if changed != 1 and self.epoch is not None:
            self._forget_current(run)
            raise self._stale(run, self._epoch_of(run), self.epoch)

    def _epoch_of(self, run: int) -> int | None:
        row = self.conn.execute("SELECT epoch FROM runs WHERE id = ?", (run,)).fetchone()
        return None if row is None else int(row[0])

    def _guarded_insert(self, run: int, sql: str, args: tuple) -> None:
        """INSERT ... SELECT `args` only while this store's epoch is the run's (one statement)."""
        if self.epoch is None:
            self.conn.execute(f"{sql} VALUES ({', '.join('?' * len(args))})", args)
            return
        cur = self.conn.execute(f"{sql} SELECT {', '.join('?' * len(args))}"
                                " WHERE EXISTS (SELECT 1 FROM runs WHERE id = ? AND epoch = ?)",
                                (*args, run, self.epoch))
        if cur.rowcount != 1:
            raise self._stale(run, self._epoch_of(run), self.epoch)

    # -- jobs -------------------------------------------------------------------------

    def expansions(self, run: int) -> list[tuple[str, tuple[str, ...]]]:
        """The run's `for_each` loops over output expanded so far, in order: (looped job id, items)."""
        try:
            rows = list(self.conn.execute("SELECT job_id, items FROM expansions WHERE run = ? ORDER BY seq", (run,)))
        except sqlite3.OperationalError:
            return []  # a journal from before loops over output, opened read-only
        return [(j, tuple(json.loads(items))) for j, items in rows]

    def job_ids(self, run: int) -> list[str]:
        """Job ids by index."""
        return [r[0] for r in self.conn.execute("SELECT job_id FROM jobs WHERE run = ? ORDER BY idx", (run,))]

    def _job_index(self, run: int, job_id: str) -> int | None:
        found = self.conn.execute("SELECT idx FROM jobs WHERE run = ? AND job_id = ?", (run, job_id)).fetchone()
        return None if found is None else int(found[0])

    def _stored_rows(self, run: int) -> tuple[int, Iterable[tuple]]:
        # Journals written before turns, and jobs an accepted plan change added, keep rows.
        n = self.conn.execute("SELECT count(*) FROM jobs WHERE run = ?", (run,)).fetchone()[0]
        return n, self.conn.execute(
            "SELECT idx, state, attempt, executor, exit_code, started, ended, reason FROM jobs"
            " WHERE run = ? AND (state != 0 OR attempt != 0)", (run,))

    def _turns(self, run: int, after: int) -> Iterator[list[tuple]]:
        """The records of each turn of a run with a transition after `after`, oldest first."""
        if not self._has_turns:
            return  # a journal no scheduler of this version has written to (read-only)
        for first, recs, causes, reasons in self.conn.execute(
                "SELECT seq, recs, causes, reasons FROM turns WHERE run = ? AND seq + n > ? ORDER BY seq",
                (run, after)):
            yield [r for r in unpack_turn(first, recs, causes, reasons) if r[0] > after]

    def _legacy_transitions(self, run: int, idx: int | None, after: int, limit: int) -> list[tuple]:
        if idx is not None:
            return list(self.conn.execute(
                "SELECT seq, idx, from_state, to_state, attempt, ts, executor, exit_code, reason, cause"
                " FROM transitions WHERE run = ? AND idx = ? ORDER BY seq", (run, idx)))
        # `+run` keeps SQLite on the rowid range (seq) instead of the (run, idx) index and a sort.
        return list(self.conn.execute(
            "SELECT seq, idx, from_state, to_state, attempt, ts, executor, exit_code, reason, cause"
            " FROM transitions WHERE seq > ? AND +run = ? ORDER BY seq LIMIT ?", (after, run, limit)))

    def last_seq(self, run: int) -> int:
        """Sequence number of the run's latest transition (0 if none)."""
        # Turns number their transitions in order without overlap: the last turn ends with the latest (one
        # step down the index, where max() over every turn of a million-job run reads thousands of rows).
        row = self.conn.execute("SELECT seq + n - 1 FROM turns WHERE run = ? ORDER BY seq DESC LIMIT 1",
                                (run,)).fetchone() if self._has_turns else (None,)
        row = row or (None,)
        if row[0] is not None:
            return int(row[0])
        row = self.conn.execute("SELECT max(seq) FROM transitions WHERE +run = ?", (run,)).fetchone()
        return int(row[0] or 0)

    def write_turn(self, run: int, transitions: Sequence[tuple], epoch: int | None = None,
                   added: Sequence[tuple[str, int, Sequence[str], Sequence[str]]] = (), durable: bool = True,
                   actions: Sequence[ActionRow] = ()) -> None:
        """Journal one loop turn's transitions and the jobs' resulting rows, in one transaction.

        Each transition is (job, from, to, attempt, ts, executor, exit_code, reason, cause).
        `added` holds the `for_each` loops expanded in the turn: (looped job id, index of its first
        instance, items, instance ids); their job rows are written before the transitions that name them.
        With auto_sync, `durable=False` lets the commit skip its fsync (it still survives a process crash;
        the next durable commit makes it durable too, the log being written in order). `actions`, the
        audit rows of the verbs that made these transitions, go in the same transaction (always durable).

        Raises:
            StoreError: the write failed, or `epoch` is given and the run moved to a newer epoch (fenced).
        """
        if not transitions and not added:
            if actions:
                self.record_actions(run, actions)
            return
        if actions:
            durable = True
        if epoch is None:
            epoch = self.epoch
        recs, causes, reasons = pack_turn(transitions)
        blocks, keys, states_at = self._current_changes(run, transitions, recs)
        rows, saved_at = self._flat_changes(run, recs, len(transitions), keys)
        last = 0
        took = self._durations(run, transitions)
        c = self.conn
        if self.auto_sync and durable == self._relaxed:
            self._set_relaxed(not durable)
        try:
            c.execute("BEGIN IMMEDIATE")
            if epoch is not None:
                cur = c.execute("SELECT epoch FROM runs WHERE id = ?", (run,)).fetchone()[0]
                if cur != epoch:
                    c.execute("ROLLBACK")
                    raise self._stale(run, cur, epoch)
            for parent, first, items, ids in added:
                c.execute("INSERT INTO expansions (run, job_id, first_idx, items) VALUES (?, ?, ?, ?)",
                          (run, parent, first, json.dumps(list(items))))
                c.executemany("INSERT INTO jobs (run, idx, job_id) VALUES (?, ?, ?)",
                              ((run, first + k, j) for k, j in enumerate(ids)))
                c.execute("UPDATE now_runs SET jobs = max(jobs, ?) WHERE run = ?", (first + len(ids), run))
            if transitions:
                # Turns number on from the last transition of any run in this journal.
                top = c.execute("SELECT seq + n FROM turns ORDER BY seq DESC LIMIT 1").fetchone()
                if top is None:
                    top = c.execute("SELECT coalesce(max(seq), 0) + 1 FROM transitions").fetchone()
                c.execute("INSERT INTO turns (seq, run, n, recs, causes, reasons) VALUES (?, ?, ?, ?, ?, ?)",
                          (top[0], run, len(transitions), recs, causes, reasons))
                span = top[0] >> SPAN_SHIFT
                c.executemany("INSERT OR IGNORE INTO turn_jobs (run, span, block, seq) VALUES (?, ?, ?, ?)",
                              [(run, span, k, top[0]) for k in keys])
                last = top[0] + len(transitions) - 1
                self._save_states(run, blocks, last if states_at is None else states_at)
                if rows:
                    self._save_flat(run, rows, last if saved_at is None else saved_at)
                if took:
                    c.execute("INSERT INTO took (run, seq, blob) VALUES (?, ?, ?)", (run, top[0], took))
            if actions:
                self._append_actions(run, actions)
            c.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            self._forget_current(run)
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise write_error(e, self.path) from None
        except BaseException:
            self._forget_current(run)
            raise
        self._flat_written(run, last)

    # -- the current state and the turn index -------------------------------------------

    def _kept_jobs(self, run: int) -> int | None:
        if not self._has_now:
            return None  # a journal no scheduler of this version has written to (read-only)
        row = self.conn.execute("SELECT jobs FROM now_runs WHERE run = ?", (run,)).fetchone()
        return None if row is None else int(row[0])

    def _state_rows(self, run: int) -> Iterable[tuple[int, bytes]]:
        return self.conn.execute("SELECT block, states FROM now_states WHERE run = ?", (run,))

    def _state_blocks(self, run: int, blocks: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        return self.conn.execute(f"SELECT block, states FROM now_states WHERE run = ? AND block IN"
                                 f" ({', '.join('?' * len(blocks))})", (run, *blocks)).fetchall()

    def _flat_blocks_at(self, run: int, blocks: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        return self.conn.execute(f"SELECT block, data FROM now_rows WHERE run = ? AND block IN"
                                 f" ({', '.join('?' * len(blocks))})", (run, *blocks)).fetchall()

    def _states_saved(self, run: int) -> int | None:
        if not self._has_states_seq:
            return None  # saved at each turn (a journal no scheduler of this version has written to)
        row = self.conn.execute("SELECT states_seq FROM now_runs WHERE run = ?", (run,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def _save_states(self, run: int, blocks: dict[int, bytes], seq: int) -> None:
        """Save these blocks of current states, and that every saved block is at transition `seq` (inside the
        caller's transaction)."""
        if blocks:
            # An upsert rewrites a saved block in its page (a REPLACE deletes and inserts it anew).
            self.conn.executemany("INSERT INTO now_states (run, block, states) VALUES (?, ?, ?)"
                                  " ON CONFLICT (run, block) DO UPDATE SET states = excluded.states",
                                  [(run, b, s) for b, s in blocks.items()])
        self.conn.execute("UPDATE now_runs SET states_seq = ? WHERE run = ?", (seq, run))

    def _flat_saved(self, run: int) -> int | None:
        if not self._has_flat:
            return None  # a journal no scheduler of this version has written to (read-only)
        row = self.conn.execute("SELECT flat_seq FROM now_runs WHERE run = ?", (run,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def _turn_records(self, run: int, after: int) -> Iterable[tuple[int, bytes]]:
        if not self._has_turns:
            return []
        return self.conn.execute("SELECT seq, recs FROM turns WHERE run = ? AND seq + n > ? ORDER BY seq", (run, after))

    def _flat_blocks(self, run: int) -> Iterable[tuple[int, bytes]]:
        return self.conn.execute("SELECT block, data FROM now_rows WHERE run = ?", (run,))

    def _save_flat(self, run: int, blocks: dict[int, bytes], seq: int) -> None:
        """Save these blocks of flat rows, standing at transition `seq` (inside the caller's transaction)."""
        # An upsert rewrites a saved block in place (a REPLACE deletes it and inserts it anew).
        self.conn.executemany("INSERT INTO now_rows (run, block, data) VALUES (?, ?, ?)"
                              " ON CONFLICT (run, block) DO UPDATE SET data = excluded.data",
                              [(run, b, d) for b, d in blocks.items()])
        self.conn.execute("UPDATE now_runs SET flat_seq = ? WHERE run = ?", (seq, run))

    def _write_flat(self, run: int, blocks: dict[int, bytes], seq: int) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("DELETE FROM now_rows WHERE run = ?", (run,))
            self._save_flat(run, blocks, seq)
            c.execute("COMMIT")
        except BaseException:
            _rollback(c)
            raise

    def _index_turns(self, run: int, jobs: Sequence[int]) -> Iterator[list[tuple]]:
        keys = index_blocks(jobs)
        if not keys:
            return
        c = self.conn
        where = ""
        if self._by_span:
            lo = c.execute("SELECT min(seq) FROM turns WHERE run = ?", (run,)).fetchone()[0]
            if lo is None:
                return
            hi = c.execute("SELECT max(seq) FROM turns WHERE run = ?", (run,)).fetchone()[0]
            # One look-up per (span, block) of the run: spans are whole numbers, written into the query.
            where = f" AND span IN ({', '.join(map(str, range(lo >> SPAN_SHIFT, (hi >> SPAN_SHIFT) + 1)))})"
        marks = ", ".join("?" * len(keys))
        for first, recs, causes, reasons in c.execute(
                "SELECT seq, recs, causes, reasons FROM turns WHERE seq IN (SELECT seq FROM turn_jobs"
                f" WHERE run = ?{where} AND block IN ({marks})) ORDER BY seq", (run, *keys)):
            yield unpack_jobs(first, recs, causes, reasons, jobs)

    def _took(self, runs: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        if not runs or not self._has_now:
            return []
        return self.conn.execute(f"SELECT run, blob FROM took WHERE run IN ({', '.join('?' * len(runs))})"
                                 " ORDER BY run, seq", tuple(runs))

    def _stored_at(self, run: int, idxs: Sequence[int]) -> dict[int, tuple]:
        out: dict[int, tuple] = {}
        for k in range(0, len(idxs), 500):
            part = idxs[k:k + 500]
            for row in self.conn.execute(
                    "SELECT idx, state, attempt, executor, exit_code, started, ended, reason FROM jobs WHERE run = ?"
                    f" AND idx IN ({', '.join('?' * len(part))}) AND (state != 0 OR attempt != 0)", (run, *part)):
                out[row[0]] = row[1:]
        return out

    def _ids_at(self, run: int, idxs: Sequence[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for k in range(0, len(idxs), 500):
            part = idxs[k:k + 500]
            out.update(self.conn.execute(f"SELECT idx, job_id FROM jobs WHERE run = ? AND idx IN"
                                         f" ({', '.join('?' * len(part))})", (run, *part)).fetchall())
        return out

    def _write_current(self, run: int, jobs: int, blocks: dict[int, bytes], index: Sequence[tuple[int, int]]) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("DELETE FROM now_states WHERE run = ?", (run,))
            c.execute("DELETE FROM turn_jobs WHERE run = ?", (run,))
            c.executemany("INSERT INTO now_states (run, block, states) VALUES (?, ?, ?)",
                          [(run, b, s) for b, s in blocks.items()])
            c.executemany("INSERT OR IGNORE INTO turn_jobs (run, span, block, seq) VALUES (?, ?, ?, ?)",
                          [(run, seq >> SPAN_SHIFT, k, seq) for k, seq in index])
            c.execute("INSERT INTO now_runs (run, jobs) VALUES (?, ?)"
                      " ON CONFLICT (run) DO UPDATE SET jobs = excluded.jobs", (run, jobs))
            c.execute("COMMIT")
        except BaseException:
            _rollback(c)
            raise

    def _write_facts(self, run: int, meta: str, blocks: dict[int, bytes]) -> None:
        self._durable()
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute("DELETE FROM job_facts WHERE run = ?", (run,))
            c.executemany("INSERT INTO job_facts (run, block, data) VALUES (?, ?, ?)",
                          [(run, b, d) for b, d in blocks.items()])
            c.execute("INSERT INTO fact_runs (run, meta) VALUES (?, ?)"
                      " ON CONFLICT (run) DO UPDATE SET meta = excluded.meta", (run, meta))
            c.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            _rollback(c)
            raise write_error(e, self.path) from None

    def _facts_meta(self, run: int) -> str | None:
        if not self._has_facts:
            return None  # a journal no scheduler of this version has written to (read-only)
        row = self.conn.execute("SELECT meta FROM fact_runs WHERE run = ?", (run,)).fetchone()
        return None if row is None else str(row[0])

    def _fact_blocks(self, run: int, blocks: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        return self.conn.execute(f"SELECT block, data FROM job_facts WHERE run = ? AND block IN"
                                 f" ({', '.join('?' * len(blocks))})", (run, *blocks)).fetchall()

    def _set_relaxed(self, relaxed: bool) -> None:
        self.conn.execute(f"PRAGMA synchronous = {'NORMAL' if relaxed else 'FULL'}")
        self._relaxed = relaxed

    def _durable(self) -> None:
        """The next commit survives power loss (auto_sync relaxes only loop turns that allow it)."""
        if self._relaxed:
            self._set_relaxed(False)

    # -- operator actions and alerts ------------------------------------------------------

    def record_actions(self, run: int, rows: Sequence[ActionRow]) -> None:
        """Append operator actions in one durable transaction, chained after the run's last (see Store)."""
        if not rows:
            return
        self._durable()
        c = self.conn
        try:
            # IMMEDIATE: the write lock is taken before the run's last hash is read, so two writers
            # cannot both chain to the same row.
            c.execute("BEGIN IMMEDIATE")
            if self.epoch is not None:
                cur = self._epoch_of(run)
                if cur != self.epoch:
                    c.execute("ROLLBACK")
                    raise self._stale(run, cur, self.epoch)
            self._append_actions(run, rows)
            c.execute("COMMIT")
        except BaseException as e:
            _rollback(c)
            if isinstance(e, sqlite3.DatabaseError):
                raise write_error(e, self.path) from None
            raise

    def _append_actions(self, run: int, rows: Sequence[ActionRow]) -> None:
        """Insert audit rows chained after the run's last (inside the caller's write transaction)."""
        c = self.conn
        last = c.execute("SELECT hash FROM actions WHERE run = ? AND hash != '' ORDER BY seq DESC LIMIT 1",
                         (run,)).fetchone()
        c.executemany("INSERT INTO actions (run, ts, user, verb, job, reason, outcome, applied, prev_hash, hash)"
                      " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      [(run, *r) for r in chained(last[0] if last else GENESIS, rows)])

    def audit_rows(self, run: int | None = None) -> list[tuple]:
        """(seq, run, ts, user, verb, job, reason, outcome, applied, prev_hash, hash) by run and seq."""
        sql = ("SELECT seq, run, ts, user, verb, job, reason, outcome, applied, prev_hash, hash FROM actions"
               + (" WHERE run = ?" if run is not None else "") + " ORDER BY run, seq")
        return list(self.conn.execute(sql, (run,) if run is not None else ()))

    def actions(self, run: int, job: str | None = None) -> list[tuple]:
        """(ts, user, verb, job, reason, outcome, applied) of the run's actions, optionally of one job."""
        sql = "SELECT ts, user, verb, job, reason, outcome, applied FROM actions WHERE run = ?"
        args: tuple = (run,)
        if job is not None:
            sql += " AND job = ?"
            args = (run, job)
        return list(self.conn.execute(sql + " ORDER BY seq", args))

    def record_alert(
        self, run: int, ts: float, job: str, tier: str, state: str, attempts: int, reason: str, log_path: str
    ) -> None:
        """Append one alert (a job failed for good)."""
        self._durable()
        try:
            self._guarded_insert(run, "INSERT INTO alerts (run, ts, job, tier, state, attempts, reason, log_path)",
                                 (run, ts, job, tier, state, attempts, reason, log_path))
        except sqlite3.DatabaseError as e:
            raise write_error(e, self.path) from None

    def alerts(self, run: int) -> list[tuple]:
        """(ts, job, tier, state, attempts, reason, log_path) of the run's alerts."""
        return list(
            self.conn.execute(
                "SELECT ts, job, tier, state, attempts, reason, log_path FROM alerts WHERE run = ? ORDER BY seq", (run,)
            )
        )

    # -- remote agents ----------------------------------------------------------------------

    def agent_index(self, run: int, name: str, first: int) -> int:
        """The executor index of the run's agent `name`, given it now if it has none (see Store.agent_index).

        Raises:
            StaleEpoch: a newer scheduler holds the run and the name had no index.
            StoreError: the write failed.
        """
        self._durable()
        c = self.conn
        try:
            # IMMEDIATE: the write lock is taken before the read, so the highest index cannot move under it.
            c.execute("BEGIN IMMEDIATE")
            row = c.execute("SELECT idx FROM agents WHERE run = ? AND name = ?", (run, name)).fetchone()
            if row is not None:
                c.execute("COMMIT")
                return int(row[0])
            top = c.execute("SELECT max(idx) FROM agents WHERE run = ?", (run,)).fetchone()[0]
            index = first if top is None else max(first, int(top) + 1)
            self._guarded_insert(run, "INSERT INTO agents (run, idx, name)", (run, index, name))
            c.execute("COMMIT")
        except BaseException as e:
            _rollback(c)
            if isinstance(e, sqlite3.DatabaseError):
                raise write_error(e, self.path) from None
            raise
        return index

    def agent_names(self, run: int) -> dict[int, str]:
        """Executor index -> name of each agent the run's schedulers numbered."""
        try:
            return {int(i): n for i, n in self.conn.execute("SELECT idx, name FROM agents WHERE run = ?", (run,))}
        except sqlite3.OperationalError:
            return {}  # a journal from before the agents' numbering, opened read-only


def _insert_jobs(c: sqlite3.Connection, rid: int, ids: list[str]) -> None:
    """Insert a new run's job rows (index and id; the rest takes the columns' defaults).

    One statement over a JSON array of the ids: SQLite makes every row in C, about twice as fast
    as binding a million rows one by one, and without the interpreter lock, so the scheduler's
    other threads go on meanwhile. Without SQLite's JSON functions the rows are bound one by one.
    """
    try:
        c.execute("INSERT INTO jobs (run, idx, job_id) SELECT ?, key, value FROM json_each(?)",
                  (rid, json.dumps(ids)))
    except sqlite3.OperationalError as e:
        if "json_each" not in str(e):
            raise
        c.executemany("INSERT INTO jobs (run, idx, job_id) VALUES (?, ?, ?)", zip(repeat(rid), count(), ids))
