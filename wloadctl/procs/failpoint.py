"""Crashes on purpose for fault tests: a failpoint strikes once per state directory.

The executor (`WLOADCTL_FAILPOINT=after-spawn:...`), the scheduler (`after-verb-commit`) and the agent
(`WLOADCTL_AGENT_FAILPOINT`) each SIGKILL a process at a chosen moment; a file in the state directory says the
failpoint struck, so the process started again (a resume, a restarted agent) goes on.
"""

from __future__ import annotations

import os
from pathlib import Path


def first_strike(state_dir: Path | str, marker: str = "failpoint-struck") -> bool:
    """Whether the failpoint of this state directory strikes now: True the first time only (the marker is made)."""
    try:
        os.close(os.open(Path(state_dir) / marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return False
    return True
