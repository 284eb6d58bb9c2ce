"""Real scientific workflows replayed as sleeps: wloadctl (first run, then with history) beside ninja.

The workflows come from the `wfcommons` package's generators (recipes built from recorded
Pegasus runs: Montage, Epigenomics, 1000Genome), with their recorded runtimes scaled down and
run as `sleep`. Each makespan is also set against its lower bound: the longer of the
critical path and the total work divided by the slots; and against a list schedule of the same
jobs with no overhead at all, in the order the second run uses (longest remaining path by recorded
runtime first): what any scheduler that starts a job the moment a slot frees reaches at best.
Each run's details (ninja's from its log) say how it used its slots: the share of slot time jobs held,
slot seconds idle while a job was ready and not started (what dispatch cost), and how much longer
than its recorded seconds each job held its slot (what spawning and reaping it cost).
"""

from __future__ import annotations

import heapq
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from wloadctl.bench.buildtools import available, run_tool
from wloadctl.bench.context import Context
from wloadctl.bench.figures import Extra, combine, ratio
from wloadctl.bench.runs import run_wloadctl

WORKFLOWS: tuple[tuple[str, str, int, float], ...] = (
    ("Montage", "MontageRecipe", 1700, 0.002),
    ("Epigenomics", "EpigenomicsRecipe", 1700, 0.02),
    ("1000Genome", "GenomeRecipe", 900, 0.02),
)
"""(name, wfcommons recipe, tasks, runtime scale). Montage's recorded runtimes are ten times longer than the
others' (7,800 s of work at 0.02: eight minutes a run on 16 slots), so it is scaled ten times further."""
EXECUTORS, SLOTS = 1, 16
"""One executor of 16 slots beside `ninja -j16`: one pool of 16 slots each. Two executors of 8 are two
pools fed by one queue, and a batch one executor takes beyond its free slots waits in its backlog while
the other has slots free (4 of Epigenomics' twelve 17.6 s roots once waited a whole root's time so),
a handicap ninja's single pool does not have."""
WORKFLOW_NAMES = tuple(w[0] for w in WORKFLOWS)
"""The workflows replayed (at full sizes; --quick replays the first, smaller)."""
WORKFLOW_SLOTS = EXECUTORS * SLOTS
"""Slots of wloadctl's runs, and ninja's -j."""
QUICK_SCALE = 0.02
"""With --quick, runtimes are scaled this much further, and only the first workflow runs, made 5 times smaller (its
makespan's lower bound is then a fraction of a second: a quick run checks the section, it measures nothing)."""


@dataclass(frozen=True)
class Workflow:
    """A workflow as jobs: ids in a topological order, upstreams and seconds of each."""

    name: str
    ids: list[str]
    deps: dict[str, list[str]]
    seconds: dict[str, float]

    def lower_bound(self, slots: int) -> float:
        """The longer of the critical path and the total work over the slots."""
        path: dict[str, float] = {}
        for j in self.ids:
            path[j] = self.seconds[j] + max((path[d] for d in self.deps[j]), default=0.0)
        return max(max(path.values(), default=0.0), sum(self.seconds.values()) / slots)

    def list_schedule(self, slots: int) -> float:
        """Makespan of a list schedule with no overhead: whenever a slot is free it starts the ready job
        with the longest remaining path (recorded seconds, the job's own included), ties in plan order."""
        downs: dict[str, list[str]] = {j: [] for j in self.ids}
        for j in self.ids:
            for d in self.deps[j]:
                downs[d].append(j)
        path: dict[str, float] = {}
        for j in reversed(self.ids):
            path[j] = self.seconds[j] + max((path[d] for d in downs[j]), default=0.0)
        left = {j: len(self.deps[j]) for j in self.ids}
        ready = [(-path[j], k, j) for k, j in enumerate(self.ids) if not left[j]]
        heapq.heapify(ready)
        order = {j: k for k, j in enumerate(self.ids)}
        running: list[tuple[float, str]] = []
        now = 0.0
        while ready or running:
            while ready and len(running) < slots:
                j = heapq.heappop(ready)[2]
                heapq.heappush(running, (now + self.seconds[j], j))
            now, j = heapq.heappop(running)
            for d in downs[j]:
                left[d] -= 1
                if not left[d]:
                    heapq.heappush(ready, (-path[d], order[d], d))
        return now

    def slot_use(self, ran: dict[int, tuple[float, float]], slots: int) -> dict[str, float]:
        """How a run used its slots, from each job's (start, end) by plan index: the share of slot time jobs
        held, slot seconds left idle while a job was ready (its upstreams had ended) and not started, and how
        much longer than its recorded seconds each job held its slot on average (the spawn and reap around it)."""
        if not ran:
            return {}
        t0, t1 = min(s for s, _ in ran.values()), max(e for _, e in ran.values())
        at = {j: k for k, j in enumerate(self.ids)}
        events: list[tuple[float, int, int]] = []  # (time, 0: ready / 1: start / 2: end, job)
        for k, (s, e) in ran.items():
            j = self.ids[k]
            ready = max((ran[at[u]][1] for u in self.deps[j] if at[u] in ran), default=t0)
            events += [(ready, 0, k), (s, 1, k), (e, 2, k)]
        events.sort()
        waiting = running = 0
        idle = idle_ready = 0.0
        last = t0
        for t, kind, _ in events:
            free = max(0, slots - running)
            idle += (t - last) * free
            idle_ready += (t - last) * min(free, max(0, waiting))
            last = t
            if kind == 0:
                waiting += 1
            elif kind == 1:
                waiting, running = waiting - 1, running + 1
            else:
                running -= 1
        held = sum(e - s for s, e in ran.values())
        span = t1 - t0
        return {"slot_use": held / (slots * span) if span > 0 else 1.0, "idle_slot_seconds": idle,
                "idle_with_ready_slot_seconds": idle_ready,
                "held_over_recorded_ms": 1000 * (held - sum(self.seconds[self.ids[k]] for k in ran)) / len(ran)}


