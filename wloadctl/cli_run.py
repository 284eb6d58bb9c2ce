"""`wloadctl run` / `resume` / `scheduler`: drive a run headless with a progress bar or a plain line log."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wloadctl.core.sla import flag_lines
from wloadctl.core.states import TERMINAL, JobState, is_holding
from wloadctl.errors import StoreFull, UsageError
from wloadctl.paths import adopt_journal_of
from wloadctl.procs.prestart import DEFAULT_PREFETCH, Prestarted, counts_problem
from wloadctl.procs.runner import RunOptions, RunOutcome, start_or_resume
from wloadctl.procs.scheduler import SchedulerLoop
from wloadctl.store import run_place

if TYPE_CHECKING:
    from wloadctl.remote.broker import BrokerOptions

LINE_LOG_MAX_JOBS = 5000
"""Plans up to this size get one line per finished job in the plain log; bigger ones a line every few seconds."""


def _say(quiet: bool) -> Any:
    def say(msg: str) -> None:
        if not quiet:
            try:
                print(f"wloadctl: {msg}", file=sys.stderr, flush=True)
            except OSError:
                pass  # the terminal went away; the run goes on
    return say


class LineLog:
    """Plain progress for pipes and files: a line per finished job (small plans) or a periodic summary."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.last = 0.0
        self.loop: SchedulerLoop | None = None

    def __call__(self, loop: SchedulerLoop) -> None:
        if self.loop is None:
            self.loop = loop
            if loop.core.n <= LINE_LOG_MAX_JOBS:
                # The first turn ended jobs before anything watched: those that never ran (an `if` false at
                # the start, an upstream that failed before) are told with the turn's others.
                core = loop.core
                before = loop.restored or bytes(core.n)  # (a resume: those ended before it are not told again)
                loop.watch = [(i, core.state[i], core.reasons.get(i, "")) for i in range(core.n)
                              if core.state[i] in TERMINAL and core.attempt[i] == 0 and before[i] not in TERMINAL]
        self.flush()

    def flush(self, final: bool = False) -> None:
        loop = self.loop
        if loop is None:
            return
        core = loop.core
        now = time.time()
        try:
            if loop.watch is not None:
                names = [s.name for s in JobState]
                for i, to, reason in loop.watch:
                    why = f"  ({reason})" if reason else ""
                    self.out.write(f"{time.strftime('%H:%M:%S')} {names[to]:<15} {core.ids[i]}{why}\n")
                loop.watch.clear()
            elif final or now - self.last >= 5.0:
                self.last = now
                c = core.counts
                done = c[4] + c[5] + c[6] + c[9] + c[10] + c[11]
                self.out.write(f"{time.strftime('%H:%M:%S')} {done}/{core.n} done, {c[3]} running, "
                               f"{c[5] + c[6]} failed\n")
            self.out.flush()
        except OSError:
            pass


class Bar:
    """A rich progress bar with counts per state, for terminals."""

    def __init__(self, total: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[detail]}"), transient=False)
        self.task = self.progress.add_task("run", total=total, detail="")
        self.progress.start()

    def __call__(self, loop: SchedulerLoop) -> None:
        self.show(loop.core.counts)

    def show(self, c: list[int]) -> None:
        done = c[4] + c[5] + c[6] + c[9] + c[10] + c[11]
        bad = c[5] + c[6] + c[11]
        detail = f"running {c[3]}  queued {c[2]}  ready {c[1]}" + (f"  failed {bad}" if bad else "") + (
            f"  held {c[8]}" if c[8] else "")
        self.progress.update(self.task, completed=done, detail=detail)


class HoldNotice:
    """One line when a headless run starts holding (only held jobs left), and one when it moves again."""

    def __init__(self, say: Any, state_dir: Path) -> None:
        self.say = say
        self.state_dir = state_dir
        self.holding = False

    def __call__(self, loop: SchedulerLoop) -> None:
        core = loop.core
        now = is_holding(core.counts)
        if now and not self.holding:
            held = [i for i in range(core.n) if core.state[i] == JobState.HELD]
            confirm = [core.ids[i] for i in held if core.specs[i].confirm]
            held = [i for i in held if not core.specs[i].confirm]
            parts = []
            if held:
                more = " ..." if len(held) > 10 else ""
                parts.append(f"{len(held)} held job(s) wait for release: {', '.join(core.ids[i] for i in held[:10])}"
                             f"{more} (`wloadctl release JOB {run_place(self.state_dir)}`)")
            if confirm:
                more = " ..." if len(confirm) > 10 else ""
                parts.append(f"{len(confirm)} job(s) wait for confirmation: {', '.join(confirm[:10])}{more} "
                             f"(`wloadctl approve JOB {run_place(self.state_dir)}`)")
            self.say(f"holding: {'; '.join(parts)}; Ctrl-C stops the run")
        elif self.holding and not now:
            # (a cancel ends the holding too: its held jobs end CANCELLED, which is no release)
            self.say("cancelled: the held jobs will not run" if core.cancelled else "released: the run goes on")
        self.holding = now


