"""`wloadctl scheduler --standby` with a server journal and a broker: before it watches (a journal it cannot reach,
no run), and as `status --journal` shows it beside the active of its host."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.integration.helpers import ENV, cli, wait_for
from tests.remote.conftest import NatsServer, free_port


def test_a_standby_whose_journal_cannot_be_reached_fails_at_once_in_one_line(
        tmp_path: Path, nats_server: NatsServer) -> None:
    journal = f"postgresql://postgres@127.0.0.1:{free_port()}/x"
    # (Well within the minute a standby waits for a run: an unreachable server is not a run yet to start.)
    p = cli("scheduler", "--standby", "--journal", journal, "--broker", nats_server.url,
            "--state-dir", str(tmp_path / "sd"), timeout=30)
    assert p.returncode == 3, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(f"wloadctl: cannot reach the journal {journal}")


def test_a_standby_on_another_host_given_no_broker_says_what_it_lacks_in_one_line(
        tmp_path: Path, pg_url: str) -> None:
    """(The README's `scheduler --standby --broker URL --journal URL` without its --broker, on a host with no run of
    its own, said "no run found" and to start one: the journal had the run.)"""
    p = cli("scheduler", "--standby", "--journal", pg_url, env={"WLOADCTL_HOME": str(tmp_path / "host-b")},
            timeout=30)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("wloadctl: a standby without --broker watches a scheduler of this host"), p.stderr
    assert "give the run's --broker URL too" in p.stderr, p.stderr


def test_a_standby_with_no_run_to_watch_says_once_that_it_waits_for_one(
        tmp_path: Path, nats_server: NatsServer, pg_url: str) -> None:
    # Given a journal with no run yet, and a standby started against it
    log = tmp_path / "standby.out"
    with open(log, "wb") as out:
        standby = subprocess.Popen([sys.executable, "-m", "wloadctl", "scheduler", "--standby", "--journal", pg_url,
                                    "--broker", nats_server.url, "--state-dir", str(tmp_path / "sd"),
                                    "--heartbeat-interval", "0.1"], stdout=out, stderr=subprocess.STDOUT, env=ENV)
    try:
        # Then it says that it waits for a run, once
        wait_for(lambda: "waiting up to" in log.read_text(), timeout=30, what="the standby saying it waits")
    finally:
        standby.send_signal(signal.SIGTERM)
        code = standby.wait(30)
    said = log.read_text().splitlines()
    assert len([x for x in said if "no running run in the journal yet" in x]) == 1, said
    assert code == 0, said


def test_status_from_the_journal_names_the_schedulers_host_and_a_standby_of_the_same_host(
        tmp_path: Path, nats_server: NatsServer, pg_url: str) -> None:
    # Given a run and a standby on this host, each with a state directory of its own, sharing the journal
    gate = tmp_path / "go"
    plan = tmp_path / "p.yaml"
    plan.write_text(f"name: here\njobs:\n  wait: {{command: 'while [ ! -e {gate} ]; do sleep 0.05; done'}}\n")
    common = ["--journal", pg_url, "--broker", nats_server.url, "--heartbeat-interval", "0.1"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir",
                                       str(tmp_path / "a"), "--quiet", *common], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, env=ENV))
        wait_for(lambda: cli("status", "--journal", pg_url, "--json").returncode == 0, timeout=60, what="the run")
        standby = subprocess.Popen([sys.executable, "-m", "wloadctl", "scheduler", "--standby", "--state-dir",
                                    str(tmp_path / "b"), *common], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env=ENV)
        procs.append(standby)
        # When an operator asks the journal for the run's status
        st = wait_for(lambda: (s := json.loads(cli("status", "--journal", pg_url, "--json", check=True).stdout))
                      ["standby_pid"] and s, timeout=60, what="the standby's pid in the status")
        # Then it names the scheduler's host, and the standby's pid
        assert st["live"] and st["scheduler_host"] == socket.gethostname(), st
        assert st["standby_pid"] == standby.pid, st
    finally:
        gate.touch()
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
