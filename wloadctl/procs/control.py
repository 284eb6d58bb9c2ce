"""The scheduler's side of the control channel: operator requests in, verbs applied in the loop, replies out.

Requests come over the state directory's Unix socket (wloadctl.ipc.ctlsock); the caller's
identity is what the kernel says (SO_PEERCRED), and its role (wloadctl.access) decides whether
the verb is applied. Refusals are journaled like any other action. A verb that needs a second
person (four eyes, wloadctl.core.foureyes) waits as a pending request until another user's
`approve` applies it or a `reject` drops it.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wloadctl.access import Role, RoleMap, allowed_verbs, load_roles, needed, refusal, unauthenticated_name
from wloadctl.core.commands import Reply
from wloadctl.core.events import OperatorEvent
from wloadctl.core.explain import why
from wloadctl.core.foureyes import (
    PendingBook,
    PendingRequest,
    gated_jobs,
    judge,
    pending_outcome,
    second_message,
    settle_word,
    settled_outcome,
    uncovered,
    uncovered_refusal,
)
from wloadctl.core.reach import reached
from wloadctl.core.verbs import VERBS, resolve_jobs, unknown_text
from wloadctl.errors import printable
from wloadctl.ipc.ctlsock import ControlSocket, Peer
from wloadctl.store.audit import ActionRow

if TYPE_CHECKING:
    from wloadctl.core.engine import SchedulerCore
    from wloadctl.procs.runctx import RunContext
    from wloadctl.remote.operators import OperatorGate
    from wloadctl.store import Store

_RESPOND = "_respond"
"""Key of a request's answering function when it came through the broker (never sent on a wire)."""
DRILL_JOB = "scheduler"
"""The audit's `job` of a drill asked of the scheduler (the drill's own report is journaled under `*`)."""
MAX_REPLY_LINES = 40
"""Per-job messages in one reply; the rest are counted (a reply must fit one queue message)."""
_DESK_KEYS = frozenset({_RESPOND, "conn", "approved", "claimed", "user"})
"""Keys of a request that the desk sets itself (who asks, how to answer, the request an approve carries out):
a caller's own are dropped, so that no request can name itself approved or answer itself."""


def _from_caller(req: dict[str, Any]) -> dict[str, Any]:
    """A caller's request without the keys only the desk may set (_DESK_KEYS)."""
    return {k: v for k, v in req.items() if k not in _DESK_KEYS}


@dataclass(slots=True)
class _Outcome:
    """A Reply of the core with its request and its audit rows, from the turn's journal write to its answer."""

    rep: Reply
    """The core's Reply."""
    req: dict[str, Any]
    """The request it answers ({} when none waits)."""
    rows: list[ActionRow]
    """One audit row per job the verb named (job "*" for the run as a whole)."""
    journaled: bool = False
    """The rows were committed with the turn's transitions."""


