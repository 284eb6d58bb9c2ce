"""One agent of a name per host: a lock beside the node's queues and segments, keyed by the agent's name; and one
live agent of a name on the broker (`refuse_live_twin`).

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
import functools
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from wloadctl.errors import UsageError, WloadError
from wloadctl.ipc.cleanup import SHM_DIR
from wloadctl.procs.health import pid_alive

if TYPE_CHECKING:
    from wloadctl.remote.link import BrokerLink

TWIN_WATCH = 2.5
"""Seconds a starting agent watches a recent beat of its name from another process for the next one (agents beat
every second)."""
TWIN_STALE = 30.0
"""A beat of the name older than this (by this host's clock) is not watched: its agent is long gone."""


@functools.cache
def host_identity() -> str:
    """This process's kernel (its boot id) and pid namespace, as `BOOT/pid:[INODE]`; empty where either cannot be
    read.

    A pid is this host's only within both: a machine cloned with its host name, or a container sharing the
    host's name (its agent pid 1, as in every other such container), shows the same name and pid as another.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


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


def refuse_live_twin(link: BrokerLink, bucket: str, name: str, *, now: Callable[[], float] = time.time,
                     sleep: Callable[[float], None] = time.sleep, watch: float = TWIN_WATCH) -> None:
    """Refuse to start agent `name` while another agent of that name beats on the broker, from any host.

    The host lock (`NodeLock`) sees only agents of this host's IPC namespace; two hosts given one name (a cloned
    machine, a copied unit file) would both take the name's pinned tasks, answer for each other's jobs and kill
    requests, and beat as one flapping agent. The name's last beat in the agents bucket tells: none, a clean
    stop, or one from a process of this host that is gone (an agent killed and started again) let it start at once;
    a beat that is not stale is watched for up to `watch` seconds, and a next beat of the same process refuses.

    Args:
        link: The open broker link.
        bucket: The installation's agents bucket (`Subjects.agents_bucket`).
        name: The agent's name.
        now, sleep, watch: The clock, the wait, and how long to watch (tests give their own).

    Raises:
        UsageError: Another agent of the name beats (named with its host and pid).
    """
    from wloadctl.remote.messages import Heartbeat

    def last() -> tuple[int, Heartbeat] | None:
        try:
            entry = link.kv.get(bucket, name, timeout=2.0)
            return (entry.revision, Heartbeat.decode(entry.value)) if entry is not None else None
        except WloadError:
            return None  # (a bucket or beat it cannot read says nothing of a twin)

    first = last()
    if first is None or first[1].stopped or now() - first[1].sent > TWIN_STALE:
        return
    rev, hb = first
    here = host_identity()
    if here and hb.host_id == here and (hb.pid == os.getpid() or not pid_alive(hb.pid)):
        return  # this host's agent of the name, gone (killed, and this one is its successor)
    until = now() + watch
    while now() < until:
        sleep(0.25)
        seen = last()
        if seen is None or seen[0] == rev:
            continue
        if seen[1].stopped or (seen[1].boot and seen[1].boot != hb.boot):
            return  # it stopped, or a third one beats: the scheduler tells twins apart and says so
        raise UsageError(f"agent {name} already runs on host {hb.host} (pid {hb.pid}; it beats on the broker): a "
                         "second one of that name would take its tasks and answer for its jobs",
                         hint="stop that one first, or give this one another --name")
