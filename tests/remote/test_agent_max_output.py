"""`max_output` of a job run on an agent: the cap goes in its payload to the agent's executors, which stop the job
and cut its log there, and the scheduler hears why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, wait_for
from tests.remote.conftest import NatsServer, _alive
from tests.remote.nodes import Node
from tests.remote.test_agent_runs import no_run_left, plan_file, run_bg
from tests.test_max_output import ENDLESS, note_line

pytestmark = pytest.mark.ipc
__all__ = ["no_run_left"]


def test_a_job_on_an_agent_past_its_max_output_is_stopped_there_and_fails_saying_why(
        tmp_path: Path, nats_server: NatsServer) -> None:
    # Given an agent of pool etl, and a runaway job capped at 16 KiB sent to it
    plan = plan_file(tmp_path / "p.yaml", tmp_path / "evidence", {
        "runaway": {"pool": "etl", "command": ENDLESS, "max_output": "16KiB"}})
    sd = tmp_path / "sd"
    node = Node("n1", nats_server.url, tmp_path / "n1", ["etl"]).start()
    try:
        wait_for(lambda: _alive(nats_server.url, "n1"), timeout=30, what="n1 beating")
        # When it runs
        proc = run_bg(plan, sd, nats_server.url)
        out, err = proc.communicate(timeout=120)
    finally:
        node.stop()
    # Then it failed for its output, and its log, as the agent kept it, holds the cap and the note
    assert proc.returncode == 1, err
    assert json.loads(out)["jobs"] == {"runaway": "FAILED"}
    st = json.loads(subprocess.run([sys.executable, "-m", "wloadctl", "status", "--state-dir", str(sd), "--json"],
                                   capture_output=True, text=True, timeout=60, env=ENV).stdout)
    assert st["jobs"][0]["reason"] == "output passed max_output 16.0 KiB: stopped"
    (log,) = (tmp_path / "n1").glob("logs/*/runaway.1.log")
    data = log.read_bytes()
    assert data.endswith(note_line(16 * 1024)) and len(data) <= 16 * 1024 + 1 + len(note_line(16 * 1024))
