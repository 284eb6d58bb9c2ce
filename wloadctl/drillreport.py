"""What a drill found, how it watches a run while it waits, and its record in the run's journal."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wloadctl.core.states import ACTIVE, JobState
from wloadctl.procs.health import pid_alive
from wloadctl.store import Store

DRILL_VERB = "drill"
"""The audit trail's verb of a drill report (its `job` is `*`, its outcome the report's one line)."""
POLL = 0.02
"""Seconds between looks at the journal while a drill waits."""


@dataclass
class DrillReport:
    """What a drill did and found."""

    kind: str
    """failover or agent-loss."""
    run: str
    """The run's id."""
    ok: bool = False
    """Every check passed."""
    facts: dict[str, Any] = field(default_factory=dict)
    """Figures and findings, by name (seconds are from the kill)."""
    problems: list[str] = field(default_factory=list)
    """What failed, one line each."""

    def summary(self) -> str:
        """One line: the verdict and the main figures (the journal's outcome of the drill)."""
        f = self.facts
        verdict = "PASSED" if self.ok else "FAILED: " + "; ".join(self.problems)
        if self.kind == "failover":
            figs = [f"takeover {_secs(f.get('takeover_s'))}", f"first start {_secs(f.get('first_start_s'))}",
                    f"epoch {f.get('epoch_from')}->{f.get('epoch_to', '?')}",
                    f"{f.get('succeeded_before', 0)} succeeded job(s), {len(f.get('reran', []))} ran again",
                    f"old active {f.get('old_active', '?')}"]
            return f"failover drill ({f.get('mode')}) of run {self.run}: {verdict}; " + ", ".join(figs)
        figs = [f"LOST after {_secs(f.get('lost_s'))}", f"{len(f.get('held', {}))} task(s) settled after "
                f"{_secs(f.get('settled_s'))}, reassigned after {_secs(f.get('reassigned_s'))}"]
        return f"agent-loss drill of {f.get('agent')} in run {self.run}: {verdict}; " + ", ".join(figs)

    def as_dict(self) -> dict[str, Any]:
        """The report as a JSON object."""
        return {"drill": self.kind, "run": self.run, "ok": self.ok, **self.facts, "problems": self.problems,
                "summary": self.summary()}


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}s"


class EventTail:
    """The run's events file (events.jsonl) from where it ended when the drill began: events other than transitions."""

    def __init__(self, path: Path) -> None:
        self.path = path
        """The file."""
        self.offset = path.stat().st_size if path.exists() else 0
        """Where the next read starts."""
        self.seen: list[dict[str, Any]] = []
        """Every event read so far."""

    def read(self) -> list[dict[str, Any]]:
        """Events appended since the last read (a line still being written waits for the next)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.seen
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            if b'"event":"transition"' in line:
                continue
            try:
                self.seen.append(json.loads(line))
            except ValueError:
                continue
        return self.seen

    def find(self, kind: str, **match: Any) -> dict[str, Any] | None:
        """The first event of a kind whose fields match."""
        return next((e for e in self.read() if e.get("event") == kind and
                     all(e.get(k) == v for k, v in match.items())), None)


class JournalWatch:
    """A run's transitions from the start of a drill, read as the journal grows."""

    def __init__(self, store: Store, run: int) -> None:
        self.store = store
        """The journal (read-only)."""
        self.run = run
        """The run's row id."""
        self.seq = store.last_seq(run)
        """The last transition read."""
        self.rows: list[tuple] = []
        """(seq, idx, from, to, attempt, ts, executor, exit_code, reason) since the drill began."""

    def read(self) -> list[tuple]:
        """The transitions journaled since the last read (all of them are kept in `rows`)."""
        new: list[tuple] = []
        while batch := self.store.transitions_since(self.run, self.seq):
            new.extend(batch)
            self.seq = batch[-1][0]
        self.rows.extend(new)
        return new

    def succeeded(self) -> dict[int, int]:
        """Index -> attempt of every job that has succeeded."""
        return {r[0]: r[3] for r in self.store.job_rows(self.run) if r[2] == JobState.SUCCEEDED}

    def reran(self, succeeded: dict[int, int]) -> list[int]:
        """Jobs of `succeeded` that were queued or started again since the drill began."""
        self.read()
        return sorted({r[1] for r in self.rows if r[1] in succeeded and r[3] in ACTIVE})


def wait_until(pred: Any, timeout: float) -> Any:
    """Poll `pred` every POLL seconds until it is truthy (its value) or `timeout` passed (None)."""
    deadline = time.time() + timeout
    while True:
        got = pred()
        if got or time.time() >= deadline:
            return got or None
        time.sleep(POLL)


def is_wloadctl(pid: int, *words: bytes) -> bool:
    """Whether a live process of this host (this pid namespace) is wloadctl, with `words` on its command line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return pid_alive(pid) and any(b"wloadctl" in a for a in argv) and all(w in argv for w in words)


def journal_report(store_dir: Path | None, run: int, rep: DrillReport) -> None:
    """Append the report to the run's audit trail (verb `drill`, job `*`, the summary as its outcome)."""
    from wloadctl.ipc.ctlsock import this_process

    with Store.open(store_dir, create=False) as st:
        st.record_action(run, this_process().user, DRILL_VERB, "*", f"{rep.kind} drill", rep.summary(), rep.ok,
                         time.time())


def last_drill(store: Store, run: int) -> dict[str, Any] | None:
    """The run's latest drill report from its audit trail ({"ts", "user", "ok", "summary"}), None if none."""
    rows = [a for a in store.actions(run, "*") if a[2] == DRILL_VERB]
    if not rows:
        return None
    ts, user, _verb, _job, _reason, outcome, applied = rows[-1]
    return {"ts": ts, "user": user, "ok": bool(applied), "summary": outcome}


def report_lines(rep: DrillReport) -> Iterator[str]:
    """The report as text."""
    f = rep.facts
    yield rep.summary()
    names = {"takeover_s": "takeover", "first_dispatch_s": "first dispatch", "first_start_s": "first start",
             "lost_s": "agent LOST", "settled_s": "tasks settled", "reassigned_s": "tasks reassigned"}
    for key, label in names.items():
        if key in f:
            yield f"  {label:<21}{_secs(f[key]):>7} after the kill"
    for key in ("first_job", "new_pid", "new_host", "old_active", "old_epoch_dispatches", "agent_pid", "killed_pids",
                "held", "lost_tasks", "note"):
        if key in f:
            yield f"  {key.replace('_', ' '):<21}{f[key]}"
