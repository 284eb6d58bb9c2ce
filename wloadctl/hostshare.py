"""One host capacity that every run of a user draws on: a lock-protected ledger under the state root.

`wloadctl host --slots N` writes the host's capacity to `host/capacity.json` under the state
root; without it every run keeps its own slots, as before. With it, each scheduler writes its
row in `host/ledger.json` at every beat (under an flock on `host/lock`): its weight (the plan's
`share:`), what it could use now by SLA tier, and what it is allowed and holds. Each one then
computes the same allocation from the rows (SLA tiers first across runs, then fair share by
weight, never more than a run can use) and takes the part of it that the others do not still
hold. A row whose scheduler is gone counts for nothing, so a crash releases its slots at the
next beat of any other run; a clean stop removes its row.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wloadctl.core.codes import TIER_SHIFT
from wloadctl.core.events import SlotsChangedEvent
from wloadctl.errors import UsageError
from wloadctl.procs.health import pid_alive

if TYPE_CHECKING:
    from wloadctl.core.engine import SchedulerCore

HOST_DIR = "host"
"""Directory of the host's capacity and ledger under the state root."""
TIERS = 4
"""SLA tiers, most urgent first (critical, high, standard, low)."""
STALE_AFTER = 30.0
"""Seconds after which a row no beat renewed counts for nothing, even if its pid lives (reused pid)."""


@dataclass(frozen=True, slots=True)
class HostCapacity:
    """What the host offers all the runs of its user together."""

    slots: int
    """Jobs running at once across every run."""

    @staticmethod
    def path(root: Path) -> Path:
        """Where it is kept."""
        return root / HOST_DIR / "capacity.json"

    @classmethod
    def read(cls, root: Path) -> HostCapacity | None:
        """The host's capacity, or None when none was set (each run keeps its own slots)."""
        try:
            data = json.loads(cls.path(root).read_text(encoding="utf-8"))
            return cls(int(data["slots"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, root: Path) -> None:
        """Set it (atomically: running schedulers read it at their next beat).

        Raises:
            UsageError: a capacity below one slot.
        """
        if self.slots < 1:
            raise UsageError(f"--slots {self.slots}: the host needs at least one slot")
        path = self.path(root)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)) + "\n", encoding="utf-8")
        tmp.replace(path)


@dataclass(slots=True)
class Row:
    """One run's line in the ledger."""

    run: str
    """The run's id."""
    plan: str
    """Its plan's name."""
    pid: int
    """Its scheduler's pid (a row of a dead pid counts for nothing)."""
    weight: float
    """The plan's `share:`."""
    demand: list[int] = field(default_factory=lambda: [0] * TIERS)
    """Jobs it could run now (running + ready), by SLA tier."""
    allowed: int = 0
    """Slots it may fill."""
    busy: int = 0
    """Slots it fills now."""
    beat: float = 0.0
    """When the row was last written."""

    def live(self, now: float) -> bool:
        """Whether the row still counts."""
        return now - self.beat < STALE_AFTER and pid_alive(self.pid)


def allocate(slots: int, rows: Sequence[Row]) -> dict[str, int]:
    """Split the host's slots between runs: tier by tier (critical first), by weight within a tier.

    Within a tier every run with demand gets slots in proportion to its weight, never more than
    its demand; what a run cannot use goes round again to the others (water filling). The result
    depends only on the rows, so every scheduler computes the same split.
    """
    out = {r.run: 0 for r in rows}
    left = slots
    for tier in range(TIERS):
        want = {r.run: r.demand[tier] for r in rows if r.demand[tier] > 0}
        weight = {r.run: r.weight for r in rows}
        while left > 0 and want:
            total = sum(weight[k] for k in want)
            gave = 0
            for k in sorted(want, key=lambda k: (-weight[k], k)):
                n = min(want[k], int(left * weight[k] / total))
                out[k] += n
                want[k] -= n
                gave += n
            left -= gave
            if gave == 0:  # fewer slots than runs: one each, heaviest first
                for k in sorted(want, key=lambda k: (-weight[k], k)):
                    if left == 0:
                        break
                    out[k] += 1
                    want[k] -= 1
                    left -= 1
            want = {k: v for k, v in want.items() if v > 0}
    return out


