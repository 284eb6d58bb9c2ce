"""Operations views of the CLI: `top` (the pipeline's live figures) and `status --at` (the run at a past moment)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from wloadctl.client import RunClient
from wloadctl.errors import UsageError

_QUIET = ("WAITING", "SUCCEEDED")
"""States `status --at` leaves out of its job list unless --all (as `status` does)."""


def show_top(a: argparse.Namespace, state_dir: Path | None) -> int:
    """`wloadctl top`: the pipeline's figures, refreshed every --interval seconds on a terminal."""
    if a.interval <= 0:
        raise UsageError(f"--interval must be positive, not {a.interval}")
    with RunClient(state_dir) as c:
        if a.json:
            print(json.dumps(c.pipeline(), separators=(",", ":")))
            return 0
        once = a.once or not sys.stdout.isatty()
        try:
            while True:
                lines = _top_lines(c)
                if once:
                    print("\n".join(lines))
                    return 0
                # Home and clear below: one screen repainted in place, as top does.
                sys.stdout.write("\x1b[H\x1b[J" + "\n".join(lines) + f"\n\n(every {a.interval:g}s; Ctrl-C quits)\n")
                sys.stdout.flush()
                time.sleep(a.interval)
        except KeyboardInterrupt:
            return 0


def _top_lines(c: RunClient) -> list[str]:
    from wloadctl.pipeview import render

    return render(c.pipeline())


def show_status_at(a: argparse.Namespace, state_dir: Path | None) -> int:
    """`wloadctl status --at TIME`: every job's state at that moment, rebuilt from the journal."""
    from wloadctl.cli_show import job_line, status_exit

    with RunClient(state_dir) as c:
        st = c.status_at(a.at)
        # The exit code says the run's outcome, as every form of status does, not how it stood at that moment.
        code = status_exit(c.status(with_jobs=False))
    if a.json:
        print(json.dumps(st, separators=(",", ":")))
        return code
    note = f"  ({st['note']})" if st["note"] else ""
    zone = f" ({st['timezone']})" if st["timezone"] else ""  # the plan's zone, --at's clock times are read in
    print(f"run {st['run']}  plan {st['plan']}  business date {st['business_date']}  "
          f"as of {st['at_iso']}{zone}{note}")
    print(f"{st['total']} jobs: " + "  ".join(f"{k} {v}" for k, v in st["counts"].items()))
    shown = [j for j in st["jobs"] if a.all or j["state"] not in _QUIET]
    for j in shown[: None if a.all else 200]:
        print(job_line(j))
    if not a.all and len(shown) > 200:
        print("  ... more (use --all or --json)")
    return code
