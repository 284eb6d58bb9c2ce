"""What a scheduler knows about its run outside the core: ids, files, payloads, board header, event log, alerts."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wloadctl.core.branches import UnusableResult
from wloadctl.core.commands import Alert, Flag
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.plan import JobSpec, Plan
from wloadctl.core.states import JobState, SlaTier
from wloadctl.ipc import protocol as P
from wloadctl.paths import log_name, log_path, result_name, result_path, run_dirs
from wloadctl.procs.eventlog import EventLog
from wloadctl.procs.userfiles import read_regular
from wloadctl.store import RunRow, Store


def read_small(path: Path | str, limit: int = 4096) -> str:
    """A small text file's content ('' when missing); bigger files are cut to `limit` bytes.

    A job writes these files: a symlink, a FIFO or anything but a regular file reads as ''.
    """
    data = read_regular(str(path), limit)
    return "" if data is None else data.decode("utf-8", "replace").strip()


def read_result(path: Path) -> dict[str, object]:
    """A job's result file: a JSON object, or `key=value` lines (values stay strings, numbers become numbers);
    an UnusableResult when it is neither, or is larger than RESULT_LIMIT."""
    return result_of_bytes(read_regular(str(path), RESULT_LIMIT + 1))


RESULT_LIMIT = 65536
"""Most bytes a job's result file may hold (a result is values a condition or a loop reads, not data; it also
crosses the broker in one message from an agent)."""


def result_of_bytes(data: bytes | None) -> dict[str, object]:
    """What a job wrote to its result file, from its first RESULT_LIMIT + 1 bytes (None: no regular file)."""
    if data is not None and len(data) > RESULT_LIMIT:
        return UnusableResult(f"its result file is larger than {RESULT_LIMIT // 1024} KiB, the most a result "
                              "may hold")
    data = data or b""
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        # Never guessed at: a name read with a character replaced would name nothing (JSON's own escapes,
        # "\udce9" as Python's json.dump writes a byte of a file name that is not UTF-8, do pass).
        return UnusableResult(f"its result file is not UTF-8 text (byte 0x{data[e.start]:02X} at offset {e.start})")
    return parse_result(text)


RESULT_DEPTH = 100
"""Deepest nesting of lists and objects in a result: what reads values deeper (a comparison, the JSON reader
itself) recurses once per level and would stop the scheduler at Python's recursion limit."""