def state_counts(o: RunOutcome) -> dict[str, int]:
    """Jobs per state name (the states no job is in left out)."""
    return {s.name: v for s, v in zip(JobState, o.core.counts, strict=True) if v}


def summary_head(o: RunOutcome) -> dict[str, Any]:
    """The --json summary of a finished run but its jobs."""
    return {"plan": o.plan.name, "run": o.run.run_id, "status": o.status, "exit_code": o.exit_code,
            "business_date": o.run.business_date, "resumed": o.resumed, "wall_seconds": round(o.wall, 3),
            "counts": state_counts(o), "flags": o.flags}


def summary(o: RunOutcome) -> dict[str, Any]:
    """The --json summary of a finished run: its jobs' states by id last."""
    names = [s.name for s in JobState]
    return {**summary_head(o), "jobs": dict(zip(o.core.ids, map(names.__getitem__, o.core.state), strict=True))}


def summary_text(o: RunOutcome) -> str:
    """`json.dumps(summary(o), indent=2)`, the same text: with `indent` the json module encodes in Python (half a
    second at a million jobs), so the jobs' lines are joined here when no id needs escaping (plan ids never do)."""
    ids = o.core.ids
    joined = " ".join(ids)
    if not ids or not (joined.isascii() and joined.isprintable() and '"' not in joined and "\\" not in joined):
        return json.dumps(summary(o), indent=2)
    text = json.dumps({**summary_head(o), "jobs": {}}, indent=2)  # ... "jobs": {}\n}
    ends = [f'": "{s.name}"' for s in JobState]
    lines = ",\n".join(map("".join, zip(map('    "'.__add__, ids), map(ends.__getitem__, o.core.state), strict=True)))
    return text[: -len("{}\n}")] + "{\n" + lines + "\n  }\n}"


def broker_of(a: argparse.Namespace) -> BrokerOptions | None:
    """The broker options of a command line (or $WLOADCTL_BROKER), None when neither names one."""
    from wloadctl.remote.broker import ENV_BROKER, BrokerOptions

    if not (a.broker or os.environ.get(ENV_BROKER)):
        return None
    return BrokerOptions.from_args(a)


def _beats_problem(a: argparse.Namespace) -> str | None:
    """What is wrong with `--heartbeat-interval` and `--heartbeat-timeout` together (None: nothing)."""
    if a.heartbeat_timeout <= a.heartbeat_interval:
        return (f"--heartbeat-timeout {a.heartbeat_timeout:g} must be longer than --heartbeat-interval "
                f"{a.heartbeat_interval:g}: a standby would take over between two beats")
    return None


def _refuse_nothing_to_resume(state_dir: Path) -> None:
    """Refuse a resume where no journal is, before the lock and the journal of a run would be made there.

    Raises:
        UsageError: no journal for this state directory (a mistyped one, say).
    """
    from wloadctl.paths import refuse_non_directory
    from wloadctl.store import journal_exists

    if not journal_exists(state_dir):
        refuse_non_directory(state_dir)
        raise UsageError(f"no unfinished run to resume in {state_dir}",
                         hint=f"start one with `wloadctl run PLAN --state-dir {state_dir}`")


