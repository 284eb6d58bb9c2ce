"""The server journal: PostgreSQL through psycopg 3 (the only module importing psycopg).

One connection per store, in autocommit mode with explicit transactions. A loop turn is one
transaction sent as one pipeline (one round trip): a single statement both checks the writer's
epoch and the run's next sequence number (compare-and-set on the run's row) and inserts the turn,
so a fenced writer, or a turn already committed, writes nothing. When the server goes away
(restart, failover) every call waits and reconnects with bounded backoff, then does its whole
transaction again; a turn is never half applied.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from wloadctl.errors import NoJournalYet, StoreError, UsageError
from wloadctl.store.audit import GENESIS, ActionRow, chained
from wloadctl.store.base import JournalLoss, JournalUnavailable, RunRow, Store, without_password
from wloadctl.store.pgschema import MIGRATION_LOCK, MIGRATIONS, RUN_COLUMNS, SCHEMA_VERSION, VERSION_TABLE
from wloadctl.turns import index_blocks, pack_turn, unpack_jobs, unpack_turn
from wloadctl.urls import split_url

T = TypeVar("T")
CONNECT_TIMEOUT = 5
"""Seconds one connection attempt may take."""
OUTAGE_LIMIT = 300.0
"""Seconds a call waits for an unreachable server before it gives up with JournalUnavailable."""
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 2.0
"""Seconds between reconnection attempts: doubling from the first to the cap."""
IDLE_IN_TRANSACTION_MS = 5000
"""Milliseconds a writer's transaction may sit idle before the server ends it (a frozen writer)."""
TAKEOVER_LOCK_MS = 1000
"""Milliseconds a takeover waits for the run's row at a time, before it looks for a frozen writer holding it."""
DEFAULT_NAMESPACE = "default"
"""Installation namespace of a URL without `?namespace=`."""

_TURN = (
    "WITH g AS (UPDATE runs SET next_seq = %(next)s WHERE id = %(run)s AND next_seq = %(seq)s"
    " AND epoch = coalesce(%(epoch)s::integer, epoch) RETURNING id)"
    " INSERT INTO turns (run, seq, upto, n, recs, causes, reasons)"
    " SELECT id, %(seq)s, %(upto)s, %(n)s, %(recs)s, %(causes)s, %(reasons)s FROM g"
)
"""A turn's insert, made only if the writer's epoch and the run's next sequence number are as it saw them."""
_GUARD = "SELECT 1 FROM runs WHERE id = %s AND epoch = coalesce(%s::integer, epoch)"
_WROTE = "EXISTS (SELECT 1 FROM runs WHERE id = %(run)s AND next_seq = %(next)s)"
"""True after this transaction's turn went in (the run's next sequence number moved past it)."""
_NOW_STATES = (
    "INSERT INTO now_states (run, block, states) SELECT %(run)s, b, s"
    " FROM unnest(%(blocks)s::integer[], %(states)s::bytea[]) AS x(b, s) WHERE " + _WROTE
    + " ON CONFLICT (run, block) DO UPDATE SET states = excluded.states"
)
_NOW_ROWS = (
    "INSERT INTO now_rows (run, block, data) SELECT %(run)s, b, d"
    " FROM unnest(%(rows)s::integer[], %(data)s::bytea[]) AS x(b, d) WHERE " + _WROTE
    + " ON CONFLICT (run, block) DO UPDATE SET data = excluded.data"
)
_STATES_SEQ = ("UPDATE now_runs SET states_seq = coalesce(%(states_at)s, %(upto)s) WHERE run = %(run)s AND "
               + _WROTE)
"""Where a turn leaves the saved current states (see store/current.py), made only with the turn."""
_FLAT_SEQ = "UPDATE now_runs SET flat_seq = coalesce(%(saved_at)s, %(upto)s) WHERE run = %(run)s AND " + _WROTE
"""A turn's save of flat rows (see store/current.py), made only with the turn."""
_TOOK = ("INSERT INTO took (run, seq, blob) SELECT %(run)s, %(seq)s, %(took)s WHERE " + _WROTE
         + " ON CONFLICT DO NOTHING")
_TURN_JOBS = (
    "INSERT INTO turn_jobs (run, block, seq) SELECT %(run)s, k, %(seq)s FROM unnest(%(keys)s::integer[]) AS k"
    " WHERE " + _WROTE + " ON CONFLICT DO NOTHING"
)


def _end_frozen_writers(conn: psycopg.Connection[Any]) -> None:
    """End the sessions of wloadctl writers of this database frozen inside a transaction: waiting for their
    client's next statement for longer than IDLE_IN_TRANSACTION_MS (no live writer waits so long in one)."""
    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                 " AND application_name = 'wloadctl' AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
                 " AND wait_event = 'ClientRead' AND state_change < now() - make_interval(secs => %s)",
                 (IDLE_IN_TRANSACTION_MS / 1000,))


