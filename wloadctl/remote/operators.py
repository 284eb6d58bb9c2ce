"""Operator verbs of another host: request/reply on a run's operator subject, to the scheduler holding its lease."""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
from typing import Any

from wloadctl.errors import TransportError
from wloadctl.remote.broker import BrokerOptions, Subjects
from wloadctl.remote.link import BrokerLink


class OperatorLink:
    """An operator's connection to the broker (opened at the first verb, kept for the next ones)."""

    def __init__(self, options: BrokerOptions) -> None:
        self.options = options
        """Where the broker is."""
        self.subjects = Subjects(options.prefix)
        """Names on the broker."""
        self.link: BrokerLink | None = None

    def ask(self, run_id: str, req: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Send a verb to the scheduler of `run_id` and wait for its answer.

        Args:
            run_id: The run.
            req: The verb, as the control desk takes it (verb, jobs, reason, downstream, user).
            timeout: Seconds to wait for the answer.

        Returns:
            The scheduler's answer, or None when no scheduler answered.

        Raises:
            TransportError: the broker cannot be reached, or the answer is garbled.
        """
        if self.link is None:
            self.link = BrokerLink.open(self.options, name=f"operator-{os.getpid()}")
        subject = self.subjects.op(run_id)
        # Operators of other hosts are named with their host in the run's audit trail.
        body = {**req, "user": f"{req.get('user', '')}@{socket.gethostname()}", "id": secrets.token_hex(4)}
        raw = self.link.request(subject, json.dumps(body).encode(), timeout=timeout)
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
