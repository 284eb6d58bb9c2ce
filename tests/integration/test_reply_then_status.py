"""A verb's answer comes once what it did can be read: `status` straight after `hold` says HELD."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import job_states, start, status, stop_proc, wait_for
from wloadctl.client import RunClient

pytestmark = pytest.mark.ipc


def test_status_read_straight_after_a_verb_is_answered_shows_what_the_verb_did(tmp_path: Path,
                                                                                no_ipc_leaks: None) -> None:
    gate, sd = tmp_path / "go", tmp_path / "sd"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "replies", "jobs": {
        "gate": {"command": f"while [ ! -e {gate} ]; do sleep 0.05; done"},
        **{f"w{k}": {"command": "true", "depends_on": ["gate"]} for k in range(50)}}}, sort_keys=False))
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    run_id = ""
    try:
        # Given a live run whose jobs wait behind a running one
        wait_for(lambda: job_states(sd).get("gate") == "RUNNING", what="gate running")
        run_id = status(sd)["run"]
        with RunClient(sd) as client:
            # When an operator holds them and releases them, again and again, reading the run's status at once
            for _ in range(15):
                for verb, want in (("hold", 50), ("release", 0)):
                    rep = client.control(verb, ["w*"])
                    assert rep["ok"], rep
                    # Then the status read straight after the answer already counts what the verb did
                    held = client.status(with_jobs=False)["counts"].get("HELD", 0)
                    assert held == want, f"{verb} answered, status counts {held} HELD"
        gate.touch()
        assert proc.wait(timeout=60) == 0
    finally:
        gate.touch()
        stop_proc(proc, grace=30, run_id=run_id)