def parse_journal_url(url: str) -> tuple[str, str, str]:
    """(connection URL for psycopg, namespace, the URL without password for messages).

    Raises:
        UsageError: not a postgresql:// URL naming a host and a database, or one that cannot be read as
            a URL (an unclosed IPv6 bracket, a port out of range).
    """
    hint = "give --journal postgresql://USER@HOST[:PORT]/DB (optionally ?namespace=NAME)"
    try:
        parts = split_url(url)
    except ValueError as e:
        raise UsageError(f"journal URL {without_password(url)!r}: {e}", hint=hint) from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise UsageError(f"journal {without_password(url)!r} is not a postgresql:// URL", hint=hint)
    db = parts.path.lstrip("/")
    query = parse_qsl(parts.query)
    known = _url_parameters()
    unknown = [k for k, _v in query if k not in known]
    if unknown:
        # Said here, in one line: the driver would refuse it as an internal error.
        raise UsageError(f"journal URL {without_password(url)!r}: unknown parameter {unknown[0]!r}; allowed: "
                         f"{', '.join(sorted(known))}", hint=hint)
    host = parts.hostname or next((v for k, v in query if k == "host"), "")  # ?host=/socket/dir
    if not db or not host:
        raise UsageError(f"journal URL {parts.scheme}://...@{parts.hostname or ''}{parts.path} names no "
                         f"{'database' if host else 'host'}", hint=hint)
    ns = next((v for k, v in query if k == "namespace"), DEFAULT_NAMESPACE) or DEFAULT_NAMESPACE
    rest = urlencode([(k, v) for k, v in query if k != "namespace"])
    user = f"{parts.username}@" if parts.username else ""
    port = f":{parts.port}" if parts.port else ""
    shown = f"[{host}]" if ":" in host else host  # an IPv6 host, bracketed as it was given
    # (Named as given, its namespace too: two installations share a database, and a message must say which.)
    where = f"postgresql://{user}{shown}{port}/{db}" + (f"?namespace={ns}" if ns != DEFAULT_NAMESPACE else "")
    return urlunsplit((parts.scheme, parts.netloc, parts.path, rest, "")), ns, where


def _url_parameters() -> set[str]:
    """Query parameters a journal URL may carry: `namespace`, and libpq's connection parameters."""
    from psycopg import pq

    return {"namespace"} | {o.keyword.decode() for o in pq.Conninfo.get_defaults()}


def _line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _say_stderr(msg: str) -> None:
    print(f"wloadctl: {msg}", file=sys.stderr, flush=True)


