"""One host capacity that every run of a user draws on: a lock-protected ledger under the state root.

`wloadctl host --slots N --cpus C --memory SIZE` writes the host's capacity to `host/capacity.json`
under the state root; without it every run keeps its own slots, and only each executor's own
--cpus/--memory bound the jobs that claim `cpu`/`memory`, as before. With it, each scheduler writes
its row in `host/ledger.json` at every beat (under an flock on `host/lock`): its weight (the plan's
`share:`), what it could use now by SLA tier, and what it is allowed and holds. Each one then
computes the same allocation from the rows (SLA tiers first across runs, then fair share by
weight, never more than a run can use) and takes the part of it that the others do not still
hold. Slots are split by count (`allocate`); cpu and memory claims job by job (`grant`), because a
job claiming two CPUs cannot start on two halves of a share. A row whose scheduler is gone counts
for nothing, so a crash releases its slots at the next beat of any other run, except the claims
its jobs held while one of its executors still lives (they keep running for a scheduler that comes
back); a clean stop removes its row.
"""

from __future__ import annotations

import fcntl
import heapq
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wloadctl.core.codes import TIER_SHIFT
from wloadctl.core.events import HostClaimsEvent, SlotsChangedEvent
from wloadctl.core.holding import HOST_CPU, HOST_MEMORY, HOST_UNLIMITED, host_claim
from wloadctl.core.states import JobState
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
KINDS = ("cpu", "memory")
"""What jobs claim of the host besides a slot: CPUs (kept in thousandths) and memory (MiB)."""
RESOURCE_OF = {"cpu": HOST_CPU, "memory": HOST_MEMORY}
"""The core's resource of each kind."""
WAITING_LISTED = 32
"""A run's waiting claims written in its row, most urgent first: what the next beats can grant."""


HOST_MOST_SLOTS = 1_000_000
"""The most slots a host capacity takes."""
HOST_MOST_CPUS = 1_000_000.0
"""The most CPUs a host capacity takes."""
HOST_MOST_MIB = 1 << 40
"""The most memory (MiB) a host capacity takes."""


@dataclass(frozen=True, slots=True)
class HostCapacity:
    """What the host offers all the runs of its user together."""

    slots: int
    """Jobs running at once across every run (0: each run keeps its own slots)."""
    cpus: float = 0.0
    """CPUs the jobs that claim `cpu` share across every run (0: no host limit)."""
    memory: int = 0
    """MiB the jobs that claim `memory` share across every run (0: no host limit)."""

    def claims(self) -> dict[str, int]:
        """The cpu (thousandths) and memory (MiB) it limits, by kind; unlimited kinds are left out."""
        out = {"cpu": round(self.cpus * 1000), "memory": self.memory}
        return {k: v for k, v in out.items() if v > 0}

    @staticmethod
    def path(root: Path) -> Path:
        """Where it is kept."""
        return root / HOST_DIR / "capacity.json"

    @classmethod
    def read(cls, root: Path) -> HostCapacity | None:
        """The host's capacity, or None when none was set (each run keeps its own slots)."""
        try:
            data = json.loads(cls.path(root).read_text(encoding="utf-8"))
            cap = cls(int(data["slots"]), float(data.get("cpus", 0.0)), int(data.get("memory", 0)))
        except (OSError, ValueError, KeyError, TypeError, OverflowError):
            return None
        # (a file written by hand, or by a version that took NaN: no capacity rather than every run failing)
        return cap if math.isfinite(cap.cpus) and cap.cpus <= HOST_MOST_CPUS else None

    def write(self, root: Path) -> None:
        """Set it (atomically: running schedulers read it at their next beat).

        Raises:
            UsageError: a negative capacity, or nothing to share.
        """
        for flag, value, most in (("--slots", self.slots, HOST_MOST_SLOTS), ("--cpus", self.cpus, HOST_MOST_CPUS),
                                  ("--memory", self.memory, HOST_MOST_MIB)):
            if not math.isfinite(value):
                raise UsageError(f"{flag} {value}: the host's capacity must be a number")
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            if value < 0:
                raise UsageError(f"{flag} {shown}: the host's capacity cannot be negative")
            if value > most:
                raise UsageError(f"{flag} {shown}: more than a host has (at most {most:,.0f})")
        if not (self.slots or self.cpus or self.memory):
            raise UsageError("the host's capacity needs slots, cpus or memory above 0 (or `wloadctl host --off`)")
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
    held: dict[str, int] = field(default_factory=dict)
    """Claims its dispatched jobs hold, by kind (cpu in thousandths, memory in MiB)."""
    granted: dict[str, int] = field(default_factory=dict)
    """Claims it may hold now, by kind."""
    waiting: list[list[int]] = field(default_factory=list)
    """Its most urgent jobs waiting for the host's cpu or memory, in order: [tier, cpu, memory] each."""
    holders: list[list[int]] = field(default_factory=list)
    """[pid, start time] of its executors: while one lives its jobs may still run and hold their claims."""
    used: float = 0.0
    """Seconds of the whole host its jobs' claims have held (by their larger part, cpu or memory): between
    runs equally far below their share, the one that used less is served first."""

    def live(self, now: float) -> bool:
        """Whether the row still counts."""
        return now - self.beat < STALE_AFTER and pid_alive(self.pid)

    def lingers(self) -> bool:
        """Whether its scheduler is gone but its claims still count: an executor of its lives."""
        return any(self.keeps().values()) and any(_started(pid) == at for pid, at in self.holders)

    def keeps(self) -> dict[str, int]:
        """What it keeps the others from: what it may hold or holds, whichever is more, by kind."""
        most = {k: max(self.held.get(k, 0), self.granted.get(k, 0)) for k in KINDS}
        return {k: v for k, v in most.items() if v}


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


