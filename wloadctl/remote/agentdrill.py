"""The agent-loss drill: kill an agent of this host (with its executors and jobs), measure LOST and the settling."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import time
from pathlib import Path

from wloadctl.core.states import ACTIVE, TERMINAL, JobState
from wloadctl.drillreport import (
    DrillReport,
    EventTail,
    JournalWatch,
    is_wloadctl,
    journal_report,
    wait_until,
)
from wloadctl.errors import UsageError
from wloadctl.remote.agents import AgentState, agent_rows
from wloadctl.remote.broker import BrokerOptions, Subjects
from wloadctl.remote.messages import Heartbeat


def agent_loss(a: argparse.Namespace, state_dir: Path | None) -> DrillReport:
    """Kill agent `a.agent` of this host with its process tree; measure LOST and the settling of its tasks.

    Returns:
        The report, journaled in the run's audit trail.

    Raises:
        UsageError: no live run, an unknown agent, an agent of another host, or one not alive now.
        TransportError: the broker does not answer.
    """
    from wloadctl.client import RunClient

    with RunClient(state_dir) as c:
        run, sd = c.run, c.state_dir
        if c.board_header() is None:
            raise UsageError(f"no live run in {sd}: run {run.run_id} has no scheduler on this host",
                             hint="a drill runs on a live run")
        settings = json.loads(run.settings or "{}")
        if not (a.broker or os.environ.get("WLOADCTL_BROKER")) and settings.get("broker"):
            a.broker, a.prefix = settings["broker"], a.prefix or settings.get("prefix")
        opts = BrokerOptions.from_args(a)
        timeout_agent = a.agent_timeout
        beat = _agent_beat(opts, a.agent, timeout_agent)
        here = socket.gethostname()
        if beat.host != here:
            raise UsageError(f"agent {a.agent} runs on host {beat.host}, not on {here}; run the drill there",
                             hint="an agent-loss drill kills the agent's processes, so it runs on the agent's host")
        if not is_wloadctl(beat.pid, b"agent", a.agent.encode()):
            raise UsageError(f"agent {a.agent}: pid {beat.pid} is not its process on this host (it may run in "
                             "another pid namespace or container)", hint="run the drill where its pid is seen")
        index = next((i for i, name in c.agent_names().items() if name == a.agent), None)
        if index is None:
            raise UsageError(f"run {run.run_id} has never had agent {a.agent}",
                             hint=f"its agents are listed by `wloadctl status --state-dir {sd}`")
        watch = JournalWatch(c.store, run.id)
        held = {r[0]: r[3] for r in c.store.job_rows(run.id) if r[4] == index and r[2] in ACTIVE}
        before = watch.succeeded()
        ids = c.store.job_ids(run.id)
        rep = DrillReport("agent-loss", run.run_id, facts={
            "agent": a.agent, "agent_pid": beat.pid, "agent_timeout": timeout_agent,
            "held": {ids[i]: att for i, att in held.items()}})
        events = EventTail(sd / "events.jsonl")
        wait = a.timeout or timeout_agent + 20.0
        killed = time.time()
        rep.facts["killed_pids"] = _kill_tree(beat.pid)
        rep.facts["killed_at"] = round(killed, 6)
        lost = wait_until(lambda: events.find("agent_lost", agent=a.agent), wait)
        if lost is None:
            rep.problems.append(f"agent {a.agent} was not declared LOST within {wait:g}s")
        else:
            rep.facts["lost_s"] = round(float(lost["ts"]) - killed, 3)
            settling = Settling(watch, held)
            settled = wait_until(settling, wait)
            if settled is None:
                rep.problems.append(f"the agent's {len(held)} task(s) were not settled within {wait:g}s of LOST")
            elif held:
                if settled[1] is None:  # taken back; a retry's delay may hold the next dispatch a while
                    settled = wait_until(lambda: (r := settling()) is not None and r[1] is not None and r,
                                         wait) or settled
                # The scheduler stamps LOST's transitions with the time of its check, just before
                # it writes the event: in the same turn, they count as settled at LOST.
                at = float(lost["ts"])
                rep.facts["settled_s"] = round(max(settled[0], at) - killed, 3)
                rep.facts["reassigned_s"] = round(max(settled[1], at) - killed, 3) if settled[1] else None
                if settled[1] is None:
                    rep.facts["note"] = "some task waits for a retry's delay or an operator (not idempotent)"
        lost_tasks = [e for e in events.read() if e.get("event") == "tasks_lost"]
        rep.facts["lost_tasks"] = sum(int(e.get("jobs", 0)) for e in lost_tasks)
        reran = watch.reran(before)
        rep.facts["reran"] = [ids[i] if i < len(ids) else str(i) for i in reran]
        if reran:
            rep.problems.append(f"{len(reran)} job(s) that had succeeded ran again")
        rep.ok = not rep.problems
    journal_report(state_dir, run.id, rep)
    return rep


def _agent_beat(opts: BrokerOptions, name: str, timeout: float) -> Heartbeat:
    """The agent's last heartbeat from the agents bucket; refused when unknown or not alive now."""
    from wloadctl.remote.link import BrokerLink

    subjects = Subjects(opts.prefix)
    with BrokerLink.open(opts, name="wloadctl-drill") as link:
        entries = link.kv.entries(subjects.agents_bucket, missing_ok=True)
    rows, _bad = agent_rows({k: e.value for k, e in entries.items()}, time.time(), timeout)
    row = next((r for r in rows if r.beat.agent == name), None)
    if row is None:
        known = ", ".join(r.beat.agent for r in rows) or "none"
        raise UsageError(f"unknown agent {name} on {opts.shown()} (agents known: {known})",
                         hint="`wloadctl agents` lists them")
    if row.state != AgentState.ALIVE:
        raise UsageError(f"agent {name} is {row.state.value} already (silent for {row.age:.1f}s): nothing to drill")
    return row.beat


def _kill_tree(pid: int) -> list[int]:
    """SIGKILL a process and every process under it (its executors and their jobs); the pids killed."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    # Stopped first, so no process of the tree starts another while the tree is killed.
    for p in tree:
        _signal(p, signal.SIGSTOP)
    for p in tree:
        _signal(p, signal.SIGKILL)
    return tree


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


class Settling:
    """Whether every task the agent held was taken back (its attempt ended), and dispatched again or finished."""

    def __init__(self, watch: JournalWatch, held: dict[int, int]) -> None:
        self.watch, self.held = watch, held
        self.left = dict(held)
        """Tasks still the agent's: job index -> attempt."""
        self.again: set[int] = set()
        """Jobs taken back and since dispatched again, or finished."""
        self.settled_at = self.again_at = 0.0

    def __call__(self) -> tuple[float, float | None] | None:
        """(settled at, reassigned at — None while some job waits for a retry's delay or an operator), or None
        while some task is still the agent's."""
        held = self.held
        for _seq, i, _frm, to, att, ts, *_ in self.watch.read():
            if i not in held:
                continue
            if i in self.left and (att > held[i] or to not in ACTIVE):
                del self.left[i]
                self.settled_at = max(self.settled_at, ts)
            if i not in self.left and i not in self.again and \
                    ((att > held[i] and to == JobState.QUEUED) or to in TERMINAL):
                self.again.add(i)
                self.again_at = max(self.again_at, ts)
        if self.left:
            return None
        return (self.settled_at or time.time()), (self.again_at if len(self.again) == len(held) else None)
