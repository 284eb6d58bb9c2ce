"""`rerun JOB --downstream` on a live run: no dependent of the job starts while it runs again.

A downstream job that has started (QUEUED or RUNNING) makes the verb refused, nothing changed; one waiting for its
retry waits for the rerun job instead; one HELD stays held and waits for it once released."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import yaml

from tests.conftest import make_plan
from tests.core.test_engine import dispatched, finish, states
from tests.integration.helpers import cli, evidence_plan, job_states, read_evidence, start, status, stop_proc, wait_for
from wloadctl.core.commands import Persist, Reply
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import JobStartedEvent, OperatorEvent, RunStartedEvent, TimerFiredEvent
from wloadctl.core.plan import RetryPolicy
from wloadctl.core.replay import attempts_unspent
from wloadctl.core.states import JobState

S = JobState


def rerun_downstream(core: SchedulerCore, job: str, now: float = 9.0) -> tuple[Reply, list]:
    cmds = core.handle(OperatorEvent("rerun", (core.index[job],), now, user="ana", downstream=True))
    return next(c for c in cmds if isinstance(c, Reply)), cmds


def chain(**b: object) -> SchedulerCore:
    """a -> b -> c, and `other` beside them (the tester's p5.yaml)."""
    core = SchedulerCore(make_plan({"a": {"idempotent": False}, "b": {"deps": ["a"], "idempotent": False, **b},
                                    "c": {"deps": ["b"], "idempotent": False}, "other": {}}), slots=10)
    core.handle(RunStartedEvent(0.0))
    finish(core, "other")
    finish(core, "a")
    return core


def test_a_rerun_with_its_downstream_while_a_dependent_runs_is_refused_and_changes_nothing() -> None:
    core = chain()
    core.handle(JobStartedEvent(core.index["b"], 1, 0, 4242, 1.5))
    before = states(core)
    rep, cmds = rerun_downstream(core, "a")
    assert rep.results == [(0, False, "job 'a' not rerun: downstream job(s) 'b' (RUNNING) have started and would "
                                      "not wait for it; let them end, or `wloadctl kill b`, then `wloadctl rerun a "
                                      "--downstream` runs them again after it")]
    assert states(core) == before and dispatched(cmds) == [] and not any(isinstance(c, Persist) for c in cmds)
    # Once b has ended, the same verb runs a, then b, then c, one after the other.
    finish(core, "b", now=2.0)
    assert states(core)["c"] == "QUEUED"
    rep, cmds = rerun_downstream(core, "a")  # c QUEUED (sent, not started): refused as well
    assert not rep.results[0][1] and "'c' (QUEUED)" in rep.results[0][2]
    finish(core, "c", now=3.0)
    rep, cmds = rerun_downstream(core, "a")
    assert rep.results[0][1:] == (True, "job 'a' will run again with 2 downstream job(s)")
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["a"]
    assert [core.ids[i] for i, _ in dispatched(finish(core, "a", now=4.0))] == ["b"]
    assert [core.ids[i] for i, _ in dispatched(finish(core, "b", now=5.0))] == ["c"]
    core.validate()


def test_a_job_followed_on_its_executor_by_its_dependent_makes_the_rerun_refused_naming_both() -> None:
    core = SchedulerCore(make_plan({"a": {}, "b": {"deps": ["a"]}, "c": {"deps": ["b"]}}), slots=10)
    core.follow = 4
    cmds = core.handle(RunStartedEvent(0.0))
    assert [core.ids[i] for i, _ in dispatched(cmds)] == ["a", "b", "c"]  # b and c follow a on its executor
    finish(core, "a")
    rep, _ = rerun_downstream(core, "a")
    assert not rep.results[0][1] and "'b' (QUEUED), 'c' (QUEUED)" in rep.results[0][2]
    assert states(core) == {"a": "SUCCEEDED", "b": "QUEUED", "c": "QUEUED"}
    core.validate()


def test_a_dependent_waiting_for_its_retry_waits_for_the_rerun_job_instead() -> None:
    core = chain(retry=RetryPolicy(count=2, delay=5.0, jitter=0.0))
    finish(core, "b", code=1, now=2.0)
    assert states(core)["b"] == "RETRY_WAIT"
    rep, cmds = rerun_downstream(core, "a", now=3.0)
    assert rep.results[0][1:] == (True, "job 'a' will run again with 1 downstream job(s)")
    assert states(core) == {"a": "QUEUED", "b": "WAITING", "c": "WAITING", "other": "SUCCEEDED"}
    # Its retry time passes: b does not start before the new a has succeeded.
    assert dispatched(core.handle(TimerFiredEvent(60.0))) == []
    assert [core.ids[i] for i, _ in dispatched(finish(core, "a", now=61.0))] == ["b"]
    # It starts over: a failure now has its whole retry budget again.
    finish(core, "b", code=1, now=62.0)
    assert states(core)["b"] == "RETRY_WAIT" and core.reasons[core.index["b"]].endswith("retry 1/2 in 5.0s")
    core.validate()
    # What a resume reads of b's journal rows counts the same attempts unspent.
    rows = [t[1:] for c in cmds if isinstance(c, Persist) for t in c.transitions if t[0] == core.index["b"]]
    assert [(S(f).name, S(t).name) for f, t, *_ in rows] == [("RETRY_WAIT", "WAITING")]
    assert attempts_unspent([(S.WAITING, S.READY, 0), (S.READY, S.QUEUED, 1), (S.QUEUED, S.RETRY_WAIT, 1),
                             *rows]) == 1


def test_a_held_dependent_stays_held_and_the_reply_says_it_runs_again_once_released() -> None:
    core = SchedulerCore(make_plan({"a": {}, "b": {"deps": ["a"]}, "c": {"deps": ["b"]}}), slots=10)
    core.handle(RunStartedEvent(0.0))
    core.handle(OperatorEvent("hold", (core.index["c"],), 0.5, user="ana"))
    finish(core, "a")
    finish(core, "b")
    rep, _ = rerun_downstream(core, "a")
    assert rep.results[0][1:] == (True, "job 'a' will run again with 1 downstream job(s); 1 held job(s) stay held "
                                        "('c': run again after it once released)")
    assert states(core) == {"a": "QUEUED", "b": "WAITING", "c": "HELD"}
    core.handle(OperatorEvent("release", (core.index["c"],), 10.0, user="ana"))
    assert states(core)["c"] == "WAITING"
    core.validate()


@pytest.mark.ipc
def test_a_live_rerun_with_its_downstream_while_a_dependent_runs_is_refused_and_the_order_kept(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    out, gate, sd = tmp_path / "ev", tmp_path / "b.go", tmp_path / "sd"
    plan = evidence_plan(tmp_path / "p5.yaml", out, {
        "a": {"idempotent": False}, "b": {"depends_on": ["a"], "idempotent": False, "gate": str(gate)},
        "c": {"depends_on": ["b"], "idempotent": False}, "other": {}})
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: job_states(sd).get("b") == "RUNNING", what="b running")
        p = cli("rerun", "a", "--downstream", "--state-dir", str(sd))
        assert p.returncode != 0 and p.stdout == ""
        assert p.stderr.strip() == ("refused: job 'a' not rerun: downstream job(s) 'b' (RUNNING) have started and "
                                    "would not wait for it; let them end, or `wloadctl kill b`, then `wloadctl "
                                    "rerun a --downstream` runs them again after it")
        gate.touch()
        assert proc.wait(30) == 0
    finally:
        gate.touch()
        stop_proc(proc)
    ev = read_evidence(out)
    assert [len(ev[j]) for j in ("a", "b", "c")] == [2, 2, 2], "each ran once"
    assert ev["a"][1][1] <= ev["b"][0][1] and ev["b"][1][1] <= ev["c"][0][1]
    audit = json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout)
    assert [(a["verb"], a["job"], a["applied"]) for a in audit] == [("rerun", "a", False)]


