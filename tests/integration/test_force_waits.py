"""skip and set-ok through the real CLI on real runs: of a job whose upstream still runs, the verb takes effect once
that upstream has ended (its downstream waits meanwhile, and the job never runs), live, on the journal of a run whose
scheduler was killed -9 and then resumed, and called off by release."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.integration.helpers import cli, evidence_plan, job_states, read_evidence, start, stop_proc, wait_for

pytestmark = pytest.mark.ipc


def ledger(tmp_path: Path, load_exit: int) -> tuple[Path, Path, Path]:
    """The tester's plan: load_accounts (held back by a gate file, then exits `load_exit`) -> validate ->
    post_ledger; each job leaves evidence. Returns (plan, gate, evidence)."""
    gate, out = tmp_path / "go", tmp_path / "ev"
    plan = evidence_plan(tmp_path / "p.yaml", out, {
        "load_accounts": {"gate": gate, "exit": load_exit},
        "validate": {"depends_on": ["load_accounts"]},
        "post_ledger": {"depends_on": ["validate"]}})
    return plan, gate, out


def why(sd: Path, job: str) -> dict[str, object]:
    p = cli("why", job, "--state-dir", str(sd), "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize(("verb", "words", "ends"), [("set-ok", "set ok", "SUCCEEDED"), ("skip", "skipped", "SKIPPED")])
def test_a_verb_on_a_waiting_job_waits_for_its_failing_upstream_and_its_downstream_with_it(
        tmp_path: Path, verb: str, words: str, ends: str, no_ipc_leaks: None) -> None:
    plan, gate, out = ledger(tmp_path, load_exit=1)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: job_states(sd).get("load_accounts") == "RUNNING", what="load_accounts running")
        # When the operator sets ok (skips) validate while load_accounts runs
        p = cli(verb, "validate", "--state-dir", str(sd), "--reason", "known ok")
        assert p.returncode == 0, p.stderr
        assert f"job 'validate' will be {words} once its upstreams have ended ('load_accounts' (RUNNING) not yet)" \
            in p.stdout
        # Then validate and post_ledger wait; `why` says what for, by whom and why
        states = job_states(sd)
        assert (states["validate"], states["post_ledger"]) == ("WAITING", "WAITING")
        w = why(sd, "validate")
        assert w["reasons"][0].startswith(f"will be {words} when its upstreams end, by root: known ok; it will not "  # type: ignore[index]
                                          "run")
        assert w["verbs"][:2] == ["release", "rerun"]  # type: ignore[index]
        # When load_accounts fails
        gate.touch()
        # Then validate gets the operator's outcome once load_accounts has ended, unrun, and post_ledger runs after
        assert proc.wait(60) == 1  # (load_accounts failed)
    finally:
        stop_proc(proc)
    assert job_states(sd) == {"load_accounts": "FAILED", "validate": ends, "post_ledger": "SUCCEEDED"}
    ev = read_evidence(out)
    assert "validate" not in ev
    load_end = next(t for what, t in ev["load_accounts"] if what == "end")
    assert [w for w, _t in ev["post_ledger"]] == ["start", "end"] and ev["post_ledger"][0][1] > load_end
    hist = cli("history", "validate", "--state-dir", str(sd), check=True).stdout
    assert f"WAITING -> WAITING  will be {words} when its upstreams end, by root: known ok" in hist
    assert (f"WAITING -> {ends}  {words} by root: known ok (asked while its upstreams ran; they have ended; upstream "
            "load_accounts did not succeed)") in hist


@pytest.mark.parametrize("journal", ["sqlite", "postgres"])
def test_a_skip_on_the_journal_of_a_killed_run_outlasts_it_and_the_resume_honours_it(
        tmp_path: Path, journal: str, request: pytest.FixtureRequest, no_ipc_leaks: None) -> None:
    plan, gate, out = ledger(tmp_path, load_exit=0)
    sd = tmp_path / "sd"
    on = ["--state-dir", str(sd)] + (["--journal", request.getfixturevalue("pg_url")] if journal == "postgres" else [])

    def states() -> dict[str, str]:
        return {j["job"]: j["state"] for j in json.loads(cli("status", *on, "--json").stdout)["jobs"]}

    proc = start("run", str(plan), *on)
    try:
        wait_for(lambda: states().get("load_accounts") == "RUNNING", what="load_accounts running")
        # Given a scheduler killed -9 while load_accounts runs (its executor keeps it running)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # When the operator skips validate on the run's journal
        p = cli("skip", "validate", *on, "--reason", "feed late")
        assert p.returncode == 0, p.stderr
        assert "job 'validate' will be skipped once its upstreams have ended" in p.stdout
        # Then the stopped run's `why` says it (read from the journal)
        w = json.loads(cli("why", "validate", *on, "--json").stdout)
        assert w["reasons"][0].startswith("will be skipped when its upstreams end, by root: feed late")
        # When the run is resumed, and load_accounts ends well
        proc = start("resume", *on)
        wait_for(lambda: json.loads(cli("status", *on, "--json").stdout).get("live"), what="the run resumed")
        assert states()["validate"] == "WAITING"
        gate.touch()
        assert proc.wait(60) == 0
    finally:
        gate.touch()
        stop_proc(proc, grace=30, term=False)
    # Then validate was skipped without running once load_accounts had ended, and post_ledger ran after it
    assert states() == {"load_accounts": "SUCCEEDED", "validate": "SKIPPED", "post_ledger": "SUCCEEDED"}
    ev = read_evidence(out)
    assert "validate" not in ev and ev["post_ledger"][0][1] > ev["load_accounts"][-1][1]


def test_release_calls_a_pending_skip_off_and_the_job_runs(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan, gate, out = ledger(tmp_path, load_exit=0)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: job_states(sd).get("load_accounts") == "RUNNING", what="load_accounts running")
        cli("skip", "validate", "--state-dir", str(sd), check=True)
        p = cli("release", "validate", "--state-dir", str(sd), "--reason", "it must run after all")
        assert p.returncode == 0, p.stderr
        assert "job 'validate': its skip by root is called off; it runs once its upstreams have ended" in p.stdout
        gate.touch()
        assert proc.wait(60) == 0
    finally:
        gate.touch()
        stop_proc(proc, grace=30, term=False)
    assert job_states(sd) == {"load_accounts": "SUCCEEDED", "validate": "SUCCEEDED", "post_ledger": "SUCCEEDED"}
    assert [w for w, _t in read_evidence(out)["validate"]] == ["start", "end"]
