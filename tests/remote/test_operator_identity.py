"""Operator verbs through the broker: the caller is the broker user the server authenticated, never the name it sends.

A real nats-server with users and per-user permissions on the operator subjects (the
configuration wloadctl.remote.operators documents), a real run whose scheduler holds the
broker, and the real CLI as each broker user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import ENV, wait_for
from tests.remote.conftest import NatsServer, serve
from wloadctl.client import RunClient
from wloadctl.remote.broker import BrokerOptions, Subjects
from wloadctl.remote.link import BrokerLink

pytestmark = pytest.mark.ipc

PASSWORDS = {"wloadctl": "sched-pw", "alice": "alice-pw", "bob": "bob-pw"}
CONFIG = """
authorization {
  users = [
    {user: wloadctl, password: sched-pw}
    {user: alice, password: alice-pw, permissions: {publish: ["wl.op.*.alice"], subscribe: ["_INBOX.>"]}}
    {user: bob, password: bob-pw, permissions: {publish: ["wl.op.*.bob"], subscribe: ["_INBOX.>"]}}
  ]
}
"""


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server whose users may each publish only on their own operator subjects."""
    yield from serve(tmp_path, CONFIG)


def wl(*args: str, user: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real CLI, connecting to the broker as `user` (its password from the environment)."""
    env = dict(ENV)
    extra: list[str] = []
    if user is not None:
        env["WLOADCTL_BROKER_PASSWORD"] = PASSWORDS[user]
        extra = ["--broker-user", user]
    return subprocess.run([sys.executable, "-m", "wloadctl", *args, *extra], capture_output=True, text=True,
                          timeout=timeout, env=env)


class LiveRun:
    """A run with a job on a pool (so its scheduler holds the broker) and a long job to steer."""

    def __init__(self, tmp: Path, url: str, user: str | None) -> None:
        self.sd = tmp / "sd"
        plan = tmp / "plan.yaml"
        plan.write_text(yaml.safe_dump({"name": "ops", "roles": {"operator": {"broker_users": ["alice"]}},
                                        "jobs": {"a": {"command": "sleep 120"},
                                                 "b": {"command": "true", "depends_on": ["a"]},
                                                 "away": {"command": "true", "pool": "etl"}}}))
        env = dict(ENV)
        args = [sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(self.sd), "--broker", url]
        if user is not None:
            env["WLOADCTL_BROKER_PASSWORD"] = PASSWORDS[user]
            args += ["--broker-user", user]
        self.out = open(tmp / "run.out", "w+")
        self.proc = subprocess.Popen(args, stdout=self.out, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.url = url

    def verb(self, *args: str, user: str | None) -> subprocess.CompletedProcess[str]:
        return wl(*args, "--state-dir", str(self.sd), "--broker", self.url, "--json", user=user)

    def run_id(self) -> str:
        return str(json.loads(wl("status", "--state-dir", str(self.sd), "--json").stdout)["run"])

    def audit(self) -> list[tuple[str, str, str, bool]]:
        rows = json.loads(wl("audit", "--state-dir", str(self.sd), "--json").stdout)
        return [(r["user"], r["verb"], r["job"], r["applied"]) for r in rows]

    def close(self) -> str:
        """Kill the long job, cancel the rest from this host (the owner, by the socket); wait; its output."""
        if self.proc.poll() is None:
            wl("kill", "a", "--state-dir", str(self.sd), "--reason", "test over")
            wl("cancel", "--state-dir", str(self.sd), "--reason", "test over")
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        return text


def _live(run: LiveRun) -> bool:
    p = wl("status", "--state-dir", str(run.sd), "--json")
    return p.returncode == 0 and bool(json.loads(p.stdout).get("live"))


def test_broker_users_act_as_themselves_and_cannot_act_as_another(tmp_path: Path, auth_server: NatsServer,
                                                                   no_ipc_leaks: None) -> None:
    # Given a run whose scheduler connects as the installation's user; alice is an operator, bob is not
    run = LiveRun(tmp_path, auth_server.url, "wloadctl")
    try:
        wait_for(lambda: _live(run), timeout=60, what="the run live")
        # When bob holds a job (whatever his request says his name is)
        bob = run.verb("hold", "b", "--reason", "bob tries", user="bob")
        # Then he is refused as the broker user he is, a viewer
        rep = json.loads(bob.stdout)
        assert not rep["ok"] and rep["error"] == "hold needs the operator role; broker:bob has viewer", rep
        # When bob sends alice's verb on alice's subject, claiming to be alice
        with BrokerLink.open(BrokerOptions(auth_server.url, user="bob", password=PASSWORDS["bob"]),
                             name="forger") as link:
            body = json.dumps({"verb": "hold", "jobs": ["b"], "reason": "forged", "user": "alice@hosta",
                               "id": "f1"}).encode()
            rid = run.run_id()
            # (each waits out its whole timeout, side by side; a request delivered late would still reach the
            # run before the verbs below, and its claim to be alice would show in the event log checked at the end)
            with ThreadPoolExecutor(2) as both:
                asks = [both.submit(link.request, subject, body, 1.5)
                        for subject in (Subjects().op_user(rid, "alice"), Subjects().op(rid))]
                forged, anon = (ask.result() for ask in asks)
        # Then the server never delivers it: no answer, nothing done
        assert forged is None and anon is None
        # and the console of each broker user sees the role the scheduler gives them
        for user, role in (("bob", "viewer"), ("alice", "operator"), ("wloadctl", "admin")):
            client = RunClient(run.sd, BrokerOptions(auth_server.url, user=user, password=PASSWORDS[user]))
            try:
                who = client.whoami()
            finally:
                client.close()
            assert (who["user"], who["role"]) == (f"broker:{user}", role), who
        # When alice holds it
        alice = run.verb("hold", "b", "--reason", "alice checks", user="alice")
        rep = json.loads(alice.stdout)
        assert rep["ok"] and rep["results"][0][1], rep
        # and the installation's own user (the run's owner on the broker) releases it
        owner = json.loads(run.verb("release", "b", user="wloadctl").stdout)
        assert owner["ok"], owner
    finally:
        output = run.close()
    # Then the audit names each broker user, and nothing in alice's name but her own hold
    acts = run.audit()
    assert ("broker:bob", "hold", "b", False) in acts, (acts, output)
    assert ("broker:alice", "hold", "b", True) in acts
    assert ("broker:wloadctl", "release", "b", True) in acts
    assert not any(r[0].startswith("alice") or "forged" in r for r in acts), acts
    # and what bob's request claimed is kept in the event log as a claim only
    events = [json.loads(line) for line in (run.sd / "events.jsonl").read_text().splitlines()]
    bobs = [e for e in events if e.get("event") == "action" and e.get("user") == "broker:bob"]
    assert bobs and all(e["claimed"].endswith("@" + os.uname().nodename) for e in bobs), bobs


def test_without_broker_authentication_a_caller_is_an_unauthenticated_viewer(
        tmp_path: Path, nats_server: NatsServer, no_ipc_leaks: None) -> None:
    # Given a run through a broker that authenticates nobody
    run = LiveRun(tmp_path, nats_server.url, None)
    try:
        wait_for(lambda: _live(run), timeout=60, what="the run live")
        # When a caller through it holds a job
        held = json.loads(run.verb("hold", "b", user=None).stdout)
    finally:
        output = run.close()
    # Then it is nobody the broker vouches for, a viewer, whatever name it sent
    host = os.uname().nodename
    assert not held["ok"] and held["role"] == "viewer", (held, output)
    assert held["error"] == f"hold needs the operator role; unauthenticated@{host} has viewer"
    assert (f"unauthenticated@{host}", "hold", "b", False) in run.audit()


def test_the_caller_comes_from_the_subject_only_when_the_server_authenticates() -> None:
    from wloadctl.remote.operators import broker_identity, caller

    op = "wl.op.r1"
    assert caller("wl.op.r1.alice", op, True, "mallory@h1") == ("alice", "broker:alice")
    assert caller("wl.op.r1.alice", op, False, "mallory@h1") == (None, "unauthenticated@h1")
    assert caller("wl.op.r1", op, True, "alice@h 1;x") == (None, "unauthenticated@h1x")
    assert broker_identity(BrokerOptions("nats://u:p@127.0.0.1:4222")) == "u"
    assert broker_identity(BrokerOptions("nats://sometoken@127.0.0.1:4222")) is None
    assert broker_identity(BrokerOptions("nats://127.0.0.1:4222", token="t")) is None
    assert broker_identity(BrokerOptions("nats://127.0.0.1:4222", user="ana", password="x")) == "ana"


def test_a_credentials_file_names_its_user(tmp_path: Path) -> None:
    import base64

    from wloadctl.remote.operators import broker_identity

    claims = base64.urlsafe_b64encode(json.dumps({"name": "carol", "sub": "UABC"}).encode()).rstrip(b"=")
    creds = tmp_path / "carol.creds"
    creds.write_bytes(b"-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ." + claims + b".c2ln\n"
                      b"------END NATS USER JWT------\n")
    assert broker_identity(BrokerOptions("nats://127.0.0.1:4222", creds_file=str(creds))) == "carol"


def test_a_verb_a_scheduler_took_and_did_not_answer_is_never_taken_for_one_nobody_heard(
        nats_server: NatsServer) -> None:
    from wloadctl.errors import Unanswered
    from wloadctl.remote.operators import OperatorLink

    options = BrokerOptions(nats_server.url)
    with BrokerLink.open(options) as listener:
        ops = OperatorLink(options)
        try:
            # Nobody listens for the run's verbs: no answer, and nothing was applied anywhere
            assert ops.ask("r1", {"verb": "hold", "jobs": ["a"], "reason": ""}, timeout=1.0) is None
            # A scheduler takes the run's verbs and goes silent (killed, frozen) before it answers
            listener.subscribe(Subjects(options.prefix).op("r1") + ".>")
            listener.subscribe(Subjects(options.prefix).op("r1"))
            wait_for(lambda: listener.connected, what="the listener connected")
            assert listener.flush()  # (the server has the subscriptions before the verb is asked)
            # Then a verb that changes the run may have been applied: said so, never None (applied again offline)
            with pytest.raises(Unanswered):
                ops.ask("r1", {"verb": "hold", "jobs": ["a"], "reason": ""}, timeout=1.0)
            # while a read is only unanswered
            assert ops.ask("r1", {"verb": "why", "jobs": ["a"], "reason": ""}, timeout=1.0) is None
        finally:
            ops.close()
