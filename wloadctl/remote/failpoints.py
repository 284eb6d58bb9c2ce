"""The agent's crashes at the worst moments, on purpose, for fault tests (as the executor's WLOADCTL_FAILPOINT)."""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from wloadctl.procs.failpoint import first_strike

AGENT_FAILPOINT_ENV = "WLOADCTL_AGENT_FAILPOINT"
"""`after-take:JOB`: the agent SIGKILLs itself once it has journaled job JOB's task as taken, before it acknowledges
the dispatch that brought it. `after-open`: once its epoch is on the node's board and it has rebuilt its book,
before its first turn (before it reports anything). Either strikes once per state directory (a file there says
it struck). Unset, it costs one comparison a dispatch."""

STRUCK = "agent-failpoint-struck"
"""The file in the agent's state directory that says its failpoint struck."""


@dataclass(frozen=True, slots=True)
class AgentFailpoint:
    """Where the agent kills itself, and the state directory that remembers it did."""

    where: str
    """`after-take` or `after-open`."""
    job: str
    """The job id of `after-take` ("" for `after-open`)."""
    state_dir: Path
    """The agent's state directory."""

    @classmethod
    def read(cls, state_dir: Path, text: str | None = None) -> AgentFailpoint | None:
        """The failpoint AGENT_FAILPOINT_ENV (or `text`) names; None when unset or not understood (said on stderr)."""
        text = os.environ.get(AGENT_FAILPOINT_ENV) if text is None else text
        if not text:
            return None
        where, _, job = text.partition(":")
        if (where, bool(job)) not in (("after-take", True), ("after-open", False)):
            print(f"wloadctl agent: {AGENT_FAILPOINT_ENV}={text!r} is not after-take:JOB or after-open; ignored",
                  file=sys.stderr)
            return None
        return cls(where, job, state_dir)

    def strike(self, where: str, job: str = "") -> None:
        """SIGKILL this process if this is the failpoint's moment and it has not struck in its state directory."""
        if where != self.where or job != self.job or not first_strike(self.state_dir, STRUCK):
            return
        os.kill(os.getpid(), signal.SIGKILL)
