"""Shared test fixtures: small plans built in code, a journal opened on both stores, and a check that no IPC object
of ours is left behind."""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from wloadctl.core.plan import JobSpec, Plan, RetryPolicy
from wloadctl.core.states import DepKind, SlaTier

if TYPE_CHECKING:
    from wloadctl.store import Store

Opener = Callable[..., "Store"]


def make_plan(spec: dict[str, dict], resources: dict[str, int] | None = None, name: str = "t") -> Plan:
    """A plan from {id: {deps, kinds, sla, priority, retry, resources, idempotent, type, pool, agent, expected, cpu,
    memory}}."""
    jobs = {}
    for jid, s in spec.items():
        deps = s.get("deps", {})
        if isinstance(deps, dict):
            ids = tuple(deps)
            kinds = tuple(DepKind[v.upper()] for v in deps.values())
            kinds_t = None if all(k == DepKind.SUCCESS for k in kinds) else kinds
        else:
            ids, kinds_t = tuple(deps), None
        jobs[jid] = JobSpec(
            id=jid, command=s.get("command", "true"), depends_on=ids, dep_kinds=kinds_t,
            type=s.get("type", "shell"), sla=SlaTier[s.get("sla", "standard").upper()],
            priority=s.get("priority", 0), timeout=s.get("timeout"), retry=s.get("retry", RetryPolicy()),
            resources=tuple(s.get("resources", {}).items()), idempotent=s.get("idempotent", True),
            pool=s.get("pool"), agent=s.get("agent"), expected=s.get("expected"), cpu=s.get("cpu", 0.0),
            memory=s.get("memory", 0),
        )
    return Plan(name, jobs, resources or {})


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile the project's bytecode once, up front: the suite starts hundreds of wloadctl processes, and
    where nothing wrote it (PYTHONDONTWRITEBYTECODE set, a fresh checkout) each would compile every module of
    the package again (about a fifth of the suite's time)."""
    import compileall

    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller compiled it before it started the workers
    root = Path(__file__).resolve().parent.parent
    for pkg in ("wloadctl", "tui", "tests"):
        try:
            compileall.compile_dir(root / pkg, quiet=2)
        except OSError:
            pass  # a read-only checkout: the processes compile as they go


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """How the suite's workers share it (pytest-xdist's `loadgroup`): a module goes whole to one worker (its
    module fixtures are made once), and the tests of `tests/remote` all to one worker, first.

    Their agents take names (n1, n2) that tests use again, each agent on a "host" of its own namespaces; but the
    host's cgroup tree is one for all of them, and an agent's executors group their jobs under its name. Two of
    those tests side by side would end each other's jobs. Put first, they run beside the rest of the suite.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    remote = [item for item in items if item.nodeid.startswith("tests/remote/")]
    rest = [item for item in items if not item.nodeid.startswith("tests/remote/")]
    items[:] = remote + rest
    for item in items:
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group("remote" if module.startswith("tests/remote/") else module))


@contextmanager
def _turn(shared_dir: Path, exclusive: bool) -> Iterator[None]:
    """Hold the suite's quota lock: shared for a test, alone for an `exclusive` one.

    The user's message-queue quota is one for every process of the user: a test that fills it (to see fifty
    runs fit, or the refusal past it) fails if the other worker's runs hold queues meanwhile. A test waiting to
    run alone holds the turnstile, so the other worker's next tests wait for it rather than keep it out.
    """
    with open(shared_dir / "turnstile.lock", "a") as gate, open(shared_dir / "quota.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def quota_turn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """On the suite's workers (pytest-xdist), an `exclusive` test runs while no other test does (see _turn)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield  # one process runs every test: nothing runs beside this one
        return
    # The workers' temporary directories are the session's, side by side: the locks live beside them.
    with _turn(tmp_path_factory.getbasetemp().parent, request.node.get_closest_marker("exclusive") is not None):
        yield


def _ours() -> set[str]:
    names: set[str] = set()
    prefix = f"wloadctl.{os.getuid()}."
    for d in ("/dev/mqueue", "/dev/shm"):
        try:
            names |= {f"{d}/{n}" for n in os.listdir(d) if n.startswith(prefix)}
        except OSError:
            pass
    return names


def _run_ids_under(root: Path) -> set[str]:
    ids: set[str] = set()
    for db in root.rglob("journal.db"):
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                ids |= {r[0] for r in con.execute("SELECT run_id FROM runs")}
            finally:
                con.close()
        except sqlite3.Error:
            pass
    return ids


@pytest.fixture
def no_ipc_leaks(tmp_path: Path) -> Iterator[None]:
    """Fail a test whose runs (those journaled under its tmp_path) leave a queue or segment behind."""
    yield
    ids = _run_ids_under(tmp_path)
    left = sorted(n for n in _ours() if any(f".{rid}." in n for rid in ids))
    assert not left, f"IPC objects left behind: {left}"


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server to make scratch databases on (see tests/pgserver.py): never skipped."""
    from tests.pgserver import shared_server_url

    url, embedded = shared_server_url(tmp_path_factory.mktemp("pg"))
    try:
        yield url
    finally:
        if embedded is not None:
            embedded.cleanup()


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A journal URL of a database of this test alone (CREATE DATABASE wl_test_<random>, dropped after)."""
    from wloadctl.store.postgres import scratch_database

    with scratch_database(pg_server_url, "wl_test") as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens the journal of one state directory: SQLite in it, or a scratch PostgreSQL database (the test runs on
    both). Every store it opened is closed after the test."""
    from wloadctl.store import Store

    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    opened: list[Store] = []

    def open_(**kw: object) -> Store:
        st = Store.open(tmp_path / "state", journal=url, **kw)  # type: ignore[arg-type]
        opened.append(st)
        return st

    yield open_
    for st in opened:
        st.close()
