"""A plan file edited under a live run: the run goes on from the journal's copy; a resume of the changed file is
refused in one line unless the change is accepted."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import (
    cli,
    evidence_plan,
    executor_pids,
    ipc_names,
    job_states,
    kill_all,
    read_evidence,
    reap_orphans,
    start,
    status,
    stop_proc,
    wait_for,
)
from wloadctl.store import Store

pytestmark = pytest.mark.ipc


@pytest.fixture(autouse=True)
def gate_opens_at_the_end(tmp_path: Path) -> Iterator[None]:
    """A test that fails before it opens a's gate leaves no job waiting at it."""
    yield
    (tmp_path / "gate").touch()


def plans(tmp: Path) -> tuple[Path, Path, Path, str]:
    """The plan file as the run starts (a, then b), and the text it is changed to (b fails, c added).

    a runs until the test opens its gate (`tmp/gate`).
    """
    out, changed_out, gate = tmp / "evidence", tmp / "changed", str(tmp / "gate")
    plan = evidence_plan(tmp / "plan.yaml", out, {"a": {"gate": gate}, "b": {"depends_on": ["a"]}})
    edit = evidence_plan(tmp / "edit.yaml", changed_out, {"a": {"gate": gate}, "b": {"depends_on": ["a"], "exit": 1},
                                                          "c": {"depends_on": ["b"]}})
    text = edit.read_text()
    edit.unlink()
    return plan, out, changed_out, text


def test_editing_the_plan_file_does_not_change_the_live_run(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan, out, changed_out, changed = plans(tmp_path)
    sd = tmp_path / "sd"
    original = plan.read_text()
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    try:
        # Given a live run, its first job running
        wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("a") == "RUNNING", what="a running")
        run_id = status(sd)["run"]
        # When the plan file is rewritten under it (b now fails, c is added)
        plan.write_text(changed)
        (tmp_path / "gate").touch()
        # Then the run finishes as it started: two jobs, b as first written, nothing of the edit
        assert proc.wait(60) == 0
    finally:
        stop_proc(proc)
    assert job_states(sd) == {"a": "SUCCEEDED", "b": "SUCCEEDED"}
    assert [k for k, _t in read_evidence(out)["b"]] == ["start", "end"]
    assert not changed_out.exists()
    with Store.open(sd, readonly=True) as st:
        run = st.latest_run()
        assert run is not None and st.plan_text(run.id) == original
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def test_a_resume_of_the_changed_plan_is_refused_unless_accepted(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan, out, changed_out, changed = plans(tmp_path)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    try:
        # Given a live run whose plan file is changed while its first job runs, and whose
        # scheduler and executors are then killed
        wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("a") == "RUNNING", what="a running")
        run_id = status(sd)["run"]
        plan.write_text(changed)
        kill_all([proc.pid, *executor_pids(run_id)])
        proc.wait()
        (tmp_path / "gate").touch()
    finally:
        stop_proc(proc)
    # When it is resumed with the changed file
    p = cli("resume", str(plan), "--state-dir", str(sd))
    # Then the resume is refused in one line naming the file and the run, and nothing moved
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr
    assert f"{plan}: the plan changed since run {run_id} started" in lines[0]
    assert "--accept-plan-change" in lines[0]
    p = cli("run", str(plan), "--state-dir", str(sd))
    assert p.returncode == 2 and "the plan changed since run" in p.stderr
    assert set(job_states(sd)) == {"a", "b"}
    # and accepted, the run goes on with the change: c is added, b runs as now written
    p = cli("resume", str(plan), "--state-dir", str(sd), "--accept-plan-change")
    assert p.returncode == 1, p.stderr  # b now fails, by the change
    # (a writes its evidence elsewhere now too)
    said = ("plan change accepted: 1 job(s) added (c), 2 changed (a, b): what has not run yet runs as the file "
            "now says")
    assert said in p.stderr
    assert job_states(sd) == {"a": "SUCCEEDED", "b": "FAILED", "c": "UPSTREAM_FAILED"}
    audit = json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout)
    assert [(x["verb"], x["outcome"]) for x in audit] == [("plan-change", said)]
    # with a run at most once more (its executor died with the scheduler; it is idempotent) and b
    # once, as now written, and nothing left behind
    assert [k for k, _t in read_evidence(out)["a"]].count("start") <= 2
    assert "b" not in read_evidence(out)
    assert [k for k, _t in read_evidence(changed_out)["b"]] == ["start", "end"]
    reap_orphans(run_id)
    assert executor_pids(run_id) == [] and ipc_names(run_id) == []


def test_a_resume_without_the_file_runs_the_journals_copy(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan, out, changed_out, changed = plans(tmp_path)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    try:
        wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("a") == "RUNNING", what="a running")
        run_id = status(sd)["run"]
        plan.write_text(changed)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        stop_proc(proc)
    # Given a run whose scheduler died after its plan file changed, its executor still running a:
    # accepting the change cannot give the live run room for c
    p = cli("resume", str(plan), "--state-dir", str(sd), "--accept-plan-change")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"the changed plan needs room for 3 jobs and run {run_id}, whose executors still run, has room for 2" \
        in p.stderr
    with Store.open(sd, readonly=True) as st:
        run = st.latest_run()
        assert run is not None and st.job_ids(run.id) == ["a", "b"]
    # When it is resumed without the file, it goes on from the journal's copy
    (tmp_path / "gate").touch()
    p = cli("resume", "--state-dir", str(sd))
    assert p.returncode == 0, p.stderr
    assert job_states(sd) == {"a": "SUCCEEDED", "b": "SUCCEEDED"}
    assert not changed_out.exists()
    assert [k for k, _t in read_evidence(out)["a"]] == ["start", "end"]
    reap_orphans(run_id)
    assert ipc_names(run_id) == []


def test_a_resume_given_no_plan_says_the_file_changed_and_goes_on_with_the_plan_it_started_with(
        tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: ed\njobs:\n  a: {command: 'exit 3'}\n  post: {command: 'true', depends_on: [a]}\n")
    sd = str(tmp_path / "sd")
    assert cli("run", str(plan), "--state-dir", sd).returncode == 1  # a failed: post is upstream-failed
    plan.write_text(plan.read_text().replace("exit 3", "true"))
    assert cli("retry", "a", "--state-dir", sd).returncode == 0
    p = cli("resume", "--state-dir", sd)
    # (it ran the plan it started with and said nothing of the edit)
    assert p.stderr.splitlines()[0] == (
        f"wloadctl: {plan} has changed since run {status(Path(sd))['run']} started: the run goes on with the plan "
        f"it started with (`wloadctl resume {plan} --state-dir {sd} --accept-plan-change` takes the change)")
    assert p.returncode == 1  # (a failed again: the edit was not taken)
