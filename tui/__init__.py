"""The operations console: `run_console` starts or joins a run, then runs the app."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

__all__ = ["run_console"]


def _state_dir(args: argparse.Namespace) -> Path:
    if args.state_dir:
        return Path(args.state_dir)
    if args.plan:
        # Loading the plan here also reports every problem in it before anything starts.
        from wloadctl.client import state_dir_for_plan

        return state_dir_for_plan(args.plan)
    from wloadctl.client import resolve_state_dir

    return resolve_state_dir(None)


def run_console(args: argparse.Namespace) -> int:
    """`wloadctl console [PLAN] [--state-dir DIR] [--readonly]`.

    Starts the run's scheduler in its own session when none is live (a closed terminal
    does not stop it), or attaches to the live one; then runs the console until the
    operator quits, detaching from the run or stopping it.

    Args:
        args: plan, state_dir, readonly, executors, slots.

    Returns:
        The exit status: 0.

    Raises:
        WloadError: a bad plan, no run to show, or a scheduler that would not start.
    """
    from tui.app import ConsoleApp
    from tui.supervise import SchedulerSupervisor
    from wloadctl.client import RunClient
    from wloadctl.errors import UsageError
    from wloadctl.paths import refuse_non_directory

    if getattr(args, "broker", None) and not args.plan and _journal_in_force():
        # A run of another host, through its journal; with a plan, --broker is that of the run's agents.
        return _run_far_console(args)
    if not args.plan and not args.state_dir and not os.environ.get("WLOADCTL_STATE_DIR"):
        return _run_list(args)
    state_dir = _state_dir(args)
    supervisor = None
    if args.readonly:
        RunClient(
            state_dir
        ).close()  # fails with a clear message when there is no run to show
    else:
        wanted = None
        if args.plan:
            from wloadctl.core.planfile import load_plan

            # A bad plan is told here, as `run` tells it, before any scheduler starts.
            wanted = load_plan(args.plan).name
        supervisor = SchedulerSupervisor(
            state_dir, args.plan, args.executors, args.slots,
            accept_plan_change=args.accept_plan_change,
        )
        refuse_non_directory(state_dir)  # (said first, as `run` says it)
        _need_terminal()  # (before a scheduler is started for it)
        print(
            f"wloadctl: {state_dir}: looking for the run's scheduler...",
            file=sys.stderr,
        )
        event = supervisor.attach_or_start()
        print(f"wloadctl: {event.text}", file=sys.stderr)
        if wanted is not None:
            with RunClient(state_dir) as client:
                if client.run.plan_name != wanted:
                    raise UsageError(
                        f"{state_dir} runs plan '{client.run.plan_name}', "
                        f"not '{wanted}'",
                        hint="give another --state-dir, or attach without a plan",
                    )
    _need_terminal()
    app = ConsoleApp(state_dir, supervisor=supervisor, readonly=args.readonly)
    result = app.run()
    where = f"--state-dir {state_dir}"
    if result == "detach" and supervisor is not None:
        print(
            f"wloadctl: {f'console ended by {app.ended_by}; ' if app.ended_by else ''}"
            f"the run goes on (scheduler pid {supervisor.pid}); "
            "attach again with "
            f"`wloadctl console {where}`",
            file=sys.stderr,
        )
    elif result == "stopped":
        from tui.screens.quit import stopped_line

        print(f"wloadctl: {stopped_line(app.stopped_running, app.stopped_held, where)}", file=sys.stderr)
    elif result == "stop-timeout":
        print(
            "wloadctl: the scheduler is still stopping; "
            f"check with `wloadctl status {where}`",
            file=sys.stderr,
        )
    return 0


def _need_terminal() -> None:
    """Refuse to draw the console where there is no terminal to draw it on (a script, a pipe, cron): without
    one it would read an input at its end over and over, at full CPU, for ever.

    Raises:
        UsageError: its input or its output is not a terminal.
    """
    from wloadctl.errors import UsageError

    for name, stream in (("input", sys.stdin), ("output", sys.stdout)):
        if stream is None or not stream.isatty():
            raise UsageError(f"the console needs a terminal, and its {name} is not one",
                             hint="in scripts use `wloadctl status`, `wloadctl top --once` and the operator verbs")


def _journal_in_force() -> bool:
    from wloadctl.client import journal_in_force

    return journal_in_force() is not None


def _run_far_console(args: argparse.Namespace) -> int:
    """`wloadctl console --broker URL --journal URL`: watch and steer a run whose scheduler is on another host.

    The run is the journal's latest (of the state directory when one is given); no scheduler is
    started from here, and verbs go through the broker to whichever scheduler holds the lease.
    """
    from tui.app import ConsoleApp
    from wloadctl.client import RunClient, broker_from_args, journal_in_force
    from wloadctl.errors import UsageError

    if journal_in_force() is None:
        raise UsageError("console --broker watches a run of another host through its journal: give --journal URL",
                         hint="wloadctl console --broker nats://HOST:4222 --journal postgresql://USER@HOST/DB")
    broker = broker_from_args(args)
    state_dir = Path(args.state_dir) if args.state_dir else None

    def open_client() -> RunClient:
        return RunClient(state_dir, broker=broker)

    with open_client() as client:  # fails with a clear message when there is no run to show
        where = client.state_dir
    _need_terminal()
    ConsoleApp(where, supervisor=None, readonly=args.readonly, open_client=open_client).run()
    return 0


def _run_list(args: argparse.Namespace) -> int:
    """The console over every run under the state root: the list first, a run opened from it."""
    from tui.app import ConsoleApp
    from wloadctl.paths import state_root
    from wloadctl.runlist import list_runs

    root = state_root()
    _need_terminal()
    ConsoleApp(None, readonly=args.readonly, runs_source=lambda: list_runs(root)[0], runs_root=str(root)).run()
    return 0
