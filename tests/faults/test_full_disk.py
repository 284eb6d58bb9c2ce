"""A full disk under the state directory mid-run: the scheduler pauses, says why, and goes on when space returns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.inns import ENV, ns_available, ns_command
from tests.integration.helpers import evidence_plan, read_evidence

pytestmark = pytest.mark.ipc

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    if not ns_available():
        pytest.fail("this test gives the state directory a small disk of its own (a tmpfs in a mount "
                    "namespace): it needs util-linux unshare, and root or unprivileged user namespaces")


def scenario(name: str, tmp: Path, mounts: list[tuple[Path | str, str]], cfg: dict) -> dict:
    """Run a scenario of tests/faults/inns.py in its namespaces; return its report."""
    cfg = {**cfg, "report": str(tmp / "report.json")}
    (tmp / "cfg.json").write_text(json.dumps(cfg))
    p = subprocess.run(ns_command(mounts, [sys.executable, "-m", "tests.faults.inns", name, str(tmp / "cfg.json")]),
                       capture_output=True, text=True, timeout=300, env=ENV, cwd=ROOT)
    log = Path(cfg["log"]).read_text() if Path(cfg.get("log", "/nonexistent")).exists() else ""
    assert p.returncode == 0, f"scenario {name} exited {p.returncode}: {p.stderr[-2000:]}\nscheduler: {log[-2000:]}"
    return json.loads((tmp / "report.json").read_text())


def test_a_full_state_dir_pauses_dispatch_and_the_run_goes_on_when_space_returns(tmp_path: Path) -> None:
    # Given a run of 30 jobs in three layers whose state directory is a 16 MiB disk of its own
    # (the jobs' evidence is written elsewhere; their logs go to the small disk)
    sd = tmp_path / "sd"
    sd.mkdir()
    out = tmp_path / "evidence"
    jobs: dict[str, dict] = {}
    for layer in range(3):
        for k in range(10):
            jobs[f"l{layer}_{k}"] = {"sleep": 0.3, **({"depends_on": [f"l{layer - 1}_{k}"]} if layer else {})}
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs)
    text = plan.read_text().replace("; sleep 0.3;", "; echo output of the job; sleep 0.3; echo more output;")
    plan.write_text(text)
    log = tmp_path / "scheduler.log"
    # When the disk fills up once 4 jobs succeeded, and the file is removed while the scheduler is paused
    got = scenario("full_state_dir", tmp_path, [(sd, "16m"), ("/dev/shm", "64m")],
                   {"sd": str(sd), "plan": str(plan), "evidence": str(out), "log": str(log), "fill_after": 4})
    said = log.read_text()
    # Then the scheduler stopped dispatching and said why, in its log and in `status`
    assert "No space left on device" in got["dd"], got["dd"]
    assert f"paused: no space left on device in {sd}" in said, said
    assert got["paused_status"]["paused"] == f"no space left on device in {sd}"
    assert f"PAUSED: no space left on device in {sd}" in got["status_text"], got["status_text"]
    assert got["paused_status"]["counts"].get("READY", 0) + got["paused_status"]["counts"].get("WAITING", 0) > 0
    assert got["still_paused"] and got["alive_while_paused"]
    assert got["starts_while_paused"] == 0
    # and went on by itself when the space came back, to a clean finish
    assert "resumed: space is back in" in said, said
    assert got["rc"] == 0, said[-3000:]
    assert got["run_status"] == "succeeded"
    # with nothing lost and nothing done twice: one success per job in an intact journal, one run each
    assert got["integrity"] == "ok"
    assert got["succeeded"] == {j: 1 for j in jobs}, got["succeeded"]
    evidence = read_evidence(out)
    assert {j: [k for k, _t in evidence[j]] for j in jobs} == {j: ["start", "end"] for j in jobs}
    # and nothing left behind
    assert got["shm"] == [] and got["procs"] == [], (got["shm"], got["procs"])
    assert "Traceback" not in said
