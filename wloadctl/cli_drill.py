"""The `wloadctl drill` verbs' command line: failover and agent-loss (the drills are in wloadctl.drill and
wloadctl.remote.agentdrill, imported when one runs: building the parser stays light)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from wloadctl.errors import UsageError
from wloadctl.paths import state_dir_text
from wloadctl.remote.agents import AGENTS_CONNECT_TIMEOUT, DEFAULT_AGENT_TIMEOUT
from wloadctl.remote.broker import add_broker_args

DEFAULT_TIMEOUT = 30.0
"""Seconds a failover drill waits for the takeover, and again for the first start and the fencing."""


def add_drill_args(p: argparse.ArgumentParser) -> None:
    """The `drill failover` and `drill agent-loss` subcommands."""
    sub = p.add_subparsers(dest="drill", metavar="DRILL", parser_class=type(p))
    sub.required = True
    f = sub.add_parser("failover", help="kill the active scheduler of a live run; measure the standby's takeover")
    f.add_argument("--state-dir", type=state_dir_text,
                   help="the run's state directory (default: $WLOADCTL_STATE_DIR, or the latest run)")
    f.add_argument("--journal", metavar="URL", help="journal in PostgreSQL (with --broker, the pair may be on other "
                   "hosts)")
    f.add_argument("--mode", choices=("kill", "stop"), default="kill",
                   help="kill: SIGKILL (default); stop: SIGSTOP, and SIGCONT once taken over (it must stand down)")
    f.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                   help="seconds to wait for the takeover, and again for the first start and the fencing "
                   f"(default {DEFAULT_TIMEOUT:g})")
    f.add_argument("--json", action="store_true")
    add_broker_args(f, streams=False)  # --broker: the active strikes itself when asked, on whichever host it runs
    a = sub.add_parser("agent-loss", help="kill an agent of this host; measure its LOST detection and its tasks' "
                       "reassignment")
    add_agent_loss_args(a)


def drill_command(a: argparse.Namespace, reader_dir: Path | None) -> int:
    """`wloadctl drill ...`: run the drill, print its report; 0 when every check passed, 1 otherwise."""
    if a.timeout is not None and a.timeout <= 0:
        raise UsageError(f"--timeout must be positive, not {a.timeout:g}")
    from wloadctl.drillreport import report_lines

    if a.drill == "failover" and a.broker:
        from wloadctl.remote.broker import BrokerOptions
        from wloadctl.remote.faildrill import failover_far

        rep = failover_far(BrokerOptions.from_args(a), a.mode, a.timeout)
    elif a.drill == "failover":
        from wloadctl.drill import failover

        rep = failover(reader_dir, a.mode, a.timeout)
    else:
        from wloadctl.remote.agentdrill import agent_loss

        rep = agent_loss(a, reader_dir)
    if a.json:
        print(json.dumps(rep.as_dict(), indent=1))
    else:
        print("\n".join(report_lines(rep)))
    for p in rep.problems:
        print(f"wloadctl: drill: {p}", file=sys.stderr)
    return 0 if rep.ok else 1


def add_agent_loss_args(p: argparse.ArgumentParser) -> None:
    """Options of `wloadctl drill agent-loss`."""
    p.add_argument("--agent", required=True, metavar="NAME", help="the agent to kill (it must run on this host)")
    p.add_argument("--state-dir", type=state_dir_text,
                   help="the run whose scheduler judges the agent (default: $WLOADCTL_STATE_DIR, or the latest run)")
    p.add_argument("--journal", metavar="URL", help="journal in PostgreSQL")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="seconds to wait for LOST, and again for its tasks to be settled (default: the agent "
                   "timeout + 20)")
    p.add_argument("--agent-timeout", type=float, default=DEFAULT_AGENT_TIMEOUT, metavar="S",
                   help="the run's --agent-timeout (default 10): how long LOST takes to come")
    p.add_argument("--json", action="store_true")
    add_broker_args(p, streams=False, timeout=AGENTS_CONNECT_TIMEOUT)