class ControlDesk:
    """Receives operator requests, feeds them to the core, journals them and answers."""

    def __init__(self, ctl: ControlSocket, core: SchedulerCore, ctx: RunContext, store: Store,
                 roles: RoleMap | None = None, owner_uid: int | None = None) -> None:
        self.ctl = ctl
        """The run's control socket."""
        self.core = core
        """The engine verbs are fed to."""
        self.ctx = ctx
        """The run (its id, epoch and event log)."""
        self.store = store
        """The journal operator actions are recorded in."""
        self.roles = roles if roles is not None else RoleMap()
        """Who has which role besides the run's owner and root."""
        self.owner_uid = os.stat(ctx.state_dir).st_uid if owner_uid is None else owner_uid
        """The run's owner (the owner of its state directory): an admin."""
        self.gate: OperatorGate | None = None
        """Who is believed on the run's broker subjects (set when the run has a broker)."""
        self.waiting: deque[dict[str, Any]] = deque()
        """Requests fed to the core whose Reply has not come out yet (FIFO, same order)."""
        self.unsent: list[tuple[dict[str, Any], dict[str, Any]]] = []
        """Answers of verbs applied this turn: sent once the board shows what they did (send_replies)."""
        self.four_eyes: frozenset[str] = frozenset(getattr(ctx.plan, "four_eyes", ())) | self.roles.four_eyes
        """Verbs the plan or the roles config make need a second person's approve on every job."""
        self.book = PendingBook.from_actions(store.actions(ctx.run.id))
        """Requests waiting for a second person (rebuilt from the journal's actions)."""
        self._four_eyes_jobs: tuple[int, dict[str, list[str]]] = (-1, {})
        """The jobs whose own `four_eyes:` name each verb, and how many jobs the run had when they were read."""
        self.drill: dict[str, Any] | None = None
        """A failover drill asked of this scheduler, carried out at the end of the turn (wloadctl.procs.selfdrill)."""
        self._outcomes: dict[int, _Outcome] = {}
        """Replies of the core being journaled and answered this turn, by identity."""

    @classmethod
    def open(cls, core: SchedulerCore, ctx: RunContext, store: Store) -> ControlDesk:
        """Listen on the run's control socket with the roles of the config file and the plan.

        The socket is 0700 unless the roles give someone besides the owner a role: then any
        local user may connect, and the kernel's word on who they are decides what they may do.
        """
        roles = load_roles(getattr(ctx.plan, "roles", None), ctx.plan.path or "plan")
        sock = ControlSocket.listen(ctx.state_dir, 0o777 if roles.grants_others else 0o700)
        return cls(sock, core, ctx, store, roles)

    def on_ready(self, fd: int, now: float) -> None:
        """A socket of the desk is readable: accept, read, and handle the requests completed."""
        for conn, peer, req in self.ctl.ready(fd):
            self._handle(conn, peer, req, now)

    def take(self, data: bytes, respond: Callable[[bytes], None], now: float, subject: str = "") -> None:
        """A request from another host (through the broker): handled like the socket's, answered by `respond`.

        No kernel vouches for a caller on another host; the broker does, through the subject the
        request came on (see wloadctl.remote.operators): a broker user of an authenticating broker
        is `broker:USER`, with the role `broker_users` gives them (the scheduler's own broker user
        is the run's owner there: an admin). Anyone else is `unauthenticated@HOST`, a viewer
        unless the roles say otherwise; the name the request carries is never believed.
        """
        try:
            req = json.loads(data)
        except ValueError:
            return  # garbled: nothing to answer to
        if not isinstance(req, dict):
            return
        claimed = str(req.get("user", ""))
        req = _from_caller(req)
        req.pop("reply", None)
        req[_RESPOND] = respond
        if self.gate is not None:
            broker_user, user = self.gate.caller(subject, claimed)
            owner = self.gate.owner
        else:
            broker_user, user, owner = None, unauthenticated_name(claimed), None
        role = self.roles.broker_role(broker_user, owner)
        self._apply({**req, "user": user, "claimed": claimed}, -1, role, now)

    def close(self) -> None:
        """Stop listening (the socket file goes: no scheduler answers there any more)."""
        self.ctl.close()

    def _handle(self, conn: int, peer: Peer, req: dict[str, Any], now: float) -> None:
        # Whoever the request claims to be, the kernel's word decides.
        user = peer.user
        role = self.roles.role_of(peer.uid, user, peer.group_names, self.owner_uid)
        self._apply({**_from_caller(req), "user": user, "conn": conn}, peer.uid, role, now)

    def _apply(self, req: dict[str, Any], uid: int, role: Role, now: float) -> None:
        core = self.core
        for key in ("reason", "claimed"):
            if isinstance(req.get(key), str):
                # Journaled, logged and shown to every operator: one line, no terminal escapes of the sender's.
                req[key] = printable(req[key])
        user = str(req.get("user", ""))
        verb = str(req.get("verb", ""))
        names = [str(n) for n in req.get("jobs", [])]
        if verb == "whoami":
            self._send(req, {"ok": True, "user": user, "uid": uid, "role": role.label,
                             "verbs": allowed_verbs(role), "four_eyes": sorted(self.four_eyes),
                             "four_eyes_jobs": self._jobs_four_eyes()})
            return
        meant = req.get("run")
        if isinstance(meant, str) and meant and meant != self.ctx.run.run_id:
            # Meant for an earlier run of this directory (a console left open on it): answered, not journaled
            # (it is no action on this run).
            self._send(req, {"ok": False, "error": f"this scheduler drives run {self.ctx.run.run_id}, not run "
                                                   f"{printable(meant)}: nothing done"})
            return
        if role < needed(verb):
            msg = refusal(verb, user, role)
            # (A drill's `*` row is its report: a refused request is the scheduler's, as an accepted one is.)
            self._journal(req, DRILL_JOB if verb == "drill" else "; ".join(names) or "*", msg, False)
            self._send(req, {"ok": False, "error": msg, "refused": True, "role": role.label,
                             "needs": needed(verb).label})
            return
        if verb == "why":
            idx, unknown = resolve_jobs(core, names)
            self._send(req, {"ok": not unknown, "why": [why(core, i, now) for i in idx[:20]],
                             "unknown": unknown})
            return
        if verb == "ping":
            self._send(req, {"ok": True, "pid": self.ctx.run.scheduler_pid, "epoch": self.ctx.epoch,
                             "run": self.ctx.run.run_id})
            return
        if verb == "pending":
            self._send(req, {"ok": True, "requests": self.book.listing()})
            return
        if verb == "drill":  # not in the roles table: it needs admin, as every verb not listed there
            self._take_drill(req)
            return
        if verb in ("approve", "reject"):
            asked, bad = judge(verb, names, user, self.book, lambda n: n in core.index)
            if bad is not None:
                self._refuse(req, "; ".join(names) or "*", bad)
                return
            if asked is not None:
                self._settle(req, role, asked, now)
                return
        if verb not in VERBS:
            self._send(req, {"ok": False, "error": f"unknown verb '{verb}'; verbs: {', '.join(VERBS)}"})
            return
        idx, unknown = resolve_jobs(core, names)
        if unknown and verb != "cancel":
            self._refuse(req, "; ".join(unknown), unknown_text(unknown), unknown=unknown)
            return
        if not req.get("approved"):
            # Every job the verb would act on counts, not only those named (`rerun X --downstream`, a glob).
            gated = self._gated(verb, idx, bool(req.get("downstream")))
            if verb in self.four_eyes or gated:
                self._ask_second(req, names, gated)
                return
        self.waiting.append(req)
        core.feed(OperatorEvent(verb, tuple(idx), now, user=str(req.get("user", "")),
                                reason=str(req.get("reason", "")), downstream=bool(req.get("downstream")),
                                cause_id=f"op-{req.get('id', '')}"))

    def _take_drill(self, req: dict[str, Any]) -> None:
        """A failover drill of this scheduler from another host: checked here, carried out once the turn is done."""
        mode, epoch = req.get("mode"), req.get("epoch")
        if _RESPOND not in req:
            bad = "a failover drill is asked of the active through the broker (`wloadctl drill failover --broker`)"
        elif mode not in ("kill", "stop"):
            bad = f"drill mode {mode!r} is not kill or stop"
        elif epoch != self.ctx.epoch:
            bad = f"this scheduler holds epoch {self.ctx.epoch}, not the {epoch} the drill was asked for"
        elif self.drill is not None:
            bad = "a drill of this scheduler is already under way"
        else:
            self.drill = req
            return
        self._refuse(req, DRILL_JOB, f"drill refused: {bad}")  # answered at once: nothing strikes

    def take_drill(self) -> dict[str, Any] | None:
        """The drill asked of this scheduler this turn, if any (handed over once)."""
        req, self.drill = self.drill, None
        return req

    def record(self, req: dict[str, Any], job: str, outcome: str, applied: bool) -> None:
        """Journal the outcome of a request carried out outside the core (then `answer` it)."""
        self._journal(req, job, outcome, applied)

    def answer(self, req: dict[str, Any], body: dict[str, Any]) -> None:
        """Answer a request carried out outside the core."""
        self._send(req, body)

    def _refuse(self, req: dict[str, Any], job: str, msg: str, **more: Any) -> None:
        """Journal a refusal and answer it."""
        self._journal(req, job, msg, False)
        self._send(req, {"ok": False, "error": msg, **more})

    def _jobs_four_eyes(self) -> dict[str, list[str]]:
        """Verb -> the jobs whose own `four_eyes:` name it (the console warns before a verb reaching one), read
        again only once the run has more jobs (a loop's instances)."""
        n, by_verb = self._four_eyes_jobs
        if n != self.core.n:
            by_verb = {}
            for spec in self.core.specs:
                for v in spec.four_eyes:
                    by_verb.setdefault(v, []).append(spec.id)
            self._four_eyes_jobs = (self.core.n, by_verb)
        return by_verb

    def _gated(self, verb: str, idx: list[int], downstream: bool) -> tuple[str, ...]:
        """The jobs `verb` on `idx` would act on whose own `four_eyes:` name it (core/reach.py)."""
        if verb not in self._jobs_four_eyes():
            return ()  # (no job says so: nothing to walk)
        core = self.core
        return gated_jobs(verb, (core.specs[i] for i in reached(core, verb, idx, downstream)))

    def _ask_second(self, req: dict[str, Any], names: list[str], gated: tuple[str, ...]) -> None:
        """The verb needs a second person: open a pending request, journal it, and say how to approve it."""
        p = self.book.open(str(req.get("verb", "")), names, str(req.get("user", "")), str(req.get("reason", "")),
                           time.time(), bool(req.get("downstream")), gated)
        self._journal(req, "; ".join(names) or "*", pending_outcome(p), False)
        self._send(req, {"ok": True, "verb": p.verb, "pending": p.as_dict(), "results": [],
                         "message": second_message(p)})

    def _settle(self, req: dict[str, Any], role: Role, p: PendingRequest, now: float) -> None:
        """`approve ID` applies a pending request asked by somebody else; `reject ID` drops it."""
        verb, user = str(req.get("verb", "")), str(req.get("user", ""))
        if verb == "approve" and role < needed(p.verb):
            self._refuse(req, p.id, f"approve of {p.id}: {refusal(p.verb, user, role)}")
            return
        if verb == "approve":
            # What the approve applies is what was asked: a verb that would now act on a job whose four eyes
            # the request did not name is refused (the request stays, to be rejected).
            idx, _unknown = resolve_jobs(self.core, list(p.jobs))
            extra = uncovered(p, self._gated(p.verb, idx, p.downstream))
            if extra:
                self._refuse(req, p.id, uncovered_refusal(p, extra))
                return
        self.book.take(p.id)
        word = settle_word(verb, p, user)
        self._journal(req, p.id, settled_outcome(word, p, user), True)
        if verb == "reject":
            self._send(req, {"ok": True, "verb": verb, "results": [],
                             "message": f"{p.id} {word}: {p.describe()} will not be applied"})
            return
        why_ = f"{p.reason}; " if p.reason else ""
        self._apply({**req, "verb": p.verb, "jobs": list(p.jobs), "downstream": p.downstream, "approved": p.id,
                     "reason": f"{why_}{p.id} asked by {p.user}, approved by {user}"}, -1, role, now)

    def pending(self) -> list[PendingRequest]:
        """The requests waiting for a second person, oldest first."""
        return list(self.book.requests.values())

    def turn_actions(self, replies: Sequence[Reply]) -> list[ActionRow]:
        """The audit rows of these replies (one per job each names), for the journal to commit with the
        transitions the verbs caused (Store.write_turn): a crash then keeps both or neither.

        Asked again for the same replies (a turn retried after a full disk), it gives the same rows.
        """
        return [row for rep in replies for row in self._outcome(rep).rows]

    def turn_journaled(self, replies: Sequence[Reply]) -> None:
        """The rows of these replies were committed with their turn: `reply` does not write them again."""
        for rep in replies:
            self._outcome(rep).journaled = True

    def _outcome(self, rep: Reply) -> _Outcome:
        """What a Reply says, worked out once: its request (taken from `waiting`) and its audit rows."""
        out = self._outcomes.get(id(rep))
        if out is None:
            req = self.waiting.popleft() if self.waiting else {}
            user, verb, reason = str(req.get("user", "")), str(req.get("verb", "")), str(req.get("reason", ""))
            ids, ts = self.core.ids, time.time()
            rows = [(ts, user, verb, (ids[i] if i >= 0 else "*")[:4000], reason, msg, applied)
                    for i, applied, msg in rep.results]
            # (keyed by identity: the Reply is kept in the value, so its id is not reused meanwhile)
            out = self._outcomes[id(rep)] = _Outcome(rep, req, rows)
        return out

    def reply(self, rep: Reply) -> None:
        """A Reply came out of the core: journal each job's outcome (unless its turn did) and answer the request.

        Raises:
            StoreFull: the journal refused the rows for want of space (the reply is kept for a retry).
        """
        out = self._outcome(rep)
        req = out.req
        if not out.journaled:
            self.store.record_actions(self.ctx.run.id, out.rows)
        del self._outcomes[id(rep)]
        claim = {"claimed": str(req["claimed"])} if "claimed" in req else {}
        self.ctx.events.actions(out.rows, **claim)
        lines = [[job, applied, msg] for _ts, _user, _verb, job, _reason, msg, applied in out.rows]
        ok = all(applied for _job, applied, _msg in lines)
        extra = len(lines) - MAX_REPLY_LINES
        body: dict[str, Any] = {"ok": ok, "verb": rep.verb, "results": lines[:MAX_REPLY_LINES],
                                "touched": len(rep.touched)}
        if extra > 0:
            # The jobs past the lines sent are counted, so that a glob's answer still says how many were applied.
            body["more"] = extra
            body["applied"] = sum(1 for job, applied, _msg in lines if applied and job != "*")
            body["refused"] = sum(1 for job, applied, _msg in lines if not applied and job != "*")
        if req.get("approved"):
            body["approved"] = req["approved"]
        if req:
            self.unsent.append((req, body))

    def send_replies(self) -> None:
        """Answer the verbs the core replied to: after the turn's board publish, so that whoever is told a verb
        applied reads its effect in `status` at once (the board is what a live run's status reads)."""
        unsent, self.unsent = self.unsent, []
        for req, body in unsent:
            self._send(req, body)

    def _journal(self, req: dict[str, Any], job: str, outcome: str, applied: bool) -> None:
        user, verb, reason = str(req.get("user", "")), str(req.get("verb", "")), str(req.get("reason", ""))
        self.store.record_action(self.ctx.run.id, user, verb, job[:4000], reason, outcome, applied, time.time())
        # What a request through the broker said it was goes to the event log only, marked as a claim.
        # (The attempt is given by place: a key of `claim` cannot then stand for it.)
        claim = {"claimed": str(req["claimed"])} if "claimed" in req else {}
        self.ctx.events.emit("action", job, 0, user=user, verb=verb, reason=reason, outcome=outcome, applied=applied,
                             **claim)

    def _send(self, req: dict[str, Any], body: dict[str, Any]) -> None:
        respond = req.get(_RESPOND)
        if respond is not None:
            body["id"] = req.get("id")
            respond(json.dumps(body).encode())
            return
        conn = req.get("conn")
        if conn is None:
            return
        body["id"] = req.get("id")
        self.ctl.answer(int(conn), body)
