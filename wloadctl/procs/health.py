"""Process health readings shared by the processes: resident memory, liveness of a pid."""

from __future__ import annotations

import os

_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def process_rss_kb(pid: int | None = None) -> int:
    """Resident set size of a process in KiB (0 when it cannot be read)."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as f:
            return int(f.read().split()[1]) * _PAGE_KB
    except (OSError, ValueError, IndexError):
        return 0


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this pid exists (zombies count as gone)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
