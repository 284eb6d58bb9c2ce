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
    """Whether a process with this pid exists and is not a zombie (what decides whether a run's queues and
    segments may be removed, and whether a scheduler, executor or agent is still there).

    A process whose state cannot be read is taken for alive: it answered the signal test.
    """
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return not os.path.isdir("/proc/self")  # gone since the signal test (unless no /proc is mounted)
    except OSError:
        return True
    # The state letter follows the command name, which may itself hold ") ".
    end = stat.rfind(b")")
    return stat[end + 2:end + 3] != b"Z"