class Ledger:
    """The host's ledger file, read and written under its lock."""

    def __init__(self, root: Path) -> None:
        self.dir = root / HOST_DIR
        """Where the ledger lives."""

    @contextmanager
    def locked(self) -> Iterator[dict[str, Row]]:
        """The rows, writable; written back when the block ends."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            rows = self._read()
            yield rows
            tmp = self.dir / f"ledger.{os.getpid()}.tmp"
            tmp.write_text(json.dumps([asdict(r) for r in rows.values()]), encoding="utf-8")
            tmp.replace(self.dir / "ledger.json")

    def rows(self) -> dict[str, Row]:
        """The rows as they are now (read only: no lock is needed, the file is replaced whole)."""
        return self._read()

    def _read(self) -> dict[str, Row]:
        try:
            data: list[dict[str, Any]] = json.loads((self.dir / "ledger.json").read_text(encoding="utf-8"))
            return {d["run"]: Row(**d) for d in data}
        except (OSError, ValueError, TypeError, KeyError):
            return {}


class HostShare:
    """A scheduler's side of the ledger: its row, and the slots it may fill."""

    def __init__(self, root: Path, run: str, plan: str, weight: float, own_slots: int) -> None:
        self.ledger = Ledger(root)
        """The host's ledger."""
        self.root = root
        """The state root."""
        self.row = Row(run, plan, os.getpid(), weight)
        """This run's row."""
        self.own_slots = own_slots
        """Slots this run's executors offer: it never takes more, whatever the host's share."""

    def beat(self, demand: Sequence[int], busy: int, now: float | None = None) -> int:
        """Write this run's row and return the slots it may fill now.

        Args:
            demand: Jobs it could run now (running + ready), by SLA tier.
            busy: Slots it fills now.
            now: The time (read now by default).
        """
        now = time.time() if now is None else now
        cap = HostCapacity.read(self.root)
        if cap is None:
            return self.own_slots
        row = self.row
        row.demand = [min(int(d), self.own_slots) for d in demand]
        row.busy, row.beat = busy, now
        with self.ledger.locked() as rows:
            for k in [k for k, r in rows.items() if k != row.run and not r.live(now)]:
                del rows[k]  # a crashed or finished run's slots come back
            rows[row.run] = row
            share = allocate(cap.slots, list(rows.values()))[row.run]
            # What the others still hold (a run that lost share finishes its running jobs first).
            held = sum(max(r.busy, r.allowed) for k, r in rows.items() if k != row.run)
            row.allowed = max(0, min(share, cap.slots - held, self.own_slots))
        return row.allowed

    def leave(self) -> None:
        """Remove this run's row (a clean stop)."""
        try:
            with self.ledger.locked() as rows:
                rows.pop(self.row.run, None)
        except OSError:
            pass


def behind(root: Path, run: str, now: float | None = None) -> list[Row]:
    """The other live runs that hold the host's slots, most slots first (what a job here waits behind)."""
    now = time.time() if now is None else now
    if HostCapacity.read(root) is None:
        return []
    rows = [r for r in Ledger(root).rows().values() if r.run != run and r.live(now) and r.busy > 0]
    return sorted(rows, key=lambda r: -r.busy)


def demand_of(core: SchedulerCore) -> list[int]:
    """Jobs a run could run now by SLA tier: those it runs, and its ready ones at the tier of the most
    urgent of them (the ready queue is a heap: reading its top costs nothing, counting it would)."""
    out = [min(n, 1 << 30) for n in core.tiers.in_use[:TIERS]]
    if core.ready and not core.paused and not core.cancelled:
        out[min(TIERS - 1, core.ready[0] >> TIER_SHIFT)] += len(core.ready)
    return out


class SlotGovernor:
    """Feeds a run's core the slots its host share allows, at each beat of its scheduler."""

    def __init__(self, share: HostShare) -> None:
        self.share = share
        """The run's side of the ledger."""
        self.given: int | None = None
        """The slots last given to the core."""

    def beat(self, core: SchedulerCore, now: float) -> None:
        """Write the run's row and give the core its slots when they changed."""
        slots = self.share.beat(demand_of(core), core.busy, now)
        if slots != self.given:
            self.given = slots
            core.feed(SlotsChangedEvent(slots, now, cause_id="host-share"))

    def leave(self) -> None:
        """The run ends: its slots go back to the host."""
        self.share.leave()
