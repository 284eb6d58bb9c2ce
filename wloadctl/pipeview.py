"""The pipeline view (`wloadctl top`, the console's pipeline pane): the live scheduler's figures, merged and shown.

The scheduler publishes its figures (wloadctl.procs.pipeline) in the state directory about
once a second; this module joins them with the executors' heartbeat board and the agents'
rows, says how fresh they are, and renders them as text.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

from wloadctl.ipc.protocol import BoardHeader
from wloadctl.procs.pipeline import read_pipeline
from wloadctl.store import RunRow


class RunReader(Protocol):
    """What the view reads of a run (wloadctl.client.RunClient)."""

    run: RunRow
    state_dir: Path

    def board_header(self) -> BoardHeader | None:
        """The live scheduler's board header, or None."""

    def executors(self) -> list[dict[str, Any]]:
        """Executors from the heartbeat board."""

    def agents(self) -> list[dict[str, Any]]:
        """The run's agents as its scheduler judges them."""

    def far_holder(self) -> str | None:
        """Host of the scheduler holding the run's lease when its board is not here (None: here, or none)."""

    def journal_counts(self) -> dict[str, int]:
        """Jobs per state name, from the journal."""

STALE_AFTER = 5.0
"""Figures older than this many seconds are marked stale (the scheduler stopped publishing)."""


def pipeline_view(client: RunReader, now: float | None = None) -> dict[str, Any]:
    """The run's pipeline figures: queues, arena, latencies, journal, loop, per executor and per agent.

    `live` says whether a scheduler runs the run now; `age` how old the figures are. Without a
    live scheduler the last figures published are given, marked stale. A scheduler of another host
    (its lease in force, its board not here) is live as the journal tells (`from_journal`):
    `scheduler_host` names its host, as `status` does, and `counts` are the journal's, read again
    at each call.
    """
    now = time.time() if now is None else now
    header = client.board_header()
    host = client.far_holder() if header is None else None
    figures = read_pipeline(client.state_dir) or {}
    mine = figures.get("run") == client.run.run_id
    if not mine:
        figures = {}
    age = round(now - float(figures["ts"]), 3) if figures.get("ts") else None
    started = {e["executor"]: e for e in figures.get("executors", [])}
    executors = []
    for e in client.executors() if header is not None else []:
        fig = started.get(e["executor"], {})
        executors.append({**e, "started": fig.get("started", 0), "started_per_s": fig.get("started_per_s", 0.0),
                          "dispatch_to_start": fig.get("dispatch_to_start", {"n": 0, "p50": None, "p99": None})})
    agents = []
    for g in client.agents() if header is not None else figures.get("agents", []):
        # An agent is a node of the engine numbered from AGENT_BASE: its starts are counted as an executor's.
        fig = started.get(g.get("index"), {})
        agents.append({**g, "started": fig.get("started", 0), "started_per_s": fig.get("started_per_s", 0.0),
                       "dispatch_to_start": fig.get("dispatch_to_start", {"n": 0, "p50": None, "p99": None})})
    if host is not None:
        run = client.run
        return {
            "run": run.run_id, "live": True, "scheduler_pid": run.scheduler_pid, "epoch": run.epoch, "age": age,
            # Its figures are published on its host: none here is no sign of staleness.
            "stale": age is not None and age > STALE_AFTER, "from_journal": True, "scheduler_host": host,
            "lease_until": run.lease_until,
            "counts": client.journal_counts(), "queues": figures.get("queues", {}), "arena": figures.get("arena", {}),
            "latency": figures.get("latency", {}), "journal": figures.get("journal", {}),
            "loop": figures.get("loop", {}), "executors": [], "agents": agents,
        }
    return {
        "run": client.run.run_id, "live": header is not None, "scheduler_pid": header.scheduler_pid if header else None,
        "epoch": header.epoch if header else figures.get("epoch"), "age": age,
        "stale": age is None or age > STALE_AFTER or header is None, "from_journal": False, "scheduler_host": None,
        "queues": figures.get("queues", {}), "arena": figures.get("arena", {}),
        "latency": figures.get("latency", {}), "journal": figures.get("journal", {}),
        "loop": figures.get("loop", {}), "executors": executors, "agents": agents,
    }


WIDTH = 76
"""Columns every line of the figures fits, large counts too (but the first, naming the scheduler's host): `top` at
80 columns and the console's pipeline pane, 76 inside its border."""


def _ms(v: float | None) -> str:
    """Seconds as milliseconds below one, else seconds ('-': none); at most 7 characters below 10,000 s."""
    if v is None:
        return "-"
    return f"{v * 1000:.1f}ms" if v < 0.99995 else f"{v:.2f}s" if v < 100 else f"{v:.0f}s"


def _count(n: int) -> str:
    """A count in at most 5 characters: exact below 100,000, else in thousands (k) or millions (M)."""
    if n < 100_000:
        return str(n)
    return f"{n / 1000:.0f}k" if n < 999_500 else f"{n / 1e6:.1f}M"