def ran_of(records: list) -> dict[int, tuple[float, float]]:
    """(start, end) of each job that ran to its end, by plan index, from the executors' result records."""
    from wloadctl.ipc import protocol as P

    return {r.task: (r.started, r.ended) for r in records
            if r.kind == P.RES_EXITED and r.started > 0 and not r.flags & P.FLAG_RETURNED}


def ninja_ran(workdir: Path, wf: Workflow) -> dict[int, tuple[float, float]]:
    """(start, end) of each job by plan index from ninja's log of its last build (milliseconds from its start)."""
    at = {j: k for k, j in enumerate(wf.ids)}
    ran: dict[int, tuple[float, float]] = {}
    try:
        lines = (workdir / ".ninja_log").read_text().splitlines()
    except OSError:
        return ran
    for line in lines:
        parts = line.split("\t")
        if len(parts) == 5 and parts[3] in at:
            ran[at[parts[3]]] = (int(parts[0]) / 1000, int(parts[1]) / 1000)
    return ran


def generate(recipe: str, tasks: int, scale: float, seed: int) -> Workflow:
    """A workflow from a wfcommons recipe, its runtimes times `scale` (rounded to milliseconds)."""
    import numpy as np
    import wfcommons
    import wfcommons.wfchef.recipes as recipes

    random.seed(seed)
    np.random.seed(seed)
    wf = wfcommons.WorkflowGenerator(getattr(recipes, recipe).from_num_tasks(tasks)).build_workflow()
    import networkx as nx

    names = {t: f"t{k:05d}_{t.split('_')[0]}" for k, t in enumerate(nx.topological_sort(wf))}
    ids = list(names.values())
    deps = {names[t]: [names[u] for u in wf.predecessors(t)] for t in names}
    seconds = {names[t]: max(0.001, round(wf.tasks[t].runtime * scale, 3)) for t in names}
    return Workflow(recipe, ids, deps, seconds)


def write_plan(path: Path, wf: Workflow) -> None:
    """The workflow as a plan: one `sleep` job each."""
    with open(path, "w", encoding="utf-8") as out:
        out.write(f"name: wf-{wf.name}\njobs:\n")
        for j in wf.ids:
            deps = f", depends_on: [{', '.join(wf.deps[j])}]" if wf.deps[j] else ""
            out.write(f"  {j}: {{command: \"sleep {wf.seconds[j]}\"{deps}}}\n")


def write_ninja(path: Path, wf: Workflow) -> None:
    """The workflow as a build.ninja: one edge per job, no outputs written (see buildtools)."""
    with open(path, "w", encoding="utf-8") as out:
        out.write("rule sleep\n  command = sleep $secs\n\n")
        for j in wf.ids:
            deps = f" | {' '.join(wf.deps[j])}" if wf.deps[j] else ""
            out.write(f"build {j}: sleep{deps}\n  secs = {wf.seconds[j]}\n")


