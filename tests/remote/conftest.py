"""Fixtures of the remote tests: a real `nats-server -js` per test, on a free port, with its own store."""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wloadctl.remote.broker import BrokerOptions, Subjects, ensure_streams
from wloadctl.remote.link import BrokerLink
from wloadctl.remote.pulling import Msg
from wloadctl.remote.server import MISSING, NatsServer, free_port, nats_server_binary

__all__ = ["NatsServer", "free_port", "nats_server_binary"]


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A started nats-server with JetStream on a free port, stopped and reaped at teardown."""
    yield from serve(tmp_path)


def serve(tmp_path: Path, config: str | None = None) -> Iterator[NatsServer]:
    """Start a nats-server (with `config` as its configuration file, when given), yield it, stop and reap it."""
    binary = nats_server_binary()
    if binary is None:
        pytest.fail(MISSING, pytrace=False)
    store = tmp_path / "jetstream"
    store.mkdir()
    conf = None
    if config is not None:
        conf = tmp_path / "nats.conf"
        conf.write_text(config)
    server = NatsServer(binary, store, free_port(), config=conf)
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
