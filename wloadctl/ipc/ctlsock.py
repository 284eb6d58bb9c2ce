"""The control socket: operator verbs over a Unix socket in the state directory, callers known by SO_PEERCRED.

One request and one reply per connection, each a 4-byte length and a control message
(protocol.encode_control). A caller keeps its end open until the reply comes: one that closes it
(even half way, with shutdown) or whose deadline passes has withdrawn its request. The scheduler's
side never blocks: it accepts and reads without waiting, and the loop's poller wakes it for the
listening socket and each open connection.
The kernel tells who is calling (uid, gid, pid of the peer at connect time), so an operator's
identity never comes from the environment.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import select
import socket
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wloadctl.errors import NoReply, TransportError, Unanswered, WloadError
from wloadctl.ipc import protocol as P

SOCKET_NAME = "control.sock"
"""File name of the control socket in a state directory."""
MAX_REQUEST = 64 * 1024
"""Largest request a scheduler reads; a longer one is refused."""
MAX_REPLY = 1024 * 1024
"""Largest reply a client reads."""
ANSWER_MARGIN = 1.0
"""Seconds before a request's deadline after which the scheduler no longer takes it: its answer would
come too late for the asker, who is told the request was withdrawn."""
_LEN = struct.Struct("!I")
_UCRED = struct.Struct("3i")
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)


@dataclass(frozen=True, slots=True)
class Peer:
    """Who is on the other end of a connection, as the kernel saw it at connect time."""

    pid: int
    """The peer's process id."""
    uid: int
    """The peer's user id."""
    gid: int
    """The peer's primary group id."""
    groups: tuple[int, ...] = ()
    """Every group of the peer (primary and supplementary)."""

    @property
    def user(self) -> str:
        """The user name of the uid (the uid itself when the system has no name for it)."""
        return user_name(self.uid)

    @property
    def group_names(self) -> frozenset[str]:
        """Names of the peer's groups."""
        out = set()
        for g in (self.gid, *self.groups):
            try:
                out.add(grp.getgrgid(g).gr_name)
            except KeyError:
                out.add(str(g))
        return frozenset(out)


def user_name(uid: int) -> str:
    """The name of a uid from the password database (never from $USER)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def this_process() -> Peer:
    """The calling process as a Peer (for verbs applied on the journal with no live scheduler)."""
    return Peer(os.getpid(), os.getuid(), os.getgid(), tuple(os.getgroups()))


def socket_path(state_dir: Path) -> Path:
    """Where a state directory's control socket lives."""
    return Path(state_dir) / SOCKET_NAME


@contextlib.contextmanager
def _short_path(path: Path):  # type: ignore[no-untyped-def]
    """A path to `path` short enough for sun_path (108 bytes): through /proc/self/fd when needed."""
    if len(os.fsencode(str(path))) < 100:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def peer_of(conn: socket.socket) -> Peer:
    """The kernel's credentials of a connected Unix socket's peer (SO_PEERCRED, SO_PEERGROUPS)."""
    pid, uid, gid = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    groups: tuple[int, ...] = ()
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, 4 * 256)
        groups = struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4])
    except OSError:
        # Kernels before 4.13: the password database's view of the user's groups.
        with contextlib.suppress(KeyError, OSError):
            groups = tuple(os.getgrouplist(pwd.getpwuid(uid).pw_name, gid))
    return Peer(pid, uid, gid, groups)


@dataclass
class _Conn:
    sock: socket.socket
    peer: Peer
    buf: bytearray = field(default_factory=bytearray)
    opened: float = 0.0


