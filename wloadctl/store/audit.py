"""The tamper-evident audit trail: each operator action carries the hash of the run's previous one.

A row's hash covers its contents and the previous row's hash, so an edited row no longer
matches its hash and a removed one breaks the next row's link. Both journals refuse UPDATE and
DELETE of audit rows with triggers; the chain catches what was done around them (triggers
dropped, the file edited). Rows written before the chain existed have no hash: they are
counted, not judged, and only before a run's first chained row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

GENESIS = "0" * 64
"""The `prev_hash` of a run's first chained action."""
APPEND_ONLY = "audit rows are append-only"
"""The message of the triggers that refuse UPDATE and DELETE of audit rows."""
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""How a hashed body is encoded (one encoder: json.dumps with options makes one per call)."""


def action_hash(prev: str, ts: float, user: str, verb: str, job: str, reason: str, outcome: str,
                applied: bool | int) -> str:
    """SHA-256 of one action's contents after the previous action's hash."""
    body = _ENCODE([prev, float(ts), user, verb, job, reason, outcome, bool(applied)])
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


ActionRow = tuple[float, str, str, str, str, str, bool]
"""One operator action as a store appends it: (ts, user, verb, job, reason, outcome, applied)."""


def chained(prev: str, rows: Sequence[ActionRow]) -> list[tuple[float, str, str, str, str, str, bool, str, str]]:
    """The rows with their (prev_hash, hash), each chained to the one before it, the first to `prev`.

    Computed here, in one pass, so that a verb's rows (one per job, thousands for a glob) are
    appended with one read of the run's last hash and one insert of them all.
    """
    out = []
    sha, last, mid = hashlib.sha256, None, ""
    for ts, user, verb, job, reason, outcome, applied in rows:
        if (ts, user, verb) != last:
            # The body action_hash encodes, its shared part made once for the rows that share it.
            last = (ts, user, verb)
            mid = _ENCODE([float(ts), user, verb])[1:-1]
        body = f'["{prev}",{mid},{_ENCODE([job, reason, outcome, bool(applied)])[1:]}'
        h = sha(body.encode("utf-8", "surrogatepass")).hexdigest()
        out.append((float(ts), user, verb, job, reason, outcome, bool(applied), prev, h))
        prev = h
    return out


@dataclass(frozen=True, slots=True)
class ChainReport:
    """What `wloadctl audit --verify` found."""

    checked: int
    """Chained rows whose link and hash were checked."""
    unchained: int
    """Rows from before the chain (no hash), counted only."""
    broken: tuple[int, int, str] | None = None
    """(run row id, action seq, what is wrong) of the first broken link; None when the chain holds."""

    @property
    def ok(self) -> bool:
        """Whether every link holds."""
        return self.broken is None


def verify(rows: Iterable[tuple]) -> ChainReport:
    """Check (seq, run, ts, user, verb, job, reason, outcome, applied, prev_hash, hash) rows, by run then seq."""
    last: dict[int, str] = {}
    checked = unchained = 0
    for seq, run, ts, user, verb, job, reason, outcome, applied, prev, h in rows:
        if not h and run not in last:
            unchained += 1
            continue
        want_prev = last.get(run, GENESIS)
        if not h:
            return ChainReport(checked, unchained, (run, seq, "the row has no hash after chained rows"))
        if prev != want_prev:
            why = ("the previous row of the run is missing or was changed" if run in last
                   else "the run's first chained row does not start the chain (rows before it were removed)")
            return ChainReport(checked, unchained, (run, seq, why))
        if action_hash(prev, ts, user, verb, job, reason, outcome, applied) != h:
            return ChainReport(checked, unchained, (run, seq, "the row was changed after it was written"))
        last[run] = h
        checked += 1
    return ChainReport(checked, unchained)