def run_command(a: argparse.Namespace, early: Prestarted | None = None) -> int:
    """`wloadctl run PLAN` and `wloadctl resume` (`early`: executors started ahead for a new run)."""
    from wloadctl.core.planfile import load_plan
    from wloadctl.store import default_state_dir

    quiet = a.quiet or a.json
    problem = counts_problem(a.executors, a.slots, a.prefetch or 0) or _beats_problem(a)
    if problem is not None:
        raise UsageError(problem)
    loaded = None
    if a.cmd == "run" and not a.state_dir:
        loaded = load_plan(a.plan)  # a bad plan fails here, before anything is created
        state_dir = default_state_dir(loaded.name)
        adopt_journal_of(state_dir)  # (a journal given, or the directory's own journal.db, wins)
    elif a.cmd == "run":
        state_dir = Path(a.state_dir)
    else:
        from wloadctl.client import resolve_state_dir  # a resume only: `run` does not read runs

        state_dir = resolve_state_dir(a.state_dir)
        _refuse_nothing_to_resume(state_dir)
    opts = RunOptions(state_dir=state_dir, executors=a.executors, slots=a.slots, business_date=a.business_date,
                      accept_plan_change=a.accept_plan_change, journal_sync=a.journal_sync.upper(),
                      dead_after=a.executor_timeout, executor_cpus=a.executor_cpus,
                      executor_memory=a.executor_memory,
                      prefetch=DEFAULT_PREFETCH if a.prefetch is None else a.prefetch,
                      heartbeat_interval=a.heartbeat_interval, exit_when_stalled=a.exit_on_hold,
                      lease_seconds=a.heartbeat_timeout, say=_say(a.quiet), warn=_say(False), broker=broker_of(a),
                      agent_timeout=a.agent_timeout, run_id=early.run_id if early is not None else None,
                      prestarted=early)
    opts.metrics, server = _metrics(a, opts)
    try:
        return _run_headless(a, opts, state_dir, quiet, loaded)
    finally:
        if server is not None:
            server.close()


def _metrics(a: argparse.Namespace, opts: RunOptions) -> tuple[Any, Any]:
    """The collector and server of `--metrics`, listening before the run starts (a taken port fails first)."""
    if not a.metrics:
        return None, None
    from wloadctl.metrics import scheduler_metrics

    return scheduler_metrics(a.metrics, opts.say)


def _run_headless(a: argparse.Namespace, opts: RunOptions, state_dir: Path, quiet: bool, loaded: Any) -> int:
    """Drive the run with a progress display and print how it ended."""
    tty = sys.stdout.isatty() and not quiet
    bars: list[Bar] = []
    on_turn: Any = None
    if tty:

        def on_turn(loop: SchedulerLoop) -> None:
            if not bars:
                bars.append(Bar(loop.core.n))
            bars[0](loop)
    elif not quiet:
        on_turn = LineLog(sys.stdout)
    notice = HoldNotice(_say(a.quiet), state_dir)
    seen: list[SchedulerLoop] = []

    def each_turn(loop: SchedulerLoop) -> None:
        if not seen:
            seen.append(loop)
        notice(loop)
        if on_turn is not None:
            on_turn(loop)

    try:
        outcome = start_or_resume(a.plan, opts, resume_only=a.cmd == "resume", on_turn=each_turn, loaded=loaded)
    except StoreFull:
        if not (seen and seen[0].stop_requested and seen[0].no_space):
            raise
        # Stopped while paused for a full disk: the stop could not be journaled, and the jobs running were
        # left to their executors (SchedulerLoop.request_stop): a resume goes on from the journal and them.
        loop = seen[0]
        kept = loop.jobs_here()
        them = f"; {kept} job(s) keep running under their executors" if kept else ""
        _say(False)(f"run {loop.ctx.run_id} stopped while paused: {loop.no_space}, so the stop was not "
                    f"journaled{them}; free space there, then `wloadctl resume {run_place(state_dir)}` goes on "
                    "from what the journal holds")
        return 130
    if bars:
        bars[0].show(outcome.core.counts)
        bars[0].progress.stop()
    elif isinstance(on_turn, LineLog):
        on_turn.flush(final=True)
    if a.json:
        print(summary_text(outcome))
    elif not a.quiet:
        _print_ending(outcome, state_dir)
    if outcome.status == "interrupted" and outcome.kept:
        _say(False)(f"run {outcome.run.run_id} stopped; {outcome.kept} job(s) keep running under their "
                    f"executors and `wloadctl resume {run_place(state_dir)}` picks them up")
        return 130
    if outcome.status == "interrupted":
        # A stopped run's running jobs were stopped and requeued (held, if they may not run twice): a resume
        # runs them again.
        core = outcome.core
        stopped = [i for i in range(core.n) if core.reasons.get(i, "").startswith("interrupted: run stopped")]
        held = [core.ids[i] for i in stopped if core.state[i] == JobState.HELD]
        them = f" ({', '.join(held[:5])}{' ...' if len(held) > 5 else ''} idempotent: false, held until released)" \
            if held else ""
        again = f"; jobs that were running will run again{them}" if stopped else ""
        _say(False)(f"run {outcome.run.run_id} stopped{again}: `wloadctl resume {run_place(state_dir)}` goes on")
        return 130
    return outcome.exit_code


