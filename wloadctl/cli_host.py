"""`wloadctl host`: set the host's capacity that every run draws on, and show who holds it."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from wloadctl.hostshare import HostCapacity, Ledger, allocate
from wloadctl.paths import state_root


def host_command(a: argparse.Namespace) -> int:
    """`wloadctl host [--slots N] [--off] [--root DIR] [--json]`."""
    root = Path(a.root) if a.root else state_root()
    if a.off:
        HostCapacity.path(root).unlink(missing_ok=True)
    elif a.slots is not None:
        HostCapacity(a.slots).write(root)
    cap = HostCapacity.read(root)
    now = time.time()
    rows = [r for r in Ledger(root).rows().values() if r.live(now)] if cap is not None else []
    fair = allocate(cap.slots, rows) if cap is not None else {}
    if a.json:
        print(json.dumps({"slots": cap.slots if cap else None,
                          "runs": [{**asdict(r), "fair": fair.get(r.run, 0)} for r in rows]}, indent=1))
        return 0
    if cap is None:
        print(f"no host capacity set under {root}: every run uses its own executors' slots "
              "(set one with `wloadctl host --slots N`)")
        return 0
    used = sum(r.busy for r in rows)
    print(f"host capacity {cap.slots} slots under {root}: {used} in use by {len(rows)} run(s)")
    for r in sorted(rows, key=lambda r: -r.busy):
        print(f"  {r.plan:<24} {r.run:<24} share {r.weight:g}  running {r.busy}  may fill {r.allowed}  "
              f"wants {sum(r.demand)}")
    return 0
