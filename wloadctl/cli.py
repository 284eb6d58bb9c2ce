"""The `wloadctl` command line: validate, gen, run, resume, status, verbs, why, logs, history, console, agents."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from wloadctl.errors import PlanError, UsageError, WloadError, printable
from wloadctl.paths import state_dir_text
from wloadctl.stdoutguard import GuardedStdout, to_devnull

if TYPE_CHECKING:
    from wloadctl.procs.prestart import Prestarted

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 141
"""A command whose output was cut short by its reader going away (`logs JOB | head`): 128 + SIGPIPE, the code
of a `cat` the shell's pipe stops."""
GEN_MAX_JOBS = 100_000_000
"""The most jobs `gen` writes."""
PROBLEM_LINES = 20
"""A plan's problems printed at most (validate --json lists every one)."""
VERB_COMMANDS = ("hold", "release", "retry", "rerun", "kill", "set-ok", "skip")
JOB_ID_LIMIT = 200
"""The longest job id (wloadctl.core.plan.JOB_ID_MAX, which a test holds this to: the plan model is not loaded
to parse a command line)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {_invalid_choice(message)} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _invalid_choice(message: str) -> str:
    """argparse's "invalid choice" with the closest choice first and the internal ones (`_x`) left out."""
    import re

    m = re.fullmatch(r"(argument [^:]+): invalid choice: '(.*)' \(choose from (.*)\)", message, re.S)
    if m is None:
        return message
    import difflib

    choices = [c for c in re.findall(r"'([^']*)'", m[3]) if not c.startswith("_")]
    close = difflib.get_close_matches(m[2], choices, n=1, cutoff=0.6)
    guess = f"did you mean '{close[0]}'? " if close else ""
    what = "unknown command" if m[1] == "argument COMMAND" else f"{m[1]}: invalid choice"
    return f"{what} '{m[2]}' ({guess}choose from {', '.join(choices)})"


def _moment(text: str) -> str:
    """`status --at`: a moment as written (read against the run's zone later); blank names none, and is refused
    rather than taken for no --at at all (the live status, as if it were the answer)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} names no moment: write a clock time (23:40), an ISO timestamp "
                                         "(2026-12-01T23:40:00) or an offset back from now (-15m)")
    return text


def _business_date(text: str) -> str:
    """`--business-date`: a calendar date written YYYY-MM-DD (what jobs see as $WLOADCTL_BUSINESS_DATE)."""
    import datetime as dt
    import re

    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r} is not a date: write it YYYY-MM-DD (2026-12-31)")


PLAN_STATE_DIR = "$WLOADCTL_STATE_DIR, else one named after the plan under $WLOADCTL_HOME or $XDG_STATE_HOME/wloadctl"
"""Where `run` and `trigger` keep a plan's run when no --state-dir is given."""


def _state_dir_arg(p: argparse.ArgumentParser, default: str = "$WLOADCTL_STATE_DIR, or the latest run") -> None:
    p.add_argument("--state-dir", type=state_dir_text, help=f"the run's state directory (default: {default})")
    p.add_argument("--journal", metavar="URL",
                   help="journal in PostgreSQL, postgresql://USER@HOST[:PORT]/DB[?namespace=NAME] (default: "
                        "$WLOADCTL_JOURNAL, else SQLite in the state directory)")


def _seconds(text: str) -> float:
    """A duration option in seconds: a finite number above 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0")
    return v


def _agent_timeout(text: str) -> float:
    """A run's `--agent-timeout`: seconds, agents.MIN_AGENT_TIMEOUT at least."""
    from wloadctl.remote.agents import MIN_AGENT_TIMEOUT

    v = _seconds(text)
    if v < MIN_AGENT_TIMEOUT:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give {MIN_AGENT_TIMEOUT:g} seconds or more (agents beat every second, and the executors of "
            "one that died may start what they hold for a moment after)")
    return v


def _one_or_more(text: str, what: str, below: str) -> int:
    """A whole number of 1 or more; else `what` it is not, or what is `below` 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: {below}")
    return v


def _utf8(text: str, what: str) -> str:
    """`text` of an argument when it is UTF-8; else refused, naming the first byte that is not (a shell in a
    Latin-1 locale passes `é` as 0xe9, which Python keeps as a lone surrogate no request or journal row can carry).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raw = text[e.start].encode("utf-8", "surrogateescape") if "\udc80" <= text[e.start] <= "\udcff" else b""
        byte = f"byte 0x{raw[0]:02x}" if raw else "a character"
        raise argparse.ArgumentTypeError(f"{what} is not UTF-8 text ({byte} at character {e.start + 1}): write "
                                         "it in UTF-8 (LANG=C.UTF-8 or another UTF-8 locale)") from None
    return text


