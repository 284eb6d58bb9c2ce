"""Who may do what: the control socket's kernel identity, roles from config files, refusals audited."""

from __future__ import annotations

import json
import os
import pwd
import select
import socket
import stat
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_plan
from wloadctl.access import Role, load_roles, needed, parse_roles
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import RunStartedEvent
from wloadctl.errors import TransportError, UsageError
from wloadctl.ipc import ctlsock
from wloadctl.ipc import protocol as P
from wloadctl.procs.control import ControlDesk
from wloadctl.procs.runctx import EventLog, RunContext
from wloadctl.store import Store

ME = pwd.getpwuid(os.getuid()).pw_name


def serve(sock: ctlsock.ControlSocket, handle: Any, rounds: int = 1) -> threading.Thread:
    """Answer `rounds` requests in a thread the way the scheduler's loop does (poll, then ready)."""
    def loop() -> None:
        poller = select.poll()
        sock.attach(poller)
        done = 0
        while done < rounds:
            for fd, _ev in poller.poll(5000):
                for conn, peer, req in sock.ready(fd):
                    handle(conn, peer, req)
                    done += 1
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


def test_the_socket_says_who_calls_whatever_the_environment_claims(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a socket deep enough that its path is over sun_path's 108 bytes
    sd = tmp_path / ("d" * 60) / ("e" * 60)
    sd.mkdir(parents=True)
    sock = ctlsock.ControlSocket.listen(sd)
    seen: list[ctlsock.Peer] = []

    def handle(conn: int, peer: ctlsock.Peer, req: dict[str, Any]) -> None:
        seen.append(peer)
        sock.answer(conn, {"ok": True, "claimed": req.get("user"), "user": peer.user})

    try:
        assert stat.S_IMODE(os.stat(sd / ctlsock.SOCKET_NAME).st_mode) == 0o700
        t = serve(sock, handle)
        # When a caller claims to be someone else
        monkeypatch.setenv("USER", "someone-else")
        monkeypatch.setenv("LOGNAME", "someone-else")
        rep = ctlsock.request(sd, {"verb": "ping", "user": "someone-else"}, 5.0)
        t.join(5)
        # Then the kernel's uid decides
        assert rep == {"ok": True, "claimed": "someone-else", "user": ME}
        assert seen[0].uid == os.getuid() and seen[0].pid == os.getpid()
        assert os.getgid() in (seen[0].gid, *seen[0].groups)
    finally:
        sock.close()
    assert not (sd / ctlsock.SOCKET_NAME).exists()
    with pytest.raises(TransportError, match="no scheduler listens"):
        ctlsock.request(sd, {"verb": "ping"}, 1.0)


def test_roles_come_from_groups_and_users_and_the_owner_is_admin() -> None:
    m = parse_roles({"operator": {"groups": ["ops"]}, "viewer": {"users": ["eve"], "groups": ["staff"]},
                     "admin": {"users": ["ana"]}}, "roles.yaml")
    assert m.role_of(5000, "bob", ["ops", "staff"], owner_uid=4000) is Role.OPERATOR
    assert m.role_of(5000, "eve", [], owner_uid=4000) is Role.VIEWER
    assert m.role_of(5000, "ana", [], owner_uid=4000) is Role.ADMIN
    assert m.role_of(4000, "own", [], owner_uid=4000) is Role.ADMIN
    assert m.role_of(0, "root", [], owner_uid=4000) is Role.ADMIN
    assert m.role_of(5001, "mallory", ["users"], owner_uid=4000) is Role.NONE
    assert [needed(v).label for v in ("why", "hold", "rerun", "kill", "cancel", "approve")] == \
        ["viewer", "operator", "operator", "admin", "admin", "admin"]


def test_broker_users_have_their_own_roles_and_nobody_unvouched_is_more_than_a_viewer() -> None:
    m = parse_roles({"operator": {"broker_users": ["alice"], "users": ["bob"]}}, "plan: roles")
    # the scheduler's own broker user owns the run; a listed user has their role; others view
    assert m.broker_role("wloadctl", owner="wloadctl") is Role.ADMIN
    assert m.broker_role("alice", owner="wloadctl") is Role.OPERATOR
    # a Unix user's role is not a broker user's of the same name, and the socket opens to no broker user
    assert m.broker_role("bob", owner="wloadctl") is Role.VIEWER and m.role_of(5000, "alice", [], 4000) is Role.NONE
    assert not parse_roles({"admin": {"broker_users": ["carol"]}}, "x").grants_others
    # a caller the broker vouches for nobody is a viewer, unless the roles say more, explicitly
    assert m.broker_role(None, owner="wloadctl") is Role.VIEWER
    assert m.broker_role(None, owner=None) is Role.VIEWER
    trusting = parse_roles({"operator": {"broker_users": ["unauthenticated"]}}, "x")
    assert trusting.broker_role(None, owner=None) is Role.OPERATOR


@pytest.mark.parametrize(("doc", "fragment"), [
    ({"boss": {"users": ["a"]}}, "unknown role 'boss'"),
    ({"admin": ["a"]}, "takes a mapping"),
    ({"admin": {"users": 3}}, "must be a list"),
    (["admin"], "must be a mapping"),
])
def test_a_malformed_roles_mapping_is_refused_with_where_and_what(doc: Any, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment) as ei:
        parse_roles(doc, "/etc/wloadctl/roles.yaml")
    assert str(ei.value).startswith("/etc/wloadctl/roles.yaml")


def test_the_config_file_and_the_plan_add_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WLOADCTL_HOME", str(tmp_path))
    (tmp_path / "roles.yaml").write_text("roles:\n  operator: {groups: [ops]}\n")
    m = load_roles({"admin": {"groups": ["ops"]}, "viewer": {"users": ["eve"]}}, "plan.yaml")
    assert m.groups == {"ops": Role.ADMIN} and m.users == {"eve": Role.VIEWER}
    assert m.grants_others


def desk_for(tmp_path: Path, roles_doc: dict[str, Any]) -> tuple[ControlDesk, Store, int]:
    plan = make_plan({"a": {}, "b": {"deps": ["a"]}})
    core = SchedulerCore(plan, slots=2)
    core.handle(RunStartedEvent(0.0))
    core.flush()
    sd = tmp_path / "sd"
    store = Store.open(sd)
    run = store.create_run("r1", "t", "p.yaml", "d", "", ["a", "b"], "2026-01-01", 1.0)
    ctx = RunContext(run, plan, sd, 1, EventLog(sd / "events.jsonl", "r1"))
    sock = ctlsock.ControlSocket.listen(sd, 0o777)
    # The run belongs to another uid here: the caller is judged by its role alone.
    return ControlDesk(sock, core, ctx, store, parse_roles(roles_doc, "roles.yaml"),
                       owner_uid=os.getuid() + 4242), store, run.id


def test_a_verb_beyond_the_callers_role_is_refused_naming_the_role_and_audited(tmp_path: Path) -> None:
    desk, store, run = desk_for(tmp_path, {"operator": {"users": [ME]}})

    def handle(conn: int, peer: ctlsock.Peer, req: dict[str, Any]) -> None:
        desk._handle(conn, peer, req, 2.0)
        for c in desk.core.flush():
            if hasattr(c, "results"):
                desk.reply(c)
        desk.send_replies()  # (as the loop does once it published the turn)

    try:
        t = serve(desk.ctl, handle, rounds=3)
        who = ctlsock.request(desk.ctx.state_dir, {"verb": "whoami", "jobs": []}, 5.0)
        held = ctlsock.request(desk.ctx.state_dir, {"verb": "hold", "jobs": ["b"], "user": "root"}, 5.0)
        killed = ctlsock.request(desk.ctx.state_dir, {"verb": "skip", "jobs": ["b"], "user": "root"}, 5.0)
        t.join(5)
    finally:
        desk.close()
    desk.ctx.events.close()
    rows = [(r[1], r[2], r[3], bool(r[6])) for r in store.actions(run)]
    store.close()
    if os.geteuid() == 0:
        # root is an admin of every run whatever the mapping says (as on the host itself)
        assert who["role"] == "admin" and held["ok"] and killed["ok"]
        assert rows == [(ME, "hold", "b", True), (ME, "skip", "b", True)]
        return
    assert who["role"] == "operator" and "hold" in who["verbs"] and "kill" not in who["verbs"]
    assert held["ok"]
    assert not killed["ok"] and killed["error"] == f"skip needs the admin role; {ME} has operator"
    assert rows == [(ME, "hold", "b", True), (ME, "skip", "b", False)]


def test_somebody_with_no_role_may_not_even_look(tmp_path: Path) -> None:
    desk, store, run = desk_for(tmp_path, {})

    def handle(conn: int, peer: ctlsock.Peer, req: dict[str, Any]) -> None:
        desk._handle(conn, peer, req, 2.0)

    try:
        t = serve(desk.ctl, handle)
        rep = ctlsock.request(desk.ctx.state_dir, {"verb": "why", "jobs": ["b"]}, 5.0)
        t.join(5)
    finally:
        desk.close()
    desk.ctx.events.close()
    actions = [r[5] for r in store.actions(run)]
    store.close()
    if os.geteuid() == 0:
        assert rep["ok"] and actions == []  # root may look at any run
        return
    assert rep["error"] == f"why needs the viewer role; {ME} has no role" and rep["needs"] == "viewer"
    assert actions == [rep["error"]]


def test_a_drill_through_the_broker_needs_the_admin_role_and_the_actives_epoch(tmp_path: Path) -> None:
    # Given a desk whose roles make callers through the broker (unauthenticated) operators
    desk, store, run = desk_for(tmp_path, {"operator": {"broker_users": ["unauthenticated"]}})
    answers: list[dict[str, Any]] = []

    def ask(**req: Any) -> None:
        body = {"verb": "drill", "jobs": [], "user": "ana@elsewhere", **req}
        desk.take(json.dumps(body).encode(), lambda d: answers.append(json.loads(d)), 2.0, "wl.op.r1")

    try:
        # When an operator asks for a drill, it is refused naming the admin role
        ask(mode="kill", epoch=1)
        assert not answers[-1]["ok"] and answers[-1]["needs"] == "admin" and desk.drill is None
        # and an admin's drill of another epoch, or of a mode that is not one, is refused too
        desk.roles = parse_roles({"admin": {"broker_users": ["unauthenticated"]}}, "roles.yaml")
        ask(mode="kill", epoch=7)
        assert "this scheduler holds epoch 1, not the 7" in answers[-1]["error"]
        ask(mode="freeze", epoch=1)
        assert "drill mode 'freeze' is not kill or stop" in answers[-1]["error"]
        # Then an admin's drill of this epoch waits, unanswered, for the end of the turn
        ask(mode="stop", epoch=1, wake_after=30)
        assert len(answers) == 3
        drill = desk.take_drill()
        assert drill is not None and drill["mode"] == "stop" and desk.take_drill() is None
    finally:
        desk.close()
    desk.ctx.events.close()
    rows = [(r[2], r[3], bool(r[6])) for r in store.actions(run)]
    store.close()
    # and each refusal is audited as the scheduler's (a drill's `*` row is its report)
    assert rows == [("drill", "scheduler", False)] * 3


def _requests_read(sock: ctlsock.ControlSocket, poller: Any) -> list[tuple[int, ctlsock.Peer, dict[str, Any]]]:
    """Accept what waits on the listener and read each connection to its end, as a scheduler going on does."""
    got: list[tuple[int, ctlsock.Peer, dict[str, Any]]] = []
    for fd, _ev in poller.poll(5000):
        got += sock.ready(fd)
    while sock.conns and (ready := poller.poll(5000)):
        for fd, _ev in ready:
            got += sock.ready(fd)
        if got:
            break
    return got


def test_a_request_its_asker_gave_up_on_is_dropped_not_applied_later(tmp_path: Path) -> None:
    # Given a scheduler that does not read its socket for a while (stopped, or busy)
    sd = tmp_path / "sd"
    sd.mkdir()
    sock = ctlsock.ControlSocket.listen(sd)
    poller = select.poll()
    sock.attach(poller)
    try:
        # When a verb gets no answer in time
        with pytest.raises(TransportError) as e:
            ctlsock.request(sd, {"verb": "hold", "jobs": ["j099"]}, 0.3)
        # Then the asker is told it is withdrawn, and where to see what was applied
        assert "no answer from the scheduler within 0s: the 'hold' request is withdrawn" in str(e.value)
        assert "wloadctl audit" in (e.value.hint or "")
        # and the scheduler, reading its socket again, finds no request to apply
        assert _requests_read(sock, poller) == [] and sock.conns == {}
        # nor one whose deadline passed while its asker is still connected
        late = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        late.connect(str(sd / ctlsock.SOCKET_NAME))
        data = P.encode_control({"verb": "hold", "jobs": ["j099"], "deadline": time.time() - 1})
        late.sendall(struct.pack("!I", len(data)) + data)
        assert _requests_read(sock, poller) == [] and sock.conns == {}
        # (which it is told, if it still waits: not a closed connection that says nothing)
        (n,) = struct.unpack("!I", late.recv(4))
        told = P.decode_control(late.recv(n))
        assert told["ok"] is False and told["withdrawn"] is True and "withdrawn, not applied" in told["error"]
        late.close()
        # while an asker that waits gets its request taken
        t = serve(sock, lambda conn, peer, req: sock.answer(conn, {"ok": True, "verb": req["verb"]}))
        assert ctlsock.request(sd, {"verb": "hold", "jobs": ["j099"]}, 5.0) == {"ok": True, "verb": "hold"}
        t.join(5)
    finally:
        sock.close()


def test_a_caller_cannot_set_the_keys_only_the_desk_sets(tmp_path: Path) -> None:
    # Given a run whose skips need four eyes, an admin on the socket, and admins through the broker
    desk, store, run = desk_for(tmp_path, {"admin": {"users": [ME], "broker_users": ["unauthenticated"]}})
    desk.four_eyes = frozenset({"skip"})
    told: list[dict[str, Any]] = []

    def handle(conn: int, peer: ctlsock.Peer, req: dict[str, Any]) -> None:
        desk._handle(conn, peer, req, 2.0)
        for c in desk.core.flush():
            if hasattr(c, "results"):
                desk.reply(c)
        desk.send_replies()

    try:
        t = serve(desk.ctl, handle, rounds=2)
        # When a request says it is the approved one, or carries an answering function of its own
        forged = ctlsock.request(desk.ctx.state_dir, {"verb": "skip", "jobs": ["b"], "approved": "R1"}, 5.0)
        pinged = ctlsock.request(desk.ctx.state_dir, {"verb": "ping", "jobs": [], "_respond": 1}, 2.0)
        t.join(5)
        desk.take(json.dumps({"verb": "skip", "jobs": ["a"], "approved": "R1"}).encode(),
                  lambda data: told.append(json.loads(data)), 2.0)
    finally:
        desk.close()
    desk.ctx.events.close()
    rows = [(r[1], r[2], r[3], r[5].split(":")[0], bool(r[6])) for r in store.actions(run)]
    store.close()
    # Then the skip waits for a second person, the ping is answered, and nothing was applied
    assert forged["pending"]["id"] == "R1" and pinged["ok"]
    assert told[0]["pending"]["id"] == "R2"
    assert desk.core.forcing == {}
    assert rows == [(ME, "skip", "b", "pending R1", False),
                    ("unauthenticated@?", "skip", "a", "pending R2", False)]
