"""Four eyes: which operator verbs need a second person, and the book of requests waiting for one.

A verb named by the plan's `four_eyes:`, a job's own `four_eyes:` or the roles config is not
applied when an operator issues it: it becomes a pending request (`R1`, `R2`, ...) that another
user's `approve` carries out or `reject` drops. A job's own `four_eyes:` counts for every job the
verb would act on (core/reach.py), not only those it names: `rerun load --downstream` needs a
second person when a job downstream of load says `four_eyes: [rerun]`, and so does a glob that
matches one. The request names those jobs, and its approve covers them alone: one that would now
act on another such job (a glob matching a job made since, a plan changed on resume) is refused,
to be asked again.

The journal's audited operator actions are the record of truth: a request is an action row whose
outcome starts with `pending R<n>` (and names the jobs of its four eyes), and the approve or reject
that settles it names the request in its outcome. So the book is rebuilt from the journal after a
crash, a takeover, or for a run with no live scheduler.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wloadctl.core.plan import JobSpec

REQUEST_ID = re.compile(r"R[1-9][0-9]{0,8}")
"""What a request id looks like."""
_PENDING = re.compile(r"pending (R[0-9]+):")
_GATED = "; four eyes of "
"""In a request's outcome, before the jobs whose own `four_eyes:` name its verb (PendingRequest.gated)."""
_SETTLED = re.compile(r"(?:approved|rejected|withdrawn) (R[0-9]+)\b")


def gated_jobs(verb: str, jobs: Iterable[JobSpec]) -> tuple[str, ...]:
    """The ids of the jobs whose own `four_eyes:` name `verb`, of those it would act on (in their order): `verb`
    needs a second person when there is one, or when the plan's or the roles config's `four_eyes:` name it.

    Args:
        verb: the operator verb.
        jobs: the specs of every job it would act on (core/reach.py: those it names, their downstream for
            `rerun --downstream`, a loop's instances); none for `cancel`.
    """
    return tuple(j.id for j in jobs if verb in j.four_eyes)


def uncovered(req: PendingRequest, gated: Iterable[str]) -> list[str]:
    """The jobs (of `gated`, those the request's verb would act on now whose own `four_eyes:` name it) that the
    request did not name when it was asked: its approve does not cover them."""
    known = {*req.gated, *req.jobs}
    return [j for j in gated if j not in known]


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
    gated: tuple[str, ...] = ()
    """The jobs it would act on whose own `four_eyes:` name its verb, when it was asked (beside the ones it names,
    those downstream or matched by a glob): what its approve covers."""

    def reaching(self) -> list[str]:
        """Jobs of `gated` it does not name by id (reached downstream, or matched by a glob)."""
        return [j for j in self.gated if j not in self.jobs]

    def describe(self) -> str:
        """`kill load_01 by alice`, `rerun load with downstream (reaching post_ledger) by alice` (for messages)."""
        return f"{request_words(self.as_dict())} by {self.user}"

    def as_dict(self) -> dict[str, object]:
        """The request as JSON-ready fields."""
        return {"id": self.id, "verb": self.verb, "jobs": list(self.jobs), "user": self.user,
                "reason": self.reason, "ts": self.ts, "downstream": self.downstream, "four_eyes_of": list(self.gated)}


def request_words(row: Mapping[str, Any], whole: str = "") -> str:
    """What a request (PendingRequest.as_dict) asks for, all of it: `rerun load with downstream (reaching
    post_ledger)`; `whole`: said for a verb that names no job (`cancel`)."""
    jobs = [str(j) for j in row.get("jobs") or ()]
    what = f"{row['verb']} {', '.join(jobs)}" if jobs else f"{row['verb']}{whole and ' ' + whole}"
    more = " with downstream" if row.get("downstream") else ""
    reach = [str(j) for j in row.get("four_eyes_of") or () if j not in jobs]
    if reach:
        more += f" (reaching {', '.join(reach[:5])}{' ...' if len(reach) > 5 else ''})"
    return what + more


def pending_outcome(req: PendingRequest) -> str:
    """The outcome written in the request's action row (the book reads it back)."""
    down = " (with downstream)" if req.downstream else ""
    gated = f"{_GATED}{', '.join(req.gated)}" if req.gated else ""
    return f"pending {req.id}: needs another person's `wloadctl approve {req.id}`{down}{gated}"


def second_message(req: PendingRequest) -> str:
    """What the asker is told of a request that waits for a second person."""
    reach = req.reaching()
    why = ""
    if reach:
        names = ", ".join(reach[:5]) + (f" and {len(reach) - 5} more" if len(reach) > 5 else "")
        why = f" (it reaches {names}, whose four_eyes name{'s' if len(reach) == 1 else ''} {req.verb})"
    return (f"{req.id}: {req.verb} needs a second person{why}: another admin's `wloadctl approve {req.id}` applies "
            f"it, `wloadctl reject {req.id}` drops it")


def uncovered_refusal(req: PendingRequest, extra: Sequence[str]) -> str:
    """Why the approve of a request is refused: its verb would now act on jobs the request did not name."""
    names = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
    return (f"approve of {req.id} refused: {req.describe()} would now also act on {names}, whose four_eyes name "
            f"{req.verb}, which {req.id} did not name when asked; `wloadctl reject {req.id}` and ask again")


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
                _, cut, names = text.partition(_GATED)
                gated = tuple(names.split(", ")) if cut and names else ()
                book.requests[rid] = PendingRequest(rid, str(verb), jobs, str(user), str(reason), float(ts),
                                                    "(with downstream)" in text.partition(_GATED)[0], gated)
                book.last = max(book.last, int(rid[1:]))
                continue
            s = _SETTLED.match(text)
            if s and applied and verb in ("approve", "reject"):
                book.requests.pop(s.group(1), None)
        return book

    def open(self, verb: str, jobs: Sequence[str], user: str, reason: str, ts: float,
             downstream: bool = False, gated: Sequence[str] = ()) -> PendingRequest:
        """A new request with the next id, added to the book."""
        self.last += 1
        req = PendingRequest(f"R{self.last}", verb, tuple(jobs), user, reason, ts, downstream, tuple(gated))
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
    if not ids and verb == "reject" and len(rest) == 1:
        return None, (f"'{rest[0]}' is not a pending request id (ids read R1, R2, ...; `wloadctl pending` lists "
                      "those open)")
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
