"""`wloadctl agent`: its options, its signals, and its one-line errors."""

from __future__ import annotations

import argparse
import math
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from wloadctl.errors import UsageError, WloadError
from wloadctl.paths import make_state_dir, state_dir_text, state_root
from wloadctl.procs.prestart import MOST_EXECUTORS, MOST_SLOTS
from wloadctl.remote.broker import BrokerOptions, add_broker_args, check_name

if TYPE_CHECKING:
    from wloadctl.remote.agent import AgentOptions


def add_agent_args(p: argparse.ArgumentParser) -> None:
    """The options of `wloadctl agent`."""
    add_broker_args(p)
    p.add_argument("--name", help="this node's agent name (default: the host name)")
    p.add_argument("--pool", action="append", default=[], metavar="POOL",
                   help="a pool this agent serves (repeat for several; default: default)")
    p.add_argument("--slots", type=int, default=4, help="jobs it runs at once (default 4)")
    p.add_argument("--executors", type=int, default=None,
                   help="executor processes on this node, sharing its slots evenly (default 2, or 1 for an odd "
                        "number of slots)")
    p.add_argument("--cpus", type=float, default=0.0, help="CPUs it offers jobs that claim `cpu` (0: no limit)")
    p.add_argument("--memory", default="0", help="memory it offers jobs that claim `memory`: MiB or 4G (0: no limit)")
    p.add_argument("--state-dir", type=state_dir_text,
                   help="its journal, logs and results (default: $WLOADCTL_HOME/agent-NAME, or "
                        "$XDG_STATE_HOME/wloadctl/agent-NAME, by default ~/.local/state/wloadctl/agent-NAME)")


def executors_for(slots: int, given: int | None) -> int:
    """The executors of an agent of `slots` slots: each runs as many jobs (`given`, or 2, or 1 for odd slots).

    Raises:
        UsageError: the slots given cannot be shared evenly by the executors given (`--slots 3` ran 4 jobs at
            once on 2 executors).
    """
    if given is None:
        return 2 if slots % 2 == 0 else 1
    if slots % given:
        fits = [k for k in range(1, min(slots, MOST_EXECUTORS) + 1) if slots % k == 0]
        near = [given * (slots // given), given * (slots // given + 1)]
        raise UsageError(f"--slots {slots} cannot be shared evenly by --executors {given} (each runs as many jobs)",
                         hint=f"give --slots {' or '.join(str(n) for n in near if n >= 1)}, or --executors "
                              f"{', '.join(map(str, fits[-4:]))}")
    return given


def agent_command(a: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT."""
    from wloadctl.cli_host import memory_mib
    from wloadctl.remote.agent import AgentOptions
    from wloadctl.remote.nodelock import NodeLock

    name = check_name(a.name or socket.gethostname().split(".")[0], "agent name")
    pools = [check_name(p, "pool") for p in (a.pool or ["default"])]
    if not 1 <= a.slots <= MOST_SLOTS or (a.executors is not None and not 1 <= a.executors <= MOST_EXECUTORS):
        raise UsageError(f"--slots must be 1 to {MOST_SLOTS} and --executors 1 to {MOST_EXECUTORS}")
    a.executors = executors_for(a.slots, a.executors)
    memory = memory_mib(a.memory)
    for flag, value, shown in (("--cpus", a.cpus, f"{a.cpus:g}"), ("--memory", memory, a.memory)):
        if not (value >= 0 and math.isfinite(value)):
            # (a negative offer failed every job claiming it, after the agent had started serving)
            raise UsageError(f"{flag} {shown}: give 0 or more (0: no limit)")
    state_dir = Path(a.state_dir) if a.state_dir else state_root() / f"agent-{name}"
    opts = AgentOptions(BrokerOptions.from_args(a), name, pools, state_dir, slots=a.slots, executors=a.executors,
                        cpus=a.cpus, memory=memory)
    if a.metrics:
        from wloadctl.metrics import parse_address

        parse_address(a.metrics)  # a malformed address fails before the broker is dialled
    # Before anything of the node's is touched: a second agent of this name would take over the first's queues.
    lock = NodeLock.take(name, str(state_dir.absolute()))
    try:
        make_state_dir(state_dir)  # (before the broker is dialled: a path it cannot use ended in an internal error)
        return _serve(a, opts)
    finally:
        lock.release()


def _serve(a: argparse.Namespace, opts: AgentOptions) -> int:
    """Connect, serve until SIGTERM/SIGINT, stop (under the node's lock)."""
    from wloadctl.remote.agent import Agent
    from wloadctl.remote.link import BrokerLink

    name, pools, state_dir = opts.name, opts.pools, opts.state_dir
    server = None
    link = BrokerLink.open(opts.broker, name=f"agent-{name}")
    agent = Agent(opts, link)
    if a.metrics:
        from wloadctl.metrics import AgentCollector, MetricsServer

        try:
            server = MetricsServer(a.metrics, AgentCollector(agent))
        except UsageError:
            link.close(timeout=5.0)
            raise
        agent.note(f"metrics at http://{server.address}/metrics")

    def stop(_s: int, _f: object) -> None:
        agent.stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        agent.open()
        agent.note(f"serving pool(s) {', '.join(pools)} with {opts.slots} slot(s) on broker "
                   f"{opts.broker.shown()} (state dir {state_dir})")
        agent.serve()
        agent.note("stopping: running jobs are stopped and reported lost, so their runs retry them")
        agent.shutdown()
    except WloadError as e:
        print(f"wloadctl agent {name}: {e.one_line()}", file=sys.stderr)
        return e.exit_code
    finally:
        if server is not None:
            server.close()
        link.close(timeout=5.0)
    return 0
