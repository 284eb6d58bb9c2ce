"""A follower handed back while no scheduler ran: the resume counts the hand-back once, and the report of it
still in the response queue never settles (nor requeues) the copy the resumed scheduler sends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import ENV, cli, evidence_plan, read_evidence, start, status, stop_proc, wait_for
from wloadctl.ipc import protocol as P
from wloadctl.procs.localpool import read_results, result_journals
from wloadctl.procs.recovery import AttemptReports


def _records(sd: Path, run_id: str) -> list[P.ResultRecord]:
    """Every record the run's executors journaled."""
    return [r for _ex, _pid, path in result_journals(sd, run_id) for r in read_results(path)]


@pytest.mark.ipc
def test_a_follower_handed_back_while_the_scheduler_was_dead_runs_once_after_resume(
        tmp_path: Path, no_ipc_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    out, gate, sd, pidfile = tmp_path / "ev", tmp_path / "a.go", tmp_path / "sd", tmp_path / "scheduler.pid"
    # s0 and s1 are short (chains go out from then on); b follows a, which kills the scheduler as it starts
    # (b is sent and unstarted then), and runs on until the gate opens.
    plan = evidence_plan(tmp_path / "p.yaml", out, {
        "s0": {}, "s1": {"depends_on": ["s0"]}, "a": {"depends_on": ["s1"], "gate": str(gate)},
        "b": {"depends_on": ["a"], "idempotent": False}})
    spec = yaml.safe_load(plan.read_text())
    spec["jobs"]["a"]["command"] = (f"while [ ! -e {pidfile} ]; do sleep 0.01; done; kill -9 $(cat {pidfile}); "
                                    + spec["jobs"]["a"]["command"])
    plan.write_text(yaml.safe_dump(spec, sort_keys=False))
    # A follower goes back after the job before it has run this long: well after the kill.
    monkeypatch.setitem(ENV, "WLOADCTL_HAND_BACK", "0.5")
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "1")
    try:
        pidfile.write_text(str(proc.pid))
        proc.wait(60)
        h = cli("history", "b", "--state-dir", str(sd)).stdout
        assert "follows a" in h and "handed back" not in h, h
        run_id = str(status(sd)["run"])
        ids = (sd / "jobs" / f"{run_id}.ids").read_text().split()
        a, b = ids.index("a"), ids.index("b")
        # With no scheduler, the executor hands b back behind the long a (its report waits in the response
        # queue), then a ends: both are journaled before the resume.
        wait_for(lambda: any(r.task == b and r.flags & P.FLAG_RETURNED for r in _records(sd, run_id)),
                 what="b handed back")
        gate.touch()
        wait_for(lambda: any(r.task == a and r.kind == P.RES_EXITED for r in _records(sd, run_id)),
                 what="a's end journaled")
        p = cli("resume", "--state-dir", str(sd), "--json", timeout=60)
    finally:
        gate.touch()
        stop_proc(proc)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"s0": "SUCCEEDED", "s1": "SUCCEEDED", "a": "SUCCEEDED", "b": "SUCCEEDED"}
    # b (idempotent: false) ran once, after a; the hand-back was applied once, by the resume's recovery.
    ev = read_evidence(out)
    assert [k for k, _ in ev["b"]] == ["start", "end"], ev["b"]
    assert ev["b"][0][1] >= ev["a"][-1][1]
    h = cli("history", "b", "--state-dir", str(sd)).stdout
    moves = h.split("\n", 1)[1]  # (the first line counts the dispatches handed back too)
    assert moves.count("handed back unstarted") == 1 and "lost before start" not in h, h
    assert h.count("READY -> QUEUED") == 1 and h.count("-> RUNNING") == 1, h
    assert "1 handed back unstarted" in p.stderr, p.stderr


def test_a_hand_back_is_the_last_word_on_an_attempt_only_while_no_executor_holds_it() -> None:
    def rec(kind: int, pid: int, started: float, flags: int = 0, epoch: int = 1) -> P.ResultRecord:
        return P.ResultRecord(kind, flags, pid, 7, 2, 0, 0, epoch, pid, started, started, 0, 0)

    seen = AttemptReports()
    seen.add(10, rec(P.RES_ACCEPTED, 10, 1.0))
    seen.add(10, rec(P.RES_EXITED, 10, 1.5, flags=P.FLAG_LOST | P.FLAG_RETURNED))
    assert seen.of((7, 2)) == {} and seen.handed_back((7, 2)).flags & P.FLAG_RETURNED
    # Taken by another executor after the hand-back: its reports, not the hand-back, say where the attempt is.
    seen.add(11, rec(P.RES_ACCEPTED, 11, 2.0))
    assert seen.handed_back((7, 2)) is None and seen.of((7, 2))[P.RES_ACCEPTED][0] == 11