class PostgresStore(Store):
    """The journal of runs in a PostgreSQL database shared by runs, state directories and installations."""

    def __init__(self, conninfo: str, ns: str, where: str, home: str | None, state_dir: Path | None, *,
                 readonly: bool, sync: str, say: Callable[[str], None] | None) -> None:
        super().__init__()
        self.conninfo = conninfo
        """What psycopg connects with (may hold a password: never shown)."""
        self.ns = ns
        """The installation's namespace."""
        self._where = where
        self.home = home
        """host:path of the state directory whose runs latest_run sees (None: the whole namespace)."""
        self.state_dir = state_dir
        """The state directory of the runs this store creates (kept in their settings)."""
        self.readonly = readonly
        self.sync = sync
        """FULL, NORMAL or AUTO (see Store.open)."""
        self.auto_sync = sync == "AUTO"
        self.say = say or _say_stderr
        """Where the lines about a lost and found server go."""
        self.outage_limit = OUTAGE_LIMIT
        """Seconds a call waits for the server before giving up."""
        self._conn: psycopg.Connection[Any] | None = None
        self._gave_up = False
        """The last call waited for the server in vain."""
        self._down_since: float | None = None
        """Since when the server has been unreachable (None: it answered the last call)."""
        self._next: dict[int, int] = {}
        """Next transition sequence number of each run this store writes turns of."""

    @classmethod
    def connect(cls, url: str, state_dir: Path | None, *, create: bool = True, readonly: bool = False,
                sync: str = "FULL", say: Callable[[str], None] | None = None) -> PostgresStore:
        """Connect, and create or migrate the schema (see Store.open).

        Raises:
            StoreError: bad URL, server unreachable, no journal there (not creating), or a newer schema.
        """
        conninfo, ns, where = parse_journal_url(url)
        home = f"{socket.gethostname()}:{state_dir.resolve()}" if state_dir is not None else None
        store = cls(conninfo, ns, where, home, state_dir, readonly=readonly, sync=sync, say=say)
        try:
            store._conn = store._open_conn()
        except psycopg.OperationalError as e:
            raise JournalUnavailable(f"cannot reach the journal {where}: {_line(e)}",
                                     hint="check the URL and that PostgreSQL is running there") from None
        store._prepare(create and not readonly, readonly)
        return store

    @property
    def where(self) -> str:
        """The URL without its password."""
        return self._where

    @property
    def loss(self) -> JournalLoss:
        """A server journal loses committed turns with its database (dropped, made anew or restored from an older
        backup), or is not the database the run was journaled in."""
        return JournalLoss(
            cause="its database dropped and made anew, restored from an older backup, or not the one the run was "
                  "journaled in?",
            last_turns="the database server crashed before they reached its disk, or the database was restored "
                       "from an older backup?",
            restore=f"restore the database {self._where} from its backup, or give --journal the URL of the database "
                    "the run was journaled in")

    def _open_conn(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                               application_name="wloadctl")
        if self.readonly:
            conn.execute("SET default_transaction_read_only = on")
        if self.sync == "NORMAL":
            conn.execute("SET synchronous_commit = off")
        if not self.readonly:
            # A scheduler frozen (SIGSTOP) inside a transaction would keep the run's row locked, and
            # the standby's takeover waiting: the server ends such a transaction after this long.
            conn.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")
        return conn

    def _prepare(self, create: bool, readonly: bool) -> None:
        """Check the schema version; create or migrate it (one transaction, under an advisory lock)."""

        def version(conn: psycopg.Connection[Any]) -> int:
            if conn.execute("SELECT to_regclass(%s)", (VERSION_TABLE,)).fetchone()[0] is None:  # type: ignore[index]
                return 0
            row = conn.execute(f"SELECT version FROM {VERSION_TABLE}").fetchone()
            return int(row[0]) if row else 0

        def migrate(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                v = version(conn)
                if v >= SCHEMA_VERSION:
                    return v
                for step in MIGRATIONS[v:]:
                    for sql in step:
                        conn.execute(sql)  # type: ignore[arg-type]
                conn.execute(f"INSERT INTO {VERSION_TABLE} (one, version) VALUES (true, %s)"
                             " ON CONFLICT (one) DO UPDATE SET version = excluded.version", (SCHEMA_VERSION,))
                return SCHEMA_VERSION

        v = self._do(version)
        if v > SCHEMA_VERSION:
            self.close()
            raise StoreError(f"run journal {self.where} has schema {v}, newer than this wloadctl ({SCHEMA_VERSION})",
                             hint="upgrade wloadctl")
        if v < SCHEMA_VERSION:
            if not create:
                self.close()
                if v == 0:
                    raise NoJournalYet(f"no run journal in {self.where}",
                                     hint="start a run with `wloadctl run PLAN --journal URL`")
                raise StoreError(f"run journal {self.where} has schema {v}, older than this wloadctl "
                                 f"({SCHEMA_VERSION})", hint="a run or resume with this wloadctl migrates it")
            self._do(migrate)

    def close(self) -> None:
        """Close the connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _do(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run `fn` (one whole transaction) on the connection, reconnecting while the server is away.

        Raises:
            JournalUnavailable: the server stayed away past outage_limit.
            StoreError: any other database failure.
        """
        lost_at: float | None = None
        delay = BACKOFF_FIRST
        while True:
            try:
                conn = self._conn
                if conn is None or conn.closed:
                    conn = self._conn = self._open_conn()
                out = fn(conn)
                self._gave_up = False
                if self._down_since is not None:
                    self._outage(False, f"journal: PostgreSQL {self.where} is back after "
                                        f"{time.time() - self._down_since:.1f}s"
                                        + ("; the unfinished transaction was written again as a whole"
                                           if lost_at is not None else ""))
                    self._down_since = None
                return out
            except psycopg.OperationalError as e:
                conn = self._conn
                if conn is not None and not conn.closed and not conn.broken:
                    raise StoreError(f"journal {self.where}: {_line(e)}") from None
                if conn is not None:
                    conn.close()
                self._conn = None
                now = time.time()
                if lost_at is None:
                    lost_at = now
                down = self._down_since
                if down is None:
                    # Said once an outage (the calls after one that gave up try once, each).
                    down = self._down_since = now
                    self._outage(True, f"journal: PostgreSQL {self.where} unreachable ({_line(e)}); reconnecting "
                                       f"for up to {self.outage_limit:.0f}s, nothing is dispatched until the journal "
                                       "is written")
                stop = self.stop_waiting() if self.stop_waiting is not None else None
                if stop is not None or now - lost_at > (0.0 if self._gave_up else self.outage_limit):
                    # Once it gave up, later calls (status, fencing checks on the way out) try once.
                    self._gave_up = True
                    raise JournalUnavailable(f"journal {self.where} unreachable for {now - down:.0f}s"
                                             f"{f' ({stop})' if stop else ''}: {_line(e)}",
                                             hint="the run is resumable once PostgreSQL is back") from None
                time.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)
            except psycopg.Error as e:
                raise StoreError(f"journal {self.where}: {_line(e)}") from None

    def _outage(self, lost: bool, notice: str) -> None:
        """Say that the server went away or came back, and tell whoever watches (a scheduler's loop)."""
        self.say(notice)
        if self.on_outage is not None:
            self.on_outage(lost, notice)

    def _guarded(self, conn: psycopg.Connection[Any], run: int, sql: str, args: Sequence[object]) -> None:
        """Execute `sql` (an UPDATE or INSERT ... SELECT ending in WHERE) only while this store's epoch holds."""
        cur = conn.execute(f"{sql} AND EXISTS ({_GUARD})" if self.epoch is not None else sql,  # type: ignore[arg-type]
                           (*args, run, self.epoch) if self.epoch is not None else tuple(args))
        if cur.rowcount != 1 and self.epoch is not None:
            row = conn.execute("SELECT epoch FROM runs WHERE id = %s", (run,)).fetchone()
            raise self._stale(run, row[0] if row else None, self.epoch)

    # -- runs and the lease ---------------------------------------------------------------

    def create_run(self, run_id: str, plan_name: str, plan_path: str, plan_digest: str, plan_text: str,
                   job_ids: Iterable[str], business_date: str, now: float, settings: str = "{}") -> RunRow:
        """Record a new run and its jobs (all WAITING) in one transaction."""
        ids = list(job_ids)
        extra = json.loads(settings or "{}")
        if self.state_dir is not None:
            # Readers without the state directory (another host) still see where its files are.
            extra.update(state_dir=str(self.state_dir.resolve()), host=socket.gethostname())

        def create(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                rid = conn.execute(
                    "INSERT INTO runs (ns, home, run_id, plan_name, plan_path, plan_digest, business_date, started,"
                    " status, settings) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'running', %s) RETURNING id",
                    (self.ns, self.home or "", run_id, plan_name, plan_path, plan_digest, business_date, now,
                     json.dumps(extra))).fetchone()[0]  # type: ignore[index]
                conn.execute("INSERT INTO plans (run, text) VALUES (%s, %s)", (rid, plan_text))
                self._copy_jobs(conn, rid, enumerate(ids))
                conn.execute("INSERT INTO now_runs (run, jobs, flat_seq, states_seq) VALUES (%s, %s, 0, 0)",
                             (rid, len(ids)))

        self._do(create)
        row = self.get_run(run_id)
        assert row is not None
        return row

    @staticmethod
    def _copy_jobs(conn: psycopg.Connection[Any], run: int, jobs: Iterable[tuple[int, str]]) -> None:
        with conn.cursor().copy("COPY jobs (run, idx, job_id) FROM STDIN") as cp:
            for i, j in jobs:
                cp.write_row((run, i, j))

    def _run(self, where: str, args: Sequence[object]) -> RunRow | None:
        row = self._do(lambda c: c.execute(f"SELECT {RUN_COLUMNS} FROM runs {where}", args).fetchone())  # type: ignore[arg-type]
        return RunRow(*row) if row else None

    def get_run(self, run_id: str) -> RunRow | None:
        """The run with this public id."""
        return self._run("WHERE run_id = %s", (run_id,))

    def runs(self) -> list[RunRow]:
        """Every run of the state directory (of the namespace when opened without one), oldest first."""
        where, args = ("WHERE ns = %s AND home = %s", (self.ns, self.home)) if self.home is not None else \
            ("WHERE ns = %s", (self.ns,))
        rows = self._do(lambda c: c.execute(f"SELECT {RUN_COLUMNS} FROM runs {where} ORDER BY id", args).fetchall())  # type: ignore[arg-type]
        return [RunRow(*r) for r in rows]

    def unfinished_elsewhere(self, plan_name: str | None, business_date: str | None = None) -> list[tuple[RunRow, str]]:
        """Unfinished runs (of this plan and business date, when given) of other state directories of the namespace,
        with their homes (host:directory)."""
        sql = (f"SELECT {RUN_COLUMNS}, home FROM runs WHERE ns = %s AND status IN ('running', 'interrupted', 'held')"
               " AND home IS DISTINCT FROM %s")
        args: list[object] = [self.ns, self.home]
        for col, val in (("plan_name", plan_name), ("business_date", business_date)):
            if val is not None:
                sql += f" AND {col} = %s"
                args.append(val)
        rows = self._do(lambda c: c.execute(sql + " ORDER BY id", args).fetchall())  # type: ignore[arg-type]
        return [(RunRow(*r[:-1]), str(r[-1] or "")) for r in rows]

    def latest_run(self) -> RunRow | None:
        """The latest run of the state directory, or of the namespace when opened without one."""
        if self.home is not None:
            return self._run("WHERE ns = %s AND home = %s ORDER BY id DESC LIMIT 1", (self.ns, self.home))
        return self._run("WHERE ns = %s ORDER BY id DESC LIMIT 1", (self.ns,))

    def plan_text(self, run: int) -> str:
        """The plan text as loaded at the run's start."""
        row = self._do(lambda c: c.execute("SELECT text FROM plans WHERE run = %s", (run,)).fetchone())
        return str(row[0]) if row else ""

    def plan_blob(self, run: int) -> str | None:
        """The plan's encoded form."""
        row = self._do(lambda c: c.execute("SELECT blob FROM plans WHERE run = %s", (run,)).fetchone())
        return row[0] if row else None

    def set_plan_blob(self, run: int, blob: str) -> None:
        """Keep the plan's encoded form beside its text."""
        self._do(lambda c: c.execute("UPDATE plans SET blob = %s WHERE run = %s", (blob, run)))

    def has_plan_copy(self, run: int) -> bool:
        """See Store.has_plan_copy."""
        row = self._do(lambda c: c.execute("SELECT blob IS NOT NULL OR text <> '' FROM plans WHERE run = %s",
                                           (run,)).fetchone())
        return bool(row and row[0])

    def keep_plan_file(self, run: int, path: str, digest: str) -> bool:
        """See Store.keep_plan_file."""
        data = Path(path).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            return False
        text = data.decode("utf-8", "replace")
        del data
        self._do(lambda c: c.execute("UPDATE plans SET text = %s WHERE run = %s", (text, run)))
        return True

    def replace_plan(self, run: int, digest: str, text: str, path: str,
                     new_job_ids: Sequence[tuple[int, str]]) -> None:
        """Accept a changed plan on resume: store its text and add rows for its new jobs."""

        def replace(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                self._guarded(conn, run, "UPDATE runs SET plan_digest = %s, plan_path = %s WHERE id = %s",
                              (digest, path, run))
                conn.execute("UPDATE plans SET text = %s, blob = NULL WHERE run = %s", (text, run))
                self._copy_jobs(conn, run, new_job_ids)
                if new_job_ids:
                    self._grow(conn, run, max(i for i, _ in new_job_ids) + 1)

        self._do(replace)

    def begin_epoch(self, run: int, pid: int, lease: float, expect_epoch: int | None = None) -> int:
        """Take the run for a scheduler: compare-and-set its epoch one up; later writes carry it.

        A writer frozen in the middle of a turn's pipeline holds the run's row, and the server's idle
        timeout never ends its transaction (it waits for the rest of the pipeline, not idle between
        statements): found so, it is ended here (_end_frozen_writers), and the run taken.
        """

        def begin(conn: psycopg.Connection[Any]) -> int | None:
            try:
                with conn.transaction():
                    conn.execute(f"SET LOCAL lock_timeout = {TAKEOVER_LOCK_MS}")
                    cur = conn.execute("SELECT epoch FROM runs WHERE id = %s FOR UPDATE", (run,)).fetchone()[0]  # type: ignore[index]
                    if expect_epoch is not None and cur != expect_epoch:
                        raise StoreError(f"another scheduler took the run first (epoch {cur}, expected {expect_epoch})")
                    conn.execute("UPDATE runs SET epoch = %s, scheduler_pid = %s, holder = %s, lease_until = %s,"
                                 " status = 'running', ended = NULL WHERE id = %s AND epoch = %s",
                                 (cur + 1, pid, f"{socket.gethostname()}:{pid}", lease, run, cur))
                    return int(cur) + 1
            except psycopg.errors.LockNotAvailable:
                return None

        while (epoch := self._do(begin)) is None:
            self._do(_end_frozen_writers)
        self.epoch = epoch
        self._next.pop(run, None)
        return self.epoch

    def renew_lease(self, run: int, epoch: int, lease: float) -> bool:
        """Extend the lease of the scheduler holding `epoch`; False if it was fenced off."""
        cur = self._do(lambda c: c.execute("UPDATE runs SET lease_until = %s WHERE id = %s AND epoch = %s",
                                           (lease, run, epoch)))
        return cur.rowcount == 1

    def home_of(self, run: int) -> tuple[str, Path] | None:
        """(host, state directory) of the scheduler that started the run (None: it named none)."""
        row = self._do(lambda c: c.execute("SELECT home FROM runs WHERE id = %s", (run,)).fetchone())
        host, _, path = str(row[0] if row and row[0] else "").partition(":")
        return (host, Path(path)) if host and path else None

    def holder_host(self, run: int) -> str | None:
        """Host of the scheduler holding the run's lease (from its holder, host:pid)."""
        row = self._do(lambda c: c.execute("SELECT holder FROM runs WHERE id = %s", (run,)).fetchone())
        return str(row[0]).rpartition(":")[0] if row and row[0] else None

    def set_status(self, run: int, status: str, ended: float | None) -> None:
        """Record the run's status (and end time), and save the flat rows this writer changed since it
        last did (see SqliteStore.set_status)."""
        now, rows, seq = self._unsaved(run)

        def put(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                self._guarded(conn, run, "UPDATE runs SET status = %s, ended = %s WHERE id = %s",
                              (status, ended, run))
                if now:
                    conn.execute("INSERT INTO now_states (run, block, states) SELECT %s, b, s"
                                 " FROM unnest(%s::integer[], %s::bytea[]) AS x(b, s)"
                                 " ON CONFLICT (run, block) DO UPDATE SET states = excluded.states",
                                 (run, list(now), list(now.values())))
                    conn.execute("UPDATE now_runs SET states_seq = %s WHERE run = %s", (seq, run))
                if rows:
                    self._save_flat(conn, run, rows, seq)

        try:
            self._do(put)
        except BaseException:
            self._forget_current(run)
            raise

    # -- jobs and turns ---------------------------------------------------------------------

    def expansions(self, run: int) -> list[tuple[str, tuple[str, ...]]]:
        """The run's `for_each` expansions over output, in order."""
        rows = self._do(lambda c: c.execute("SELECT job_id, items FROM expansions WHERE run = %s ORDER BY seq",
                                            (run,)).fetchall())
        return [(j, tuple(json.loads(items))) for j, items in rows]

    def job_ids(self, run: int) -> list[str]:
        """Job ids by index."""
        rows = self._do(lambda c: c.execute("SELECT job_id FROM jobs WHERE run = %s ORDER BY idx", (run,)).fetchall())
        return [r[0] for r in rows]

    def _job_index(self, run: int, job_id: str) -> int | None:
        row = self._do(lambda c: c.execute("SELECT idx FROM jobs WHERE run = %s AND job_id = %s",
                                           (run, job_id)).fetchone())
        return None if row is None else int(row[0])

    def _stored_rows(self, run: int) -> tuple[int, Iterable[tuple]]:
        row = self._do(lambda c: c.execute("SELECT count(*) FROM jobs WHERE run = %s", (run,)).fetchone())
        return int(row[0]) if row else 0, ()  # job rows live in the turns only

    def _turns(self, run: int, after: int) -> Iterator[list[tuple]]:
        rows = self._do(lambda c: c.execute(
            "SELECT seq, recs, causes, reasons FROM turns WHERE run = %s AND upto > %s ORDER BY seq",
            (run, after)).fetchall())
        for first, recs, causes, reasons in rows:
            yield [r for r in unpack_turn(first, bytes(recs), causes, reasons) if r[0] > after]

    def last_seq(self, run: int) -> int:
        """Sequence number of the run's latest transition (0 if none)."""
        row = self._do(lambda c: c.execute("SELECT max(upto) FROM turns WHERE run = %s", (run,)).fetchone())
        return int(row[0]) if row and row[0] is not None else 0

    def write_turn(self, run: int, transitions: Sequence[tuple], epoch: int | None = None,
                   added: Sequence[tuple[str, int, Sequence[str], Sequence[str]]] = (),
                   durable: bool = True, actions: Sequence[ActionRow] = ()) -> None:
        """Journal one loop turn in one transaction (see Store.write_turn)."""
        if not transitions and not added:
            if actions:
                self.record_actions(run, actions)
            return
        held = self.epoch if epoch is None else epoch
        n = len(transitions)
        recs, causes, reasons = pack_turn(transitions) if n else (b"", "[]", "")
        relaxed = self.auto_sync and not durable
        try:
            blocks, keys, states_at = self._current_changes(run, transitions, recs)
            rows, saved_at = self._flat_changes(run, recs, n, keys) if n else ({}, None)
            took = self._durations(run, transitions)
        except BaseException:
            self._forget_current(run)
            raise

        def write(conn: psycopg.Connection[Any]) -> None:
            seq = self._next.get(run)
            if seq is None:
                row = conn.execute("SELECT next_seq FROM runs WHERE id = %s", (run,)).fetchone()
                if row is None:
                    raise StoreError(f"journal {self.where}: no run {run}")
                seq = self._next[run] = int(row[0])
            args = {"run": run, "seq": seq, "next": seq + n, "upto": seq + n - 1, "n": n, "epoch": held,
                    "recs": recs, "causes": causes, "reasons": reasons, "blocks": list(blocks),
                    "states": list(blocks.values()), "keys": keys, "took": took, "rows": list(rows),
                    "data": list(rows.values()), "saved_at": saved_at,
                    "states_at": states_at}
            if not added and not actions:
                # The common turn: one round trip (BEGIN, the guarded insert, COMMIT in one pipeline).
                with conn.pipeline(), conn.transaction():
                    if relaxed:
                        conn.execute("SET LOCAL synchronous_commit = off")
                    cur = conn.execute(_TURN, args)
                    if blocks:
                        conn.execute(_NOW_STATES, args)
                    conn.execute(_STATES_SEQ, args)
                    conn.execute(_TURN_JOBS, args)
                    if rows:
                        conn.execute(_NOW_ROWS, args)
                        conn.execute(_FLAT_SEQ, args)
                    if took:
                        conn.execute(_TOOK, args)
                done = cur.rowcount == 1
            else:
                with conn.transaction():
                    done = conn.execute(_TURN, args).rowcount == 1 if n else self._guard_added(conn, run, held, added)
                    if done and n:
                        if blocks:
                            conn.execute(_NOW_STATES, args)
                        conn.execute(_STATES_SEQ, args)
                        conn.execute(_TURN_JOBS, args)
                        if rows:
                            conn.execute(_NOW_ROWS, args)
                            conn.execute(_FLAT_SEQ, args)
                        if took:
                            conn.execute(_TOOK, args)
                    if done:
                        for parent, first, items, ids in added:
                            conn.execute("INSERT INTO expansions (run, job_id, first_idx, items)"
                                         " VALUES (%s, %s, %s, %s)", (run, parent, first, json.dumps(list(items))))
                            self._copy_jobs(conn, run, ((first + k, j) for k, j in enumerate(ids)))
                            self._grow(conn, run, first + len(ids))
                    if done and actions:
                        # (the turn's guarded UPDATE of the run's row holds its lock: the chain's order)
                        self._append_actions(conn, run, actions)
            if done:
                self._next[run] = seq + n
                if n:
                    self._flat_written(run, seq + n - 1)
                return
            self._settle_refused(conn, run, seq, n, held)

        try:
            self._do(write)
        except BaseException:
            self._forget_current(run)
            raise

    @staticmethod
    def _grow(conn: psycopg.Connection[Any], run: int, jobs: int) -> None:
        conn.execute("UPDATE now_runs SET jobs = greatest(jobs, %s) WHERE run = %s", (jobs, run))

    # -- the current state and the turn index -------------------------------------------

    def _kept_jobs(self, run: int) -> int | None:
        row = self._do(lambda c: c.execute("SELECT jobs FROM now_runs WHERE run = %s", (run,)).fetchone())
        return None if row is None else int(row[0])

    def _state_rows(self, run: int) -> Iterable[tuple[int, bytes]]:
        rows = self._do(lambda c: c.execute("SELECT block, states FROM now_states WHERE run = %s",
                                            (run,)).fetchall())
        return [(b, bytes(s)) for b, s in rows]

    def _state_blocks(self, run: int, blocks: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        rows = self._do(lambda c: c.execute("SELECT block, states FROM now_states WHERE run = %s AND block = ANY(%s)",
                                            (run, list(blocks)), binary=True).fetchall())
        return [(b, bytes(s)) for b, s in rows]

    def _flat_blocks_at(self, run: int, blocks: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        rows = self._do(lambda c: c.execute("SELECT block, data FROM now_rows WHERE run = %s AND block = ANY(%s)",
                                            (run, list(blocks)), binary=True).fetchall())
        return [(b, bytes(d)) for b, d in rows]

    def _states_saved(self, run: int) -> int | None:
        row = self._do(lambda c: c.execute("SELECT states_seq FROM now_runs WHERE run = %s", (run,)).fetchone())
        return None if row is None or row[0] is None else int(row[0])

    def _flat_saved(self, run: int) -> int | None:
        row = self._do(lambda c: c.execute("SELECT flat_seq FROM now_runs WHERE run = %s", (run,)).fetchone())
        return None if row is None or row[0] is None else int(row[0])

    def _turn_records(self, run: int, after: int) -> Iterable[tuple[int, bytes]]:
        rows = self._do(lambda c: c.execute("SELECT seq, recs FROM turns WHERE run = %s AND upto > %s ORDER BY seq",
                                            (run, after), binary=True).fetchall())
        return [(int(first), bytes(recs)) for first, recs in rows]

    def _flat_blocks(self, run: int) -> Iterable[tuple[int, bytes]]:
        rows = self._do(lambda c: c.execute("SELECT block, data FROM now_rows WHERE run = %s", (run,),
                                            binary=True).fetchall())
        return [(b, bytes(d)) for b, d in rows]

    @staticmethod
    def _save_flat(conn: psycopg.Connection[Any], run: int, blocks: dict[int, bytes], seq: int) -> None:
        """Save these blocks of flat rows, standing at transition `seq` (inside the caller's transaction)."""
        conn.execute("INSERT INTO now_rows (run, block, data) SELECT %s, b, d"
                     " FROM unnest(%s::integer[], %s::bytea[]) AS x(b, d)"
                     " ON CONFLICT (run, block) DO UPDATE SET data = excluded.data",
                     (run, list(blocks), list(blocks.values())))
        conn.execute("UPDATE now_runs SET flat_seq = %s WHERE run = %s", (seq, run))

    def _write_flat(self, run: int, blocks: dict[int, bytes], seq: int) -> None:
        def put(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                conn.execute("DELETE FROM now_rows WHERE run = %s", (run,))
                self._save_flat(conn, run, blocks, seq)

        self._do(put)

    def _write_facts(self, run: int, meta: str, blocks: dict[int, bytes]) -> None:
        def put(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                conn.execute("DELETE FROM job_facts WHERE run = %s", (run,))
                conn.execute("INSERT INTO job_facts (run, block, data) SELECT %s, b, d"
                             " FROM unnest(%s::integer[], %s::bytea[]) AS x(b, d)",
                             (run, list(blocks), list(blocks.values())))
                conn.execute("INSERT INTO fact_runs (run, meta) VALUES (%s, %s)"
                             " ON CONFLICT (run) DO UPDATE SET meta = excluded.meta", (run, meta))

        self._do(put)

    def _facts_meta(self, run: int) -> str | None:
        row = self._do(lambda c: c.execute("SELECT meta FROM fact_runs WHERE run = %s", (run,)).fetchone())
        return None if row is None else str(row[0])

    def _fact_blocks(self, run: int, blocks: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        rows = self._do(lambda c: c.execute("SELECT block, data FROM job_facts WHERE run = %s AND block = ANY(%s)",
                                            (run, list(blocks)), binary=True).fetchall())
        return [(b, bytes(d)) for b, d in rows]

    def _index_turns(self, run: int, jobs: Sequence[int]) -> Iterator[list[tuple]]:
        rows = self._do(lambda c: c.execute(
            "SELECT seq, recs, causes, reasons FROM turns WHERE run = %s AND seq IN (SELECT seq FROM turn_jobs"
            " WHERE run = %s AND block = ANY(%s)) ORDER BY seq", (run, run, index_blocks(jobs))).fetchall())
        for first, recs, causes, reasons in rows:
            yield unpack_jobs(first, bytes(recs), causes, reasons, jobs)

    def _took(self, runs: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        rows = self._do(lambda c: c.execute("SELECT run, blob FROM took WHERE run = ANY(%s) ORDER BY run, seq",
                                            (list(runs),)).fetchall())
        return [(r, bytes(b)) for r, b in rows]

    def _ids_at(self, run: int, idxs: Sequence[int]) -> dict[int, str]:
        rows = self._do(lambda c: c.execute("SELECT idx, job_id FROM jobs WHERE run = %s AND idx = ANY(%s)",
                                            (run, list(idxs))).fetchall())
        return dict(rows)

    def _write_current(self, run: int, jobs: int, blocks: dict[int, bytes], index: Sequence[tuple[int, int]]) -> None:
        def put(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                conn.execute("DELETE FROM now_states WHERE run = %s", (run,))
                conn.execute("DELETE FROM turn_jobs WHERE run = %s", (run,))
                conn.execute("INSERT INTO now_states (run, block, states) SELECT %s, b, s"
                             " FROM unnest(%s::integer[], %s::bytea[]) AS x(b, s)",
                             (run, list(blocks), list(blocks.values())))
                conn.execute("INSERT INTO turn_jobs (run, block, seq) SELECT %s, k, s"
                             " FROM unnest(%s::integer[], %s::bigint[]) AS x(k, s) ON CONFLICT DO NOTHING",
                             (run, [k for k, _ in index], [q for _, q in index]))
                conn.execute("INSERT INTO now_runs (run, jobs) VALUES (%s, %s)"
                             " ON CONFLICT (run) DO UPDATE SET jobs = excluded.jobs", (run, jobs))

        self._do(put)

    def _guard_added(self, conn: psycopg.Connection[Any], run: int, held: int | None,
                     added: Sequence[tuple[str, int, Sequence[str], Sequence[str]]]) -> bool:
        """For a turn of expansions only: whether the epoch holds and the expansion is not written yet."""
        if conn.execute(f"{_GUARD} FOR UPDATE", (run, held)).fetchone() is None:
            return False
        first = added[0][1]
        return conn.execute("SELECT 1 FROM jobs WHERE run = %s AND idx = %s", (run, first)).fetchone() is None

    def _settle_refused(self, conn: psycopg.Connection[Any], run: int, seq: int, n: int, held: int | None) -> None:
        """A turn's guarded insert matched nothing: fenced, already committed, or a stale sequence number."""
        row = conn.execute("SELECT epoch, next_seq FROM runs WHERE id = %s", (run,)).fetchone()
        if row is None:
            raise StoreError(f"journal {self.where}: no run {run}")
        now_epoch, next_seq = int(row[0]), int(row[1])
        if held is not None and now_epoch != held:
            raise self._stale(run, now_epoch, held)
        self._next[run] = next_seq
        if n and conn.execute("SELECT 1 FROM turns WHERE run = %s AND seq = %s AND n = %s",
                              (run, seq, n)).fetchone() is not None and next_seq == seq + n:
            return  # the commit of an earlier try went through before the connection was lost
        if not n:
            return  # expansions already written by an earlier try
        raise StoreError(f"journal {self.where}: run {run} was written by another writer at epoch {now_epoch}",
                         hint="two schedulers share the run's epoch; stop one")

    # -- operator actions and alerts ----------------------------------------------------------

    def record_actions(self, run: int, rows: Sequence[ActionRow]) -> None:
        """Append operator actions in one transaction, chained after the run's last (see Store)."""
        if not rows:
            return

        def put(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                # The run's row lock orders its writers: each chains to the last row committed.
                row = conn.execute("SELECT epoch FROM runs WHERE id = %s FOR UPDATE", (run,)).fetchone()
                if self.epoch is not None and (row is None or int(row[0]) != self.epoch):
                    raise self._stale(run, row[0] if row else None, self.epoch)
                self._append_actions(conn, run, rows)

        self._do(put)

    @staticmethod
    def _append_actions(conn: psycopg.Connection[Any], run: int, rows: Sequence[ActionRow]) -> None:
        """Insert audit rows chained after the run's last, in one statement (inside the caller's
        transaction, which holds the run's row lock)."""
        last = conn.execute("SELECT hash FROM actions WHERE run = %s AND hash <> '' ORDER BY seq DESC LIMIT 1",
                            (run,)).fetchone()
        cols = list(zip(*chained(last[0] if last else GENESIS, rows), strict=True))
        # unnest keeps the arrays' order, and seq (bigserial) numbers the rows in it: the chain's order.
        conn.execute("INSERT INTO actions (run, ts, username, verb, job, reason, outcome, applied, prev_hash, hash)"
                     " SELECT %s, ts, u, v, j, r, o, a, p, h FROM unnest(%s::double precision[], %s::text[],"
                     " %s::text[], %s::text[], %s::text[], %s::text[], %s::boolean[], %s::text[], %s::text[])"
                     " WITH ORDINALITY"
                     " AS x(ts, u, v, j, r, o, a, p, h, k) ORDER BY k",
                     (run, *(list(c) for c in cols)))

    def audit_rows(self, run: int | None = None) -> list[tuple]:
        """(seq, run, ts, user, verb, job, reason, outcome, applied, prev_hash, hash) by run and seq."""
        sql = ("SELECT a.seq, a.run, a.ts, a.username, a.verb, a.job, a.reason, a.outcome, a.applied, a.prev_hash,"
               " a.hash FROM actions a JOIN runs r ON r.id = a.run WHERE r.ns = %s"
               + (" AND a.run = %s" if run is not None else "") + " ORDER BY a.run, a.seq")
        args = (self.ns,) if run is None else (self.ns, run)
        return self._do(lambda c: c.execute(sql, args).fetchall())  # type: ignore[arg-type]

    def actions(self, run: int, job: str | None = None) -> list[tuple]:
        """(ts, user, verb, job, reason, outcome, applied) of the run's actions, optionally of one job."""
        sql = "SELECT ts, username, verb, job, reason, outcome, applied::integer FROM actions WHERE run = %s"
        args: tuple = (run,) if job is None else (run, job)
        if job is not None:
            sql += " AND job = %s"
        return self._do(lambda c: c.execute(sql + " ORDER BY seq", args).fetchall())  # type: ignore[arg-type]

    def record_alert(self, run: int, ts: float, job: str, tier: str, state: str, attempts: int, reason: str,
                     log_path: str) -> None:
        """Append one alert (a job failed for good)."""
        args = (run, ts, job, tier, state, attempts, reason, log_path)

        def put(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                self._guarded(conn, run, "INSERT INTO alerts (run, ts, job, tier, state, attempts, reason, log_path)"
                              " SELECT %s, %s, %s, %s, %s, %s, %s, %s WHERE true", args)

        self._do(put)

    def alerts(self, run: int) -> list[tuple]:
        """(ts, job, tier, state, attempts, reason, log_path) of the run's alerts."""
        return self._do(lambda c: c.execute(
            "SELECT ts, job, tier, state, attempts, reason, log_path FROM alerts WHERE run = %s ORDER BY seq",
            (run,)).fetchall())

    # -- remote agents ----------------------------------------------------------------------

    def agent_index(self, run: int, name: str, first: int) -> int:
        """The executor index of the run's agent `name`, given it now if it has none (see Store.agent_index).

        Two schedulers of the run giving a number at once: one insert wins on the unique (run, idx) or
        (run, name); the other inserts nothing and tries again, where it reads the winner's row.

        Raises:
            StaleEpoch: a newer scheduler holds the run and the name had no index.
        """

        def take(conn: psycopg.Connection[Any]) -> int | None:
            with conn.transaction():
                row = conn.execute("SELECT idx FROM agents WHERE run = %s AND name = %s", (run, name)).fetchone()
                if row is not None:
                    return int(row[0])
                top = conn.execute("SELECT max(idx) FROM agents WHERE run = %s", (run,)).fetchone()
                index = first if top is None or top[0] is None else max(first, int(top[0]) + 1)
                if self.epoch is not None:
                    got = conn.execute(f"INSERT INTO agents (run, idx, name) SELECT %s, %s, %s WHERE EXISTS ({_GUARD})"
                                       " ON CONFLICT DO NOTHING RETURNING idx",
                                       (run, index, name, run, self.epoch)).fetchone()
                else:
                    got = conn.execute("INSERT INTO agents (run, idx, name) VALUES (%s, %s, %s)"
                                       " ON CONFLICT DO NOTHING RETURNING idx", (run, index, name)).fetchone()
                if got is not None:
                    return index
                now = conn.execute("SELECT epoch FROM runs WHERE id = %s", (run,)).fetchone()
                if self.epoch is not None and (now is None or int(now[0]) != self.epoch):
                    raise self._stale(run, now[0] if now else None, self.epoch)
                return None  # another writer's row took the index or the name first: read again

        while True:
            index = self._do(take)
            if index is not None:
                return index

    def agent_names(self, run: int) -> dict[int, str]:
        """Executor index -> name of each agent the run's schedulers numbered."""
        rows = self._do(lambda c: c.execute("SELECT idx, name FROM agents WHERE run = %s", (run,)).fetchall())
        return {int(i): str(n) for i, n in rows}


def server_answers(server_url: str, timeout: int = 2) -> bool:
    """Whether a PostgreSQL server accepts connections at this URL."""
    try:
        psycopg.connect(server_url, connect_timeout=timeout, autocommit=True).close()
    except psycopg.Error:
        return False
    return True


@contextmanager
def scratch_database(server_url: str, prefix: str = "wl_scratch") -> Iterator[str]:
    """A new empty database on the server at `server_url` for as long as the block runs (dropped after).

    Yields:
        The journal URL of the new database.

    Raises:
        StoreError: the server cannot be reached or refuses to create it.
    """
    name = f"{prefix}_{secrets.token_hex(5)}"
    parts = urlsplit(server_url)
    try:
        with psycopg.connect(server_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as e:
        raise StoreError(f"cannot create a scratch database on {parts.hostname}:{parts.port or 5432}: {_line(e)}",
                         hint="check that PostgreSQL runs there and the user may create databases") from None
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))
    finally:
        with psycopg.connect(server_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
