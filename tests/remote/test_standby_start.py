"""`wloadctl scheduler --standby` from another host before it watches anything: a journal it cannot reach, no run."""

from __future__ import annotations

import signal
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
