"""The control desk's four eyes: requests by one identity, settled by another, all in the audit trail."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tests.conftest import make_plan
from wloadctl.access import Role, parse_roles
from wloadctl.core.commands import Reply
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import RunStartedEvent
from wloadctl.core.states import JobState as S
from wloadctl.ipc import ctlsock
from wloadctl.procs.control import ControlDesk
from wloadctl.procs.runctx import EventLog, RunContext
from wloadctl.store import Store


def desk(tmp_path: Path, roles_four_eyes: frozenset[str] = frozenset(),
         **plan_keys: Any) -> tuple[ControlDesk, Store, list[dict[str, Any]]]:
    plan = dataclasses.replace(make_plan({"a": {}, "b": {"deps": ["a"]}}, name="t"), **plan_keys)
    core = SchedulerCore(plan, slots=1)
    core.handle(RunStartedEvent(0.0))
    sd = tmp_path / "sd"
    store = Store.open(sd)
    run = store.create_run("r1", "t", "p.yaml", "d", "", ["a", "b"], "2026-01-01", 1.0)
    ctx = RunContext(run, plan, sd, 1, EventLog(sd / "events.jsonl", "r1"))
    sock = ctlsock.ControlSocket.listen(sd)
    roles = parse_roles({}, "roles.yaml")
    roles.four_eyes |= roles_four_eyes
    d = ControlDesk(sock, core, ctx, store, roles, owner_uid=4000)
    answers: list[dict[str, Any]] = []
    # Answers are kept here instead of going to a connection.
    d._send = lambda req, body: answers.append(body)  # type: ignore[method-assign]
    return d, store, answers


def ask(d: ControlDesk, user: str, verb: str, *jobs: str, reason: str = "") -> None:
    d._apply({"verb": verb, "jobs": list(jobs), "user": user, "reason": reason}, 5000, Role.ADMIN, 2.0)
    for c in d.core.flush():
        if isinstance(c, Reply):
            d.reply(c)
    d.send_replies()


def close(d: ControlDesk, store: Store) -> list[tuple[str, str, str, bool]]:
    d.close()
    d.ctx.events.close()
    rows = [(r[1], r[2], r[3], bool(r[6])) for r in store.actions(d.ctx.run.id)]
    store.close()
    return rows


def test_a_request_waits_its_asker_may_not_approve_and_another_admin_applies_it(tmp_path: Path) -> None:
    d, store, answers = desk(tmp_path, four_eyes=("skip",))
    try:
        ask(d, "alice", "skip", "b", reason="not today")
        assert answers[-1]["pending"]["id"] == "R1" and S(d.core.state[1]) is S.WAITING
        ask(d, "alice", "approve", "R1")
        assert answers[-1]["error"] == "approve of R1 refused: alice asked for it; another person must approve it"
        ask(d, "alice@host2", "approve", "R1")  # the same person through the broker
        assert not answers[-1]["ok"]
        ask(d, "bob", "approve", "R1")
        assert answers[-1]["ok"] and answers[-1]["approved"] == "R1"
        assert S(d.core.state[1]) is S.SKIPPED and not d.book.requests
        # A request settled cannot be approved again
        ask(d, "carol", "approve", "R1")
        assert answers[-1]["error"].startswith("no pending request R1")
    finally:
        rows = close(d, store)
    assert rows == [("alice", "skip", "b", False), ("alice", "approve", "R1", False),
                    ("alice@host2", "approve", "R1", False), ("bob", "approve", "R1", True),
                    ("bob", "skip", "b", True), ("carol", "approve", "R1", False)]


def test_a_rejected_request_is_dropped_and_a_new_desk_rebuilds_the_open_ones(tmp_path: Path) -> None:
    d, store, answers = desk(tmp_path, four_eyes=("hold", "cancel"))
    try:
        ask(d, "alice", "hold", "b")
        ask(d, "alice", "cancel")
        ask(d, "bob", "reject", "R1")
        assert answers[-1]["message"] == "R1 rejected: hold b by alice will not be applied"
        assert S(d.core.state[1]) is S.WAITING and list(d.book.requests) == ["R2"]
        # When the scheduler restarts, the journal gives the open requests back
        again = ControlDesk.__new__(ControlDesk)
        ControlDesk.__init__(again, d.ctl, d.core, d.ctx, store, parse_roles({}, "roles.yaml"), owner_uid=4000)
        assert [(r.id, r.verb, r.user) for r in again.pending()] == [("R2", "cancel", "alice")]
        ask(d, "alice", "hold", "a")
        assert answers[-1]["pending"]["id"] == "R3"
    finally:
        close(d, store)


def test_the_roles_file_may_name_four_eyes_verbs_for_every_run(tmp_path: Path, monkeypatch: Any) -> None:
    import pytest

    from wloadctl.access import load_roles
    from wloadctl.errors import UsageError

    monkeypatch.setenv("WLOADCTL_HOME", str(tmp_path))
    (tmp_path / "roles.yaml").write_text("roles:\n  admin: {users: [ana]}\nfour_eyes: [kill, set-ok]\n")
    assert load_roles().four_eyes == {"kill", "set-ok"}
    (tmp_path / "roles.yaml").write_text("four_eyes: [kill, nuke]\n")
    with pytest.raises(UsageError, match=r"roles.yaml: four_eyes: unknown verb 'nuke'"):
        load_roles()
    # A desk whose roles name set-ok makes it a request
    d, store, answers = desk(tmp_path, roles_four_eyes=frozenset({"set-ok"}))
    try:
        ask(d, "alice", "set-ok", "b")
        assert answers[-1]["pending"]["verb"] == "set-ok" and S(d.core.state[1]) is S.WAITING
    finally:
        close(d, store)
