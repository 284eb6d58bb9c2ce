"""The scheduler's side of the control channel: operator requests in, verbs applied in the loop, replies out."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wloadctl.core.commands import Reply
from wloadctl.core.events import OperatorEvent
from wloadctl.core.explain import why
from wloadctl.core.verbs import VERBS, resolve_jobs
from wloadctl.errors import WloadError
from wloadctl.ipc import protocol as P
from wloadctl.ipc.mq import MessageQueue

if TYPE_CHECKING:
    from wloadctl.core.engine import SchedulerCore
    from wloadctl.procs.runctx import RunContext
    from wloadctl.store import Store

_RESPOND = "_respond"
"""Key of a request's answering function when it came through the broker (never sent on a wire)."""
MAX_REPLY_LINES = 40
"""Per-job messages in one reply; the rest are counted (a reply must fit one queue message)."""


class ControlDesk:
    """Receives operator requests, feeds them to the core, journals them and answers."""

    def __init__(self, ctl: MessageQueue, core: SchedulerCore, ctx: RunContext, store: Store) -> None:
        self.ctl = ctl
        """The run's control queue."""
        self.core = core
        """The engine verbs are fed to."""
        self.ctx = ctx
        """The run (its id, epoch and event log)."""
        self.store = store
        """The journal operator actions are recorded in."""
        self.waiting: deque[dict[str, Any]] = deque()
        """Requests fed to the core whose Reply has not come out yet (FIFO, same order)."""

    def drain(self, now: float) -> None:
        """Take every waiting request from the control queue."""
        ctl = self.ctl
        while True:
            data = ctl.recv_nowait()
            if data is None:
                return
            try:
                req = P.decode_control(data)
            except WloadError:
                continue  # not ours or garbled: nothing to answer to
            self._handle(req, now)

    def take(self, data: bytes, respond: Callable[[bytes], None], now: float) -> None:
        """A request from another host (through the broker): handled like the queue's, answered by `respond`."""
        try:
            req = json.loads(data)
        except ValueError:
            return  # garbled: nothing to answer to
        if not isinstance(req, dict):
            return
        req.pop("reply", None)
        req[_RESPOND] = respond
        self._handle(req, now)

    def _handle(self, req: dict[str, Any], now: float) -> None:
        core = self.core
        verb = str(req.get("verb", ""))
        names = [str(n) for n in req.get("jobs", [])]
        if verb == "why":
            idx, unknown = resolve_jobs(core, names)
            self._send(req, {"ok": not unknown, "why": [why(core, i, now) for i in idx[:20]],
                             "unknown": unknown})
            return
        if verb == "ping":
            self._send(req, {"ok": True, "pid": self.ctx.run.scheduler_pid, "epoch": self.ctx.epoch})
            return
        if verb not in VERBS:
            self._send(req, {"ok": False, "error": f"unknown verb '{verb}'; verbs: {', '.join(VERBS)}"})
            return
        idx, unknown = resolve_jobs(core, names)
        if unknown and verb != "cancel":
            msg = f"unknown job(s): {', '.join(unknown)}"
            self._journal(req, "; ".join(unknown), msg, False)
            self._send(req, {"ok": False, "error": msg, "unknown": unknown})
            return
        self.waiting.append(req)
        core.feed(OperatorEvent(verb, tuple(idx), now, user=str(req.get("user", "")),
                                reason=str(req.get("reason", "")), downstream=bool(req.get("downstream")),
                                cause_id=f"op-{req.get('id', '')}"))

    def reply(self, rep: Reply) -> None:
        """A Reply came out of the core: journal each job's outcome and answer the request."""
        req = self.waiting.popleft() if self.waiting else {}
        core = self.core
        lines = []
        ok = True
        for i, applied, msg in rep.results:
            job = core.ids[i] if i >= 0 else "*"
            self._journal(req, job, msg, applied)
            ok = ok and applied
            lines.append([job, applied, msg])
        extra = len(lines) - MAX_REPLY_LINES
        body: dict[str, Any] = {"ok": ok, "verb": rep.verb, "results": lines[:MAX_REPLY_LINES],
                                "touched": len(rep.touched)}
        if extra > 0:
            body["more"] = extra
        if req:
            self._send(req, body)

    def _journal(self, req: dict[str, Any], job: str, outcome: str, applied: bool) -> None:
        user, verb, reason = str(req.get("user", "")), str(req.get("verb", "")), str(req.get("reason", ""))
        self.store.record_action(self.ctx.run.id, user, verb, job, reason, outcome, applied, time.time())
        self.ctx.events.emit("action", job, user=user, verb=verb, reason=reason, outcome=outcome, applied=applied)

    def _send(self, req: dict[str, Any], body: dict[str, Any]) -> None:
        respond = req.get(_RESPOND)
        if respond is not None:
            body["id"] = req.get("id")
            respond(json.dumps(body).encode())
            return
        name = req.get("reply")
        if not name:
            return
        body["id"] = req.get("id")
        try:
            q = MessageQueue.open(str(name))
        except WloadError:
            return  # the client gave up and removed its reply queue
        try:
            data = P.encode_control(body, max_size=q.max_message_size)
        except WloadError:
            body = {"ok": body.get("ok", False), "id": req.get("id"), "error": "reply too large; see the journal"}
            data = P.encode_control(body, max_size=q.max_message_size)
        try:
            q.send_nowait(data)
        finally:
            q.close()
