"""The SQLite journal's tables, at the version PRAGMA user_version records."""

from __future__ import annotations

SCHEMA_VERSION = 12
"""The schema version a new or migrated SQLite journal is at."""

AUDIT_TRIGGERS: tuple[str, ...] = tuple(
    f"CREATE TRIGGER IF NOT EXISTS actions_no_{what.lower()} BEFORE {what} ON actions"
    " BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END"
    for what in ("UPDATE", "DELETE")
)
"""Audit rows are never changed or removed (wloadctl.store.audit)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run_id TEXT UNIQUE NOT NULL,
    plan_name TEXT NOT NULL,
    plan_path TEXT NOT NULL,
    plan_digest TEXT NOT NULL,
    plan_text TEXT NOT NULL,
    business_date TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    status TEXT NOT NULL,
    epoch INTEGER NOT NULL DEFAULT 0,
    scheduler_pid INTEGER,
    lease_until REAL NOT NULL DEFAULT 0,
    settings TEXT NOT NULL DEFAULT '{}',
    plan_blob TEXT
);
CREATE TABLE IF NOT EXISTS jobs (
    run INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,
    attempt INTEGER NOT NULL DEFAULT 0,
    executor INTEGER NOT NULL DEFAULT -1,
    exit_code INTEGER,
    started REAL,
    ended REAL,
    reason TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY,
    run INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    from_state INTEGER NOT NULL,
    to_state INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    ts REAL NOT NULL,
    executor INTEGER NOT NULL,
    exit_code INTEGER,
    reason TEXT NOT NULL,
    cause TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions (run, idx);
CREATE TABLE IF NOT EXISTS plans (
    run INTEGER PRIMARY KEY,
    text TEXT NOT NULL,
    blob TEXT
);
CREATE TABLE IF NOT EXISTS turns (
    seq INTEGER PRIMARY KEY,
    run INTEGER NOT NULL,
    n INTEGER NOT NULL,
    recs BLOB NOT NULL,
    causes TEXT NOT NULL,
    reasons TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_run ON turns (run, seq);
CREATE TABLE IF NOT EXISTS actions (
    seq INTEGER PRIMARY KEY,
    run INTEGER NOT NULL,
    ts REAL NOT NULL,
    user TEXT NOT NULL,
    verb TEXT NOT NULL,
    job TEXT NOT NULL,
    reason TEXT NOT NULL,
    outcome TEXT NOT NULL,
    applied INTEGER NOT NULL,
    prev_hash TEXT NOT NULL DEFAULT '',
    hash TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS actions_job ON actions (run, job, seq);
CREATE TABLE IF NOT EXISTS expansions (
    seq INTEGER PRIMARY KEY,
    run INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    first_idx INTEGER NOT NULL,
    items TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS now_runs (
    run INTEGER PRIMARY KEY,
    jobs INTEGER NOT NULL,
    flat_seq INTEGER,
    states_seq INTEGER
);
CREATE TABLE IF NOT EXISTS now_states (
    run INTEGER NOT NULL,
    block INTEGER NOT NULL,
    states BLOB NOT NULL,
    PRIMARY KEY (run, block)
);
CREATE TABLE IF NOT EXISTS now_rows (
    run INTEGER NOT NULL,
    block INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (run, block)
);
CREATE TABLE IF NOT EXISTS turn_jobs (
    run INTEGER NOT NULL,
    span INTEGER NOT NULL,
    block INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (run, span, block, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS took (
    run INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    blob BLOB NOT NULL,
    PRIMARY KEY (run, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fact_runs (
    run INTEGER PRIMARY KEY,
    meta TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS job_facts (
    run INTEGER NOT NULL,
    block INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (run, block)
);
CREATE TABLE IF NOT EXISTS alerts (
    seq INTEGER PRIMARY KEY,
    run INTEGER NOT NULL,
    ts REAL NOT NULL,
    job TEXT NOT NULL,
    tier TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    reason TEXT NOT NULL,
    log_path TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS agents (
    run INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (run, idx),
    UNIQUE (run, name)
) WITHOUT ROWID;
""" + "".join(f"{t};\n" for t in AUDIT_TRIGGERS)
"""The tables of a new journal (older ones are brought here by the migrations in sqlite.py).

now_runs and now_states: a run's job count, the last transition its saved flat rows include (NULL: not kept),
the transition its saved current states are at (NULL: each turn saved them, schema 11 and older), and current
states; now_rows: its flat rows (turns.FlatRows). now_states and now_rows have one row per block and
are rowid tables, whose pages hold a block's 1,024 or 1,536 bytes where a WITHOUT ROWID one would give each an
overflow page (about 1,000 bytes fit there); turn_jobs: the turn index, keyed by span (see sqlite.SPAN_SHIFT),
block and turn, so a turn writes its keys into the latest span's few pages; took: the durations of successful
attempts, per turn (see store/base.py); fact_runs and job_facts: what the run's scheduler worked out of its plan,
per job (store/facts.py); actions carry the audit hash chain; agents: the executor index each of a run's remote
agents has (Store.agent_index), the same for every scheduler of the run on whatever host."""
