"""Every run under a state root, live or finished, read cheaply (`wloadctl runs`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from wloadctl.client import RunClient, lease_held, live_header
from wloadctl.core.sla import standing_flags
from wloadctl.core.states import TERMINAL, JobState, is_holding
from wloadctl.errors import WloadError, printable
from wloadctl.paths import read_summary
from wloadctl.store import DB_NAME, RunRow, Store

_NAMES = [s.name for s in JobState]


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One run as `wloadctl runs` lists it."""

    run: str
    """The run's id."""
    plan: str
    """Its plan's name."""
    business_date: str
    """The business date it is for."""
    status: str
    """running | holding (live), succeeded | failed | cancelled | interrupted | held (stopped)."""
    done: int
    """Jobs in a terminal state."""
    total: int
    """Jobs in the run."""
    at_risk: int
    """Jobs flagged AT_RISK (and not LATE since)."""
    late: int
    """Jobs flagged LATE."""
    started: float
    """When it started, epoch seconds."""
    state_dir: str
    """Its state directory."""
    counts: dict[str, int]
    """Jobs per state name (empty when unknown)."""
    latest: bool = True
    """Whether it is the latest run of its state directory (an earlier one is only read)."""
    host: str = ""
    """Host of its state directory, for a run of a server journal ("" for a state directory's own journal)."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return asdict(self)


def _progress(counts: list[int] | tuple[int, ...]) -> tuple[int, int, dict[str, int]]:
    done = sum(counts[s] for s in TERMINAL if s < len(counts))
    named = {_NAMES[k]: n for k, n in enumerate(counts[: len(_NAMES)]) if n}
    return done, sum(counts[: len(_NAMES)]), named


def _risk(store: Store, run: RunRow, live: bool) -> tuple[int, int]:
    # (A run no scheduler runs: a job still AT_RISK whose deadline has passed since is LATE.)
    flags = standing_flags(store.alerts(run.id), None if live else time.time())
    late = sum(1 for f in flags.values() if f == "LATE")
    return len(flags) - late, late


def _entry(store: Store, run: RunRow, state_dir: Path, counts: list[int] | tuple[int, ...] | None,
           status: str, latest: bool, host: str = "") -> RunEntry:
    if counts is None:
        summary = read_summary(state_dir, run.run_id)
        if summary is not None and summary.get("seq") == store.last_seq(run.id):
            counts = summary.get("counts") or []
        else:
            # Stopped without closing figures (its scheduler was killed), or an operator's verb (rerun, set-ok...)
            # journaled since its scheduler wrote them: the journal's own count, as `status` reads it.
            counts = [0] * len(_NAMES)
            for s, n in store.state_counts(run.id):
                counts[s] = n
    done, total, named = _progress(counts)
    at_risk, late = _risk(store, run, live=status in ("running", "holding"))
    return RunEntry(run.run_id, run.plan_name, run.business_date, status, done, total, at_risk, late,
                    run.started, str(state_dir), named, latest, host)


def runs_of(state_dir: Path) -> list[RunEntry]:
    """The runs journaled in one state directory, oldest first (the latest may be live).

    Raises:
        WloadError: the journal cannot be read.
    """
    with RunClient(state_dir) as client:
        store, latest = client.store, client.run
        out: list[RunEntry] = []
        for run in store.runs():
            header = client.board_header() if run.id == latest.id else None
            if header is not None:
                status = "holding" if is_holding(header.counts) else "running"
                out.append(_entry(store, run, state_dir, header.counts[: len(_NAMES)], status, True))
            else:
                # A run left `running` in the journal with no live scheduler was cut off.
                status = "interrupted" if run.status == "running" else run.status
                out.append(_entry(store, run, state_dir, None, status, run.id == latest.id))
        return out


def journal_runs() -> list[RunEntry]:
    """Every run of the server journal in force (its namespace, whatever state directory or host), newest first.

    A run is live when its board is on this host, or when the journal's lease says a scheduler
    (of another host) holds it; its counts are then the board's, or the journal's.

    Raises:
        WloadError: the journal cannot be read.
    """
    with Store.open(None, create=False, readonly=True) as store:
        runs = store.runs()
        homes = [_home(run) for run in runs]
        latest = {home: run.id for home, run in zip(homes, runs, strict=True)}  # the last of each home wins
        out: list[RunEntry] = []
        for (host, state_dir), run in zip(homes, runs, strict=True):
            last = latest[(host, state_dir)] == run.id
            header = live_header(run.run_id) if run.status == "running" else None
            if header is not None:
                status = "holding" if is_holding(header.counts) else "running"
                out.append(_entry(store, run, state_dir, header.counts[: len(_NAMES)], status, last, host))
                continue
            if lease_held(store, run, state_dir):
                counts = [0] * len(_NAMES)  # its scheduler is elsewhere: the journal's own count
                for s, n in store.state_counts(run.id):
                    counts[s] = n
                status = "holding" if is_holding(counts) else "running"
                out.append(_entry(store, run, state_dir, counts, status, last, host))
                continue
            status = "interrupted" if run.status == "running" else run.status
            out.append(_entry(store, run, state_dir, None, status, last, host))
    out.sort(key=lambda e: e.started, reverse=True)
    return out


def _home(run: RunRow) -> tuple[str, Path]:
    """(host, state directory) a server journal's run was started in, as its settings say."""
    import json

    settings = json.loads(run.settings or "{}")
    return str(settings.get("host") or ""), Path(str(settings.get("state_dir") or "."))


def list_runs(root: Path) -> tuple[list[RunEntry], list[str]]:
    """Every run of every state directory directly under `root`, newest first, and the journals unread.

    Returns:
        (runs, problems): a line per state directory whose journal could not be read.
    """
    entries: list[RunEntry] = []
    problems: list[str] = []
    if not root.is_dir():
        return entries, problems
    for journal in sorted(root.glob(f"*/{DB_NAME}")):
        try:
            entries += runs_of(journal.parent)
        except WloadError as e:
            problems.append(f"{journal.parent}: {e.one_line()}")
        except Exception as e:
            if not (isinstance(e, ValueError | LookupError | OSError) or type(e).__module__ == "sqlite3"):
                raise
            # Damage the first look at a journal does not catch (a mangled schema, a row that does not decode):
            # that directory is skipped and said, the others listed.
            problems.append(f"{journal.parent}: run journal {journal} is unreadable or corrupt: "
                            f"{printable(f'{type(e).__name__}: {e}')}")
    entries.sort(key=lambda e: e.started, reverse=True)
    return entries, problems