def _print_ending(outcome: RunOutcome, state_dir: Path) -> None:
    """How a run ended, in a few lines: its counts and time, its LATE and AT_RISK jobs, the jobs that failed."""
    c = state_counts(outcome)
    parts = ", ".join(f"{v} {k.lower()}" for k, v in c.items())
    sla = "".join(f", {n} {flag}" for flag in ("LATE", "AT_RISK")
                  if (n := sum(1 for f in outcome.flags.values() if f == flag)))
    # A resumed run (or one a standby took over) took this scheduler's time, and the run's since it started.
    since = f"{max(0.0, time.time() - outcome.run.started):.1f}s since the run started; " \
        if outcome.resumed and outcome.run.started else ""
    print(f"run {outcome.run.run_id} {outcome.status}{sla}: {parts} in {outcome.wall:.1f}s "
          f"({since}state dir {state_dir})")
    for line in flag_lines(outcome.flags):
        print(line)
    failed = [outcome.core.ids[i] for i in range(outcome.core.n)
              if outcome.core.state[i] in (JobState.FAILED, JobState.TIMED_OUT)]
    if failed:
        print(f"failed: {', '.join(failed[:20])}{' ...' if len(failed) > 20 else ''} "
              f"(see `wloadctl why JOB {run_place(state_dir)}`)")


def scheduler_command(a: argparse.Namespace) -> int:
    """`wloadctl scheduler`: the scheduler of a run as its own process (started by the console)."""
    from wloadctl.client import resolve_state_dir
    from wloadctl.store import default_state_dir, journal_url

    problem = counts_problem(a.executors, a.slots, 0) or _beats_problem(a)
    if problem is not None:
        raise UsageError(problem)
    broker = broker_of(a)
    if a.standby and broker is not None and journal_url() is not None and not a.state_dir:
        # A standby on another host: the run's files are not here; its own go to a directory of its own.
        state_dir = default_state_dir("standby")
    else:
        try:
            state_dir = resolve_state_dir(a.state_dir)
        except UsageError:
            if a.standby and broker is None and journal_url() is not None:
                # (A standby without a broker watches the active through the boards of this host, where no run is.)
                raise UsageError("a standby without --broker watches a scheduler of this host, and no run's state "
                                 "directory is here", hint="on another host than the active, give the run's "
                                 "--broker URL too; on the active's host, its --state-dir DIR") from None
            raise
    opts = RunOptions(state_dir=state_dir, executors=a.executors, slots=a.slots, business_date=a.business_date,
                      heartbeat_interval=a.heartbeat_interval, lease_seconds=a.heartbeat_timeout,
                      say=_say(False), exit_when_stalled=False, broker=broker, agent_timeout=a.agent_timeout,
                      accept_plan_change=a.accept_plan_change)
    if a.run and not a.standby:
        raise UsageError("--run goes with --standby", hint="wloadctl scheduler --standby --run ID ...")
    opts.metrics, server = _metrics(a, opts)
    try:
        if a.standby:
            from wloadctl.procs.standby import run_standby

            # Once it has taken the run over, its terminal shows the run going on and how it ended, as `resume`'s.
            log = LineLog(sys.stdout)
            code, outcome = run_standby(a.plan, opts, a.run, on_turn=log)
            if outcome is not None:
                log.flush(final=True)
                _print_ending(outcome, state_dir)
            return code
        if a.plan is None:
            _refuse_nothing_to_resume(state_dir)
        outcome = start_or_resume(a.plan, opts, resume_only=a.plan is None)
        return outcome.exit_code
    finally:
        if server is not None:
            server.close()