def grant(cap: dict[str, int], rows: Sequence[Row]) -> dict[str, dict[str, int]]:
    """Split the host's cpu and memory between runs, job by job: what each run may claim in all.

    Each run keeps what its running jobs hold. The rest goes to the runs' waiting jobs one at a
    time: the most urgent SLA tier first, within it the run furthest below its weighted share (its
    dominant share: the larger of its cpu and memory parts, over its weight), each run's jobs in its
    own order (between runs equally far below their share, the one that has used the host less first).
    When the job chosen does not fit in what is left, granting stops: no smaller job
    behind it takes the room it waits for (it would wait forever behind them), as within a run.
    A job claiming more than the host has is passed over (`why` says it cannot run).

    Args:
        cap: the host's cpu (thousandths) and memory (MiB), by kind; a kind left out is not limited.
        rows: the runs that count.

    Returns:
        What each run may claim, by run and kind.
    """
    kinds = [k for k in KINDS if cap.get(k, 0) > 0]
    out = {r.run: {k: r.held.get(k, 0) for k in kinds} for r in rows}
    left = {k: cap[k] - sum(o[k] for o in out.values()) for k in kinds}
    weight = {r.run: max(r.weight, 1e-6) for r in rows}
    queues = {r.run: [w for w in r.waiting if all(w[1 + KINDS.index(k)] <= cap[k] for k in kinds)] for r in rows}
    pos = dict.fromkeys(queues, 0)

    used = {r.run: r.used / weight[r.run] for r in rows}

    def dominant(run: str) -> float:
        return max((out[run][k] / cap[k] for k in kinds), default=0.0) / weight[run]

    while kinds:
        heads = [(run, q[pos[run]]) for run, q in queues.items() if pos[run] < len(q)]
        if not heads:
            break
        top = min(w[0] for _r, w in heads)
        run, job = min(
            ((r, w) for r, w in heads if w[0] == top),
            key=lambda rw: (dominant(rw[0]), used[rw[0]], -weight[rw[0]], rw[0]),
        )
        need = {k: job[1 + KINDS.index(k)] for k in kinds}
        if any(need[k] > left[k] for k in kinds):
            break
        for k in kinds:
            out[run][k] += need[k]
            left[k] -= need[k]
        pos[run] += 1
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
    """A scheduler's side of the ledger: its row, the slots it may fill and the cpu and memory its jobs may claim."""

    def __init__(self, root: Path, run: str, plan: str, weight: float, own_slots: int) -> None:
        self.ledger = Ledger(root)
        """The host's ledger."""
        self.root = root
        """The state root."""
        self.row = Row(run, plan, os.getpid(), weight)
        """This run's row."""
        self.own_slots = own_slots
        """Slots this run's executors offer: it never takes more, whatever the host's share."""
        self.claims: dict[str, int] = {}
        """The cpu (thousandths) and memory (MiB) its jobs may claim in all, by kind, after the last beat;
        a kind the host does not limit is left out, and all are when it limits none."""
        self.contended = False
        """Other runs waited for the host's cpu or memory at the last beat."""

    def beat(
        self,
        demand: Sequence[int],
        busy: int,
        now: float | None = None,
        held: dict[str, int] | None = None,
        waiting: list[list[int]] | None = None,
        holders: list[int] | None = None,
    ) -> int:
        """Write this run's row and return the slots it may fill now (the claims it may hold go to `claims`).

        Args:
            demand: Jobs it could run now (running + ready), by SLA tier.
            busy: Slots it fills now.
            now: The time (read now by default).
            held: Claims its dispatched jobs hold, by kind.
            waiting: Its most urgent jobs waiting for the host's cpu or memory: [tier, cpu, memory] each.
            holders: Pids of its executors (its claims outlive it while one of them lives).
        """
        now = time.time() if now is None else now
        cap = HostCapacity.read(self.root)
        self.claims = {}
        if cap is None:
            return self.own_slots
        row = self.row
        limits = cap.claims()
        if row.beat and row.held and limits:
            row.used += max(row.held.get(k, 0) / v for k, v in limits.items()) * max(0.0, now - row.beat)
        row.demand = [min(int(d), self.own_slots) for d in demand]
        row.busy, row.beat = busy, now
        row.held, row.waiting = dict(held or {}), list(waiting or [])[:WAITING_LISTED]
        row.holders = [[pid, _started(pid)] for pid in holders or ()]
        with self.ledger.locked() as rows:
            for k, r in list(rows.items()):
                if k != row.run and not r.live(now):
                    if r.lingers():
                        # Its jobs may still run, some sent since its last beat: it keeps all it might hold
                        # (what it held or was granted), and wants nothing more.
                        r.held = r.granted = r.keeps()
                        r.demand, r.busy, r.allowed, r.waiting = [0] * TIERS, 0, 0, []
                    else:
                        del rows[k]  # a crashed or finished run's slots and claims come back
            rows[row.run] = row
            others = [r for k, r in rows.items() if k != row.run]
            if cap.slots:
                share = allocate(cap.slots, list(rows.values()))[row.run]
                # What the others still hold (a run that lost share finishes its running jobs first).
                taken = sum(max(r.busy, r.allowed) for r in others)
                row.allowed = max(0, min(share, cap.slots - taken, self.own_slots))
            else:
                row.allowed = self.own_slots
            mine = grant(limits, list(rows.values()))[row.run]
            self.contended = any(r.waiting for r in others)
            row.granted = {
                k: max(0, min(mine[k], limits[k] - sum(r.keeps().get(k, 0) for r in others))) for k in limits
            }
            self.claims = dict(row.granted)
        return row.allowed

    def leave(self) -> None:
        """Remove this run's row (a clean stop)."""
        try:
            with self.ledger.locked() as rows:
                rows.pop(self.row.run, None)
        except OSError:
            pass


