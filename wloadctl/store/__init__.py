"""The run journal behind one seam: `Store.open` gives SQLite in a state directory or PostgreSQL from a URL.

Modules: base (the interface, RunRow, the reads both share), sqlite + sqlschema (the embedded default, the only
module importing sqlite3), postgres (psycopg 3, the only module importing psycopg), pgschema (its
tables and migrations).
"""

from __future__ import annotations

from wloadctl.store.base import (
    DB_NAME,
    JOURNAL_ENV,
    JournalUnavailable,
    RunRow,
    StaleEpoch,
    Store,
    default_state_dir,
    journal_exists,
    journal_url,
    run_place,
    without_password,
)

__all__ = ["DB_NAME", "JOURNAL_ENV", "JournalUnavailable", "RunRow", "StaleEpoch", "Store", "default_state_dir",
           "journal_exists", "journal_url", "run_place", "without_password"]
