"""The remote section: no-op jobs through a private broker and two agents on this host,
beside the local path and Dask distributed on the same DAG, in the same run.

The section starts its own `nats-server -js` (a free port, a store in the scratch
directory) and two `wloadctl agent` processes serving pool `bench`, runs the bank plan
whose jobs all say `pool: bench` through `wloadctl run --broker`, then stops the agents
and the server and checks that nothing of theirs is left: no process, queue or segment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from wloadctl.bench import daskcmp
from wloadctl.bench.context import Context
from wloadctl.bench.figures import Extra, Figure, combine, ratio
from wloadctl.bench.runs import run_processes
from wloadctl.bench.sections import e2e_figure, run_extra
from wloadctl.errors import TransportError, WloadError

POOL = "bench"
"""The pool every job of the remote plan runs in."""
AGENTS = 2
"""Agents started on this host."""
NO_BROKER = "no nats-server binary"
"""Start of the note of a remote figure that could not be measured for want of a broker."""
READY_WAIT = 30.0
"""Seconds an agent may take to connect and serve."""
STOP_WAIT = 20.0
"""Seconds an agent gets to stop its executors and remove its queues and segments after SIGTERM."""


class BenchBroker:
    """A private nats-server and the agents of pool `bench`, for as long as the section runs."""

    def __init__(self, ctx: Context, binary: str, slots: int) -> None:
        from wloadctl.remote.server import NatsServer, free_port

        self.ctx = ctx
        """The benchmark run (scratch directory, leftovers)."""
        root = ctx.scratch("broker")
        (root / "store").mkdir()
        self.server = NatsServer(binary, root / "store", free_port())
        """The broker."""
        self.root = root
        """Where the server's store and the agents' state directories live."""
        self.slots = slots
        """Slots of each agent."""
        self.names = agent_names()
        """The agents' names."""
        self.agents: list[subprocess.Popen[bytes]] = []
        """The agent processes."""

    @property
    def url(self) -> str:
        """The broker's URL."""
        return self.server.url

    def __enter__(self) -> BenchBroker:
        try:
            self.server.start()
            for name in self.names:
                self.agents.append(self._start_agent(name))
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.close()

    def _start_agent(self, name: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "wloadctl", "agent", "--broker", self.url, "--name", name, "--pool", POOL,
                "--slots", str(self.slots), "--state-dir", str(self.root / name)]
        with open(self.root / f"{name}.out", "ab") as out:
            # Their own session: a Ctrl-C at the terminal reaches the benchmark, which stops them.
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def _wait_ready(self) -> None:
        """Until every agent serves (it says so once its executors run and its pullers are made)."""
        deadline = time.monotonic() + READY_WAIT
        for name, proc in zip(self.names, self.agents, strict=True):
            log = self.root / f"{name}.out"
            while b"serving pool" not in log.read_bytes():
                if proc.poll() is not None or time.monotonic() > deadline:
                    lines = log.read_text(errors="replace").strip().splitlines()
                    raise TransportError(f"agent {name} did not start: {lines[-1] if lines else 'no output'}")
                time.sleep(0.05)

    def close(self) -> None:
        """Stop the agents (SIGTERM, then SIGKILL) and the server; record what any of them left behind."""
        for proc in self.agents:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in zip(self.names, self.agents, strict=False):
            try:
                proc.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.ctx.leftovers.append(f"agent {name} did not stop within {STOP_WAIT:.0f}s (killed)")
            if proc.returncode not in (0, -signal.SIGKILL):
                self.ctx.notes.append(f"agent {name} exited with {proc.returncode}")
        self.agents.clear()
        self.server.stop()
        self.ctx.leftovers += agent_leftovers(self.names, self.root)


def agent_names() -> list[str]:
    """Names of this benchmark's agents: unique per benchmark process, as their queues and segments carry them."""
    return [f"bench{os.getpid()}-{k}" for k in range(1, AGENTS + 1)]


def agent_leftovers(names: list[str], root: Path) -> list[str]:
    """Queues, segments and processes of these agents still there after they stopped (then removed)."""
    from wloadctl.ipc.shm import remove_run_objects
    from wloadctl.remote.agent import node_run_id

    found: list[str] = []
    # An agent names its state directory, its executors the node's id, the server its store.
    needles = [str(root), *(node_run_id(n) for n in names)]
    for pid in sorted({pid for needle in needles for pid in run_processes(needle)}):
        found.append(f"process {pid}")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for name in names:
        found += remove_run_objects(node_run_id(name))
    return found


