"""Fixtures of the remote tests: a real `nats-server -js` per test, on a free port, with its own store."""

from __future__ import annotations

import json
import select
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import cli, wait_for
from tests.remote.nodes import Node, unshare_available
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


@pytest.fixture
def nodes(tmp_path: Path, nats_server: NatsServer) -> Iterator[dict[str, Node]]:
    """Two agents of pool `etl`, n1 and n2, each on its own host; stopped at teardown whatever happened."""
    if not unshare_available():
        pytest.fail("these tests put each agent in its own namespaces: they need util-linux unshare, and root "
                    "or unprivileged user namespaces", pytrace=False)
    made: dict[str, Node] = {}
    try:
        for name in ("n1", "n2"):
            made[name] = Node(name, nats_server.url, tmp_path / name, ["etl"]).start()
        wait_for(lambda: all(_alive(nats_server.url, n) for n in made), timeout=30, what="both agents beating")
        yield made
    finally:
        for n in made.values():
            n.stop()


def _alive(url: str, name: str) -> bool:
    """Whether the broker's heartbeats show agent `name` ALIVE."""
    p = cli("agents", "--broker", url, "--json")
    return p.returncode == 0 and any(a["agent"] == name and a["state"] == "ALIVE" for a in json.loads(p.stdout))