def behind(root: Path, run: str, now: float | None = None, kinds: Sequence[str] = ()) -> list[Row]:
    """The other runs that hold the host's slots (or, given `kinds`, its cpu or memory), most first: what a
    job here waits behind. A crashed run whose executors live still holds its claims."""
    now = time.time() if now is None else now
    cap = HostCapacity.read(root)
    if cap is None or not (kinds or cap.slots):
        return []
    rows = [r for r in Ledger(root).rows().values() if r.run != run]
    if kinds:
        out = [r for r in rows if (r.live(now) or r.lingers()) and any(r.held.get(k, 0) for k in kinds)]
        return sorted(out, key=lambda r: [-r.held.get(k, 0) for k in kinds])
    return sorted((r for r in rows if r.live(now) and r.busy > 0), key=lambda r: -r.busy)


def claims_of(core: SchedulerCore) -> tuple[dict[str, int], list[list[int]]]:
    """What a run's dispatched jobs hold of the host's cpu and memory, and its most urgent jobs waiting for
    them ([tier, cpu, memory] each): those parked on the host's share (a ready job reached for dispatch
    parks there while the share has no room; those not reached wait for a slot first)."""
    res = core.resources
    if not res.host:
        return {}, []
    held = {
        k: res.capacity_of[name] - res.res_free[name]
        for k, name in RESOURCE_OF.items()
        if res.capacity_of[name] < HOST_UNLIMITED
    }
    state, key_base, ready = core.state, core.key_base, int(JobState.READY)
    parked = {i for name in RESOURCE_OF.values() for i in res.parked[name] if state[i] == ready}
    waiting = []
    for i in heapq.nsmallest(WAITING_LISTED, parked, key=lambda i: key_base[i] | i):
        need = dict(host_claim(core.specs[i]))
        waiting.append([core.tier[i], need.get(HOST_CPU, 0), need.get(HOST_MEMORY, 0)])
    return held, waiting


