"""Shared test fixtures: small plans built in code, and a check that no IPC object of ours is left behind."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from wloadctl.core.plan import JobSpec, Plan, RetryPolicy
from wloadctl.core.states import DepKind, SlaTier


def make_plan(spec: dict[str, dict], resources: dict[str, int] | None = None, name: str = "t") -> Plan:
    """A plan from {id: {deps, kinds, sla, priority, retry, resources, idempotent, type}}."""
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
        )
    return Plan(name, jobs, resources or {})


def _ours() -> set[str]:
    names: set[str] = set()
    prefix = f"wloadctl.{os.getuid()}."
    for d in ("/dev/mqueue", "/dev/shm"):
        try:
            names |= {f"{d}/{n}" for n in os.listdir(d) if n.startswith(prefix)}
        except OSError:
            pass
    return names


@pytest.fixture
def no_ipc_leaks() -> Iterator[None]:
    """Fail a test that leaves a queue or segment of ours behind."""
    before = _ours()
    yield
    left = _ours() - before
    if left:
        # Another process's short-lived objects may pass by; a leak stays.
        time.sleep(1.0)
        left &= _ours()
    assert not left, f"IPC objects left behind: {sorted(left)}"
