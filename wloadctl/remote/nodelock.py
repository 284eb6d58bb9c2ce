"""One agent of a name per host: a lock beside the node's queues and segments, keyed by the agent's name.

An agent's queues and segments (`wloadctl.UID.agent-NAME.*`) are per host, so two agents of
one name on one host would share them. The lock lives where they do (/dev/shm, which a host,
or a container with its own IPC namespace, has to itself), not in the state directory that
two such agents need not share. It is an flock: it goes with the agent process, however it
ends, and the executors it spawns do not inherit it (they outlive a crashed agent, whose
successor must start). An agent that stops removes the file; a crashed one leaves it for its
successor to lock again.
"""

from __future__ import annotations

import fcntl
import os

from wloadctl.errors import UsageError
from wloadctl.ipc.cleanup import SHM_DIR


def lock_path(name: str, directory: str = SHM_DIR) -> str:
    """The lock file of agent `name` for this user (hidden: cleanup of stale IPC objects never lists it)."""
    return os.path.join(directory, f".wloadctl.{os.getuid()}.agent-{name}.lock")


class NodeLock:
    """Held by the one agent of its name on this host while it runs."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        """The locked file (close-on-exec)."""
        self.path = path
        """Where it is."""

    @classmethod
    def take(cls, name: str, state_dir: str, directory: str = SHM_DIR) -> NodeLock:
        """Lock agent `name` on this host, or refuse.

        Args:
            name: The agent's name.
            state_dir: Its state directory (written in the lock, for the refusal of a second one).
            directory: Where the lock lives (tests give another).

        Raises:
            UsageError: If an agent of that name runs on this host already (named with its pid).
        """
        path = lock_path(name, directory)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as e:
                raise UsageError(f"agent {name}: cannot make its lock {path} ({e.strerror})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip().split("\n")
                os.close(fd)
                pid = holder[0] if holder and holder[0] else "?"
                where = f", state dir {holder[1]}" if len(holder) > 1 else ""
                raise UsageError(f"agent {name} already runs on this host (pid {pid}{where}): a second one of "
                                 "that name would share its queues and segments",
                                 hint="stop that one first, or give this one another --name") from None
            # The agent before may have removed the file between our open and our lock (see release):
            # the lock then is on a file nobody else finds, and the path's file is locked afresh.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{state_dir}\n".encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        """Remove the file, then unlock (in that order: whoever waits on the old file takes the path afresh)."""
        if self.fd >= 0:
            try:
                os.unlink(self.path)
            except OSError:
                pass  # already gone: nothing is left behind either way
            os.close(self.fd)
            self.fd = -1