class ControlSocket:
    """The scheduler's listening control socket (0700 by default: see `mode`)."""

    STALE_AFTER = 10.0
    """Seconds a connection may take to send its request before it is dropped."""

    def __init__(self, sock: socket.socket, path: Path, inode: int = 0) -> None:
        self.sock = sock
        """The listening socket (non-blocking)."""
        self.path = path
        """Its file in the state directory."""
        self.conns: dict[int, _Conn] = {}
        """Open connections by file descriptor, waiting for their request or their reply."""
        self.poller: Any = None
        """The loop's poller, when attached: connections are registered on it."""
        self.inode = inode
        """The socket file's inode: a successor that bound the same path is not unlinked on close."""

    @classmethod
    def listen(cls, state_dir: Path, mode: int = 0o700) -> ControlSocket:
        """Bind the state directory's control socket, replacing one a dead scheduler left.

        Args:
            state_dir: The run's state directory.
            mode: File mode of the socket: 0700 lets only the owner (and root) connect; a
                wider mode lets other users in, who are then judged by their roles.

        Raises:
            TransportError: the socket cannot be bound (directory missing or not writable).
        """
        path = socket_path(state_dir)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            with _short_path(path) as where:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(where)
                old = os.umask(0o077)
                try:
                    sock.bind(where)
                finally:
                    os.umask(old)
                os.chmod(where, mode)
                inode = os.stat(where).st_ino
            sock.listen(64)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise TransportError(f"{path}: cannot listen for operator verbs: {exc.strerror}") from None
        return cls(sock, path, inode)

    @property
    def fd(self) -> int:
        """The listening socket's descriptor (readable when a client connects)."""
        return self.sock.fileno()

    def attach(self, poller: Any) -> None:
        """Register the listening socket on the loop's poller; connections follow as they come."""
        self.poller = poller
        poller.register(self.fd, select.POLLIN)

    def owns(self, fd: int) -> bool:
        """Whether `fd` is this socket's (the listener or one of its connections)."""
        return fd == self.fd or fd in self.conns

    def ready(self, fd: int) -> list[tuple[int, Peer, dict[str, Any]]]:
        """Handle readiness of `fd`: accept, or read; return the requests now complete (conn, peer, request)."""
        if fd == self.fd:
            self._accept()
            return []
        return self._read(fd)

    def _accept(self) -> None:
        now = time.monotonic()
        for fd in [k for k, c in self.conns.items() if now - c.opened > self.STALE_AFTER and not c.buf]:
            self.close_conn(fd)
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            conn.setblocking(False)
            try:
                peer = peer_of(conn)
            except OSError:
                conn.close()
                continue
            self.conns[conn.fileno()] = _Conn(conn, peer, opened=now)
            if self.poller is not None:
                self.poller.register(conn.fileno(), select.POLLIN)

    def _read(self, fd: int) -> list[tuple[int, Peer, dict[str, Any]]]:
        c = self.conns.get(fd)
        if c is None:
            return []
        try:
            chunk = c.sock.recv(MAX_REQUEST + _LEN.size)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            chunk = b""
        if not chunk:
            self.close_conn(fd)
            return []
        c.buf += chunk
        if len(c.buf) < _LEN.size:
            return []
        (n,) = _LEN.unpack_from(c.buf)
        if n > MAX_REQUEST:
            self.answer(fd, {"ok": False, "error": f"request of {n} bytes is over the {MAX_REQUEST}-byte limit"})
            return []
        if len(c.buf) < _LEN.size + n:
            return []
        data = bytes(c.buf[_LEN.size : _LEN.size + n])
        c.buf.clear()
        if self.poller is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.poller.unregister(fd)  # one request a connection: wait only for the reply now
        try:
            req = P.decode_control(data)
        except WloadError as exc:
            self.answer(fd, {"ok": False, "error": f"garbled request: {exc}"})
            return []
        if _withdrawn(c.sock, req):
            # (an asker still waiting, in its last moment, is told; one that went away loses the answer)
            self.answer(fd, {"ok": False, "withdrawn": True,
                             "error": "the scheduler read the request too late to answer in time: it is withdrawn, "
                                      "not applied"})
            return []
        return [(fd, c.peer, req)]

    def answer(self, fd: int, body: dict[str, Any]) -> None:
        """Send the reply to connection `fd` and close it (a client that went away loses it)."""
        c = self.conns.get(fd)
        if c is None:
            return
        try:
            try:
                data = P.encode_control(body, max_size=MAX_REPLY)
            except WloadError:
                data = P.encode_control({"ok": body.get("ok", False), "id": body.get("id"),
                                         "error": "reply too large; see the journal"})
            c.sock.setblocking(True)
            c.sock.settimeout(1.0)
            c.sock.sendall(_LEN.pack(len(data)) + data)
        except OSError:
            pass
        finally:
            self.close_conn(fd)

    def close_conn(self, fd: int) -> None:
        """Forget and close one connection."""
        c = self.conns.pop(fd, None)
        if c is None:
            return
        if self.poller is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.poller.unregister(fd)
        c.sock.close()

    def close(self, unlink: bool = True) -> None:
        """Close the listener and every connection; remove the socket file unless told not to."""
        for fd in list(self.conns):
            self.close_conn(fd)
        self.sock.close()
        if unlink:
            with contextlib.suppress(OSError), _short_path(self.path) as where:
                if os.stat(where).st_ino == self.inode:
                    os.unlink(where)