def workflows(ctx: Context) -> None:
    """Each workflow: a first wloadctl run, a second in the same state directory (history), ninja."""
    try:
        import wfcommons  # noqa: F401
    except ImportError:
        ctx.notes.append("wfcommons is not installed (pip install 'wloadctl[bench]'): no workflow replays")
        return
    s = ctx.settings
    executors, slots = EXECUTORS, SLOTS
    total = executors * slots
    for name, recipe, tasks, scale in WORKFLOWS[:1] if s.quick else WORKFLOWS:
        if s.quick:
            tasks, scale = max(50, tasks // 5), scale * QUICK_SCALE
        wf = generate(recipe, tasks, scale, s.seed)
        n = len(wf.ids)
        d = ctx.scratch(f"wf-{name}")
        plan = d / "plan.yaml"
        write_plan(plan, wf)
        write_ninja(d / "build.ninja", wf)
        bound = wf.lower_bound(total)
        ideal = wf.list_schedule(total)
        reps: dict[str, list[dict[str, Extra]]] = {"first run": [], "second run (history)": [], "ninja": []}
        for k in range(s.repeat):
            ctx.say(f"workflow {name} ({n:,} jobs, lower bound {bound:.1f}s): wloadctl twice, ninja ({k + 1}/"
                    f"{s.repeat})")
            state = d / f"state-{k}"
            for label in ("first run", "second run (history)"):
                r = run_wloadctl(plan, state, n, executors=executors, slots=slots, journal_sync=s.journal_sync,
                                 timeout=max(300.0, bound * 10), keep_state=True, keep_records=True)
                if r.run_id:
                    ctx.run_ids.append(r.run_id)
                ctx.leftovers += r.leftovers
                jobs_span = r.window[1] - r.window[0] if r.window else None
                reps[label].append({"seconds": r.process_seconds if r.ok else None, "run_seconds": r.wall_seconds,
                                    "over_lower_bound": r.process_seconds / bound if bound else None,
                                    # first job received .. last job ended, and the rest of the command
                                    # (interpreter, plan, journal, executors' start, summary, exit)
                                    "jobs_span_seconds": jobs_span,
                                    "outside_jobs_seconds": r.process_seconds - jobs_span if jobs_span else None,
                                    **wf.slot_use(ran_of(r.records), total),
                                    "note": "" if r.ok else f"run {r.status}: {r.error}"})
            shutil.rmtree(state, ignore_errors=True)
            if available("ninja"):
                t = run_tool("ninja", d, total, timeout=max(300.0, bound * 10))
                reps["ninja"].append({"seconds": t.seconds if t.ok else None,
                                      "over_lower_bound": t.seconds / bound if bound else None,
                                      **(wf.slot_use(ninja_ran(d, wf), total) if t.ok else {}),
                                      "note": "" if t.ok else f"ninja failed: {t.error}"})
        basis = f"the whole command, start to exit; lower bound {bound:.2f}s (critical path or work / {total} slots)"
        figs = {}
        sched = combine("workflows", f"{name} makespan", f"list schedule, no overhead, {total} slots", "workflow", n,
                        [{"seconds": ideal, "over_lower_bound": ideal / bound if bound else None}],
                        "simulated: longest remaining path by recorded runtime first, no spawn or dispatch cost")
        ctx.figures.append(sched)
        for label, runs in reps.items():
            if not runs:
                continue
            tool = f"ninja -j{total}" if label == "ninja" else f"wloadctl {label}"
            figs[label] = combine("workflows", f"{name} makespan", tool, "workflow", n, runs, basis)
            ctx.figures.append(figs[label])
        ninja = figs.get("ninja")
        for label in ("first run", "second run (history)"):
            ctx.add_ratio(ratio(f"workflow {name}: wloadctl {label} / ninja -j{total} makespan", figs[label], ninja,
                                "seconds"))
            ctx.add_ratio(ratio(f"workflow {name}: wloadctl {label}, first job to last / list schedule with no "
                                "overhead", figs[label], sched, "jobs_span_seconds", "seconds"))
        ctx.add_ratio(ratio(f"workflow {name}: list schedule with no overhead / ninja -j{total} makespan", sched,
                            ninja, "seconds"))