def test_a_rerun_that_sent_a_retrying_dependent_back_keeps_it_waiting_after_a_kill_9_and_resume(
        tmp_path: Path) -> None:
    out, b_ok, a_go, sd = tmp_path / "ev", tmp_path / "b.ok", tmp_path / "a.go", tmp_path / "sd"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "rr", "jobs": {
        "a": {"command": f'echo "a $WLOADCTL_ATTEMPT" >> {out}; [ "$WLOADCTL_ATTEMPT" = 1 ] || '
                         f'while [ ! -e {a_go} ]; do sleep 0.05; done; echo "a end" >> {out}'},
        "b": {"command": f"echo b >> {out}; test -e {b_ok}", "depends_on": ["a"],
              "retries": {"count": 2, "delay": "1h"}},
        "c": {"command": f"echo c >> {out}", "depends_on": ["b"]}}}))
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: job_states(sd).get("b") == "RETRY_WAIT", what="b waiting for its retry")
        p = cli("rerun", "a", "--downstream", "--state-dir", str(sd))
        assert p.stdout.strip() == "job 'a' will run again with 1 downstream job(s)", p.stderr
        wait_for(lambda: out.read_text().count("a 2"), what="a running again")
        os.kill(proc.pid, signal.SIGKILL)  # the scheduler dies right after the verb; the new a runs on
        proc.wait()
        b_ok.touch()  # b would succeed now, were it started before the new a has ended
        proc = start("resume", "--state-dir", str(sd))
        wait_for(lambda: status(sd).get("live") and job_states(sd)["a"] == "RUNNING", what="the run resumed")
        a_go.touch()
        assert proc.wait(30) == 0
    finally:
        b_ok.touch()
        a_go.touch()
        stop_proc(proc)
    lines = out.read_text().split("\n")
    # b ran once before the rerun, and after it only once the new a had ended; c came last
    assert lines[:5] == ["a 1", "a end", "b", "a 2", "a end"], lines
    assert lines[5:] == ["b", "c", ""], lines
