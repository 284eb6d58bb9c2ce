"""Reading a finished run without replaying it: `status`, `history` and `why` of one job, beside a replay."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wloadctl.bench.context import Context
from wloadctl.bench.figures import Extra, combine, ratio


def _timed(fn: Callable[[], Any], repeat: int) -> list[dict[str, Extra]]:
    out: list[dict[str, Extra]] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append({"seconds": time.perf_counter() - t0})
    return out


def _command(argv: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "wloadctl", *argv], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def reads(ctx: Context) -> None:
    """A finished no-op run of the big size, then its reads, each beside a replay of its turns."""
    from wloadctl.client import RunClient
    from wloadctl.store import Store

    s = ctx.settings
    jobs = s.sizes.big
    ctx.say(f"reads: no-op bank {jobs:,} jobs, kept for reading")
    run = ctx.run(ctx.plan(jobs, "bank", "noop"), jobs, executors=s.executors, slots=s.slots, keep_state=True,
                  cache="noop")
    state_dir = ctx.last_state_dir
    basis = "in-process call on a fresh client (journal opened, nothing cached)"
    if not run.ok:
        ctx.figures.append(combine("reads", "status", "wloadctl", "bank", jobs, [], basis,
                                   note=f"run {run.status}: {run.error}"))
        return
    with RunClient(state_dir) as c:
        ids = c.ids()
    job = ids[len(ids) // 2]

    def replay() -> None:
        with Store.open(state_dir, create=False, readonly=True) as st:
            rr = st.latest_run()
            assert rr is not None
            st.columns(rr.id)

    def status() -> None:
        with RunClient(state_dir) as c:
            c.status(with_jobs=True, only_unfinished=True, limit=201)

    def history() -> None:
        with RunClient(state_dir) as c:
            c.history(job)

    def why() -> None:
        with RunClient(state_dir) as c:
            c.why(job)

    ctx.say(f"reads: status, history, why of {jobs:,} jobs ({s.repeat} each)")
    figs = {
        "replay of every turn": _timed(replay, s.repeat),
        "status": _timed(status, s.repeat),
        "history of one job": _timed(history, s.repeat),
        "why of one job": _timed(why, s.repeat),
        "status (command)": _timed(lambda: _command(["status", "--state-dir", str(state_dir)]), s.repeat),
        "interpreter start (command)": _timed(lambda: _command(["--version"]), s.repeat),
    }
    made = {name: combine("reads", name, "wloadctl", "bank", jobs, reps,
                          "whole command" if "command" in name else basis) for name, reps in figs.items()}
    ctx.figures.extend(made.values())
    base = made["replay of every turn"]
    for name in ("status", "history of one job", "why of one job"):
        ctx.add_ratio(ratio(f"reads {jobs}: {name} / replay of every turn", made[name], base, "seconds"))
    ctx.add_ratio(ratio(f"reads {jobs}: status command / interpreter start", made["status (command)"],
                        made["interpreter start (command)"], "seconds"))
    _remove(state_dir)


def _remove(state_dir: Path) -> None:
    import shutil

    shutil.rmtree(state_dir, ignore_errors=True)
