"""Operator verbs of another host: request/reply on a run's operator subject, to the scheduler holding its lease.

Who a caller is comes from the broker, never from the request. An operator connected as
broker user USER (user and password, an nkey, or a credentials file) sends on
`PFX.op.RUN.USER`, and the server's permissions must let only USER publish there; a caller
without a user of its own (no authentication, or a shared token) sends on `PFX.op.RUN`. The
scheduler takes USER from the subject when its server authenticates every client, and calls
anyone else `unauthenticated@HOST` (HOST as the request claims it), whatever name the
request carries. Roles then come from `broker_users:` (wloadctl.access).

The server configuration this needs (one user per operator; the installation's own user,
which schedulers and agents connect as, may publish anywhere and owns its runs):

    authorization {
      users = [
        {user: wloadctl, password: "..."}
        {user: alice, password: "...",
         permissions: {publish: ["wl.op.*.alice"], subscribe: ["_INBOX.>"]}}
        {user: bob, password: "...",
         permissions: {publish: ["wl.op.*.bob"], subscribe: ["_INBOX.>"]}}
      ]
    }

(`wl` is the installation's prefix; broker user names are letters, digits, `_` and `-`.)
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import socket
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from wloadctl.access import unauthenticated_name
from wloadctl.errors import TransportError
from wloadctl.remote.broker import NAME_RE, BrokerOptions, Subjects
from wloadctl.remote.link import BrokerLink

JWT_RE = re.compile(rb"-----BEGIN NATS USER JWT-----\s*([A-Za-z0-9_.=-]+)\s*-")
"""The user JWT of a credentials file."""


def broker_identity(options: BrokerOptions) -> str | None:
    """The broker user a connection with these options authenticates as, or None when it has none of its own.

    `--broker-user` (or the user of the URL, `nats://USER:PASSWORD@HOST`), else the `name` of a
    credentials file's user JWT, else the public key of an
    nkey seed; a token is shared, so it names nobody.
    """
    if options.user:
        return options.user
    first = urlsplit(options.servers[0])
    if first.username and first.password is not None:  # `nats://TOKEN@HOST` is a token, not a user
        return first.username
    if options.creds_file:
        return _creds_name(options.creds_file)
    if options.nkey_seed_file:
        try:
            import nkeys  # type: ignore[import-not-found]

            with open(options.nkey_seed_file, "rb") as f:
                return str(nkeys.from_seed(f.read().strip()).public_key.decode())
        except Exception:  # no nkeys module or a bad seed: the connection itself will say so
            return None
    return None


def _creds_name(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            m = JWT_RE.search(f.read())
        if m is None:
            return None
        body = m.group(1).split(b".")[1]
        claims = json.loads(base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4)))
    except (OSError, IndexError, ValueError):
        return None
    name = claims.get("name") if isinstance(claims, dict) else None
    return name if isinstance(name, str) and name else None


def caller(subject: str, op_subject: str, auth_required: bool, claimed: str) -> tuple[str | None, str]:
    """Who sent an operator request, as the scheduler may believe it.

    Args:
        subject: The subject the request came on.
        op_subject: The run's operator subject (`PFX.op.RUN`).
        auth_required: Whether the scheduler's server authenticates every client.
        claimed: The `user` the request names (`NAME@HOST`): only its host is kept, as information.

    Returns:
        (the broker user, or None when the broker vouches for nobody; the name for the audit).
    """
    user = subject[len(op_subject) + 1:] if subject.startswith(op_subject + ".") else ""
    if auth_required and NAME_RE.fullmatch(user):
        return user, f"broker:{user}"
    return None, unauthenticated_name(claimed)


@dataclass(frozen=True, slots=True)
class OperatorGate:
    """The scheduler's side: who may be believed on a run's operator subjects."""

    op_subject: str
    """The run's operator subject (`PFX.op.RUN`; per-user subjects are below it)."""
    owner: str | None
    """The broker user the scheduler connects as: it owns the run on the broker (None: nobody in particular)."""
    link: BrokerLink
    """The scheduler's connection (whether its server authenticates clients is read at each request)."""

    @classmethod
    def of(cls, link: BrokerLink, subjects: Subjects, run_id: str) -> OperatorGate:
        """The gate of run `run_id` on this link."""
        return cls(subjects.op(run_id), broker_identity(link.options), link)

    def caller(self, subject: str, claimed: str) -> tuple[str | None, str]:
        """(broker user or None, name for the audit) of a request on `subject` (see `caller`)."""
        return caller(subject, self.op_subject, self.link.auth_required, claimed)


class OperatorLink:
    """An operator's connection to the broker (opened at the first verb, kept for the next ones)."""

    def __init__(self, options: BrokerOptions, link: BrokerLink | None = None) -> None:
        self.options = options
        """Where the broker is."""
        self.subjects = Subjects(options.prefix)
        """Names on the broker."""
        self.identity = broker_identity(options)
        """The broker user this operator connects as (None: none of its own)."""
        self.link = link
        """The connection (opened at the first verb unless given: its owner then closes it)."""

    def ask(self, run_id: str, req: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Send a verb to the scheduler of `run_id` and wait for its answer.

        Args:
            run_id: The run.
            req: The verb, as the control desk takes it (verb, jobs, reason, downstream, user).
            timeout: Seconds to wait for the answer.

        Returns:
            The scheduler's answer, or None when no scheduler answered (also when the broker
            refused this user the subject: it says so to the connection, not to the request).

        Raises:
            Unanswered: a scheduler took a verb that changes the run and did not answer in time.
            TransportError: the broker cannot be reached, or the answer is garbled.
        """
        if self.link is None:
            self.link = BrokerLink.open(self.options, name=f"operator-{os.getpid()}")
        if self.identity is not None and NAME_RE.fullmatch(self.identity):
            subject = self.subjects.op_user(run_id, self.identity)
        else:
            subject = self.subjects.op(run_id)
        # The name is only a claim (the scheduler believes the broker, not this); its host is shown.
        body = {**req, "user": f"{req.get('user', '')}@{socket.gethostname()}", "id": secrets.token_hex(4)}
        # A verb a scheduler took and did not answer may have been applied: the caller must not apply it again.
        changes = req.get("verb") not in ("why", "whoami", "pending", "ping")
        raw = self.link.request(subject, json.dumps(body).encode(), timeout=timeout, heard=changes)
        if raw is None:
            return None
        try:
            got = json.loads(raw)
        except ValueError:
            raise TransportError(f"a garbled answer on {subject}") from None
        return got if isinstance(got, dict) else None

    def close(self) -> None:
        """Close the connection (from any thread: the console closes it on its own event loop's thread)."""
        link, self.link = self.link, None
        if link is None:
            return
        # The link finishes its loop's last tasks in the closing thread, which must run no loop itself.
        closer = threading.Thread(target=link.close, kwargs={"timeout": 2.0}, name="operator-close")
        closer.start()
        closer.join()