def trigger_command(a: argparse.Namespace) -> int:
    """`wloadctl trigger PLAN`: run the plan at each cron trigger that falls on a business day."""
    import dataclasses
    import datetime as dt
    import signal

    from wloadctl.core.calendar import business_date_of, due_fire, next_triggers
    from wloadctl.core.planfile import load_plan
    from wloadctl.errors import OtherDateUnfinished, PlanError, UsageError
    from wloadctl.paths import named_state_dir
    from wloadctl.store import default_state_dir

    problem = counts_problem(a.executors, a.slots, 0)
    if problem is not None:
        raise UsageError(problem)
    plan = load_plan(a.plan)
    if plan.schedule is None:
        raise UsageError(f"{a.plan}: the plan has no `schedule` (cron and calendar) to trigger on",
                         hint="add schedule: {cron: '30 18 * * 1-5'} or run it with `wloadctl run`")
    never = UsageError(f"{a.plan}: the schedule never fires on a business day (cron '{plan.schedule.cron}')",
                       hint="check the cron expression and the business days and holidays")
    if a.next is not None:
        times = next_triggers(plan.schedule, dt.datetime.now().astimezone(), a.next, plan.timezone)
        if not times:
            raise never
        rows = [{"at": t.isoformat(), "business_date": business_date_of(t)} for t in times]
        if a.json:
            print(json.dumps(rows, indent=1))
        else:
            for r in rows:
                print(f"{r['at']}  business date {r['business_date']}")
        return 0
    stop = {"now": False}

    def on_signal(_s: int, _f: object) -> None:
        stop["now"] = True

    def watch(loop: SchedulerLoop) -> None:
        # A SIGTERM that came as the run started, before its own handler: the run stops at its first turn.
        if stop["now"] and not loop.stop_requested:
            loop.request_stop()

    named = named_state_dir(a.state_dir)
    state_dir = Path(named) if named else default_state_dir(plan.name)
    if not named:
        adopt_journal_of(state_dir)
    say = _say(False)
    old = signal.signal(signal.SIGTERM, on_signal)
    code = 0
    last: dt.datetime | None = None
    try:
        while not stop["now"]:
            now = dt.datetime.now().astimezone()
            due, missed = due_fire(plan.schedule, now, last, plan.timezone)
            if due is None:
                raise never
            when = due
            if missed:
                dates = sorted({business_date_of(t) for t in missed} - {business_date_of(when)})
                say(f"{len(missed)} fire(s) of '{plan.name}' came while its last run ran, the latest at "
                    f"{when.isoformat()}: the run of business date {business_date_of(when)} starts now"
                    + (f" (none is started for {', '.join(dates)})" if dates else ""))
            else:
                say(f"next run of '{plan.name}' at {when.isoformat()} (business date {business_date_of(when)}) "
                    f"in {state_dir}")
            while not stop["now"] and time.time() < when.timestamp():
                time.sleep(min(1.0, max(0.0, when.timestamp() - time.time())))
            if stop["now"]:
                # A stop is not a success: systemd and scripts must not take it for one (130, as `run` stopped so).
                say(f"stopped by SIGTERM while waiting for the run of '{plan.name}' at {when.isoformat()}, "
                    "which was not started")
                return 130
            bdate = business_date_of(when)
            opts = RunOptions(state_dir=state_dir, executors=a.executors, slots=a.slots, business_date=bdate,
                              say=say)
            last = when
            try:
                outcome = start_or_resume(a.plan, opts, on_turn=watch)
            except OtherDateUnfinished as e:
                # An earlier date's batch left unfinished is finished first: then this date's starts.
                say(f"run {e.run_id} of business date {e.business_date} is unfinished: it is resumed first, "
                    f"then the run of {bdate} starts")
                first = start_or_resume(a.plan, dataclasses.replace(opts, business_date=None), on_turn=watch)
                print(f"run {first.run.run_id} for {first.run.business_date}: {first.status}", flush=True)
                outcome = first if first.status == "interrupted" else start_or_resume(a.plan, opts, on_turn=watch)
            except (PlanError, UsageError):
                say(f"the run of '{plan.name}' due at {when.isoformat()} (business date {bdate}) was not started; "
                    "no more runs are triggered")
                raise
            code = outcome.exit_code
            print(f"run {outcome.run.run_id} for {outcome.run.business_date}: {outcome.status}", flush=True)
            if outcome.status == "interrupted":
                # The run was stopped (SIGTERM, Ctrl-C, the console's stop): the trigger stops with it, as `run`
                # does, rather than wait for the next fire time with a run left to resume.
                say(f"run {outcome.run.run_id} stopped: `wloadctl resume {run_place(state_dir)}` goes on; "
                    f"no more runs of '{plan.name}' are triggered")
                return code
            if a.once:
                break
    finally:
        signal.signal(signal.SIGTERM, old)
    if stop["now"] and not a.once:
        # SIGTERM came after a run had ended, before the next wait began: the trigger stops after it.
        say(f"stopped by SIGTERM after a run; no more runs of '{plan.name}' are triggered")
        return 130
    return code