def claims_text(claims: dict[str, int]) -> str:
    """Claims in words: `cpu 2, memory 512 MiB` (empty for none)."""
    parts = [f"cpu {claims['cpu'] / 1000:g}"] if claims.get("cpu") else []
    return ", ".join([*parts, *([f"memory {claims['memory']} MiB"] if claims.get("memory") else [])])


def _started(pid: int) -> int:
    """When a process started (clock ticks since boot; 0 when it is gone): a reused pid starts later."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return int(fields[19]) if len(fields) > 19 and fields[0] != "Z" else 0


def demand_of(core: SchedulerCore) -> list[int]:
    """Jobs a run could run now by SLA tier: those it runs, and its ready ones at the tier of the most
    urgent of them (the ready queue is a heap: reading its top costs nothing, counting it would)."""
    out = [min(n, 1 << 30) for n in core.tiers.in_use[:TIERS]]
    if core.ready and not core.paused and not core.cancelled:
        out[min(TIERS - 1, core.ready[0] >> TIER_SHIFT)] += len(core.ready)
    return out


class SlotGovernor:
    """Feeds a run's core the slots, cpu and memory its host share allows, at each beat of its scheduler."""

    def __init__(self, share: HostShare, holders: Callable[[], list[int]] = list) -> None:
        self.share = share
        """The run's side of the ledger."""
        self.holders = holders
        """Pids of the run's executors now."""
        self.given: int | None = None
        """The slots last given to the core."""

    def beat(self, core: SchedulerCore, now: float) -> None:
        """Write the run's row and give the core its slots and claims when they changed."""
        held, waiting = claims_of(core)
        share = self.share
        holders = self.holders() if core.resources.host else []
        slots = share.beat(demand_of(core), core.busy, now, held, waiting, holders)
        if slots != self.given:
            self.given = slots
            core.feed(SlotsChangedEvent(slots, now, cause_id="host-share"))
        res = core.resources
        if share.claims or res.host:
            # Compared with what the core holds now: a job's claim given back to the host (contended) shrank it.
            want = (share.claims.get("cpu", HOST_UNLIMITED), share.claims.get("memory", HOST_UNLIMITED))
            if (
                not res.host
                or want != (res.capacity_of[HOST_CPU], res.capacity_of[HOST_MEMORY])
                or share.contended != res.host_returns
            ):
                core.feed(HostClaimsEvent(*want, share.contended, now, cause_id="host-share"))

    def leave(self) -> None:
        """The run ends: its slots go back to the host."""
        self.share.leave()
