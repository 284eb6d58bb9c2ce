"""Prometheus metrics at /metrics (`--metrics HOST:PORT` on run, scheduler and agent), served from a thread.

The collectors read what the scheduler (or agent) already keeps, only when scraped: the
loop itself records nothing for Prometheus. The engine's arrays and the pipeline meter are
read without a lock; a scrape may see one turn's changes half applied, which a gauge
sampled every few seconds tolerates.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from wloadctl.core.states import JobState, SlaTier
from wloadctl.errors import UsageError, WloadError
from wloadctl.latency import Histogram

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from wloadctl.procs.scheduler import SchedulerLoop
    from wloadctl.remote.agent import Agent

PREFIX = "wloadctl_"
"""Every metric's name starts with it."""
_ENDS = (JobState.SUCCEEDED, JobState.FAILED, JobState.TIMED_OUT, JobState.SKIPPED, JobState.CANCELLED,
         JobState.UPSTREAM_FAILED)


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (or :PORT for every interface, [V6]:PORT) as (host, port).

    Raises:
        UsageError: not HOST:PORT with a port from 0 to 65535.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--metrics {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464 or :9464")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def histogram(name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
    """A meter's histogram as a Prometheus histogram (seconds)."""
    return HistogramMetricFamily(name, doc, buckets=h.prometheus_buckets(), sum_value=h.sum)


class SchedulerCollector(Collector):
    """A scheduler's run: jobs by state and tier, outcomes, latencies, queues, arena, journal, agents, SLA risk."""

    def __init__(self) -> None:
        self.loop: SchedulerLoop | None = None
        """The loop read at each scrape: set once the run is built (a standby has none until it takes over)."""

    def collect(self) -> Iterator[Metric]:
        """The metric families of one scrape."""
        loop = self.loop
        active = GaugeMetricFamily(f"{PREFIX}scheduler_active", "1 while this process drives a run (0: a "
                                   "standby waiting, or a run being loaded).")
        active.add_metric([], 0 if loop is None else 1)
        yield active
        if loop is None:
            return
        core, ctx = loop.core, loop.ctx
        n = core.n
        info = GaugeMetricFamily(f"{PREFIX}run_info", "The run this scheduler drives (value 1).",
                                 labels=["run", "plan", "epoch"])
        info.add_metric([ctx.run_id, ctx.plan.name, str(ctx.epoch)], 1)
        yield info
        jobs = GaugeMetricFamily(f"{PREFIX}jobs", "Jobs by state and SLA tier.", labels=["state", "tier"])
        seen = pair_counts(core.state, core.tier, n)
        for state in JobState:
            for tier in SlaTier:
                jobs.add_metric([state.name, tier.label], seen.get((int(state), int(tier)), 0))
        yield jobs
        meter = loop.meter
        if meter is not None:
            done = CounterMetricFamily(f"{PREFIX}jobs_finished", "Job attempts that ended, by outcome, since "
                                       "this scheduler started.", labels=["outcome"])
            for st in _ENDS:
                done.add_metric([st.name], meter.entered[st])
            yield done
            yield histogram(f"{PREFIX}dispatch_latency_seconds", "READY to dispatched (QUEUED).", meter.dispatch)
            yield histogram(f"{PREFIX}completion_to_start_seconds",
                            "An upstream's end to the start of the dependent it released.", meter.release)
            yield histogram(f"{PREFIX}journal_commit_seconds", "Seconds of each journal commit.", meter.commit)
            yield histogram(f"{PREFIX}loop_turn_seconds", "Seconds of each scheduler loop turn.", meter.turn)
            rows = CounterMetricFamily(f"{PREFIX}journal_rows", "Transitions journaled.")
            rows.add_metric([], meter.rows)
            yield rows
        pools, objs = loop.pools, loop.objs
        depth = GaugeMetricFamily(f"{PREFIX}queue_depth_messages", "Messages waiting in a run queue.",
                                  labels=["queue"])
        for name, q in (("request", objs.req), ("response", objs.rsp)):
            try:
                depth.add_metric([name], q.current_messages)
            except WloadError:  # the queue closed under the scrape at the run's end
                continue
        yield depth
        backlog = GaugeMetricFamily(f"{PREFIX}dispatch_backlog_tasks",
                                    "Dispatched tasks waiting for room in the request queue or the arena.")
        backlog.add_metric([], pools.backlog())
        yield backlog
        arena = GaugeMetricFamily(f"{PREFIX}arena_used_bytes", "Bytes of the payload arena in use.")
        arena.add_metric([], objs.arena.used)
        yield arena
        cap = GaugeMetricFamily(f"{PREFIX}arena_capacity_bytes", "Bytes of the payload arena.")
        cap.add_metric([], objs.arena.capacity)
        yield cap
        agents = GaugeMetricFamily(f"{PREFIX}agents", "Agents of the run's pools by state.", labels=["state"])
        by_state = Counter(str(row["state"]) for row in pools.health(time.time()) if "agent" in row)
        from wloadctl.remote.agents import AgentState

        for ast in AgentState:
            agents.add_metric([ast.name], by_state.get(ast.name, 0))
        yield agents
        yield from _risk(loop)


def pair_counts(a: bytearray, b: bytearray, n: int) -> Counter[tuple[int, int]]:
    """How many i < n have each (a[i], b[i]), for byte arrays of values below 16 (job states and SLA tiers).

    About 15x cheaper than counting the pairs in Python at 1M jobs: both arrays become one
    big integer each, one shifted a nibble up (a value below 16 keeps to its own byte), and
    their OR holds every pair in one byte, which C counts per distinct value present.
    """
    if n <= 0:
        return Counter()
    left, right = bytes(a[:n]), bytes(b[:n])
    both = (int.from_bytes(left, "little") | int.from_bytes(right, "little") << 4).to_bytes(n, "little")
    xs = [x for x in range(16) if bytes((x,)) in left]
    ys = [y for y in range(16) if bytes((y,)) in right]
    out: Counter[tuple[int, int]] = Counter()
    for x in xs:
        for y in ys:
            got = both.count(bytes((x | y << 4,)))
            if got:
                out[(x, y)] = got
    return out


def _risk(loop: SchedulerLoop) -> Iterator[Metric]:
    """Unfinished jobs flagged AT_RISK or LATE, and whether the run is at risk."""
    core = loop.core
    levels: Counter[str] = Counter()
    for i, text in list(core.timers.lateness.items()):
        if i < core.n and core.state[i] not in _ENDS:
            levels["LATE" if text.startswith("LATE") else "AT_RISK"] += 1
    flagged = GaugeMetricFamily(f"{PREFIX}jobs_flagged", "Unfinished jobs flagged by their deadline.",
                                labels=["level"])
    for level in ("AT_RISK", "LATE"):
        flagged.add_metric([level], levels[level])
    yield flagged
    runs = GaugeMetricFamily(f"{PREFIX}runs_at_risk", "Runs with an unfinished job AT_RISK or LATE.")
    runs.add_metric([], 1 if levels else 0)
    yield runs


class AgentCollector(Collector):
    """An agent's node: tasks held and running, queue depths, arena, results not yet acknowledged."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        """The agent read at each scrape."""

    def collect(self) -> Iterator[Metric]:
        """The metric families of one scrape."""
        a = self.agent
        info = GaugeMetricFamily(f"{PREFIX}agent_info", "This agent (value 1).", labels=["agent", "pools"])
        info.add_metric([a.opts.name, ",".join(a.opts.pools)], 1)
        yield info
        book = getattr(a, "book", None)
        if book is None:
            return  # not open yet
        tasks = GaugeMetricFamily(f"{PREFIX}agent_tasks", "Tasks on this node by state.", labels=["state"])
        running = book.running_count()
        tasks.add_metric(["RUNNING"], running)
        tasks.add_metric(["WAITING"], max(0, len(book.held) - running))
        yield tasks
        slots = GaugeMetricFamily(f"{PREFIX}agent_slots", "Tasks this node runs at once.")
        slots.add_metric([], book.slots)
        yield slots
        unacked = GaugeMetricFamily(f"{PREFIX}agent_results_unacked_batches",
                                    "Result batches published and not yet acknowledged by the broker.")
        unacked.add_metric([], len(a.pending))
        yield unacked
        objs = a.objs
        depth = GaugeMetricFamily(f"{PREFIX}queue_depth_messages", "Messages waiting in a node queue.",
                                  labels=["queue"])
        for name, q in (("request", objs.req), ("response", objs.rsp)):
            try:
                depth.add_metric([name], q.current_messages)
            except WloadError:  # the queue closed under the scrape at shutdown
                continue
        yield depth
        arena = GaugeMetricFamily(f"{PREFIX}arena_used_bytes", "Bytes of the payload arena in use.")
        arena.add_metric([], objs.arena.used)
        yield arena


class MetricsServer:
    """The HTTP server of /metrics on its own daemon thread."""

    def __init__(self, address: str, collector: Collector) -> None:
        """Listen on `address` (HOST:PORT) and serve `collector`.

        Raises:
            UsageError: a malformed address, or one that cannot be listened on.
        """
        from prometheus_client import start_http_server

        host, port = parse_address(address)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        try:
            self.httpd: WSGIServer
            self.httpd, self.thread = start_http_server(port, addr=host, registry=registry)
        except OSError as e:
            raise UsageError(f"--metrics {address}: cannot listen there: {e.strerror or e}",
                             hint="choose a free port, or :0 for any") from None
        self.address = f"{host}:{self.httpd.server_port}"
        """Where it listens (the port chosen when 0 was asked)."""

    def close(self) -> None:
        """Stop serving and release the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5.0)


def scheduler_metrics(address: str | None, say: Callable[[str], None]) -> \
        tuple[SchedulerCollector | None, MetricsServer | None]:
    """The collector and listening server of a scheduler's `--metrics` (both None without it).

    Raises:
        UsageError: see MetricsServer.
    """
    if not address:
        return None, None
    collector = SchedulerCollector()
    return collector, serve(address, collector, say)


def serve(address: str | None, collector: Collector, say: Callable[[str], None] | None = None) \
        -> MetricsServer | None:
    """Start a metrics server when an address was given; say where it listens.

    Raises:
        UsageError: see MetricsServer.
    """
    if not address:
        return None
    server = MetricsServer(address, collector)
    if say is not None:
        say(f"metrics at http://{server.address}/metrics (pid {os.getpid()})")
    return server

