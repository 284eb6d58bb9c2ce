"""The control desk's four eyes: requests by one identity, settled by another, all in the audit trail."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tests.conftest import make_plan
from wloadctl.access import Role, parse_roles
from wloadctl.core.commands import Reply
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import JobExitedEvent, RunStartedEvent
from wloadctl.core.plan import Plan
from wloadctl.core.states import JobState as S
from wloadctl.ipc import ctlsock
from wloadctl.procs.control import ControlDesk
from wloadctl.procs.runctx import EventLog, RunContext
from wloadctl.store import Store


def desk(tmp_path: Path, roles_four_eyes: frozenset[str] = frozenset(), plan: Plan | None = None,
         **plan_keys: Any) -> tuple[ControlDesk, Store, list[dict[str, Any]]]:
    plan = plan or dataclasses.replace(make_plan({"a": {}, "b": {"deps": ["a"]}}, name="t"), **plan_keys)
    core = SchedulerCore(plan, slots=1)
    core.handle(RunStartedEvent(0.0))
    sd = tmp_path / "sd"
    store = Store.open(sd)
    run = store.create_run("r1", "t", "p.yaml", "d", "", list(plan.jobs), "2026-01-01", 1.0)
    ctx = RunContext(run, plan, sd, 1, EventLog(sd / "events.jsonl", "r1"))
    sock = ctlsock.ControlSocket.listen(sd)
    roles = parse_roles({}, "roles.yaml")
    roles.four_eyes |= roles_four_eyes
    d = ControlDesk(sock, core, ctx, store, roles, owner_uid=4000)
    answers: list[dict[str, Any]] = []
    # Answers are kept here instead of going to a connection.
    d._send = lambda req, body: answers.append(body)  # type: ignore[method-assign]
    return d, store, answers


def ask(d: ControlDesk, user: str, verb: str, *jobs: str, reason: str = "", downstream: bool = False) -> None:
    d._apply({"verb": verb, "jobs": list(jobs), "user": user, "reason": reason, "downstream": downstream}, 5000,
             Role.ADMIN, 2.0)
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
        # (a is still queued: b's skip waits for it, and b then ends SKIPPED without running)
        assert S(d.core.state[1]) is S.WAITING and d.core.forcing[1].verb == "skip" and not d.book.requests
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


def ledger_plan() -> Plan:
    """load -> post_ledger (idempotent: false, four_eyes: [rerun, retry]), and post_fx beside it."""
    plan = make_plan({"load": {}, "post_ledger": {"deps": ["load"], "idempotent": False}, "post_fx": {}}, name="t")
    jobs = {**plan.jobs, "post_ledger": dataclasses.replace(plan.jobs["post_ledger"], four_eyes=("rerun", "retry"))}
    return dataclasses.replace(plan, jobs=jobs)


def ran(d: ControlDesk) -> None:
    """Every job of the run ran and succeeded."""
    core = d.core
    for _ in range(core.n):
        for i in range(core.n):
            if S(core.state[i]) in (S.QUEUED, S.RUNNING):
                core.handle(JobExitedEvent(i, core.attempt[i], 0, 0, 1.0))
    assert all(S(s) is S.SUCCEEDED for s in core.state)


def test_a_rerun_reaching_a_four_eyes_job_downstream_or_by_a_glob_waits_for_a_second_person(tmp_path: Path) -> None:
    d, store, answers = desk(tmp_path, plan=ledger_plan())
    try:
        ran(d)
        # The job itself: a request, as before
        ask(d, "alice", "rerun", "post_ledger")
        assert answers[-1]["pending"]["id"] == "R1"
        # Upstream of it with its downstream: a request naming it, and nothing rerun meanwhile
        ask(d, "alice", "rerun", "load", downstream=True, reason="bad feed")
        assert answers[-1]["message"].startswith("R2: rerun needs a second person (it reaches post_ledger, whose "
                                                 "four_eyes names rerun): another admin's `wloadctl approve R2`")
        assert answers[-1]["pending"]["four_eyes_of"] == ["post_ledger"]
        assert all(S(s) is S.SUCCEEDED for s in d.core.state)
        # A glob that matches it
        ask(d, "alice", "rerun", "post_*")
        assert answers[-1]["pending"]["id"] == "R3"
        # Upstream of it alone (its downstream keeps its result), and a job beside it: applied at once
        ask(d, "alice", "rerun", "post_fx")
        assert answers[-1]["ok"] and "pending" not in answers[-1]
        # The book shows all a request asks for, as the journal keeps it
        again = ControlDesk.__new__(ControlDesk)
        ControlDesk.__init__(again, d.ctl, d.core, d.ctx, store, parse_roles({}, "roles.yaml"), owner_uid=4000)
        assert [r.describe() for r in again.pending()] == [
            "rerun post_ledger by alice", "rerun load with downstream (reaching post_ledger) by alice",
            "rerun post_* (reaching post_ledger) by alice"]
        # When another admin approves R2: load and post_ledger both run again
        ask(d, "bob", "approve", "R2")
        assert answers[-1]["ok"] and answers[-1]["approved"] == "R2"
        # (post_fx, rerun before, holds the run's one slot)
        assert [S(d.core.state[d.core.index[j]]).name for j in ("load", "post_ledger")] == ["READY", "WAITING"]
    finally:
        rows = close(d, store)
    assert rows[-2:] == [("bob", "approve", "R2", True), ("bob", "rerun", "load", True)]


def test_an_approve_is_refused_when_the_verb_would_now_reach_a_four_eyes_job_the_request_did_not_name(
        tmp_path: Path) -> None:
    d, store, answers = desk(tmp_path, plan=ledger_plan())
    try:
        ran(d)
        ask(d, "alice", "rerun", "post_*", reason="fx again")
        assert answers[-1]["pending"]["four_eyes_of"] == ["post_ledger"]
        # When post_fx comes to need four eyes for its rerun too (a plan changed on resume, say)
        fx = d.core.index["post_fx"]
        d.core.specs[fx] = dataclasses.replace(d.core.specs[fx], four_eyes=("rerun",))
        ask(d, "bob", "approve", "R1")
        assert answers[-1]["error"] == (
            "approve of R1 refused: rerun post_* (reaching post_ledger) by alice would now also act on post_fx, "
            "whose four_eyes name rerun, which R1 did not name when asked; `wloadctl reject R1` and ask again")
        assert list(d.book.requests) == ["R1"] and all(S(s) is S.SUCCEEDED for s in d.core.state)
    finally:
        close(d, store)
