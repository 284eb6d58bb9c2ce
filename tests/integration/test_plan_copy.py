"""The journal's copy of a run's plan: written after the first dispatch; until then the plan file stands in for it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.integration.helpers import cli
from wloadctl.errors import WloadError
from wloadctl.runplan import run_plan
from wloadctl.store import Store

PLAN = "name: copy\njobs:\n  a: {command: 'true'}\n  b: {command: 'true', depends_on: [a]}\n"


def test_a_finished_run_keeps_the_plan_text_it_started_with(tmp_path: Path) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text(PLAN)
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--json")
    assert p.returncode == 0, p.stderr
    assert set(json.loads(p.stdout)["jobs"].values()) == {"SUCCEEDED"}
    plan.write_text("name: other\njobs: {}\n")  # the file may change or go once the run has its copy
    st = Store.open(sd)
    try:
        run = st.latest_run()
        assert run is not None
        assert st.plan_text(run.id) == PLAN
        assert list(run_plan(st, run).jobs) == ["a", "b"]
    finally:
        st.close()
    h = cli("history", "b", "--state-dir", str(sd), "--json")
    assert h.returncode == 0, h.stderr


def test_a_run_whose_copy_was_never_written_reads_its_unchanged_file_and_refuses_a_changed_one(tmp_path: Path) -> None:
    # Given a run journaled as a new run is, before its first dispatch: job rows, no copy of the plan yet
    plan = tmp_path / "p.yaml"
    plan.write_text(PLAN)
    st = Store.open(tmp_path / "sd")
    try:
        run = st.create_run("20261202-000000-aaaaaa", "copy", str(plan), hashlib.sha256(PLAN.encode()).hexdigest(),
                            "", ["a", "b"], "2026-12-02", 1.0)
        # Then its plan is the file, while the file is the one it started with
        assert list(run_plan(st, run).jobs) == ["a", "b"]
        # and a changed file is refused in one line that says what to do
        plan.write_text(PLAN.replace("'true'", "'false'"))
        try:
            run_plan(st, run)
        except WloadError as e:
            line = e.one_line()
            assert "no copy of the plan of run 20261202-000000-aaaaaa" in line and "changed since" in line
            assert str(plan) in line and "\n" not in line
        else:
            raise AssertionError("a changed plan file was taken for the run's plan")
        plan.unlink()
        try:
            run_plan(st, run)
        except WloadError as e:
            assert "cannot be read" in e.one_line()
        else:
            raise AssertionError("a missing plan file was taken for the run's plan")
    finally:
        st.close()


def test_a_run_resumed_before_its_copy_was_written_runs_from_its_file_and_keeps_the_copy(tmp_path: Path) -> None:
    # Given a run killed after its jobs' rows were journaled and before its plan's copy was
    plan = tmp_path / "p.yaml"
    plan.write_text(PLAN)
    sd = tmp_path / "sd"
    st = Store.open(sd)
    try:
        st.create_run("20261202-000000-bbbbbb", "copy", str(plan), hashlib.sha256(PLAN.encode()).hexdigest(),
                      "", ["a", "b"], "2026-12-02", 1.0, json.dumps({"executors": 1, "slots": 1}))
    finally:
        st.close()
    # When it is resumed
    p = cli("resume", "--state-dir", str(sd), "--json")
    # Then it runs to its end from the unchanged file, and the journal keeps the copy from now on
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"a": "SUCCEEDED", "b": "SUCCEEDED"}
    st = Store.open(sd)
    try:
        run = st.latest_run()
        assert run is not None and st.has_plan_copy(run.id) and st.plan_text(run.id) == PLAN
    finally:
        st.close()
