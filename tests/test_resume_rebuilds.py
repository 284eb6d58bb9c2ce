"""A resume rebuilds from the journal's transitions what the live engine knew beyond the jobs' states: the jobs a
branch skipped (not an operator), the followers sent behind a job, the losses of a job's executors, and the jobs
held for a node that was lost."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.conftest import make_plan
from tests.core.test_conditions import with_fields
from tests.core.test_engine import dispatched, states
from tests.integration import helpers
from tests.integration.helpers import cli, evidence_plan, read_evidence, start, status, wait_for
from wloadctl.core.commands import Persist
from wloadctl.core.engine import FOLLOW, MAX_LOST, SchedulerCore
from wloadctl.core.events import (
    Event,
    ExecutorLostEvent,
    JobExitedEvent,
    JobStartedEvent,
    OperatorEvent,
    RunStartedEvent,
)
from wloadctl.core.plan import RetryPolicy
from wloadctl.core.replay import journaled, replayed_jobs
from wloadctl.core.states import JobState
from wloadctl.ipc import protocol as P
from wloadctl.procs.localpool import read_results, result_journals
from wloadctl.store import Store


class Journal:
    """A live core whose Persist commands are kept as the journal keeps them: (from, to, attempt, ts, executor,
    exit_code, reason, cause) by job, in order."""

    def __init__(self, make: Callable[[], SchedulerCore]) -> None:
        self.make = make
        self.core = make()
        self.tx: dict[int, list[tuple]] = {}

    def __call__(self, ev: Event) -> list:
        cmds = self.core.handle(ev)
        for c in cmds:
            if isinstance(c, Persist):
                for t in c.transitions:
                    self.tx.setdefault(t[0], []).append(tuple(t[1:]))
        return cmds

    def resumed(self) -> SchedulerCore:
        """A core rebuilt from this journal as the runner rebuilds it, its run started again."""
        core = self.core
        rows = [(i, core.state[i], core.attempt[i]) for i in range(core.n)]
        again = self.make()
        jobs = set(replayed_jobs(rows, again.branches.untils))
        again.restore(rows, 5.0, journaled=journaled({i: t for i, t in self.tx.items() if i in jobs}, again.index))
        again.handle(RunStartedEvent(5.0))
        again.validate()
        return again


# -- 1. a branch not taken stays not taken -------------------------------------------------------------------


def _branchy() -> SchedulerCore:
    plan = with_fields(make_plan({"a": {}, "b": {}, "c": {"deps": ["a"]}, "d": {"deps": ["c", "b"]}}),
                       c={"condition": "vars.limit > 5"}, __vars__={"limit": 1})
    return SchedulerCore(plan, slots=4)


@pytest.mark.parametrize(("job", "downstream"), [("b", True), ("d", False)])
def test_a_job_rejudged_after_a_resume_below_an_if_that_came_out_false_is_skipped_not_run(
        job: str, downstream: bool) -> None:
    j = Journal(_branchy)
    j(RunStartedEvent(0.0))
    j(JobExitedEvent(0, 1, 0, 0, 1.0))
    j(JobExitedEvent(1, 1, 0, 0, 1.0))
    assert states(j.core) == {"a": "SUCCEEDED", "b": "SUCCEEDED", "c": "SKIPPED", "d": "SKIPPED"}
    core = j.resumed()
    # When the operator reruns b with its downstream (or d itself), d is judged again: c's branch is still not taken
    cmds = core.handle(OperatorEvent("rerun", (core.index[job],), 6.0, downstream=downstream))
    if job == "b":
        cmds = core.handle(JobExitedEvent(1, core.attempt[1], 0, 0, 7.0))
    assert dispatched(cmds) == [] and states(core)["d"] == "SKIPPED"
    core.validate()


def test_an_operators_skip_still_counts_as_done_after_a_resume() -> None:
    plan = make_plan({"x": {}, "a": {"deps": ["x"]}, "b": {"deps": ["a"]}})
    j = Journal(lambda: SchedulerCore(plan, slots=2))
    j(RunStartedEvent(0.0))
    j(OperatorEvent("skip", (1,), 0.5))
    j(JobExitedEvent(0, 1, 0, 0, 1.0))
    j(JobExitedEvent(2, 1, 0, 0, 1.5))
    assert states(j.core) == {"x": "SUCCEEDED", "a": "SKIPPED", "b": "SUCCEEDED"}
    core = j.resumed()
    cmds = core.handle(OperatorEvent("rerun", (2,), 6.0))
    assert dispatched(cmds) == [(2, 2)]


def _plan_file(path: Path, jobs: dict) -> Path:
    path.write_text(yaml.safe_dump({"name": path.stem, "variables": {"limit": 1}, "jobs": jobs}, sort_keys=False))
    return path


@pytest.mark.parametrize(("job", "flags"), [("b", ["--downstream"]), ("d", [])])
def test_a_rerun_on_a_stopped_run_below_an_if_that_came_out_false_leaves_the_branch_not_taken(
        tmp_path: Path, no_ipc_leaks: None, job: str, flags: list[str]) -> None:
    sd, ran = tmp_path / "sd", tmp_path / "ran"
    plan = _plan_file(tmp_path / "branch.yaml", {
        "a": {"command": "true"}, "b": {"command": f"echo b >> {ran}"},
        "c": {"command": f"echo c >> {ran}", "depends_on": ["a"], "if": "vars.limit > 5"},
        "d": {"command": f"echo d >> {ran}", "depends_on": ["c", "b"]}})
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 0
    assert ran.read_text() == "b\n"
    p = cli("rerun", job, *flags, "--state-dir", str(sd))
    assert p.returncode == 0, p.stderr
    if job == "b":  # (d alone is judged at once: there is nothing to resume)
        assert cli("resume", "--state-dir", str(sd)).returncode == 0
    # d never runs: its branch was not taken, which no rerun changes while c is not run again
    assert ran.read_text() == "b\n" * (2 if job == "b" else 1)
    assert {j["job"]: j["state"] for j in status(sd)["jobs"]}["d"] == "SKIPPED"


# -- 2. a follower comes back as a follower ------------------------------------------------------------------


def _chain() -> SchedulerCore:
    core = SchedulerCore(make_plan({"j0": {}, "j1": {"deps": ["j0"]}, "j2": {"deps": ["j1"]}}), slots=2)
    core.follow = FOLLOW
    return core


def test_a_follower_of_a_job_that_failed_before_the_resume_is_handed_back_and_ends_upstream_failed() -> None:
    j = Journal(_chain)
    j(RunStartedEvent(0.0))
    j(JobStartedEvent(0, 1, 0, 100, 0.1))
    j(JobExitedEvent(0, 1, 0, 3, 0.2))  # j0 failed; its executor hands j1 and j2 back, unread before the crash
    core = j.resumed()
    assert core.following == {1: 0, 2: 1}
    for k in (1, 2):
        cmds = core.handle(JobExitedEvent(k, 1, 0, 0, 6.0, lost=True, returned=True))
        assert dispatched(cmds) == []
        core.validate()
    assert states(core) == {"j0": "FAILED", "j1": "UPSTREAM_FAILED", "j2": "UPSTREAM_FAILED"}
    assert core.is_finished()


def test_a_follower_lost_after_the_resume_behind_a_job_waiting_for_its_retry_waits_for_it_again() -> None:
    def make() -> SchedulerCore:
        retry = RetryPolicy(count=1, delay=60, jitter=0)
        core = SchedulerCore(make_plan({"j0": {"retry": retry}, "j1": {"deps": ["j0"]}}), slots=2)
        core.follow = FOLLOW
        return core

    j = Journal(make)
    j(RunStartedEvent(0.0))
    j(JobExitedEvent(0, 1, 0, 1, 0.2))
    assert states(j.core)["j0"] == "RETRY_WAIT"
    core = j.resumed()
    cmds = core.handle(JobExitedEvent(1, 1, -1, -1, 6.0, lost=True))  # lost with its executor, unstarted
    assert (1, 1) not in dispatched(cmds) and states(core)["j1"] == "WAITING"
    assert core.reasons[1] == "handed back unstarted behind j0"
    core.validate()


def test_a_follower_handed_back_after_the_resume_behind_a_running_job_takes_a_new_attempt() -> None:
    j = Journal(_chain)
    j(RunStartedEvent(0.0))
    j(JobStartedEvent(0, 1, 0, 100, 0.1))
    core = j.resumed()
    core.handle(JobExitedEvent(1, 1, 0, 0, 6.0, lost=True, returned=True))
    assert states(core)["j1"] == "WAITING" and core.reasons[1] == "handed back unstarted behind j0"
    cmds = core.handle(JobExitedEvent(0, 1, 0, 0, 6.5))
    assert (1, 2) in dispatched(cmds) and core.attempt_base[1] == 1
    core.validate()


# -- 3. losses and holds for a lost node -----------------------------------------------------------------------


def test_a_job_that_kept_losing_its_executor_before_the_resume_fails_after_as_many_losses_in_all() -> None:
    j = Journal(lambda: SchedulerCore(make_plan({"poison": {}}), slots=1))
    j(RunStartedEvent(0.0))
    for _ in range(2):
        j(JobStartedEvent(0, j.core.attempt[0], 1, 100, 0.1))
        j(ExecutorLostEvent(1, 1.0))
    core = j.resumed()
    core.handle(JobStartedEvent(0, core.attempt[0], 1, 100, 6.0))
    core.handle(ExecutorLostEvent(1, 6.1))
    assert states(core)["poison"] == "QUEUED", "its third loss: run again"
    core.handle(JobStartedEvent(0, core.attempt[0], 1, 100, 6.2))
    core.handle(ExecutorLostEvent(1, 6.3))
    assert states(core)["poison"] == "FAILED", "its fourth: it fails, as it would have without the resume"
    assert core.reasons[0].startswith("executor lost (4 losses under this job: the first 3 ran it again at once")


def test_losses_found_by_resumes_of_a_run_gone_down_whole_leave_a_live_loss_its_runs_again() -> None:
    """MAX_LOST counts the losses a scheduler sees: one a resume finds (the executor went with the whole run, a
    host's power lost) says nothing of the job, and is journaled in words a later resume does not count."""
    j = Journal(lambda: SchedulerCore(make_plan({"batch": {}}), slots=1))
    j(RunStartedEvent(0.0))
    for k in range(MAX_LOST + 1):
        # Given a run gone down whole while `batch` ran, each time resumed, the loss found by its recovery
        j(JobStartedEvent(0, j.core.attempt[0], 1, 100, 10.0 * k + 1))
        j.core = j.resumed()
        j(JobExitedEvent(0, j.core.attempt[0], -1, -1, 10.0 * k + 6, lost=True, run_down=True, cause_id="recovery"))
        assert states(j.core)["batch"] == "QUEUED", f"crash {k + 1}: run again"
    reasons = [t[6] for t in j.tx[0] if t[1] == JobState.READY and t[6]]
    assert reasons == [f"was running when the run went down (attempt {k}), its executor lost with it; running it "
                       "again" for k in range(1, MAX_LOST + 2)]
    # When its executor dies under it while the scheduler runs
    j(JobStartedEvent(0, j.core.attempt[0], 1, 100, 60.0))
    j(ExecutorLostEvent(1, 61.0))
    # Then that is its first loss: it runs again, and a resume counts that one alone
    assert states(j.core)["batch"] == "QUEUED" and j.core.lost_count == {0: 1}
    assert j.resumed().lost_count == {0: 1}


def test_a_job_held_for_its_lost_node_takes_the_success_the_node_reports_after_the_resume() -> None:
    plan = make_plan({"c": {"idempotent": False}, "after": {"deps": ["c"]}})
    j = Journal(lambda: SchedulerCore(plan, slots=2))
    j(RunStartedEvent(0.0))
    j(JobStartedEvent(0, 1, 7, 100, 0.1))
    j(ExecutorLostEvent(7, 1.0))
    assert states(j.core)["c"] == "HELD"
    core = j.resumed()
    assert core.held_lost == {0: 1}
    cmds = core.handle(JobExitedEvent(0, 1, 7, 0, 6.0))
    assert states(core)["c"] == "SUCCEEDED" and dispatched(cmds) == [(1, 1)]
    core.validate()


def _handed_back(sd: Path, run_id: str, job: int) -> bool:
    """Whether an executor of the run journaled the hand-back of a job (unstarted, behind a long one)."""
    return any(r.task == job and r.kind == P.RES_EXITED and r.flags & P.FLAG_RETURNED
               for _x, _pid, path in result_journals(sd, run_id) for r in read_results(path))


def test_followers_handed_back_while_no_scheduler_ran_come_back_as_followers_on_resume(
        tmp_path: Path, no_ipc_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    out, g1, sd = tmp_path / "ev", tmp_path / "g1", tmp_path / "sd"
    # (followers wait 1 s behind a long job, not 50 ms: time enough to kill the scheduler before they go back)
    monkeypatch.setitem(helpers.ENV, "WLOADCTL_HAND_BACK", "1.0")
    # s0 ends at once (short jobs: chains go out); s1 takes c and d behind it as its followers, then runs long
    jobs = {"s0": {}, "s1": {"depends_on": ["s0"], "gate": str(g1)}, "c": {"depends_on": ["s1"]},
            "d": {"depends_on": ["c"]}}
    plan = evidence_plan(tmp_path / "plan.yaml", out, jobs)
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    try:
        wait_for(lambda: "s1" in read_evidence(out), timeout=30, what="s1 running")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with Store.open(sd, create=False) as st:
        run = st.latest_run()
        assert run is not None
        run_id = run.run_id
        assert "follows s1" in (st.job_row(run.id, "c") or ("",) * 9)[-1]
    # When, with no scheduler, its executor hands c and d back behind s1, and then s1 ends
    wait_for(lambda: _handed_back(sd, run_id, 2) and _handed_back(sd, run_id, 3), timeout=30,
             what="c and d handed back")
    g1.touch()
    wait_for(lambda: [w for w, _ in read_evidence(out)["s1"]] == ["start", "end"], timeout=30, what="s1 ended")
    p = cli("resume", "--state-dir", str(sd), timeout=60)
    assert p.returncode == 0, p.stderr
    # Then c came back as a follower: it waited for s1, and ran once, under a new attempt not counted
    ev = read_evidence(out)
    assert [w for w, _ in ev["c"]] == ["start", "end"] and [w for w, _ in ev["d"]] == ["start", "end"], ev
    h = cli("history", "c", "--state-dir", str(sd)).stdout
    assert "handed back unstarted behind s1" in h and "by executor" not in h, h
    with Store.open(sd, create=False) as st:
        run = st.latest_run()
        assert run is not None
        assert [t[2] for t in st.transitions_of(run.id, 2) if t[1] == JobState.RUNNING] == [2], h


def test_a_held_job_keeps_what_held_it_in_why_after_the_resume(tmp_path: Path) -> None:
    from wloadctl.core.explain import why
    from wloadctl.core.replay import restore_journaled

    # Given a run whose journal holds one job by an operator's word and one whose executor was lost
    plan = make_plan({"a": {}, "b": {"deps": ["a"]}, "c": {}})
    w, held, run_, q = int(JobState.WAITING), int(JobState.HELD), int(JobState.RUNNING), int(JobState.QUEUED)
    lost = "its executor was lost while it ran; it may not run twice (idempotent: false): an operator decides"
    with Store.open(tmp_path) as st:
        run = st.create_run("r1", plan.name, "p.yaml", "d", "text", ["a", "b", "c"], "2026-12-07", 1.0)
        st.write_turn(run.id, [(1, w, held, 0, 2.0, -1, None, "held by ana: treasury sign-off", "op"),
                               (2, w, q, 1, 2.0, -1, None, "", "start"), (2, q, run_, 1, 2.1, 0, None, "", "s")])
        st.write_turn(run.id, [(2, run_, held, 1, 3.0, 0, None, lost, "lost")])
        # When a resume rebuilds its core from the journal
        core = SchedulerCore(plan, slots=2)
        restore_journaled(st, run.id, core, 4.0)
    # Then `why` says what held each, as the scheduler that held them did
    assert "held: held by ana: treasury sign-off;" in str(why(core, 1, 4.0))
    assert f"held: {lost};" in str(why(core, 2, 4.0))
