"""The two reference loops the engine is compared with, on the same DAG."""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass

from wloadctl.core.plan import Plan


@dataclass(frozen=True, slots=True)
class Graph:
    """A plan's dependencies in compressed rows (CSR), both ways."""

    n: int
    """Number of jobs."""
    indegree: array
    """Upstream count per job."""
    up_start: array
    """Upstreams of job i are up[up_start[i]:up_start[i+1]]."""
    up: array
    """Upstream job indices."""
    down_start: array
    """Dependents of job i are down[down_start[i]:down_start[i+1]]."""
    down: array
    """Dependent job indices."""

    @property
    def edges(self) -> int:
        """Number of dependency edges."""
        return len(self.up)


def build_graph(plan: Plan) -> Graph:
    """Index a plan's jobs and lay its edges out in CSR arrays.

    Args:
        plan: a validated plan (every dependency names a job).

    Returns:
        The graph, jobs numbered in plan order.
    """
    index = {jid: i for i, jid in enumerate(plan.jobs)}
    n = len(index)
    up_start = array("i", bytes(4 * (n + 1)))
    up = array("i")
    out_deg = array("i", bytes(4 * (n + 1)))
    for i, spec in enumerate(plan.jobs.values()):
        for dep in spec.depends_on:
            u = index[dep]
            up.append(u)
            out_deg[u + 1] += 1
        up_start[i + 1] = len(up)
    for i in range(n):
        out_deg[i + 1] += out_deg[i]
    down_start = array("i", out_deg)
    fill = array("i", out_deg)
    down = array("i", bytes(4 * len(up)))
    for d in range(n):
        for k in range(up_start[d], up_start[d + 1]):
            u = up[k]
            down[fill[u]] = d
            fill[u] += 1
    indegree = array("i", (up_start[i + 1] - up_start[i] for i in range(n)))
    return Graph(n, indegree, up_start, up, down_start, down)


def counter_run(g: Graph) -> list[int]:
    """Complete every job, a round at a time, with one unmet-dependency counter per job.

    Each round completes every ready job at once; a job whose counter reaches
    zero is ready in the next round. This is the least any scheduler must do.

    Returns:
        How many jobs completed in each round (their sum is `g.n` for a DAG).
    """
    unmet = array("i", g.indegree)
    start, down = g.down_start, g.down
    ready = [i for i in range(g.n) if not unmet[i]]
    sizes: list[int] = []
    while ready:
        sizes.append(len(ready))
        nxt: list[int] = []
        append = nxt.append
        for u in ready:
            for d in down[start[u] : start[u + 1]]:
                left = unmet[d] - 1
                unmet[d] = left
                if not left:
                    append(d)
        ready = nxt
    return sizes


@dataclass(frozen=True, slots=True)
class RescanResult:
    """How far the re-scanning loop got."""

    rounds: int
    """Rounds completed."""
    completed: int
    """Jobs completed."""
    checks: int
    """Waiting jobs examined, summed over rounds (the loop's unit of work)."""
    capped: bool
    """Stopped at the time cap before every job completed."""


def rescan_run(g: Graph, cap_seconds: float) -> RescanResult:
    """Complete every job the traditional way: each round re-examines every waiting job.

    A waiting job is ready when all its upstreams are done; every ready job of a
    round completes at once. Work grows with (jobs x rounds): fine on a shallow
    DAG, quadratic on a chain, so the loop stops at a time cap.

    Args:
        g: the graph.
        cap_seconds: stop after the first round that ends past this many seconds.

    Returns:
        Rounds, completions and checks made, and whether the cap was hit.
    """
    deadline = time.perf_counter() + cap_seconds
    done = bytearray(g.n)
    up_start, up = g.up_start, g.up
    waiting = list(range(g.n))
    rounds = completed = checks = 0
    while waiting:
        if time.perf_counter() > deadline:
            return RescanResult(rounds, completed, checks, True)
        ready: list[int] = []
        still: list[int] = []
        for j in waiting:
            for p in up[up_start[j] : up_start[j + 1]]:
                if not done[p]:
                    still.append(j)
                    break
            else:
                ready.append(j)
        checks += len(waiting)
        for j in ready:
            done[j] = 1
        if not ready:
            break  # a cycle: validated plans have none
        rounds += 1
        completed += len(ready)
        waiting = still
    return RescanResult(rounds, completed, checks, False)


def rescan_total_checks(n: int, round_sizes: list[int]) -> int:
    """Checks the re-scanning loop makes over a whole run, from the rounds' sizes.

    Round r examines every job not completed before it; the counter loop's
    rounds are the same rounds, so this is exact.
    """
    total = 0
    left = n
    for size in round_sizes:
        total += left
        left -= size
    return total
