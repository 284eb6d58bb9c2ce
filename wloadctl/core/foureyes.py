"""Four eyes: which operator verbs need a second person, and the book of requests waiting for one.

A verb named by the plan's `four_eyes:`, a job's own `four_eyes:` or the roles config is not
applied when an operator issues it: it becomes a pending request (`R1`, `R2`, ...) that another
user's `approve` carries out or `reject` drops. The journal's audited operator actions are the
record of truth: a request is an action row whose outcome starts with `pending R<n>`, and the
approve or reject that settles it names the request in its outcome. So the book is rebuilt from
the journal after a crash, a takeover, or for a run with no live scheduler.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from wloadctl.core.plan import JobSpec

REQUEST_ID = re.compile(r"R[1-9][0-9]{0,8}")
"""What a request id looks like."""
_PENDING = re.compile(r"pending (R[0-9]+):")
_SETTLED = re.compile(r"(?:approved|rejected|withdrawn) (R[0-9]+)\b")


def needs_second(verb: str, jobs: Iterable[JobSpec], run_verbs: Iterable[str]) -> bool:
    """Whether `verb` on these jobs needs a second person: the run names it, or one of the jobs does.

    Args:
        verb: the operator verb.
        jobs: the specs of the jobs it names (none for `cancel`).
        run_verbs: verbs the plan's and the roles config's `four_eyes:` name.
    """
    if verb in run_verbs:
        return True
    return any(verb in j.four_eyes for j in jobs)


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """An operator's verb waiting for another person's approve."""

    id: str
    """`R1`, `R2`, ... in the order asked, within the run."""
    verb: str
    """The verb asked for."""
    jobs: tuple[str, ...]
    """The jobs (ids or globs) it names; empty for `cancel`."""
    user: str
    """Who asked (as the kernel or the broker named them)."""
    reason: str
    """The asker's reason."""
    ts: float
    """When it was asked (epoch seconds)."""
    downstream: bool = False
    """`rerun --downstream`."""

    def describe(self) -> str:
        """`kill load_01 by alice` (for messages)."""
        what = f"{self.verb} {', '.join(self.jobs)}" if self.jobs else self.verb
        more = " with downstream" if self.downstream else ""
        return f"{what}{more} by {self.user}"

    def as_dict(self) -> dict[str, object]:
        """The request as JSON-ready fields."""
        return {"id": self.id, "verb": self.verb, "jobs": list(self.jobs), "user": self.user,
                "reason": self.reason, "ts": self.ts, "downstream": self.downstream}


def pending_outcome(req: PendingRequest) -> str:
    """The outcome written in the request's action row (the book reads it back)."""
    down = " (with downstream)" if req.downstream else ""
    return f"pending {req.id}: needs another person's `wloadctl approve {req.id}`{down}"


def settled_outcome(word: str, req: PendingRequest, by: str, detail: str = "") -> str:
    """The outcome of the approve or reject row that settles a request (`approved R1: ...`)."""
    tail = f": {detail}" if detail else ""
    return f"{word} {req.id} ({req.describe()}) by {by}{tail}"


class PendingBook:
    """The run's requests waiting for a second person, by id."""

    def __init__(self) -> None:
        self.requests: dict[str, PendingRequest] = {}
        """Open requests, in the order asked."""
        self.last = 0
        """The highest request number given out in the run."""

    @classmethod
    def from_actions(cls, rows: Iterable[Sequence[Any]]) -> PendingBook:
        """Rebuild the book from the run's action rows (ts, user, verb, job, reason, outcome, applied)."""
        book = cls()
        for ts, user, verb, job, reason, outcome, applied in rows:
            text = str(outcome)
            m = _PENDING.match(text)
            if m and not applied:
                rid = m.group(1)
                jobs = tuple(j for j in str(job).split("; ") if j and j != "*")
                book.requests[rid] = PendingRequest(rid, str(verb), jobs, str(user), str(reason), float(ts),
                                                    "(with downstream)" in text)
                book.last = max(book.last, int(rid[1:]))
                continue
            s = _SETTLED.match(text)
            if s and applied and verb in ("approve", "reject"):
                book.requests.pop(s.group(1), None)
        return book

    def open(self, verb: str, jobs: Sequence[str], user: str, reason: str, ts: float,
             downstream: bool = False) -> PendingRequest:
        """A new request with the next id, added to the book."""
        self.last += 1
        req = PendingRequest(f"R{self.last}", verb, tuple(jobs), user, reason, ts, downstream)
        self.requests[req.id] = req
        return req

    def take(self, rid: str) -> PendingRequest | None:
        """Remove and return an open request (None when there is none by that id)."""
        return self.requests.pop(rid, None)

    def listing(self) -> list[dict[str, object]]:
        """Open requests as JSON-ready rows, oldest first."""
        return [r.as_dict() for r in self.requests.values()]


def same_person(a: str, b: str) -> bool:
    """Whether two callers are one person (`alice@host` through the broker is alice)."""
    return a.split("@", 1)[0] == b.split("@", 1)[0]


def judge(verb: str, names: Sequence[str], user: str, book: PendingBook,
          is_job: Callable[[str], bool]) -> tuple[PendingRequest | None, str | None]:
    """What `approve`/`reject` of `names` by `user` settles, or why it is refused.

    Args:
        verb: approve or reject.
        names: what the operator named: one request id, or (approve) jobs waiting for confirmation.
        user: the caller.
        book: the open requests.
        is_job: whether a name is a job of the run (a job may be called R1).

    Returns:
        (request, None) to settle; (None, message) refused; (None, None) for approve of jobs.
    """
    ids = [n for n in names if n in book.requests]
    rest = [n for n in names if n not in book.requests]
    stale = [n for n in rest if REQUEST_ID.fullmatch(n) and not is_job(n)]
    if stale:
        return None, f"no pending request {', '.join(stale)}: settled already or never asked (see `wloadctl pending`)"
    if not ids and verb == "approve":
        return None, None
    if len(ids) != 1 or rest:
        also = "; approve JOB confirms jobs waiting for confirmation" if verb == "approve" else ""
        return None, f"{verb} takes one pending request id at a time (see `wloadctl pending`){also}"
    req = book.requests[ids[0]]
    if verb == "approve" and same_person(req.user, user):
        return None, f"approve of {req.id} refused: {user} asked for it; another person must approve it"
    return req, None


def settle_word(verb: str, req: PendingRequest, user: str) -> str:
    """approved, rejected, or withdrawn (a reject by the one who asked)."""
    if verb == "approve":
        return "approved"
    return "withdrawn" if same_person(req.user, user) else "rejected"
