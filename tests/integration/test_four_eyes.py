"""Four eyes through real processes: verbs that need a second person wait as requests; confirmation jobs wait."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli, evidence_plan, job_states, start, stop_proc, wait_for
from wloadctl.ipc.ctlsock import SOCKET_NAME

pytestmark = pytest.mark.ipc

ME = pwd.getpwuid(os.getuid()).pw_name
SECOND = ("daemon", "nobody")
"""Two users every Debian host has: as root, the test acts as each of them (setpriv)."""


def live(sd: Path) -> bool:
    return (sd / SOCKET_NAME).exists()


def test_a_verb_that_needs_a_second_person_waits_and_its_asker_cannot_approve_it(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    go = tmp_path / "go"
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {
        "load": {"command": f"while [ ! -e {go} ]; do sleep 0.1; done"}, "post": {"depends_on": ["load"]}},
        extra={"four_eyes": ["kill"]})
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: live(sd) and job_states(sd).get("load") == "RUNNING", what="load running")
        # When the run's owner kills a job of a plan whose kills need four eyes
        p = cli("kill", "load", "--state-dir", str(sd), "--reason", "stuck")
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith("R1: kill needs a second person"), p.stdout
        # Then it is a pending request, and the job still runs
        pend = json.loads(cli("pending", "--state-dir", str(sd), "--json").stdout)
        assert [(r["id"], r["verb"], r["jobs"], r["user"], r["reason"]) for r in pend["requests"]] == [
            ("R1", "kill", ["load"], ME, "stuck")]
        st = json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)
        assert [r["id"] for r in st["pending"]] == ["R1"] and job_states(sd)["load"] == "RUNNING"
        assert "pending R1: kill load asked by" in cli("status", "--state-dir", str(sd)).stdout
        # When the one who asked approves it: refused, one line
        p = cli("approve", "R1", "--state-dir", str(sd))
        assert p.returncode == 1
        assert p.stderr == f"wloadctl: approve of R1 refused: {ME} asked for it; another person must approve it\n"
        assert job_states(sd)["load"] == "RUNNING"
        # A reject by the one who asked withdraws it; a request settled is not there any more
        p = cli("reject", "R1", "--state-dir", str(sd), "--reason", "it moved")
        assert p.returncode == 0 and p.stdout.startswith("R1 withdrawn"), p.stderr
        assert json.loads(cli("pending", "--state-dir", str(sd), "--json").stdout)["requests"] == []
        p = cli("approve", "R1", "--state-dir", str(sd))
        assert p.returncode == 1 and "no pending request R1" in p.stderr
        # Verbs that need no second person apply at once
        assert cli("skip", "post", "--state-dir", str(sd)).returncode == 0
        go.touch()
        assert proc.wait(60) == 0
    finally:
        stop_proc(proc)
    audit = json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout)
    rows = [(a["user"], a["verb"], a["job"], a["applied"]) for a in audit]
    assert rows[:4] == [(ME, "kill", "load", False), (ME, "approve", "R1", False),
                        (ME, "reject", "R1", True), (ME, "approve", "R1", False)]
    assert audit[0]["outcome"].startswith("pending R1")
    assert cli("audit", "--verify", "--state-dir", str(sd)).returncode == 0


def test_a_confirmation_job_waits_for_approve_and_the_headless_run_then_ends_well(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    plan = evidence_plan(tmp_path / "plan.yaml", out, {
        "extract": {}, "transfer": {"depends_on": ["extract"], "confirm": True},
        "report": {"depends_on": ["transfer"]}})
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        # Given a run whose only job left waits for confirmation
        wait_for(lambda: live(sd) and job_states(sd).get("extract") == "SUCCEEDED"
                 and json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["status"] == "holding",
                 what="the run holding on transfer")
        st = json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)
        assert st["confirm"] == ["transfer"] and proc.poll() is None
        assert "waiting for confirmation (1), started with `wloadctl approve JOB`: transfer" in \
            cli("status", "--state-dir", str(sd)).stdout
        why = json.loads(cli("why", "transfer", "--state-dir", str(sd), "--json").stdout)
        assert "wloadctl approve transfer" in why["reasons"][0]
        assert json.loads(cli("pending", "--state-dir", str(sd), "--json").stdout)["confirm"] == ["transfer"]
        # A release does not let it go
        p = cli("release", "transfer", "--state-dir", str(sd))
        assert p.returncode == 1 and "waits for confirmation" in p.stderr
        # When an operator approves it
        p = cli("approve", "transfer", "--state-dir", str(sd), "--reason", "ledger checked")
        assert p.returncode == 0 and "job 'transfer' confirmed" in p.stdout, p.stderr
        # Then the run finishes with exit 0
        assert proc.wait(60) == 0
    finally:
        stop_proc(proc)
    assert "transfer" in out.read_text() and "report" in out.read_text()
    audit = json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout)
    assert [(a["verb"], a["job"], a["applied"]) for a in audit] == [
        ("release", "transfer", False), ("approve", "transfer", True)]


def test_a_stopped_run_keeps_its_requests_in_the_journal(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {"a": {"exit": 3}, "b": {"depends_on": ["a"]}},
                         extra={"four_eyes": ["set-ok"]})
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 1
    # When set-ok is asked on the journal of the finished run
    p = cli("set-ok", "a", "--state-dir", str(sd), "--reason", "fixed by hand")
    assert p.returncode == 0 and p.stdout.startswith("R1: set-ok needs a second person"), p.stderr
    assert job_states(sd)["a"] == "FAILED"
    pend = json.loads(cli("pending", "--state-dir", str(sd), "--json").stdout)
    assert [r["id"] for r in pend["requests"]] == ["R1"]
    p = cli("approve", "R1", "--state-dir", str(sd))
    assert p.returncode == 1 and "another person must approve it" in p.stderr
    assert job_states(sd)["a"] == "FAILED"


def as_user(user: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`wloadctl ARGS` as another user (setpriv; needs root), of the checkout under test (from `/` the interpreter
    would import the one installed, perhaps another checkout's)."""
    import wloadctl

    gid = pwd.getpwnam(user).pw_gid
    here = str(Path(wloadctl.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (here, ENV.get("PYTHONPATH", "")) if p)
    return subprocess.run(["setpriv", f"--reuid={user}", f"--regid={gid}", "--clear-groups",
                           sys.executable, "-m", "wloadctl", *args], capture_output=True, text=True,
                          timeout=120, env={**ENV, "HOME": "/", "PYTHONPATH": path}, cwd="/")


def _closed_to_others() -> list[Path]:
    """The directories on the way to this interpreter and this checkout that other users cannot cross
    (root's home is 0700 on a fresh host, and the interpreter may live under it)."""
    import wloadctl

    out: list[Path] = []
    for start_at in (Path(sys.executable).resolve(), Path(sys.prefix).resolve(), Path(wloadctl.__file__).resolve()):
        for d in reversed(start_at.parents):
            if not d.stat().st_mode & 0o001 and d not in out:
                out.append(d)
    return out


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory other users can reach (pytest's own are the running user's alone), and the way to the
    interpreter and the checkout opened to them (crossing only, `o+x`) for the test, then closed again."""
    d = Path(tempfile.mkdtemp(prefix="wloadctl-foureyes-", dir="/tmp"))
    d.chmod(0o755)
    opened = _closed_to_others()
    for o in opened:
        o.chmod(o.stat().st_mode & 0o7777 | 0o001)
    try:
        yield d
    finally:
        for o in opened:
            o.chmod(o.stat().st_mode & 0o7776)
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as two other users needs root (setpriv)")
def test_another_users_approve_applies_a_request_and_a_reject_drops_one(shared_dir: Path) -> None:
    asker, approver = SECOND
    plan = evidence_plan(shared_dir / "plan.yaml", shared_dir / "ev", {
        "load": {"sleep": 60}, "post": {"depends_on": ["load"]}},
        extra={"four_eyes": ["kill", "skip"], "roles": {"admin": {"users": [asker, approver]}}})
    plan.chmod(0o644)
    sd = shared_dir / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: live(sd) and job_states(sd).get("load") == "RUNNING", what="load running")
        # Given a kill and a skip asked by one admin
        p = as_user(asker, "kill", "load", "--state-dir", str(sd), "--reason", "stuck")
        assert p.returncode == 0 and p.stdout.startswith("R1:"), p.stderr
        assert as_user(asker, "skip", "post", "--state-dir", str(sd)).returncode == 0
        pend = json.loads(as_user(approver, "pending", "--state-dir", str(sd), "--json").stdout)
        assert [(r["id"], r["user"]) for r in pend["requests"]] == [("R1", asker), ("R2", asker)]
        # When the asker approves: refused; when another admin rejects one and approves the other
        p = as_user(asker, "approve", "R1", "--state-dir", str(sd))
        assert p.returncode == 1 and f"{asker} asked for it" in p.stderr
        assert job_states(sd)["load"] == "RUNNING"
        p = as_user(approver, "reject", "R2", "--state-dir", str(sd), "--reason", "post must run")
        assert p.returncode == 0 and p.stdout.startswith("R2 rejected"), p.stderr
        p = as_user(approver, "approve", "R1", "--state-dir", str(sd))
        assert p.returncode == 0 and "job 'load' is being killed" in p.stdout, p.stderr
        # Then the kill is carried out, and the skip never was
        assert proc.wait(60) == 1
    finally:
        stop_proc(proc)
    states = job_states(sd)
    assert states["load"] == "FAILED" and states["post"] == "UPSTREAM_FAILED"
    audit = json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout)
    assert [(a["user"], a["verb"], a["job"], a["applied"]) for a in audit] == [
        (asker, "kill", "load", False), (asker, "skip", "post", False), (asker, "approve", "R1", False),
        (approver, "reject", "R2", True), (approver, "approve", "R1", True), (approver, "kill", "load", True)]
    assert audit[4]["outcome"] == f"approved R1 (kill load by {asker}) by {approver}"
    assert f"R1 asked by {asker}, approved by {approver}" in audit[5]["reason"]
    assert cli("audit", "--verify", "--state-dir", str(sd)).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root (setpriv)")
def test_on_a_stopped_run_another_admin_approves_from_the_journal(shared_dir: Path) -> None:
    owner = SECOND[0]
    pw = pwd.getpwnam(owner)
    plan = evidence_plan(shared_dir / "plan.yaml", shared_dir / "sd" / "ev", {"a": {"exit": 3}},
                         extra={"four_eyes": ["set-ok"]})
    plan.chmod(0o644)
    sd = shared_dir / "sd"
    sd.mkdir()
    os.chown(sd, pw.pw_uid, pw.pw_gid)
    # Given a finished run of another user, who asks for a set-ok on its journal
    assert as_user(owner, "run", str(plan), "--state-dir", str(sd)).returncode == 1
    p = as_user(owner, "set-ok", "a", "--state-dir", str(sd))
    assert p.returncode == 0 and p.stdout.startswith("R1: set-ok needs a second person"), p.stderr
    # When root (an admin of every run, and another person) approves it
    p = cli("approve", "R1", "--state-dir", str(sd))
    assert p.returncode == 0 and "job 'a' is now SUCCEEDED" in p.stdout, p.stderr
    # Then it is applied and both are audited
    assert job_states(sd)["a"] == "SUCCEEDED"
    audit = json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout)
    assert [(a["user"], a["verb"], a["applied"]) for a in audit] == [
        (owner, "set-ok", False), ("root", "approve", True), ("root", "set-ok", True)]


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root (setpriv)")
def test_on_a_stopped_run_a_viewer_of_the_plans_roles_is_refused_by_role_on_a_journal_it_cannot_write(
        shared_dir: Path) -> None:
    viewer = SECOND[1]
    plan = evidence_plan(shared_dir / "plan.yaml", shared_dir / "sd" / "ev", {"a": {"exit": 3}},
                         extra={"four_eyes": ["set-ok"], "roles": {"viewer": {"users": [viewer]}}})
    plan.chmod(0o644)
    sd = shared_dir / "sd"
    # Given a finished run of root's with a set-ok waiting for a second person
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 1
    assert cli("set-ok", "a", "--state-dir", str(sd)).stdout.startswith("R1:")
    # When a viewer by the plan's roles approves it on the journal, which it may read but not write
    p = as_user(viewer, "approve", "R1", "--state-dir", str(sd))
    # Then it is refused by its role, in one line, and nothing changed
    assert p.returncode == 1 and p.stderr == f"wloadctl: approve needs the admin role; {viewer} has viewer\n", p.stderr
    assert "pending R1: set-ok a asked by" in as_user(viewer, "status", "--state-dir", str(sd)).stdout
    assert job_states(sd)["a"] == "FAILED"
    assert [r["id"] for r in json.loads(cli("pending", "--state-dir", str(sd), "--json").stdout)["requests"]] == ["R1"]


def ledger_plan(d: Path, gate: Path) -> Path:
    """load -> post_ledger (idempotent: false, its reruns and retries need four eyes); `other` waits for `gate`."""
    return evidence_plan(d / "plan.yaml", d / "ev", {
        "load": {}, "post_ledger": {"depends_on": ["load"], "idempotent": False, "four_eyes": ["rerun", "retry"]},
        "other": {"gate": gate}})


def runs_of(out: Path, job: str) -> int:
    return sum(1 for line in out.read_text().splitlines() if line.startswith(f"{job} start"))


def test_a_rerun_that_reaches_a_four_eyes_job_downstream_or_by_a_glob_is_a_request(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    gate = tmp_path / "go"
    plan = ledger_plan(tmp_path, gate)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: live(sd) and job_states(sd).get("post_ledger") == "SUCCEEDED", what="post_ledger done")
        # The job itself needs a second person, as before
        p = cli("rerun", "post_ledger", "--state-dir", str(sd))
        assert p.returncode == 0 and p.stdout.startswith("R1: rerun needs a second person:"), p.stdout + p.stderr
        # So does a rerun of its upstream with the downstream, and a glob that matches it; nothing is rerun
        p = cli("rerun", "load", "--downstream", "--state-dir", str(sd), "--reason", "bad feed")
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith("R2: rerun needs a second person (it reaches post_ledger, whose four_eyes names "
                                   "rerun): another admin's `wloadctl approve R2` applies it"), p.stdout
        p = cli("rerun", "post_*", "--state-dir", str(sd))
        assert p.returncode == 0 and p.stdout.startswith("R3: rerun needs a second person"), p.stdout
        pend = cli("pending", "--state-dir", str(sd)).stdout
        assert "pending R2: rerun load with downstream (reaching post_ledger) asked by" in pend, pend
        assert "pending R3: rerun post_* (reaching post_ledger) asked by" in pend, pend
        assert job_states(sd) == {"load": "SUCCEEDED", "post_ledger": "SUCCEEDED", "other": "RUNNING"}
        # The asker may not approve the whole of it either
        p = cli("approve", "R2", "--state-dir", str(sd))
        assert p.returncode == 1 and "another person must approve it" in p.stderr
        # A rerun of the upstream alone keeps post_ledger's result: applied at once
        p = cli("rerun", "load", "--state-dir", str(sd))
        assert p.returncode == 0 and "job 'load' will run again" in p.stdout, p.stdout
        wait_for(lambda: runs_of(tmp_path / "ev", "load") == 2, what="load run again")
        gate.touch()
        assert proc.wait(60) == 0
    finally:
        gate.touch()
        stop_proc(proc)
    assert runs_of(tmp_path / "ev", "post_ledger") == 1
    # The request's row keeps all it asks for (a new scheduler's book reads it back)
    audit = json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout)
    assert audit[1]["outcome"] == ("pending R2: needs another person's `wloadctl approve R2` (with downstream); four "
                                   "eyes of post_ledger")


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as two other users needs root (setpriv)")
def test_another_admins_approve_of_a_rerun_with_its_downstream_reruns_the_four_eyes_job_too(shared_dir: Path) -> None:
    asker, approver = SECOND
    gate = shared_dir / "go"
    plan = evidence_plan(shared_dir / "plan.yaml", shared_dir / "ev", {
        "load": {}, "post_ledger": {"depends_on": ["load"], "idempotent": False, "four_eyes": ["rerun", "retry"]},
        "other": {"gate": gate}}, extra={"roles": {"admin": {"users": [asker, approver]}}})
    plan.chmod(0o644)
    sd = shared_dir / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: live(sd) and job_states(sd).get("post_ledger") == "SUCCEEDED", what="post_ledger done")
        # Given a rerun with its downstream asked by one admin (through the live scheduler)
        p = as_user(asker, "rerun", "load", "--downstream", "--state-dir", str(sd))
        assert p.returncode == 0 and p.stdout.startswith("R1: rerun needs a second person (it reaches post_ledger"), \
            p.stdout + p.stderr
        # When another admin approves it
        p = as_user(approver, "approve", "R1", "--state-dir", str(sd))
        assert p.returncode == 0, p.stderr
        # Then both run again, post_ledger after load
        wait_for(lambda: runs_of(shared_dir / "ev", "post_ledger") == 2 and job_states(sd)["post_ledger"] ==
                 "SUCCEEDED", what="post_ledger run again")
        gate.touch()
        assert proc.wait(60) == 0
    finally:
        gate.touch()
        stop_proc(proc)
    assert runs_of(shared_dir / "ev", "load") == 2
    audit = json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout)
    assert [(a["user"], a["verb"], a["job"], a["applied"]) for a in audit] == [
        (asker, "rerun", "load", False), (approver, "approve", "R1", True), (approver, "rerun", "load", True)]
    assert audit[1]["outcome"] == (f"approved R1 (rerun load with downstream (reaching post_ledger) by {asker}) by "
                                   f"{approver}")


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root (setpriv)")
def test_on_a_stopped_run_a_rerun_reaching_a_four_eyes_job_waits_and_its_approve_covers_it(shared_dir: Path) -> None:
    owner = SECOND[0]
    pw = pwd.getpwnam(owner)
    sd = shared_dir / "sd"
    sd.mkdir()
    os.chown(sd, pw.pw_uid, pw.pw_gid)
    plan = evidence_plan(shared_dir / "plan.yaml", sd / "ev", {
        "load": {}, "post_ledger": {"depends_on": ["load"], "idempotent": False, "four_eyes": ["rerun", "retry"]}})
    plan.chmod(0o644)
    # Given a finished run of another user, who asks for a rerun of load with its downstream on its journal
    assert as_user(owner, "run", str(plan), "--state-dir", str(sd)).returncode == 0
    p = as_user(owner, "rerun", "load", "--downstream", "--state-dir", str(sd))
    assert p.returncode == 0 and p.stdout.startswith("R1: rerun needs a second person (it reaches post_ledger"), \
        p.stdout + p.stderr
    assert job_states(sd) == {"load": "SUCCEEDED", "post_ledger": "SUCCEEDED"}
    # When root (another person) approves it: both wait to run again, and the resume runs them
    p = cli("approve", "R1", "--state-dir", str(sd))
    assert p.returncode == 0 and "job 'load' will run again with 1 downstream job(s)" in p.stdout, p.stdout + p.stderr
    assert job_states(sd) == {"load": "READY", "post_ledger": "WAITING"}
    assert as_user(owner, "resume", "--state-dir", str(sd)).returncode == 0
    assert runs_of(sd / "ev", "post_ledger") == 2
