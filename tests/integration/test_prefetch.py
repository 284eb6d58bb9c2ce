"""Prefetch with real processes: tasks an executor took ahead are handed back when it dies."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, evidence_plan, read_evidence, start, status, stop_proc, wait_for
from wloadctl.ipc import protocol as P
from wloadctl.procs.localpool import read_results, result_journals

pytestmark = pytest.mark.ipc


def _held(sd: Path, run_id: str) -> dict[int, tuple[int, set[int]]]:
    """Executor index -> (pid, job indices it journaled as taken and has not reported ended)."""
    out: dict[int, tuple[int, set[int]]] = {}
    for index, pid, path in result_journals(sd, run_id):
        taken: set[int] = set()
        for r in read_results(path):
            if r.kind == P.RES_ACCEPTED:
                taken.add(r.task)
            elif r.kind == P.RES_EXITED:
                taken.discard(r.task)
        out[index] = (pid, taken)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kill_9_of_an_executor_with_a_prefetched_backlog_every_job_runs_exactly_once(
        tmp_path: Path, no_ipc_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given independent jobs, on two executors of one slot that each take three tasks ahead
    # (jobs under a minute count as short here, so they do once one has ended: the first two end
    # at once; the others run until a gate opens after the kill, so backlogs stay held until then)
    monkeypatch.setitem(ENV, "WLOADCTL_HAND_BACK", "60")
    out, gate = tmp_path / "ev", tmp_path / "gate"
    names = [f"j{i:02d}" for i in range(12)]
    jobs = {n: ({"gate": str(gate)} if i >= 2 else {}) for i, n in enumerate(names)}
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs, sleep=0.2)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "1", "--prefetch", "3")
    try:
        def loaded() -> tuple[int, set[int]] | None:
            if not (sd / "journal.db").exists():
                return None
            run_id = status(sd).get("run")
            if not run_id:
                return None
            for pid, held in _held(sd, str(run_id)).values():
                # one running, the rest its backlog
                if len(held) >= 3 and _alive(pid):
                    return pid, held
            return None

        victim, held = wait_for(loaded, timeout=30, what="an executor holding a prefetched backlog")
        # When it is killed -9 with its backlog
        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()
        # (the gate opens once the scheduler has found the executor lost: its job is stopped by then)
        wait_for(lambda: "executor_lost" in (sd / "events.jsonl").read_text(), timeout=30, every=0.05,
                 what="the executor found lost")
        gate.touch()
        # Then the run still succeeds
        assert proc.wait(90) == 0
    finally:
        gate.touch()
        stop_proc(proc)
    ev = read_evidence(out)
    assert sorted(ev) == names
    for jid, lines in ev.items():
        assert [k for k, _ in lines].count("end") == 1, (jid, lines)
    # and the spare log files the killed executor had made are gone with the run
    assert list((sd / "logs").glob("*/.spare-*")) == []
    # Nothing ran twice but what was running on the victim (one slot)
    twice = [jid for jid, lines in ev.items() if [k for k, _ in lines].count("start") > 1]
    assert len(twice) <= 1, twice
    # Jobs are numbered in plan order: what the victim held and had not started when it died
    # (its backlog) was handed back and ran exactly once, on another executor, after the kill.
    # (A job the victim started as it was killed may stamp its start just after the kill: that one was running
    # there, and ran again, above; it is no backlog. Of the three or more it held, one at least waited.)
    backlog = [names[i] for i in held
               if names[i] not in twice and not any(k == "start" and t < killed_at for k, t in ev[names[i]])]
    assert len(backlog) >= 1, (held, ev)
    for jid in backlog:
        starts = [t for k, t in ev[jid] if k == "start"]
        assert len(starts) == 1 and starts[0] > killed_at, (jid, ev[jid])
    events = [json.loads(x) for x in (sd / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "executor_lost" for e in events)
