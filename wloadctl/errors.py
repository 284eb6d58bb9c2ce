"""The one exception hierarchy of wloadctl: every user-facing error has a message, a location and a hint."""

from __future__ import annotations

_CONTROLS = {c: repr(chr(c))[1:-1] for c in (*range(0x20), *range(0x7F, 0xA0))}
"""Control characters (C0, DEL, C1) and their escapes as Python writes them (`\\n`, `\\x1b`, ...)."""


def printable(text: str) -> str:
    """`text` with its control characters escaped: one line, and no terminal escape sequence of a plan's or
    a request's making reaches an operator's screen."""
    return text.translate(_CONTROLS)


class WloadError(Exception):
    """Root of every error wloadctl reports to a user (never shown as a traceback)."""

    exit_code: int = 3

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        job: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        """What was wrong, in words."""
        self.file = file
        """The file the problem is in, when there is one."""
        self.line = line
        """1-based line in `file`, when known."""
        self.job = job
        """The job id the problem concerns, when there is one."""
        self.hint = hint
        """What would be accepted instead."""

    def one_line(self) -> str:
        """Format as `file:line: job 'x': message (hint)` for stderr."""
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        who = f"job '{self.job}': " if self.job else ""
        hint = f" ({self.hint})" if self.hint else ""
        return printable(f"{where}{who}{self.message}{hint}")

    def __str__(self) -> str:
        return self.one_line()


class PlanError(WloadError):
    """A plan file is invalid; `problems` holds every problem found, not only the first."""

    exit_code = 2

    def __init__(self, message: str, *, problems: list[WloadError] | None = None, unshown: int = 0,
                 **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.problems: list[WloadError] = problems or []
        """Every problem of the plan, each with its own location (with `unshown`, the first ones, then a last
        entry that counts the others)."""
        self.unshown = unshown
        """Problems past those kept in `problems` (a plan with thousands of them)."""

    def lines(self, limit: int | None = None) -> list[str]:
        """One line per problem (or this error's own line when it holds none).

        With `limit`, a plan with more problems than that is summed up: the same problem in many
        jobs (one mistake copied through a generated plan) is one line naming the first few, and
        what is still past the limit is counted on a last line.
        """
        if not self.problems:
            return [self.one_line()]
        if limit is None or len(self.problems) <= limit:
            return [p.one_line() for p in self.problems]
        alike: dict[tuple[str | None, str, str | None], list[WloadError]] = {}
        for p in self.problems[:-1] if self.unshown else self.problems:
            alike.setdefault((p.file, p.message, p.hint), []).append(p)
        out = []
        for same in alike.values():
            line = same[0].one_line()
            if len(same) > 1:
                where = [f"{p.job or '-'}{f' line {p.line}' if p.line else ''}" for p in same[1:4]]
                more = ", ..." if len(same) > 4 else ""
                line += f"; the same in {len(same) - 1} more place(s): {', '.join(where)}{more}"
            out.append(line)
        if len(out) > limit or self.unshown:
            rest = self.unshown + sum(len(same) for same in list(alike.values())[limit - 1 :])
            name = self.problems[0].file or "the plan"
            lists = f"the first {len(self.problems) - 1:,}" if self.unshown else "every one"
            out[limit - 1 :] = [f"{name}: and {rest:,} more problem(s) (`wloadctl validate --json` lists {lists})"]
        return out


class CycleError(PlanError):
    """The dependencies of a plan form a cycle; the message lists the cycle in order."""


class UsageError(WloadError):
    """The command line asked for something that cannot be done (unknown run, bad option)."""

    exit_code = 2


class OtherDateUnfinished(UsageError):
    """A run of one business date was asked for where an unfinished run of another date waits to be resumed."""

    def __init__(self, message: str, run_id: str, business_date: str, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.run_id = run_id
        """The unfinished run."""
        self.business_date = business_date
        """Its business date."""


class TransportError(WloadError):
    """A message queue or shared-memory segment could not be created, opened or used."""

    exit_code = 3


class NoReply(TransportError):
    """A scheduler took an operator's request and did not answer it in time (stopped, frozen, swamped)."""


class Unanswered(TransportError):
    """A scheduler was sent an operator's request and went away (exited, killed) before it answered:
    the request may have been applied, so it must not be applied again elsewhere."""


class ProtocolError(TransportError):
    """Bytes on a queue or in shared memory do not match the expected layout or version."""


class StoreError(WloadError):
    """The run journal (SQLite) is missing, corrupt, or refuses a change."""

    exit_code = 3


class NoJournalYet(StoreError):
    """No run journal is there yet, or one is being made that holds no run yet: the first run makes it (a standby,
    or a reader waiting for a run to start, waits for it)."""


class StoreFull(StoreError):
    """The journal's disk has no space left: the write did not happen and may be retried once space returns."""


class InvalidTransition(WloadError):
    """A job state change that the transition table does not allow."""

    exit_code = 3


class ControlError(WloadError):
    """An operator verb was refused (wrong state, unknown job, no live scheduler)."""

    exit_code = 1


class Fenced(StoreError):
    """Another scheduler took the run over (a newer epoch): this one must stop without touching it."""

    exit_code = 4
    """Final, unlike a crash (3): a service manager that restarted it would only find the run held by another."""

    def __init__(self, message: str, by_pid: int = 0, by_epoch: int = 0) -> None:
        super().__init__(message, hint="this scheduler exits without touching the run, which goes on under the newer "
                                       "one; see `wloadctl status`")
        self.by_pid = by_pid
        """Pid of the scheduler that holds the run now (0 when unknown)."""
        self.by_epoch = by_epoch
        """Its epoch (0 when unknown)."""
