"""`python -m tui.probe STATE_DIR [--from-plan] [--every-row] [--app]`: what attaching the console to a run costs.

Prints one JSON object: seconds to read the run into the console's model (from the run's shape,
or with --from-plan by parsing its plan as consoles did before the shape), the process's memory
after it, the milliseconds of what the keys do over the model (filters, sorts, a page of rows,
the panes), and with --app the seconds until the console app, headless, has loaded and painted.
--every-row makes the sorts by start, duration, attempt or executor read every job's row, as
consoles did before the journal kept its flat rows.
`wloadctl bench` runs it in a child process, so each figure is one console's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tui.dag_layout import layout
from tui.feed import _load_from_plan, load_model
from tui.filters import JobFilter, parse_filter
from tui.run_figures import summarize
from tui.sla import sla_view
from tui.view_model import JobsModel, job_row, view_order
from wloadctl.client import RunClient
from wloadctl.core.dag import Dag


def rss_mib() -> float:
    """Resident memory of this process now (MiB)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def _ms(fn: Callable[[], Any], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000.0 * statistics.median(times)


def key_costs(model: JobsModel, dag: Dag, now: float) -> dict[str, float]:
    """Milliseconds (median of 3) of what the console's keys make it compute at this size, and the
    memory after the keys that read no more than the rows they show (rss_keys_mib)."""
    everything = JobFilter()

    def page(sort: str) -> Callable[[], Any]:
        def go() -> None:
            order = view_order(model, everything, sort, now=now)
            mid = len(order) // 2
            model.ensure(order[k] for k in range(mid, min(len(order), mid + 50)))
            [job_row(model, order[k], now) for k in range(mid, min(len(order), mid + 50))]
        return go

    first = model.ids[0] if len(model) else ""
    out = {
        "page of rows (j, pagedown)": _ms(page("plan"), 1),
        "filter: state": _ms(lambda: view_order(model, parse_filter("state:running,failed,held"), now=now)),
        "filter: id text": _ms(lambda: view_order(model, parse_filter("close"), now=now)),
        "filter: id glob": _ms(lambda: view_order(model, parse_filter("*_1?"), now=now)),
        "sort: state": _ms(page("state")),
        "sort: id (first)": _ms(page("id"), 1),
        "sort: id (again)": _ms(page("id")),
        "dag pane (first job)": _ms(lambda: layout(dag, first, 2, 2, 20) if first else None),
        "sla pane and header": _ms(lambda: (sla_view(model, now), summarize(model, 0.0, now, False))),
        "find a job by id": _ms(lambda: model.index.get(model.ids[len(model) - 1]) if len(model) else None),
    }
    out["rss_keys_mib"] = rss_mib()
    # Last: the first sort by start reads every job's start, end, attempt and executor (the journal's
    # flat rows, else every row) when the attach read only their states.
    out["sort: start (first)"] = _ms(page("start"), 1)
    out["sort: start (again)"] = _ms(page("start"))
    out["sort: duration"] = _ms(page("duration"))
    out["sort: attempt"] = _ms(page("attempt"))
    out["sort: executor"] = _ms(page("executor"))
    return out


async def _app_attach(state_dir: Path) -> float:
    from tui.app import ConsoleApp

    app = ConsoleApp(state_dir, readonly=True)
    t0 = time.perf_counter()
    async with app.run_test(size=(160, 50)) as pilot:
        while not app.loaded.is_set():
            await asyncio.sleep(0.02)
        await pilot.pause()
        took = time.perf_counter() - t0
        app.exit()
    return took


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON."""
    ap = argparse.ArgumentParser(prog="python -m tui.probe")
    ap.add_argument("state_dir")
    ap.add_argument("--from-plan", action="store_true", help="read the run by parsing its plan")
    ap.add_argument("--every-row", action="store_true",
                    help="sorts by start... read every row rather than the journal's flat rows")
    ap.add_argument("--app", action="store_true", help="also time the headless app's attach")
    a = ap.parse_args(argv)
    state_dir = Path(a.state_dir)
    base = rss_mib()
    t0 = time.perf_counter()
    with RunClient(state_dir) as client:
        if a.from_plan:  # as consoles read a run before its shape was kept
            _info, model, dag = _load_from_plan(client, list(client.ids()), lambda _s: None)
        else:
            _info, model, dag = load_model(client, open_client=lambda: RunClient(state_dir))
    attach = time.perf_counter() - t0
    if a.every_row:
        model.fetch_flat = None
    out: dict[str, Any] = {
        "jobs": len(model),
        "attach_seconds": attach,
        "rss_mib": rss_mib(),
        "rss_before_mib": base,
    }
    keys = key_costs(model, dag, time.time())
    out["rss_keys_mib"] = keys.pop("rss_keys_mib")
    out["keys_ms"] = keys
    out["rss_all_rows_mib"] = rss_mib()
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if a.app:
        del model, dag
        out["app_attach_seconds"] = asyncio.run(_app_attach(state_dir))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
