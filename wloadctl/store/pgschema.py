"""The PostgreSQL journal's tables and the migrations that make them, numbered by one version table.

Runs of several installations share a database: each run row names its installation's
namespace (`?namespace=NAME` in the journal URL, `default` otherwise) and the state directory it
belongs to (`home`, host and path). A namespace column rather than a PostgreSQL schema per
installation keeps one version table and one set of migrations for the whole database, and lets
an operator's query reach every installation; the other tables hang off the run's row id.
"""

from __future__ import annotations

VERSION_TABLE = "wloadctl_schema"
"""One row: the schema version the database is at."""
MIGRATION_LOCK = 0x776C6F6164
"""pg_advisory_xact_lock key: two wloadctl processes opening a new database migrate it once."""

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 0 -> 1: the journal's tables.
    (
        f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (one boolean PRIMARY KEY DEFAULT true CHECK (one),"
        " version integer NOT NULL)",
        """CREATE TABLE runs (
            id bigserial PRIMARY KEY,
            ns text NOT NULL,
            home text NOT NULL,
            run_id text UNIQUE NOT NULL,
            plan_name text NOT NULL,
            plan_path text NOT NULL,
            plan_digest text NOT NULL,
            business_date text NOT NULL,
            started double precision NOT NULL,
            ended double precision,
            status text NOT NULL,
            epoch integer NOT NULL DEFAULT 0,
            scheduler_pid integer,
            holder text NOT NULL DEFAULT '',
            lease_until double precision NOT NULL DEFAULT 0,
            settings text NOT NULL DEFAULT '{}',
            next_seq bigint NOT NULL DEFAULT 1
        )""",
        "CREATE INDEX runs_home ON runs (ns, home, id)",
        "CREATE INDEX runs_ns ON runs (ns, id)",
        "CREATE TABLE plans (run bigint PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,"
        " text text NOT NULL, blob text)",
        "CREATE TABLE jobs (run bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE, idx integer NOT NULL,"
        " job_id text NOT NULL, PRIMARY KEY (run, idx))",
        "CREATE INDEX jobs_id ON jobs (run, job_id)",
        # One row per loop turn: packed records (wloadctl/turns.py); seq numbers a run's transitions.
        "CREATE TABLE turns (run bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE, seq bigint NOT NULL,"
        " upto bigint NOT NULL, n integer NOT NULL, recs bytea NOT NULL, causes text NOT NULL,"
        " reasons text NOT NULL, PRIMARY KEY (run, seq))",
        "CREATE INDEX turns_upto ON turns (run, upto)",
        "CREATE TABLE expansions (seq bigserial PRIMARY KEY, run bigint NOT NULL REFERENCES runs (id)"
        " ON DELETE CASCADE, job_id text NOT NULL, first_idx integer NOT NULL, items text NOT NULL)",
        "CREATE TABLE actions (seq bigserial PRIMARY KEY, run bigint NOT NULL REFERENCES runs (id)"
        " ON DELETE CASCADE, ts double precision NOT NULL, username text NOT NULL, verb text NOT NULL,"
        " job text NOT NULL, reason text NOT NULL, outcome text NOT NULL, applied boolean NOT NULL)",
        "CREATE INDEX actions_run ON actions (run, seq)",
        "CREATE TABLE alerts (seq bigserial PRIMARY KEY, run bigint NOT NULL REFERENCES runs (id)"
        " ON DELETE CASCADE, ts double precision NOT NULL, job text NOT NULL, tier text NOT NULL,"
        " state text NOT NULL, attempts integer NOT NULL, reason text NOT NULL, log_path text NOT NULL)",
        "CREATE INDEX alerts_run ON alerts (run, seq)",
    ),
    # 1 -> 2: a run's current states and job count, and the turn index (see store/base.py); the runs
    # journaled before are brought into them at their next write.
    (
        "CREATE TABLE now_runs (run bigint PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,"
        " jobs integer NOT NULL)",
        "CREATE TABLE now_states (run bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,"
        " block integer NOT NULL, states bytea NOT NULL, PRIMARY KEY (run, block))",
        "CREATE TABLE turn_jobs (run bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,"
        " block integer NOT NULL, seq bigint NOT NULL, PRIMARY KEY (run, block, seq))",
        # Durations of successful attempts, per turn (the history that expected durations come from).
        "CREATE TABLE took (run bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE, seq bigint NOT NULL,"
        " blob bytea NOT NULL, PRIMARY KEY (run, seq))",
    ),
    # 2 -> 3: the audit trail is hash-chained and append-only (wloadctl.store.audit); actions
    # already written stay unchained.
    (
        "ALTER TABLE actions ADD COLUMN prev_hash text NOT NULL DEFAULT '',"
        " ADD COLUMN hash text NOT NULL DEFAULT ''",
        "CREATE FUNCTION wloadctl_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'audit rows are append-only'; END $$",
        "CREATE TRIGGER actions_append_only BEFORE UPDATE OR DELETE ON actions"
        " FOR EACH ROW EXECUTE FUNCTION wloadctl_audit_append_only()",
    ),
    # 3 -> 4: a run's flat rows (wloadctl.turns.FlatRows, one row per block) and the last transition
    # they include (NULL: not kept); the runs journaled before are brought into them at their next write.
    (
        "ALTER TABLE now_runs ADD COLUMN flat_seq bigint",
        "CREATE TABLE now_rows (run bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,"
        " block integer NOT NULL, data bytea NOT NULL, PRIMARY KEY (run, block))",
    ),
    # 4 -> 5: what a run's scheduler works out of its plan, per job (wloadctl.store.facts); a run
    # journaled before gets them at its next start or resume.
    (
        "CREATE TABLE fact_runs (run bigint PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE, meta text NOT NULL)",
        "CREATE TABLE job_facts (run bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,"
        " block integer NOT NULL, data bytea NOT NULL, PRIMARY KEY (run, block))",
    ),
    # 5 -> 6: the executor index of each of a run's remote agents (Store.agent_index), the same for every
    # scheduler of the run on whatever host (it was a file of the scheduler's state directory, agents.json).
    (
        "CREATE TABLE IF NOT EXISTS agents (run bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,"
        " idx integer NOT NULL, name text NOT NULL, PRIMARY KEY (run, idx), UNIQUE (run, name))",
    ),
    # 6 -> 7: a job's actions (history JOB) found by their job: a glob verb journals a row per job it names.
    (
        "CREATE INDEX IF NOT EXISTS actions_job ON actions (run, job, seq)",
    ),
    # 7 -> 8: current states are saved late, as the flat rows are (store/current.py): the transition the saved
    # blocks are at (NULL: each turn saved them, as before).
    (
        "ALTER TABLE now_runs ADD COLUMN states_seq bigint",
    ),
)
"""MIGRATIONS[k] brings a database at version k to k + 1 (a new database runs them all, in one transaction)."""
SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this wloadctl writes."""

RUN_COLUMNS = ("id, run_id, plan_name, plan_path, plan_digest, business_date, started, ended, status, epoch,"
               " scheduler_pid, lease_until, settings")
"""The runs columns a RunRow is made of, in its order."""
