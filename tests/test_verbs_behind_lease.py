"""Operator verbs of a run whose lease a live scheduler holds: they go to it or are refused, never written to the
journal behind its back; and a state directory named alone is read in the server journal its journal.url names."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.integration.helpers import ENV, reap_orphans, stop_proc, wait_for
from tests.remote.nodes import host_command, unshare_available
from tests.test_pg_reads import GatedRun, gated  # noqa: F401  (the fixture)
from wloadctl.ipc.ctlsock import SOCKET_NAME
from wloadctl.ipc.shm import remove_run_objects

pytestmark = pytest.mark.ipc


def _hidden(run: GatedRun, hostname: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """`wloadctl ARGS` in namespaces of its own (its host name when given), the run's state directory hidden."""
    if not unshare_available():
        pytest.fail("this test needs util-linux unshare, and root or user namespaces", pytrace=False)
    script = f"mount -t tmpfs tmpfs {run.state_dir} && exec \"$@\""
    return subprocess.run(host_command(["sh", "-c", script, "op", sys.executable, "-m", "wloadctl", *args],
                                       hostname=hostname), capture_output=True, text=True, timeout=60, env=run.env)


def _state(run: GatedRun, job: str) -> str:
    st = json.loads(run.wl("status", "--journal", run.url, "--json", "--all").stdout)
    return next(j["state"] for j in st["jobs"] if j["job"] == job)


@pytest.mark.parametrize("hostname", [None, "hostc"], ids=["same-hostname", "other-host"])
def test_a_verb_whose_live_holder_cannot_be_reached_is_refused_naming_it_and_not_journaled(
        gated: GatedRun, hostname: str | None) -> None:  # noqa: F811
    # Given a live run of a PostgreSQL journal, and an operator whose namespaces cannot reach its scheduler's
    # control socket (on a host of the same name, or of another)
    pid = json.loads(gated.wl("status", "--journal", gated.url, "--json").stdout)["scheduler_pid"]
    # When they hold a job with the journal alone
    p = _hidden(gated, hostname, "hold", "end", "--journal", gated.url)
    # Then the verb is refused in one line, naming the scheduler holding the run and how to reach it
    assert p.returncode == 2, (p.stdout, p.stderr)
    first = p.stderr.splitlines()[0]
    assert f"is held by scheduler pid {pid} on " in first and "lease until" in first, p.stderr
    assert "--broker" in p.stderr
    # And the journal was not changed behind the scheduler's back: the job still waits, and runs
    assert _state(gated, "end") == "WAITING"
    gated.finish()
    assert _state(gated, "end") == "SUCCEEDED"


def test_a_state_directory_named_alone_is_read_in_the_journal_of_its_journal_url(gated: GatedRun) -> None:  # noqa: F811
    # Given a live run of a PostgreSQL journal, started with --state-dir S --journal URL
    run_id = json.loads(gated.wl("status", "--journal", gated.url, "--json").stdout)["run"]
    # When its operator reads it by its state directory alone
    p = gated.wl("status", "--state-dir", str(gated.state_dir), "--json")
    # Then it is read in that journal (its journal.url)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["run"] == run_id


@pytest.mark.parametrize(("login", "said"), [
    ("ops:wrong@", "refused the credentials (user 'ops' and its password)"),
    ("sekrit@", "refused the credentials (the token)"),
])
def test_credentials_in_the_broker_url_are_named_as_given_when_refused(
        tmp_path: Path, login: str, said: str) -> None:
    from tests.integration.helpers import cli
    from tests.remote.conftest import serve

    # Given a broker that wants user ops's password
    servers = serve(tmp_path, "authorization {\n  users = [\n    {user: ops, password: ops-pw}\n  ]\n}\n")
    server = next(servers)
    try:
        # When a command gives wrong credentials in the broker's URL
        url = server.url.replace("nats://", f"nats://{login}")
        p = cli("agents", "--broker", url, timeout=60)
    finally:
        servers.close()
    # Then it is told the broker refused them (the password and the token never shown)
    assert p.returncode == 3, p.stderr
    assert f"wloadctl: the broker at {server.url} {said}" in p.stderr, p.stderr
    assert "wrong" not in p.stderr and "sekrit" not in p.stderr


def test_a_run_killed_9_resumes_by_its_state_directory_alone(gated: GatedRun) -> None:  # noqa: F811
    # Given a run of a PostgreSQL journal started with --state-dir S --journal URL, its scheduler killed -9
    run_id = json.loads(gated.wl("status", "--journal", gated.url, "--json").stdout)["run"]
    gated.proc.kill()
    gated.proc.wait(10)
    gated.gate.touch()
    # When its operator resumes it by its state directory alone (once the dead scheduler's lease ran out)
    def resumed() -> subprocess.CompletedProcess[str] | None:
        p = gated.wl("resume", "--state-dir", str(gated.state_dir), "--quiet")
        return p if p.returncode == 0 or "no unfinished run" in p.stderr else None

    try:
        p = wait_for(resumed, timeout=30, what="the resume")
        # Then the run is resumed in that journal and ends
        assert p.returncode == 0, p.stderr
    finally:
        # (a run never resumed leaves its executors waiting for it: gone with its queues)
        reap_orphans(run_id, timeout=2.0)
        remove_run_objects(run_id)
    st = json.loads(gated.wl("status", "--journal", gated.url, "--json").stdout)
    assert (st["run"], st["status"]) == (run_id, "succeeded"), st