def _rate(v: float) -> str:
    """A rate or mean in at most 4 characters: one decimal below 100, whole below 10,000, else k or M."""
    if v < 100:
        return f"{v:.1f}"
    if v < 10_000:
        return f"{v:.0f}"
    return f"{v / 1000:.0f}k" if v < 999_500 else f"{v / 1e6:.1f}M"


def _pct(label: str, s: dict[str, Any] | None, more: str) -> str:
    """A latency's line: its label, p50, p99 and samples (51 columns), then `more` (at most 24)."""
    s = s or {}
    return (f"{label:<19}p50 {_ms(s.get('p50')):>7} p99 {_ms(s.get('p99')):>7} n {_count(s.get('n', 0)):<5}  "
            f"{more}").rstrip()


def _size(b: int | None) -> str:
    """Bytes as B, KiB, MiB or GiB."""
    if b is None:
        return "-"
    v = float(b)
    for unit in ("B", "KiB", "MiB"):
        if v < 1024:
            return f"{v:.0f}{unit}" if unit == "B" else f"{v:.1f}{unit}"
        v /= 1024
    return f"{v:.1f}GiB"


def render(view: dict[str, Any]) -> list[str]:
    """The view as lines of text (the same lines in `top` and the console's pane)."""
    host = view.get("scheduler_host")
    on = f" on {host}" if host else ""
    live = f"live, pid {view['scheduler_pid']}{on}, epoch {view['epoch']}" if view["live"] else "not live"
    age = "no figures yet" if view["age"] is None else f"figures {view['age']:.1f}s old"
    head, said = f"run {view['run']}", f"({live}; {age}{', STALE' if view['stale'] and view['live'] else ''})"
    # (a run id's 22 characters, a 7-digit pid and a stale age fit 76 but for a host's name: then two lines)
    lines = [f"{head}  {said}"] if len(head) + 2 + len(said) <= WIDTH else [head, f"  {said}"]
    if view.get("from_journal"):
        until = time.strftime("%H:%M:%S", time.localtime(view["lease_until"]))
        lines.append(f"scheduler on {host}: read from the journal (lease until {until})")
        lines.append("jobs: " + ("  ".join(f"{k} {n}" for k, n in view["counts"].items()) or "none"))
    q = view.get("queues") or {}
    req, rsp = q.get("request") or {}, q.get("response") or {}
    if req:
        lines.append(f"request queue   {req.get('depth', 0):>3}/{req.get('max', 0):<3} msgs  "
                     f"{req.get('batches_per_s', 0.0):8.1f} batches/s  backlog {req.get('backlog', 0)} task(s)")
        lines.append(f"response queue  {rsp.get('depth', 0):>3}/{rsp.get('max', 0):<3} msgs  "
                     f"{rsp.get('batches_per_s', 0.0):8.1f} batches/s")
    a = view.get("arena") or {}
    if a:
        cap = a.get("capacity") or 1
        lines.append(f"payload arena   {_size(a.get('used'))} of {_size(a.get('capacity'))} "
                     f"({100.0 * (a.get('used') or 0) / cap:.1f}%), {a.get('live', 0)} payload(s)")
    lat = view.get("latency") or {}
    if lat:
        lines.append(_pct("ready->dispatch", lat.get("ready_to_dispatch"), "(last minute)"))
        lines.append(_pct("finish->dep. start", lat.get("finish_to_dependent_start"), ""))
    j = view.get("journal") or {}
    if j:
        lines.append(_pct("journal commit", j.get("commit"), f"{_rate(j.get('commits_per_s', 0.0))}/s, "
                          f"{_rate(j.get('rows_per_commit', 0.0))} rows/commit"))
    lp = view.get("loop") or {}
    if lp:
        lines.append(_pct("loop turn", lp.get("turn"), f"{_rate(lp.get('turns_per_s', 0.0))} turns/s"))
    if view["executors"]:
        lines.append("EX  PID      HEALTH   RUN/SLOTS  STARTED  START/S  DISPATCH->START p50/p99")
        for e in view["executors"]:
            d = e.get("dispatch_to_start") or {}
            lines.append(f"{e['executor']:<3} {e['pid']:<8} {e['health']:<8} {e['running']:>4}/{e['slots']:<5} "
                         f"{e['started']:>8} {e['started_per_s']:>8.1f}  {_ms(d.get('p50'))}/{_ms(d.get('p99'))}")
    if view["agents"]:
        # (a name past 12 characters pushes its row on rather than lose its end)
        lines.append("AGENT        STATE   RUN/SLOTS HOLDS  LOAD STARTED START/S D->START p50/p99")
        for g in view["agents"]:
            d = g.get("dispatch_to_start") or {}
            lines.append(f"{g.get('agent', '?')!s:<12} {g.get('state', '?')!s:<7} "
                         f"{g.get('slots_used', 0):>4}/{g.get('slots', 0):<4} {_count(g.get('jobs_held', 0)):>5} "
                         f"{float(g.get('load1', 0.0)):>5.2f} {_count(g.get('started', 0)):>7} "
                         f"{_rate(float(g.get('started_per_s', 0.0))):>7} {_ms(d.get('p50'))}/{_ms(d.get('p99'))}")
    return lines