def _withdrawn(sock: socket.socket, req: dict[str, Any]) -> bool:
    """Whether the asker of a request read whole has given up on it: it closed the connection (it sends
    nothing after its request, so the end of the stream says so), or the deadline it gave is (nearly) past.

    A scheduler stopped (SIGSTOP) or busy finds such requests in the socket's backlog when it goes on: it
    drops them, for their askers were told the request was withdrawn.
    """
    deadline = req.get("deadline")
    if isinstance(deadline, (int, float)) and time.time() > deadline - ANSWER_MARGIN:
        return True
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True  # reset by the asker


def request(state_dir: Path, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send one request to the state directory's scheduler and wait for its answer.

    The request carries the time the caller gives up (`deadline`): a scheduler that reads it later, or
    after the caller closed the connection, drops it (see `_withdrawn`), so a request not answered in
    time is withdrawn rather than applied behind the caller's back.

    Raises:
        TransportError: nobody listens, the caller may not connect, or no answer came in time.
    """
    started = time.time()
    path = socket_path(state_dir)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    try:
        try:
            with _short_path(path) as where:
                sock.connect(where)
        except PermissionError:
            raise TransportError(f"{path}: permission denied: the run's owner has not opened its control "
                                 "socket to other users", hint="ask the run's owner for a role") from None
        except OSError as exc:
            raise TransportError(f"{path}: no scheduler listens ({exc.strerror})",
                                 hint="check it with `wloadctl status`") from None
        data = P.encode_control({**body, "deadline": started + timeout}, max_size=MAX_REQUEST)
        sent = False
        try:
            sock.sendall(_LEN.pack(len(data)) + data)
            sent = True
            head = _recv_exact(sock, _LEN.size)
            (n,) = _LEN.unpack(head)
            if n > MAX_REPLY:
                raise TransportError(f"{path}: reply of {n} bytes is over the {MAX_REPLY}-byte limit")
            return P.decode_control(_recv_exact(sock, n))
        except TimeoutError:
            verb = f"'{body['verb']}' " if body.get("verb") else ""
            raise NoReply(f"no answer from the scheduler within {timeout:.0f}s: the {verb}request is"
                                 " withdrawn (the scheduler drops it if it reads it later)",
                                 hint="check the scheduler with `wloadctl status` and what was applied with"
                                      " `wloadctl audit`, then ask again") from None
        except OSError as exc:
            if not sent:
                raise TransportError(f"{path}: the scheduler closed the connection ({exc.strerror or exc})") from None
            # The request went out whole: a scheduler that ends now (killed, fenced, its run over) may have
            # applied it, so it is not the caller's to apply again on the journal.
            verb = str(body.get("verb") or "request")
            raise Unanswered(f"no answer from the scheduler; the {verb} may have been applied: check "
                             "`wloadctl status` / `wloadctl audit`") from None
    finally:
        sock.close()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionResetError("closed")
        out += chunk
    return bytes(out)