def test_a_verb_right_after_its_scheduler_of_this_host_was_killed_9_is_applied_on_the_journal(
        gated: GatedRun) -> None:  # noqa: F811
    # (it was refused until the dead scheduler's lease ran out, telling the operator to go to "that host": this one)
    # Given a run of a PostgreSQL journal whose scheduler of this host was killed -9 a moment ago, its lease
    # still in force (kept so here, for as long as the verb takes)
    run_id = json.loads(gated.wl("status", "--journal", gated.url, "--json").stdout)["run"]
    gated.proc.kill()
    gated.proc.wait(10)
    with psycopg.connect(gated.url, autocommit=True) as c:
        c.execute("UPDATE runs SET lease_until = %s WHERE run_id = %s", (time.time() + 60, run_id))
    try:
        # When its operator holds a job by the run's state directory
        p = gated.wl("hold", "end", "--state-dir", str(gated.state_dir))
        # Then the hold is applied to the journal, as it is once the lease ran out
        assert p.returncode == 0, p.stderr
        assert "held" in p.stdout and "no control socket" not in p.stderr, (p.stdout, p.stderr)
        assert _state(gated, "end") == "HELD"
        # And `status` calls the run interrupted, not live elsewhere
        st = json.loads(gated.wl("status", "--state-dir", str(gated.state_dir), "--json").stdout)
        assert st["status"] == "interrupted" and not st["live"], st
    finally:
        # (a run never resumed leaves its executors waiting for it: gone with its queues)
        reap_orphans(run_id, timeout=2.0)
        remove_run_objects(run_id)


def test_verbs_reach_a_standby_of_this_host_that_took_the_run_over_in_a_state_directory_of_its_own(
        tmp_path: Path, pg_url: str) -> None:
    from tests.remote.conftest import serve

    servers = serve(tmp_path)
    broker = next(servers).url
    sd, sb, gate = tmp_path / "a", tmp_path / "b", tmp_path / "go"
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: took\njobs:\n  wait: {{command: 'while [ ! -e {gate} ]; do sleep 0.05; done'}}\n"
                    "  end: {command: 'echo done', depends_on: [wait]}\n")
    env = {k: v for k, v in ENV.items() if k not in ("WLOADCTL_STATE_DIR", "WLOADCTL_JOURNAL")}
    beat = ["--heartbeat-interval", "0.1", "--heartbeat-timeout", "0.6"]
    wl = [sys.executable, "-m", "wloadctl"]
    active = subprocess.Popen([*wl, "run", str(plan), "--state-dir", str(sd), "--journal", pg_url, "--broker", broker,
                               "--executors", "1", "--quiet", *beat], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)
    standby = subprocess.Popen([*wl, "scheduler", "--standby", "--state-dir", str(sb), "--journal", pg_url,
                                "--broker", broker, *beat], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*wl, *args], capture_output=True, text=True, timeout=60, env=env)

    def status() -> dict:
        return json.loads(run("status", "--journal", pg_url, "--json", "--all").stdout)

    run_id = ""
    try:
        wait_for(lambda: status()["counts"].get("RUNNING"), timeout=60, what="`wait` running")
        run_id = status()["run"]
        # Given a standby of this host, in a state directory of its own, that took the run over
        wait_for(lambda: (sb / "standby.pid").exists() or list(sb.glob("standby*")), timeout=30, what="standby")
        active.kill()
        active.wait(10)
        wait_for(lambda: status().get("scheduler_pid") == standby.pid, timeout=30, what="the takeover")
        # (claimed in the journal a moment before it listens: a verb in between is refused, not lost)
        wait_for(lambda: (sb / SOCKET_NAME).exists(), timeout=30, what="the new active listening")
        # When an operator holds a job with the journal alone
        p = run("hold", "end", "--journal", pg_url)
        # Then the live scheduler applied it (not the journal behind its back)
        assert p.returncode == 0, p.stderr
        assert "no live scheduler" not in p.stdout + p.stderr
        # And the new active's operator releases it by its own state directory, and the live scheduler runs it
        p = run("release", "end", "--state-dir", str(sb), "--journal", pg_url)
        assert p.returncode == 0, p.stderr
        assert "released" in p.stdout and "no live scheduler" not in p.stdout + p.stderr, p.stdout
        gate.touch()
        wait_for(lambda: status()["status"] == "succeeded", timeout=60, what="the run's end")
    finally:
        gate.touch()
        for proc in (active, standby):
            stop_proc(proc, grace=30)
        if run_id:
            reap_orphans(run_id, timeout=2.0)
            remove_run_objects(run_id)
        servers.close()