def _reason(text: str) -> str:
    """`--reason`: free text, journaled with the action, so UTF-8."""
    return _utf8(text, "the reason")


def _request_id(text: str) -> str:
    """`reject ID`: a request id (R1, R2, ...), UTF-8 as what it is compared with."""
    return _utf8(text, "the request id")


def _job_arg(text: str) -> str:
    """A job id or glob of a verb: not empty (`hold ''` names no job, and a glob of nothing matches none), UTF-8,
    and, when it is an id, no longer than a job id may be (no journal lookup, nor a request of megabytes that
    the control socket refuses as if the scheduler had failed)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty job id names no job: give a job id or a glob such as 'load_*'")
    _utf8(text, "the job id")
    if len(text) > JOB_ID_LIMIT and not any(c in text for c in "*?["):
        raise argparse.ArgumentTypeError(f"'{text[:40]}...' ({len(text):,} characters) is longer than any job id "
                                         f"(at most {JOB_ID_LIMIT} characters)")
    return text


def _attempt(text: str) -> int:
    """`--attempt N`: an attempt number, 1 or more."""
    return _one_or_more(text, "an attempt number", "attempts are numbered from 1")


def _how_many(text: str) -> int:
    """A count option (`--next N`): 1 or more."""
    return _one_or_more(text, "a whole number", "give 1 or more")


MAX_NEXT = 10_000
"""Most trigger times `trigger --next` lists: a look ahead at a schedule, not every minute of its 28 years
(14 million lines, and minutes before the first)."""


def _next_count(text: str) -> int:
    """`trigger --next N`: 1 to MAX_NEXT."""
    v = _how_many(text)
    if v > MAX_NEXT:
        raise argparse.ArgumentTypeError(f"{text!r}: give at most {MAX_NEXT}")
    return v


def _workers(text: str) -> int:
    """`--executors N`, `--slots N`: 1 or more (left out, the default; 0 is refused, never read as it)."""
    return _one_or_more(text, "a whole number", "give 1 or more, or leave the option out for the default")


def _amount(kind: type[int] | type[float]) -> Any:
    """A quantity option (CPUs, MiB): 0 or more."""
    def parse(text: str) -> int | float:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        if not (v >= 0 and math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"{text!r}: give 0 or more (0: no limit)")
        return v

    return parse


def _heartbeat_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--heartbeat-interval",
        type=_seconds,
        default=0.25,
        help="seconds between the active scheduler's heartbeats (and a standby's looks at them)",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=_seconds,
        default=1.5,
        help="seconds of silence (board beat and journal lease) before a standby verifies and takes over",
    )


def _remote_args(p: argparse.ArgumentParser) -> None:
    """The broker (for jobs on agents) and how long an agent may be silent."""
    if isinstance(p, _Unbuilt):
        return  # another command's: its options are not built, nor their modules loaded
    from wloadctl.remote.broker import add_broker_args

    add_broker_args(p)
    p.add_argument("--agent-timeout", type=_agent_timeout, default=10.0,
                   help="seconds an agent may be silent before it is LOST and its jobs are retried (default 10)")


def _metrics_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics", metavar="HOST:PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (:PORT for every interface)")


def _log_broker_args(p: argparse.ArgumentParser) -> None:
    """The broker of the agent that ran a job, for its log (default: the run's), with its credentials."""
    if isinstance(p, _Unbuilt):
        return
    from wloadctl.remote.broker import add_broker_args

    add_broker_args(p, streams=False)


def _verb_broker_arg(p: argparse.ArgumentParser) -> None:
    """The broker a verb travels through to a scheduler of another host (with --journal)."""
    if isinstance(p, _Unbuilt):
        return
    from wloadctl.remote.broker import add_broker_args

    add_broker_args(p)


class _Unbuilt:
    """Stands for the parser of a subcommand that is not the one asked for: whatever is added to it is dropped."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *_a, **_k: self


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of every subcommand, or, with `only`, of that one (building every subcommand's
    options costs tens of milliseconds at each command's start)."""
    ap = _Parser(prog="wloadctl", description="Workload scheduler for batch operations.")
    ap.add_argument("--version", action=_VersionAction)
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    if only is not None:
        add_parser = sub.add_parser

        def one(name: str, **kw: Any) -> Any:
            return add_parser(name, **kw) if name == only else _Unbuilt()

        sub.add_parser = one  # type: ignore[method-assign]

    p = sub.add_parser("validate", help="check plan files; one line per problem")
    p.add_argument("plans", nargs="+", metavar="PLAN")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("gen", help="write a synthetic plan")
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--shape", choices=("bank", "wide", "chain"), default="bank")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--type", choices=("shell", "noop"), default="shell", dest="job_type")
    p.add_argument("--command", default=None, help="shell command of every job (default: true)")
    p.add_argument("--style", choices=("flow", "block"), default="flow",
                   help="flow: one job a line (default); block: one key a line, as plans are written by hand")
    p.add_argument("-o", "--output", required=True)

    for name, helptext in (
        ("run", "run a plan headless to completion (resumes an unfinished run)"),
        ("resume", "resume the unfinished run of a state directory"),
    ):
        p = sub.add_parser(name, help=helptext)
        if name == "run":
            p.add_argument("plan", metavar="PLAN")
        else:
            p.add_argument("plan", metavar="PLAN", nargs="?", help="the plan file, to check or accept changes")
        _state_dir_arg(p, PLAN_STATE_DIR if name == "run" else "$WLOADCTL_STATE_DIR, or the latest run")
        p.add_argument("--executors", type=_workers, default=0, help="executor processes (default 2)")
        p.add_argument("--slots", type=_workers, default=0, help="jobs per executor at once (default 4)")
        p.add_argument("--business-date", type=_business_date,
                       help="YYYY-MM-DD the commands see as WLOADCTL_BUSINESS_DATE")
        p.add_argument("--accept-plan-change", action="store_true")
        p.add_argument(
            "--journal-sync",
            choices=("auto", "full", "normal"),
            default="auto",
            help="auto (default): turns touching a non-idempotent job, and operator actions, survive power "
            "loss, the rest a crash of the process; full: every commit survives power loss; normal: every "
            "commit survives a crash of the process",
        )
        p.add_argument("--json", action="store_true", help="print a summary object at the end")
        p.add_argument("--quiet", action="store_true")
        p.add_argument(
            "--exit-on-hold",
            action="store_true",
            help="end the run (status held, exit 1, resumable) when only held jobs remain, instead of "
            "waiting for them to be released",
        )
        p.add_argument(
            "--prefetch",
            type=int,
            default=None,
            help="tasks per slot an executor takes ahead while its jobs are short (under 50 ms; a task "
            "taken ahead waits at most that long before it is handed back, and fewer are taken the longer the jobs); "
            "0: never (default 8)",
        )
        p.add_argument(
            "--executor-cpus",
            type=_amount(float),
            default=0.0,
            help="CPUs each executor offers jobs that declare `cpu` (0: no limit)",
        )
        p.add_argument(
            "--executor-memory",
            type=_amount(int),
            default=0,
            help="MiB each executor offers jobs that declare `memory` (0: no limit)",
        )
        p.add_argument(
            "--executor-timeout",
            type=_seconds,
            default=5.0,
            help="seconds without a heartbeat before an executor is declared dead and replaced",
        )
        _heartbeat_args(p)
        _remote_args(p)
        _metrics_arg(p)

    p = sub.add_parser("trigger", help="start runs of a plan at its cron schedule, on business days")
    p.add_argument("plan", metavar="PLAN")
    _state_dir_arg(p, PLAN_STATE_DIR)
    p.add_argument("--next", type=_next_count, metavar="N",
                   help=f"only print the next N trigger times (1 to {MAX_NEXT}, within 28 years)")
    p.add_argument("--once", action="store_true", help="wait for the next trigger, run once, exit")
    p.add_argument("--executors", type=_workers, default=0)
    p.add_argument("--slots", type=_workers, default=0)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("status", help="state of a run, live or finished",
                       epilog="exit 1 when the run is not going on and a job failed, timed out or is upstream-failed, "
                       "or it was cancelled or ended holding; 3 when its scheduler is NOT RESPONDING (stopped or "
                       "hung) or the journal cannot be read; else 0 (--json and --at too)")
    _state_dir_arg(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true", help="list every job, not only the unfinished and failed")
    p.add_argument("--at", metavar="TIME", type=_moment,
                   help="the run as it stood then, from the journal: a clock time (23:40, the latest not to come, "
                   "in the plan's timezone), an ISO timestamp, or an offset back from now (-15m)")
    p = sub.add_parser("top", help="the live pipeline: queues, arena, latencies, journal, loop, executors, agents")
    _state_dir_arg(p)
    p.add_argument("--json", action="store_true", help="one reading as a JSON object")
    p.add_argument("--once", action="store_true", help="print one reading and exit (the default when piped)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between readings (default 1)")

    for verb in VERB_COMMANDS:
        p = sub.add_parser(verb, help=f"{verb} jobs (ids or globs)")
        p.add_argument("jobs", nargs="+", metavar="JOB", type=_job_arg)
        p.add_argument("--reason", default="", type=_reason)
        _state_dir_arg(p)
        _verb_broker_arg(p)
        p.add_argument("--json", action="store_true")
        if verb == "rerun":
            p.add_argument("--downstream", action="store_true", help="also rerun everything that depends on it")
    p = sub.add_parser("approve", help="apply another person's pending request (ID), or let jobs waiting for "
                       "confirmation start (JOB)")
    p.add_argument("jobs", nargs="+", metavar="ID|JOB", type=_job_arg)
    p.add_argument("--reason", default="", type=_reason)
    _state_dir_arg(p)
    _verb_broker_arg(p)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("reject", help="drop a pending request (ID) that needs a second person")
    p.add_argument("jobs", nargs=1, metavar="ID", type=_request_id)
    p.add_argument("--reason", default="", type=_reason)
    _state_dir_arg(p)
    _verb_broker_arg(p)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("pending", help="requests waiting for a second person's approve, and jobs waiting for "
                       "confirmation")
    _state_dir_arg(p)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("cancel", help="drain the run: nothing new starts")
    p.add_argument("--reason", default="", type=_reason)
    _state_dir_arg(p)
    _verb_broker_arg(p)
    p.add_argument("--json", action="store_true")

    for name, helptext in (
        ("why", "why a job is not running now"),
        ("history", "attempts and actions of a job"),
        ("lineage", "upstream and downstream of a job"),
        ("show", "what a job is: its description, command and settings, as its run's plan says"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("job", metavar="JOB", type=_job_arg)
        _state_dir_arg(p)
        p.add_argument("--json", action="store_true")
    p = sub.add_parser("logs", help="a job's output")
    p.add_argument("job", metavar="JOB", type=_job_arg)
    p.add_argument("--attempt", type=_attempt, help="which attempt (default: the latest)")
    p.add_argument("--tail", "-n", type=_how_many, metavar="N", help="its last N lines only")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--follow", "-f", action="store_true")
    form.add_argument("--json", action="store_true", help="the attempt, its log file and its output as one object")
    p.add_argument("--raw", action="store_true",
                   help="its bytes as the job wrote them, on a terminal too (where control characters are "
                        "otherwise shown as ^[, ^G ...: an escape sequence a job printed is not obeyed)")
    _log_broker_args(p)
    _state_dir_arg(p)
    p = sub.add_parser("audit", help="the run's operator actions")
    _state_dir_arg(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--verify", action="store_true", help="check the journal's audit hash chain (exit 1 if broken)")
    p = sub.add_parser("cleanup", help="remove queues and shared memory left by crashed runs")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("console", help="the operations console")
    p.add_argument("plan", metavar="PLAN", nargs="?")
    _state_dir_arg(p, "with PLAN, its directory under the state root; else $WLOADCTL_STATE_DIR; with neither, "
                      "the console opens the list of runs")
    _remote_args(p)  # the broker of its agents, and of verbs to a scheduler of another host
    p.add_argument("--readonly", action="store_true")
    p.add_argument("--executors", type=_workers, default=0)
    p.add_argument("--slots", type=_workers, default=0)
    p.add_argument("--accept-plan-change", action="store_true",
                   help="resume the directory's run under PLAN changed since it started (jobs added), as `resume` does")
    p = sub.add_parser("scheduler", help="run the scheduler of a state directory's run (used by the console)")
    p.add_argument("plan", metavar="PLAN", nargs="?")
    _state_dir_arg(p)
    p.add_argument("--executors", type=_workers, default=0)
    p.add_argument("--slots", type=_workers, default=0)
    p.add_argument("--standby", action="store_true", help="watch the active scheduler and take over if it dies")
    p.add_argument("--run", metavar="ID", help="with --standby: the run to follow (default: the latest running one)")
    p.add_argument("--business-date", type=_business_date)
    p.add_argument("--accept-plan-change", action="store_true")
    _heartbeat_args(p)
    _remote_args(p)
    _metrics_arg(p)
    p = sub.add_parser("agent", help="serve pools of a broker on this node: run their jobs on local executors")
    if not isinstance(p, _Unbuilt):
        from wloadctl.remote.agent_cli import add_agent_args

        add_agent_args(p)
        _metrics_arg(p)
    p = sub.add_parser("agents", help="remote agents (nodes) from the broker, with their state")
    if not isinstance(p, _Unbuilt):
        from wloadctl.remote.agents import AGENTS_CONNECT_TIMEOUT, add_agents_args
        from wloadctl.remote.broker import add_broker_args

        add_broker_args(p, streams=False, timeout=AGENTS_CONNECT_TIMEOUT)
        add_agents_args(p)
    p = sub.add_parser("drill", help="failover and agent-loss drills on a live run, measured and journaled")
    if not isinstance(p, _Unbuilt):
        from wloadctl.cli_drill import add_drill_args

        add_drill_args(p)
    p = sub.add_parser("runs", help="every run under a root directory, live or finished")
    p.add_argument("--root", help="where state directories are made (default: $WLOADCTL_HOME, or "
                   "$XDG_STATE_HOME/wloadctl, by default ~/.local/state/wloadctl)")
    p.add_argument("--journal", metavar="URL",
                   help="also list the runs of this PostgreSQL journal, postgresql://USER@HOST[:PORT]/DB"
                        "[?namespace=NAME], whatever their state directory or host (default: $WLOADCTL_JOURNAL)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("host", help="the host's capacity every run draws on (slots, cpu, memory), and the runs "
                       "holding it")
    p.add_argument("--slots", type=int, help="set the host's capacity in slots, shared by every run by `share:`")
    p.add_argument("--cpus", type=float, help="set the CPUs that jobs claiming `cpu` share across every run "
                   "(0: no host limit)")
    p.add_argument("--memory", help="set the memory that jobs claiming `memory` share across every run: MiB or a "
                   "size like 8G (0: no host limit)")
    p.add_argument("--off", action="store_true", help="remove it: every run uses its own executors' slots, cpus "
                   "and memory")
    p.add_argument("--root", help="the state root (default: $WLOADCTL_HOME, or $XDG_STATE_HOME/wloadctl, by default "
                        "~/.local/state/wloadctl)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("doctor", help="host limits that matter (queues, /dev/shm, files, processes, cgroups) and use")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("completion", help="print a shell completion script (source <(wloadctl completion bash))")
    p.add_argument("shell", choices=("bash", "zsh"))
    # Called by the completion scripts, so not listed: job ids of the latest run, one a line.
    p = sub.add_parser("_complete-jobs")
    _state_dir_arg(p)
    p = sub.add_parser("bench", help="benchmarks at bank scale (see `wloadctl bench --help`)", add_help=False)
    p.add_argument("args", nargs=argparse.REMAINDER)
    return ap


class _VersionAction(argparse.Action):
    """`--version`: the version is looked up when asked for, not at every command's start (its metadata
    costs tens of milliseconds to read)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str = "show the version and exit") -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"{parser.prog} {_version()}")
        parser.exit()


def _version() -> str:
    """The installed package's version (its metadata), or the source tree's when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wloadctl")
    except PackageNotFoundError:
        from wloadctl import __version__

        return __version__


def resolve_state_dir(given: str | None) -> Path:
    """The state directory to use (see wloadctl.client.resolve_state_dir)."""
    from wloadctl.client import resolve_state_dir as resolve

    return resolve(given)


def _journal_of_dir(given: str | None) -> None:
    """With no journal given, a state directory named (--state-dir, $WLOADCTL_STATE_DIR) whose runs went to a
    server journal is read in that journal (paths.adopt_journal_of); `run` and `trigger` do the same with their
    plan's own directory once they know it."""
    from wloadctl.paths import adopt_journal_of, named_state_dir

    named = named_state_dir(given)
    if named:  # (a command with no state directory, `validate` say, loads no journal code)
        adopt_journal_of(Path(named))


def _reader_dir(given: str | None) -> Path | None:
    """The state directory of a read or a verb; None with a server journal and no directory named."""
    from wloadctl.paths import named_state_dir
    from wloadctl.store import journal_url

    if not named_state_dir(given) and journal_url() is not None:
        return None  # the journal's latest run of the namespace: no state directory needed
    return resolve_state_dir(given)


def cmd_validate(a: argparse.Namespace) -> int:
    from wloadctl.core.planfile import load_plan

    bad = 0
    out = []
    for path in a.plans:
        try:
            plan = load_plan(path)
            out.append({"file": path, "ok": True, "jobs": len(plan.jobs)})
            if not a.json:
                print(f"{path}: ok ({len(plan.jobs)} jobs)")
        except PlanError as e:
            bad += 1
            out.append({"file": path, "ok": False, "problems": e.lines()})
            if not a.json:
                for line in e.lines(PROBLEM_LINES):
                    print(line, file=sys.stderr)
    if a.json:
        print(json.dumps(out, indent=2))
    return EXIT_USAGE if bad else EXIT_OK


def cmd_gen(a: argparse.Namespace) -> int:
    from wloadctl.gen import write_plan

    if a.jobs <= 0:
        raise UsageError(f"--jobs must be positive, not {a.jobs}")
    if a.jobs > GEN_MAX_JOBS:
        raise UsageError(f"--jobs {a.jobs} is more than gen writes ({GEN_MAX_JOBS:,}: a plan of about 10 GB)")
    # A link is written through (the file it names is the plan); what is there must be a plan file, or nothing:
    # the rename below would put a file in the place of a device, a pipe or a directory.
    target = os.path.realpath(a.output)
    with contextlib.suppress(OSError):
        mode = os.stat(target).st_mode
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # (a folder is refused by the rename below)
            raise UsageError(f"cannot write {a.output}: it is not a regular file",
                             hint="-o names the plan file to write (a new file, or a plan to replace)")
    t = time.time()
    # Written beside the file and renamed when whole: an interrupted or failed gen leaves no half plan behind.
    part = f"{target}.part-{os.getpid()}"
    try:
        try:
            write_plan(part, a.jobs, a.shape, a.seed, job_type=a.job_type, command=a.command, style=a.style)
            os.replace(part, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise
    except ValueError as e:
        raise UsageError(f"--command {a.command!r}: {e}" if a.command is not None and "command" in str(e)
                         else str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot write {a.output}: {e.strerror or e}",
                         hint="-o names the plan file to write, in a directory that exists") from None
    print(f"wrote {a.output}: {a.jobs} jobs, shape {a.shape}, seed {a.seed} ({time.time() - t:.1f}s)", file=sys.stderr)
    return EXIT_OK


def cmd_run(a: argparse.Namespace) -> int:
    from wloadctl.paths import named_state_dir

    a.state_dir = named_state_dir(a.state_dir)  # before the executors started ahead, which need it
    early = _start_ahead(a)
    try:
        from wloadctl.cli_run import run_command

        return run_command(a, early)
    finally:
        if early is not None:
            early.close()


def _start_ahead(a: argparse.Namespace) -> Prestarted | None:
    """The executors of a new run, started before the scheduler's own imports (procs/prestart.py); None when
    the command line does not say where the run lives, or what it says is refused later."""
    from wloadctl.procs import prestart as ahead

    if a.cmd != "run" or not a.state_dir or ahead.counts_problem(a.executors, a.slots, a.prefetch or 0):
        return None
    rid = ahead.new_run_id()
    argvs = [ahead.executor_argv(rid, i, a.slots or ahead.DEFAULT_SLOTS, Path(a.state_dir), ahead.ORPHAN_TIMEOUT,
                                 a.executor_cpus, ahead.DEFAULT_PREFETCH if a.prefetch is None else a.prefetch,
                                 a.executor_memory, None)
             for i in range(a.executors or ahead.DEFAULT_EXECUTORS)]
    return ahead.Prestarted(rid, argvs)


def cmd_status(a: argparse.Namespace) -> int:
    if a.at is not None:
        from wloadctl.cli_ops import show_status_at

        return show_status_at(a, _reader_dir(a.state_dir))
    from wloadctl.cli_show import show_status

    return show_status(a, _reader_dir(a.state_dir))


def cmd_top(a: argparse.Namespace) -> int:
    from wloadctl.cli_ops import show_top

    return show_top(a, _reader_dir(a.state_dir))


def cmd_verb(a: argparse.Namespace) -> int:
    from wloadctl.cli_show import show_verb

    return show_verb(a, _reader_dir(a.state_dir))


def cmd_read(a: argparse.Namespace) -> int:
    from wloadctl.cli_show import show_read

    return show_read(a, _reader_dir(a.state_dir))


def cmd_cleanup(a: argparse.Namespace) -> int:
    from wloadctl.procs.supervisor import clean_stale, clean_stale_groups

    lines: list[str] = []
    kept: dict[str, str] = {}
    gone = clean_stale(lines.append, kept)
    groups = clean_stale_groups(lines.append)
    if a.json:
        print(json.dumps({"removed": gone, "job_groups_removed": groups, "kept": kept}))
    else:
        for line in lines:
            print(line)
        for rid, why in kept.items():
            print(f"kept the IPC objects of run {rid}: {why}")
        and_groups = f" and {groups} empty job group folder(s)" if groups else ""
        print(f"removed {len(gone)} stale IPC object(s){and_groups}")
    return EXIT_OK


def cmd_console(a: argparse.Namespace) -> int:
    from tui import run_console
    from wloadctl.remote.broker import ENV_BROKER, ENV_PASSWORD, ENV_PREFIX, ENV_TIMEOUT

    # The scheduler the console starts inherits the broker of the run's agents.
    timeout = str(a.broker_timeout) if a.broker_timeout else None
    for var, value in ((ENV_BROKER, a.broker), (ENV_PASSWORD, a.broker_password), (ENV_PREFIX, a.prefix),
                       (ENV_TIMEOUT, timeout)):
        if value:
            os.environ[var] = value

    return run_console(a)


def cmd_trigger(a: argparse.Namespace) -> int:
    from wloadctl.cli_run import trigger_command

    return trigger_command(a)


def cmd_scheduler(a: argparse.Namespace) -> int:
    from wloadctl.cli_run import scheduler_command

    return scheduler_command(a)


def cmd_agent(a: argparse.Namespace) -> int:
    from wloadctl.remote.agent_cli import agent_command

    return agent_command(a)


def cmd_agents(a: argparse.Namespace) -> int:
    from wloadctl.remote.agents import agents_command

    return agents_command(a)


def cmd_drill(a: argparse.Namespace) -> int:
    from wloadctl.cli_drill import drill_command

    # Through the broker the drill finds the run in the server journal, from any host.
    far = a.drill == "failover" and a.broker
    return drill_command(a, None if far else _reader_dir(a.state_dir))


def cmd_host(a: argparse.Namespace) -> int:
    from wloadctl.cli_host import host_command

    return host_command(a)


def cmd_runs(a: argparse.Namespace) -> int:
    import socket

    from wloadctl.paths import state_root
    from wloadctl.runlist import journal_runs, list_runs
    from wloadctl.store import journal_url, without_password

    root = Path(a.root) if a.root else state_root()
    if a.root and not root.is_dir():
        raise UsageError(f"--root {root}: no such directory")
    entries, problems = list_runs(root)
    where = f"under {root}"
    url = journal_url()
    if url is not None:
        # And a server journal's runs, of every state directory and host of its namespace.
        entries = sorted(entries + journal_runs(), key=lambda e: e.started, reverse=True)
        where = f"in {without_password(url)} or {where}"
    for line in problems:
        print(f"wloadctl: {line}", file=sys.stderr)
    if a.json:
        print(json.dumps([e.as_dict() for e in entries], indent=1))
        return EXIT_OK
    if not entries:
        print(f"no runs {where}")
        return EXIT_OK
    here = socket.gethostname()
    rows = [("RUN", "PLAN", "BUSINESS DATE", "STATUS", "PROGRESS", "SLA", "STATE DIR")]
    for e in entries:
        risk = ", ".join(p for p in (f"{e.late} LATE" if e.late else "",
                                     f"{e.at_risk} AT_RISK" if e.at_risk else "") if p) or "-"
        place = f"{e.host}:{e.state_dir}" if e.host and e.host != here else e.state_dir
        rows.append((e.run, e.plan, e.business_date, e.status, f"{e.done}/{e.total}", risk, place))
    from rich.cells import cell_len

    # Padded by terminal columns: a plan named in Chinese or Japanese takes two columns a character.
    widths = [max(cell_len(r[k]) for r in rows) for k in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c + " " * (w - cell_len(c)) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])
    return EXIT_OK


def cmd_doctor(a: argparse.Namespace) -> int:
    from wloadctl.procs.limits import probe

    limits = probe()
    if a.json:
        print(json.dumps([lim.as_dict() for lim in limits], indent=1))
        return EXIT_OK
    for lim in limits:
        limit = "unlimited" if lim.limit is None and lim.unit else ("-" if lim.limit is None else f"{lim.limit}")
        used = "-" if lim.used is None else f"{lim.used}"
        amount = f"{used} of {limit} {lim.unit}".rstrip() if lim.unit else ""
        print(f"{lim.verdict:<9} {lim.name}: {amount}{'  ' if amount else ''}({lim.note})")
        if lim.verdict != "ok" and lim.hint:
            print(f"{'':<10}{lim.hint}")
    return EXIT_OK


def cmd_completion(a: argparse.Namespace) -> int:
    from wloadctl.completion import script

    sys.stdout.write(script(a.shell, build_parser()))
    return EXIT_OK


def cmd_complete_jobs(a: argparse.Namespace) -> int:
    from wloadctl.completion import job_ids

    ids = job_ids(a.state_dir)
    if ids:
        sys.stdout.write("\n".join(ids) + "\n")
    return EXIT_OK


def cmd_bench(a: argparse.Namespace) -> int:
    from wloadctl.bench import main as bench_main

    return bench_main(a.args)


COMMANDS: dict[str, Any] = {
    "validate": cmd_validate,
    "gen": cmd_gen,
    "run": cmd_run,
    "resume": cmd_run,
    "status": cmd_status,
    "top": cmd_top,
    "cancel": cmd_verb,
    "approve": cmd_verb,
    "reject": cmd_verb,
    "pending": cmd_read,
    "why": cmd_read,
    "history": cmd_read,
    "lineage": cmd_read,
    "show": cmd_read,
    "logs": cmd_read,
    "audit": cmd_read,
    "cleanup": cmd_cleanup,
    "console": cmd_console,
    "scheduler": cmd_scheduler,
    "trigger": cmd_trigger,
    "agents": cmd_agents,
    "agent": cmd_agent,
    "bench": cmd_bench,
    "completion": cmd_completion,
    "doctor": cmd_doctor,
    "runs": cmd_runs,
    "drill": cmd_drill,
    "host": cmd_host,
    "_complete-jobs": cmd_complete_jobs,
    **{v: cmd_verb for v in VERB_COMMANDS},
}


def _command_parser(parser: argparse.ArgumentParser, cmd: str) -> argparse.ArgumentParser:
    """The parser of command `cmd` (the whole parser when it has none of its own)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and cmd in action.choices:
            return action.choices[cmd]
    return parser


def _close_option(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """`; did you mean --json?` for the first unrecognized option that is close to one of the command's."""
    import difflib

    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    for word in extra:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.6)
            if close:
                return f"; did you mean {close[0]}?"
    return ""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `wloadctl` console script."""
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        # Ctrl-C while the command's modules load, before its own handling: said as every interrupt is.
        print("wloadctl: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    if argv[:1] == ["bench"]:
        # The benchmark has its own options (and --help); hand them over untouched.
        from wloadctl.bench import main as bench_main

        return _told(lambda: bench_main(argv[1:]))
    # `--at -15m`: argparse would take the offset for an option; glue it to its flag.
    argv = [f"--at={v}" if k and argv[k - 1] == "--at" and v.startswith("-") else v
            for k, v in enumerate(argv) if not (v == "--at" and k + 1 < len(argv) and argv[k + 1].startswith("-"))]
    # A known command's options are all that is built; help, a typo or no command get the whole parser.
    only = argv[0] if argv and argv[0] in COMMANDS and not {"-h", "--help"} & set(argv) else None
    parser = build_parser(only)
    args, extra = parser.parse_known_args(argv)
    if extra:
        # Told by the command's own parser, as its other usage errors are: `wloadctl logs: error: ...`.
        own = _command_parser(parser, args.cmd)
        own.error(f"unrecognized arguments: {' '.join(extra)}{_close_option(own, extra)}")
    if getattr(args, "journal", None):
        # The process's journal, inherited by the schedulers and executors it starts.
        from wloadctl.store import JOURNAL_ENV

        os.environ[JOURNAL_ENV] = args.journal
    else:
        _journal_of_dir(getattr(args, "state_dir", None))
    real_stdout = sys.stdout
    if real_stdout is not None:
        sys.stdout = GuardedStdout(real_stdout)  # a reader gone: the command goes on, exits with its own code
    try:
        return _dispatch(args)
    finally:
        sys.stdout = real_stdout


def _dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command: its exit code, its errors told in a line (and, for `run --json` and
    `resume --json`, whose output promises an exit code, in a JSON object on stdout too)."""
    said: list[str] = []
    code = _told(lambda: _command(args), said)
    if code and said and args.cmd in ("run", "resume") and getattr(args, "json", False):
        print(json.dumps({"status": "refused", "exit_code": code, "error": said[0], "problems": said[1:]}))
    return code


def _command(args: argparse.Namespace) -> int:
    """The parsed command's exit code, its journal and broker URLs checked first."""
    _urls_checked(args)
    return COMMANDS[args.cmd](args)


def _urls_checked(args: argparse.Namespace) -> None:
    """Refuse a malformed journal URL (--journal, $WLOADCTL_JOURNAL or a state directory's journal.url) or
    --broker URL of a command that takes one, as bad input, before the command looks for its run, makes a
    directory or starts a process.

    Raises:
        UsageError: the URL is not a postgresql:// (journal) or NATS (broker) URL wloadctl can use.
    """
    if hasattr(args, "journal"):
        from wloadctl.store import journal_url

        url = journal_url()
        if url is not None:
            from wloadctl.store.postgres import parse_journal_url

            parse_journal_url(url)
    if getattr(args, "broker", None):
        from wloadctl.remote.broker import check_broker_url

        check_broker_url(args.broker)


def _told(command: Callable[[], int], said: list[str] | None = None) -> int:
    """Run a command: its exit code, its errors told in a line (each also added to `said`, when given)."""
    try:
        return int(command())
    except PlanError as e:
        for line in e.lines(PROBLEM_LINES):
            print(line, file=sys.stderr)
            if said is not None:
                said.append(line)
        return EXIT_USAGE
    except WloadError as e:
        print(f"wloadctl: {e.one_line()}", file=sys.stderr)
        if said is not None:
            said.append(e.one_line())
        return e.exit_code
    except KeyboardInterrupt:
        print("wloadctl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Bytes written past the guard (a log's) to a reader that is gone: cut short, as `cat` would be
        # by SIGPIPE; what is left buffered goes nowhere.
        to_devnull(sys.stdout)
        return EXIT_BROKEN_PIPE
    except PermissionError as e:
        # A state directory, journal or log of another user's, or one made read-only.
        print(f"wloadctl: {printable(str(e.filename or ''))}: permission denied "
              "(run as the user that owns it, or give this one access)", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # an internal failure: one line, the details only on request
        if type(e).__module__ == "sqlite3":
            # A journal damaged in a way the first look at it did not catch.
            print(f"wloadctl: the run journal is unreadable or corrupt: {e}", file=sys.stderr)
            return EXIT_INTERNAL
        if os.environ.get("WLOADCTL_DEBUG"):
            raise
        print(f"wloadctl: internal error: {type(e).__name__}: {e} (set WLOADCTL_DEBUG=1 for details)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
