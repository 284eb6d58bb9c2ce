"""`wloadctl host`: set the host's capacity that every run draws on, and show who holds it."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from wloadctl.errors import UsageError
from wloadctl.hostshare import KINDS, HostCapacity, Ledger, allocate, claims_text
from wloadctl.paths import state_root


def memory_mib(text: str, flag: str = "--memory") -> int:
    """MiB of a command line's memory size: a number of MiB, or with a unit (512M, 4G).

    Raises:
        UsageError: not a size.
    """
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(float(t))
    except (ValueError, OverflowError):  # (OverflowError: "inf")
        raise UsageError(f"{flag} must be MiB or a size like 4G, not {text!r}") from None


def host_command(a: argparse.Namespace) -> int:
    """`wloadctl host [--slots N] [--cpus C] [--memory SIZE] [--off] [--root DIR] [--json]`.

    Options given change only their part of the capacity; the others keep theirs.

    Raises:
        UsageError: a bad size, a negative capacity, or nothing left to share.
    """
    root = Path(a.root) if a.root else state_root()
    if a.off:
        HostCapacity.path(root).unlink(missing_ok=True)
    elif a.slots is not None or a.cpus is not None or a.memory is not None:
        if a.slots is not None and a.slots < 1:
            raise UsageError(f"--slots {a.slots}: the host needs at least one slot (or leave slots out)")
        old = HostCapacity.read(root) or HostCapacity(0)
        HostCapacity(
            old.slots if a.slots is None else a.slots,
            old.cpus if a.cpus is None else a.cpus,
            old.memory if a.memory is None else memory_mib(a.memory),
        ).write(root)
    cap = HostCapacity.read(root)
    now = time.time()
    rows = [r for r in Ledger(root).rows().values() if r.live(now) or r.lingers()] if cap is not None else []
    fair = allocate(cap.slots, rows) if cap is not None else {}
    if a.json:
        print(
            json.dumps(
                {
                    "slots": cap.slots if cap else None,
                    "cpus": cap.cpus if cap else None,
                    "memory": cap.memory if cap else None,
                    "runs": [{**asdict(r), "fair": fair.get(r.run, 0), "live": r.live(now)} for r in rows],
                },
                indent=1,
            )
        )
        return 0
    if cap is None:
        print(
            f"no host capacity set under {root}: every run uses its own executors' slots, cpus and memory "
            "(set one with `wloadctl host --slots N --cpus C --memory SIZE`)"
        )
        return 0
    used = sum(r.busy for r in rows)
    offers = [
        f"{cap.slots} slots" if cap.slots else "slots per run",
        *([f"{cap.cpus:g} cpus"] if cap.cpus else []),
        *([f"{cap.memory} MiB"] if cap.memory else []),
    ]
    held = claims_text({k: sum(r.held.get(k, 0) for r in rows) for k in KINDS})
    print(
        f"host capacity {', '.join(offers)} under {root}: {used} slots in use by {len(rows)} run(s)"
        + (f"; jobs hold {held}" if held else "")
    )
    for r in sorted(rows, key=lambda r: (-r.busy, r.run)):
        line = f"  {r.plan:<24} {r.run:<24} share {r.weight:g}  running {r.busy}"
        if cap.slots:
            line += f"  may fill {r.allowed}  wants {sum(r.demand)}"
        if cap.cpus or cap.memory:
            line += f"  holds {claims_text(r.held) or 'no cpu/memory'}  may claim {claims_text(r.granted) or 'nothing'}"
            line += f"  waiting {len(r.waiting)}" if r.waiting else ""
        print(line + ("" if r.live(now) else "  (scheduler gone; its executors live)"))
    return 0