def _deeper_than(obj: object, limit: int) -> bool:
    """Whether lists and objects nest in `obj` more than `limit` deep (looked at without recursion)."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for v in inner:
            if isinstance(v, (dict, list)):
                if depth >= limit:
                    return True
                stack.append((v, depth + 1))
    return False


class _NotFinite:
    """A number of a JSON result that no condition could compare, as written: NaN or Infinity (not JSON, though
    Python's reader takes them), or one past a float's range (`1e999`, read as infinite)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text
        """The number as the file writes it."""


def _json_object(text: str) -> tuple[object, bool]:
    """JSON text as json.loads reads it, but NaN, Infinity and numbers past a float's range kept as _NotFinite,
    and whether there was one."""
    odd: list[_NotFinite] = []

    def aside(number: str) -> _NotFinite:
        odd.append(_NotFinite(number))
        return odd[-1]

    def real(number: str) -> float | _NotFinite:
        value = float(number)
        return value if math.isfinite(value) else aside(number)

    obj = json.loads(text, parse_constant=aside, parse_float=real)
    return obj, bool(odd)


def _first_not_finite(obj: object) -> tuple[str, str] | None:
    """The path (`a.b[0]`) and text of the first _NotFinite in `obj`, in the file's order (None: there is none)."""
    stack: list[tuple[object, str]] = [(obj, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _NotFinite):
            return path, value.text
        if isinstance(value, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((value[n], f"{path}[{n}]") for n in range(len(value) - 1, -1, -1))
    return None


def _not_finite_problem(key: str, text: str) -> UnusableResult:
    """Why a result holding `text` (NaN, Infinity or a number past a float's range) under `key` is unusable."""
    shown = text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
    if text.lstrip("-") in ("NaN", "Infinity"):
        why = f'not a number JSON can hold (write a number, or "{text}" in quotes for text)'
    else:
        why = "past ±1.8e308, the largest a number in a result may be"
    return UnusableResult(f"its result file's '{key[:40]}' is {shown}, {why}")


_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?\Z")
"""Values of `key=value` lines read as numbers: as written in JSON (`012345`, `1_000`, `NaN` stay text)."""


def parse_result(text: str) -> dict[str, object]:
    """What a job wrote to its result file (see read_result), from its text: a JSON object, or `key=value` lines
    (blank lines and `#` comments aside), whose values are numbers where they are written as JSON writes numbers,
    else text (one pair of surrounding quotes removed)."""
    written = text
    text = text.strip().lstrip("\ufeff").strip()  # (a byte-order mark some tools write first)
    if not text:
        return {}
    if text.startswith(("{", "[")):
        try:
            obj, odd = _json_object(text)
        except json.JSONDecodeError as e:
            return UnusableResult(f"its result file is not valid JSON ({e})")
        except RecursionError:
            return UnusableResult(f"its result file nests values more than {RESULT_DEPTH} deep")
        except ValueError:
            return UnusableResult(f"its result file holds a number of more than {sys.get_int_max_str_digits()} "
                                  "digits, the most a number in a result may have")
        if not isinstance(obj, dict):
            return UnusableResult(f"its result file holds a JSON {type(obj).__name__}, not an object of named values")
        if _deeper_than(obj, RESULT_DEPTH):
            return UnusableResult(f"its result file nests values more than {RESULT_DEPTH} deep")
        # NaN compares false with everything and Infinity is no amount: a condition on either would be neither
        # true nor refused, silently skipping a branch or running a loop to its end.
        found = _first_not_finite(obj) if odd else None
        if found is not None:
            return _not_finite_problem(*found)
        return obj
    out: dict[str, object] = {}
    for n, line in enumerate(written.splitlines(), 1):
        line = line.strip().lstrip("\ufeff").strip() if n == 1 else line.strip()
        if not line or line.startswith("#"):
            continue
        # Every other line is key=value: a file that is not (output meant for the log, a line cut short) is
        # no result, and a line dropped could be the very value a condition reads.
        k, eq, v = line.partition("=")
        k, v = k.strip(), v.strip()
        if not eq or not k:
            why = "has no '='" if not eq else "has no key before its '='"
            return UnusableResult(f"its result file is neither a JSON object nor key=value lines: line {n} {why}")
        if _INT.match(v):
            try:
                out[k] = int(v)
            except ValueError:  # past Python's limit of digits (sys.get_int_max_str_digits)
                return UnusableResult(f"its result file's '{k[:40]}' is a number of {len(v.lstrip('-'))} digits, "
                                      f"more than the {sys.get_int_max_str_digits()} a number in a result may have")
        elif _FLOAT.match(v):
            number = float(v)
            if not math.isfinite(number):
                return _not_finite_problem(k, v)
            out[k] = number
        else:
            out[k] = v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"" else v
    return out


@dataclass
class RunContext:
    """The run's identity and files, shared by the scheduler loop and its helpers."""

    run: RunRow
    """The journal's record of the run."""
    plan: Plan
    """The plan being run."""
    state_dir: Path
    """The run's state directory."""
    epoch: int
    """This scheduler's epoch (fencing token)."""
    events: EventLog
    """Structured event log."""
    executors: int = 2
    """Executor processes."""
    slots: int = 4
    """Jobs per executor at once."""
    lease_seconds: float = 3.0
    """How long the journal lease of this scheduler lasts without renewal."""
    started: float = field(default_factory=time.time)
    """When this scheduler started."""
    hooks: dict[subprocess.Popen[bytes], str] = field(default_factory=dict)
    """on_failure hook processes not yet reaped, with the job each is for."""
    say: Callable[[str], None] = field(default=lambda _m: None)
    """Tells the run's operator a line (the run's stderr)."""
    warn: Callable[[str], None] = field(default=lambda _m: None)
    """Where what must not pass unseen goes, even under `--quiet` (an alert that did not go out)."""
    dirs: tuple[str, str, str] = field(init=False)
    """The run's logs, checkpoints and results folders, as text (made once: a payload per dispatch)."""
    home: str = field(init=False)
    """The state directory as an absolute path, for the jobs' $WLOADCTL_STATE_DIR."""

    def __post_init__(self) -> None:
        for sub in ("checkpoints", "results"):
            (self.state_dir / sub / self.run.run_id).mkdir(parents=True, exist_ok=True)
        self.dirs = run_dirs(self.state_dir, self.run.run_id)
        self.home = str(self.state_dir.absolute())

    @property
    def run_id(self) -> str:
        """The run's public id."""
        return self.run.run_id

    def payload(self, spec: JobSpec, attempt: int) -> P.Payload:
        """What an executor needs to run one attempt of a job."""
        env = dict(spec.env)
        logs, checkpoints, results = self.dirs
        ckpt = f"{checkpoints}/{spec.id}"
        env.update(
            WLOADCTL_RUN_ID=self.run.run_id,
            WLOADCTL_PLAN=self.plan.name,
            WLOADCTL_JOB=spec.id,
            WLOADCTL_ATTEMPT=str(attempt),
            WLOADCTL_BUSINESS_DATE=self.run.business_date,
            WLOADCTL_STATE_DIR=self.home,
            # A long job writes its progress token here; a retry gets the last one back.
            WLOADCTL_CHECKPOINT_FILE=ckpt,
            # Nothing has written a checkpoint before a job's first attempt under the run's first scheduler
            # (the run's folder is new): only a later attempt, or any after a resume or takeover (epoch > 1),
            # looks for one, which spares a failed open per job dispatched.
            WLOADCTL_CHECKPOINT=read_small(ckpt) if attempt > 1 or self.epoch > 1 else "",
            # What a job writes here (JSON object or key=value lines) is its result for `if`/`until`.
            WLOADCTL_RESULT_FILE=result_name(results, spec.id, attempt),
        )
        cwd = spec.cwd
        if cwd and not os.path.isabs(cwd):
            cwd = os.path.join(os.path.dirname(os.path.abspath(self.plan.path or ".")), cwd)
        command: str | list[str] | None = spec.command if isinstance(spec.command, str) or spec.command is None \
            else list(spec.command)
        extra = {"cpu": str(spec.cpu), "memory": str(spec.memory)} if spec.cpu or spec.memory else {}
        if extra and self.plan.limits == "enforce":
            extra["enforce"] = "1"
        if spec.run_as:
            extra["run_as"] = spec.run_as
        if spec.unfit is not None:
            extra["unfit"] = spec.unfit  # the executor refuses to start it (core/loops.make_instance)
        return P.Payload(job=spec.id, command=command, env=env, cwd=cwd, timeout=spec.timeout,
                         log_path=log_name(logs, spec.id, attempt), max_output=spec.max_output, extra=extra)

    def result_of(self, job: str, attempt: int) -> dict[str, object]:
        """What an attempt wrote to its result file."""
        return read_result(result_path(self.state_dir, self.run.run_id, job, attempt))

    def board_header(self, core: SchedulerCore, done: bool = False) -> P.BoardHeader:
        """The state board's header for the core's current counts."""
        counts = tuple(core.counts) + (0,) * (16 - len(core.counts))
        return P.BoardHeader(run_id=self.run.run_id, epoch=self.epoch, scheduler_pid=os.getpid(),
                             beat=time.time(), started=self.run.started, n_jobs=core.n,
                             n_executors=self.executors, done=done, counts=counts, standby_pid=0,
                             lease_until=time.time() + self.lease_seconds)

    def alert(self, store: Store, core: SchedulerCore, a: Alert) -> None:
        """A job failed for good: journal the alert, log it, and run the plan's on_failure hook."""
        spec = core.specs[a.job]
        tier = SlaTier(spec.sla).label
        state = JobState(a.state).name
        # The attempt's log, where it has one here (one that printed nothing has none; a job of an agent's is there:
        # `wloadctl logs` fetches it): "" otherwise, so that no reader is sent to a file that does not exist.
        where = log_path(self.state_dir, self.run.run_id, spec.id, core.attempt[a.job])
        lp = str(where) if where.exists() else ""
        now = time.time()
        store.record_alert(self.run.id, now, spec.id, tier, state, a.attempts, a.reason, lp)
        self.events.emit("alert", spec.id, core.attempt[a.job], tier=tier, state=state, reason=a.reason,
                         attempts=a.attempts, log=lp)
        try:
            with open(self.state_dir / "alerts.log", "a") as f:
                f.write(json.dumps({"ts": round(now, 3), "run": self.run.run_id, "job": spec.id, "tier": tier,
                                    "state": state, "attempts": a.attempts, "reason": a.reason,
                                    "log": lp or None}) + "\n")
        except OSError:
            pass  # the journal and the event log hold the alert; this file is a convenience copy
        self.reap_hooks()
        if self.plan.on_failure:
            env = dict(os.environ, WLOADCTL_RUN_ID=self.run.run_id, WLOADCTL_PLAN=self.plan.name,
                       WLOADCTL_JOB=spec.id, WLOADCTL_TIER=tier, WLOADCTL_STATE=state,
                       WLOADCTL_REASON=a.reason, WLOADCTL_ATTEMPTS=str(a.attempts), WLOADCTL_LOG=lp,
                       WLOADCTL_EXIT_CODE="" if a.exit_code is None else str(a.exit_code),
                       WLOADCTL_BUSINESS_DATE=self.run.business_date)
            hook_log = open(self.state_dir / "hooks.log", "ab")
            try:
                hook = subprocess.Popen(["/bin/sh", "-c", self.plan.on_failure], env=env, stdin=subprocess.DEVNULL,
                                        stdout=hook_log, stderr=subprocess.STDOUT, start_new_session=True)
                self.hooks[hook] = spec.id
            except (OSError, ValueError) as e:  # (ValueError: a NUL byte in its environment)
                self.events.emit("hook_failed", spec.id, reason=str(e))
            finally:
                hook_log.close()

    def flag(self, store: Store, core: SchedulerCore, f: Flag) -> None:
        """A job is AT_RISK or LATE: journal it (status shows it) and log an event."""
        from wloadctl.core.sla import with_due

        spec = core.specs[f.job]
        tier = SlaTier(spec.sla).label
        # (The deadline goes with the flag: a reader of the run once no scheduler is left judges it by the clock.)
        store.record_alert(self.run.id, time.time(), spec.id, tier, f.level, core.attempt[f.job],
                           with_due(f.text, f.deadline), "")
        self.events.emit("deadline", spec.id, core.attempt[f.job], level=f.level, tier=tier,
                         deadline=round(f.deadline, 3), text=f.text)

    def times(self, core: SchedulerCore) -> tuple[dict[int, float], dict[int, float]]:
        """Absolute deadlines and not-before times of the plan's jobs for this run's business date."""
        from wloadctl.core.sla import run_instants

        return run_instants(core.specs, self.run.business_date, self.run.started, self.plan.timezone)

    def reap_hooks(self, wait: float = 0.0, last: bool = False,
                   stopped: Callable[[], bool] | None = None) -> None:
        """Reap finished hook processes (waiting up to `wait` seconds for the rest); each one's end is told in
        hooks.log, after its output, and one that failed or was stopped is said on the run's stderr too.

        Args:
            wait: seconds to wait for the hooks still running.
            last: the run ends (this scheduler leaves): hooks still running after the wait are stopped (their
                process group: SIGTERM, SIGKILL a second later), not left behind.
            stopped: whether an operator asked to stop waiting (Ctrl-C or SIGTERM): the hooks still running
                are stopped then.
        """
        deadline = time.monotonic() + wait
        while self.hooks:
            for h in list(self.hooks):
                code = h.poll()
                if code is not None:
                    self._hook_said(h, _ended(code), failed=code != 0)
                    del self.hooks[h]
            asked = stopped is not None and stopped()
            if not self.hooks or asked or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        else:
            return
        if not last:
            return
        why = "on Ctrl-C or SIGTERM" if asked else f"still running {wait:.0f}s after the run ended"
        for h in list(self.hooks):
            self._hook_said(h, f"{why}: stopped ({_ended(_stop_group(h))})", failed=True)
            del self.hooks[h]

    def _hook_said(self, hook: subprocess.Popen[bytes], what: str, failed: bool = False) -> None:
        log = self.state_dir / "hooks.log"
        try:
            with open(log, "a") as f:
                f.write(f"--- wloadctl: on_failure hook for job {self.hooks[hook]} (pid {hook.pid}) {what}\n")
        except OSError:
            pass  # the hook's own output is what the file is for
        if failed:
            # An alert that did not go out must not pass unseen: the run's own output says so too.
            self.warn(f"on_failure hook for job {self.hooks[hook]} {what}: its output is in {log}")


HOOK_WAIT = 60.0
"""Seconds a scheduler whose run has ended waits for the on_failure hooks still running (a pager or mail alert)
before it stops them."""


def _ended(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with status {code}"


def _stop_group(proc: subprocess.Popen[bytes]) -> int:
    """Stop a process started in a session of its own, with everything in its group; its exit status."""
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return proc.wait(grace)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()