def remote(ctx: Context) -> None:
    """No-op jobs through a broker and two agents, beside the local path and Dask distributed."""
    from wloadctl.remote.server import nats_server_binary

    s = ctx.settings
    jobs = s.sizes.remote
    local = _local_figure(ctx, jobs)
    tool = f"wloadctl {AGENTS} agents"
    basis = (f"the run's own wall time; {AGENTS} agents on this host with --slots {s.slots} each, "
             "a private nats-server -js (process_seconds: the whole command)")
    binary = nats_server_binary()
    if binary is None:
        ctx.figures.append(combine("remote", "no-op throughput", tool, "bank", jobs, [], basis,
                                   note=f"{NO_BROKER}: install nats-server or the test extra"))
    else:
        plan = ctx.plan(jobs, "bank", "noop@bench")
        reps: list[dict[str, Extra]] = []
        try:
            with BenchBroker(ctx, binary, s.slots) as broker:
                for k in range(s.repeat):
                    ctx.say(f"remote, no-op bank {jobs:,} jobs through {AGENTS} agents ({k + 1}/{s.repeat})")
                    r = ctx.run(plan, jobs, executors=s.executors, slots=s.slots, broker=broker.url)
                    reps.append({**run_extra(r, ctx, AGENTS, s.slots), "agents": AGENTS})
                    if not r.ok:
                        break
        except WloadError as e:
            reps.append({"seconds": None, "note": e.one_line()})
        fig = combine("remote", "no-op throughput", tool, "bank", jobs, reps, basis)
        ctx.figures.append(fig)
        ctx.add_ratio(ratio(f"remote {jobs}: {AGENTS} agents jobs/s / local jobs/s", fig, local))
    dist = _dask_distributed(ctx, jobs)
    if dist is not None:
        ctx.add_ratio(ratio(f"remote {jobs}: {AGENTS} agents jobs/s / Dask distributed jobs/s",
                            ctx.find("remote", "no-op throughput", tool, "bank", jobs), dist))


def _local_figure(ctx: Context, jobs: int) -> Figure:
    """The local path's figure of the same plan (without `pool:`), measured now unless the e2e section did."""
    s = ctx.settings
    found = ctx.find("e2e", "no-op throughput", "wloadctl", "bank", jobs)
    if found is not None:
        return found
    plan = ctx.plan(jobs, "bank", "noop")
    runs = ctx.cached_runs("noop", jobs)
    for k in range(len(runs), s.repeat):
        ctx.say(f"end to end, no-op bank {jobs:,} jobs (local path of the remote section) ({k + 1}/{s.repeat})")
        runs.append(ctx.run(plan, jobs, executors=s.executors, slots=s.slots, cache="noop"))
        if not runs[-1].ok:
            break
    return e2e_figure(ctx, jobs, runs)


def _dask_distributed(ctx: Context, jobs: int) -> Figure | None:
    """Dask distributed (a LocalCluster of worker processes) on the same DAG; None when not installed."""
    s = ctx.settings
    if not daskcmp.available("distributed"):
        ctx.notes.append(daskcmp.MISSING_DISTRIBUTED)
        return None
    limit = daskcmp.memory_limit_bytes()
    reps: list[dict[str, Extra]] = []
    for k in range(s.repeat):
        ctx.say(f"Dask distributed, {AGENTS} worker processes, no-op bank {jobs:,} jobs ({k + 1}/{s.repeat})")
        r = daskcmp.run_child(jobs, "bank", s.seed, AGENTS, limit, timeout=max(120.0, jobs / 20),
                              scheduler="distributed")
        if "error" in r:
            reps.append({"seconds": None, "note": f"Dask distributed did not finish: {r['error']}"})
            break
        reps.append({"seconds": r["seconds"], "start_seconds": r["start_seconds"], "peak_mib": r["peak_kib"] / 1024,
                     "workers": r["workers"], "memory_limit_mib": limit >> 20})
    fig = combine("remote", "no-op DAG", f"dask distributed {AGENTS} workers", "bank", jobs, reps,
                  "client.get on the DAG's sinks, LocalCluster of worker processes with one thread each "
                  "(started beforehand: start_seconds)")
    ctx.figures.append(fig)
    return fig
