"""`why` of a stopped run read from the journal's rows and the run's facts gives what a core rebuilt from the
whole journal gives, on SQLite and on PostgreSQL."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_plan
from wloadctl.client import RunClient, journal_core
from wloadctl.core.commands import Persist
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import Event, JobExitedEvent, JobStartedEvent, OperatorEvent, RunStartedEvent
from wloadctl.core.explain import why as explain
from wloadctl.core.plan import Plan, RetryPolicy
from wloadctl.core.plancodec import encode_plan
from wloadctl.core.states import JobState
from wloadctl.errors import ControlError
from wloadctl.paths import write_ids
from wloadctl.runshape import index_of_id, shape_of_core, write_shape
from wloadctl.store import JOURNAL_ENV, RunRow, Store
from wloadctl.store.facts import FACT_BLOCK, run_facts

S = JobState


@pytest.fixture(params=["sqlite", "postgres"])
def state_dir(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A state directory whose journal is SQLite in it, or a scratch PostgreSQL database."""
    if request.param == "postgres":
        monkeypatch.setenv(JOURNAL_ENV, request.getfixturevalue("pg_url"))
    else:
        monkeypatch.delenv(JOURNAL_ENV, raising=False)
    yield tmp_path / "state"


class Journaled:
    """A run driven through the pure core, its turns journaled as a scheduler journals them."""

    def __init__(self, state_dir: Path, plan: Plan, slots: int = 4) -> None:
        self.store = Store.open(state_dir)
        self.run: RunRow = self.store.create_run("r1", plan.name, "p.yaml", "digest-1", "name: t", plan.jobs.keys(),
                                                 "2026-12-02", 1.0)
        self.store.set_plan_blob(self.run.id, encode_plan(plan))
        self.core = core = SchedulerCore(plan, slots)
        self.store.keep_facts(self.run.id, run_facts(core.specs, core.ids, core.tier, core.expected, core.path,
                                                     self.run.plan_digest, plan.resources, core.resources.places))
        self.feed(RunStartedEvent(1.0))

    def feed(self, ev: Event) -> None:
        for c in self.core.handle(ev):
            if isinstance(c, Persist):
                self.store.write_turn(self.run.id, c.transitions)

    def start(self, job: str, now: float = 2.0) -> None:
        i = self.core.index[job]
        self.feed(JobStartedEvent(i, self.core.attempt[i], 0, 100 + i, now))

    def end(self, job: str, code: int, now: float = 3.0) -> None:
        i = self.core.index[job]
        self.start(job, now - 0.5)
        self.feed(JobExitedEvent(i, self.core.attempt[i], 0, code, now))

    def stop(self, status: str) -> None:
        self.store.set_status(self.run.id, status, None)
        self.store.close()


def answers(state_dir: Path, jobs: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(read from the journal's rows, from a core rebuilt from the whole journal) for these jobs."""
    with RunClient(state_dir) as c:
        read = c._why_read({"jobs": jobs, "user": "ann", "reason": ""})
        assert read is not None and read["ok"], read
        core = journal_core(c.store, c.run)
        now = time.time()
        full = [explain(core, core.index[j], now, c._undispatched()) for j in jobs]
    return read["why"], full


def test_the_situations_of_a_stopped_run_read_as_a_rebuilt_core_says(state_dir: Path) -> None:
    plan = make_plan({
        "open": {"expected": 30.0},
        "load": {"deps": ["open"], "expected": 120.0, "sla": "critical"},
        "report": {"deps": ["load"]},
        "flaky": {"deps": ["open"], "retry": RetryPolicy(count=2, delay=60.0)},
        "after_flaky": {"deps": ["flaky"], "sla": "high"},
        "alert": {"deps": {"load": "failure"}},
        "cleanup": {"deps": {"load": "done"}},
        "held": {"deps": ["open"]},
        "late": {"deps": ["held", "flaky"]},
        "lock_a": {"deps": ["open"], "resources": {"db": 1}},
        "lock_b": {"deps": ["open"], "resources": {"db": 1}},
    }, resources={"db": 1})
    jobs = dict(plan.jobs)
    jobs["sign"] = dataclasses.replace(make_plan({"sign": {"deps": ["open"]}}).jobs["sign"], confirm=True)
    plan = dataclasses.replace(plan, jobs=jobs)
    # Given a run that stopped with a job failed, one in retry delay, one held, one waiting for approval,
    # one holding a resource another wants, and jobs that never ran
    r = Journaled(state_dir, plan)
    r.feed(OperatorEvent("hold", (r.core.index["held"],), 1.5, user="ann", reason="month end"))
    r.end("open", 0)
    r.end("load", 1, now=4.0)
    r.end("flaky", 1, now=4.5)
    r.start("lock_a", now=5.0)
    r.stop("interrupted")
    # When each is explained both ways, then the answers are the same
    names = list(plan.jobs)
    read, full = answers(state_dir, names)
    assert read == full
    by = {w["job"]: w for w in read}
    assert by["open"]["state"] == "SUCCEEDED" and by["load"]["state"] == "FAILED"
    assert by["report"]["state"] == "UPSTREAM_FAILED" and by["flaky"]["state"] == "RETRY_WAIT"
    assert by["after_flaky"]["state"] == "WAITING" and by["after_flaky"]["blocking"]
    assert by["held"]["state"] == "HELD" and "month end" in by["held"]["reasons"][0]
    assert by["sign"]["state"] == "HELD" and "approve" in by["sign"]["reasons"][0]
    waiting_db = by["lock_b"] if by["lock_b"]["state"] == "READY" else by["lock_a"]
    assert any("resource db" in line for line in waiting_db["reasons"]), waiting_db
    assert by["late"]["critical_path"] is not None
    # (both said "on executor -1": neither way read the executor a running job's row names)
    assert "running (attempt 1) on executor 0" in by["lock_a"]["reasons"], by["lock_a"]
    # No scheduler holds the run: what waits to be dispatched says so first, and waits for no slot
    # (the resume it names is the run's own: with `--journal URL` when the journal is a server's)
    stopped = f"the run is interrupted: no scheduler dispatches its jobs now (`wloadctl resume --state-dir {state_dir}"
    journal = os.environ.get(JOURNAL_ENV)
    for job in ("flaky", waiting_db["job"]):
        first = by[job]["reasons"][0]
        assert first.startswith(stopped) and first.endswith("` goes on)"), by[job]
        assert ("--journal postgresql://" in first) == bool(journal), (first, journal)
    assert not any("free slot" in line for w in read for line in w["reasons"]), read


def test_an_until_ended_by_its_max_iterations_says_so_read_either_way(state_dir: Path) -> None:
    plan = make_plan({"poll": {}})
    poll = dataclasses.replace(plan.jobs["poll"], until="result.ready == 1", max_iterations=2)
    r = Journaled(state_dir, dataclasses.replace(plan, jobs={"poll": poll}))
    r.end("poll", 0)
    r.end("poll", 0, now=4.0)
    r.stop("succeeded")
    read, full = answers(state_dir, ["poll"])
    assert read == full
    assert read[0]["reasons"][0] == "succeeded after 2 attempt(s): max_iterations reached (2) with its until never met"


def test_a_waiting_job_whose_upstream_failed_in_a_lagging_journal_reads_as_upstream_failed(state_dir: Path) -> None:
    plan = make_plan({"a": {}, "b": {"deps": ["a"]}, "c": {"deps": {"a": "failure"}}})
    r = Journaled(state_dir, plan)
    r.start("a")
    # A turn that ended `a` without its dependents' transitions (as an older scheduler could leave it)
    a = r.core.index["a"]
    r.store.write_turn(r.run.id, [(a, S.RUNNING, S.FAILED, 1, 3.0, 0, 1, "exit status 1", "t")])
    r.stop("interrupted")
    read, full = answers(state_dir, ["a", "b", "c"])
    assert read == full
    assert read[1]["state"] == "UPSTREAM_FAILED" and read[2]["state"] == "WAITING"


def test_jobs_of_a_finished_run_read_over_several_blocks_and_a_run_on_agents(state_dir: Path) -> None:
    n = FACT_BLOCK + 40
    spec: dict[str, dict] = {f"j{k}": {"deps": [f"j{k - 1}"]} if k else {} for k in range(n)}
    spec["j1"]["pool"] = "gpu"
    spec["side"] = {"deps": ["j0"]}
    spec["side2"] = {"deps": ["j0"]}
    r = Journaled(state_dir, make_plan(spec), slots=1)
    r.end("j0", 0)
    r.stop("interrupted")
    picks = ["j0", "j1", "j2", "side", "side2", f"j{FACT_BLOCK - 1}", f"j{FACT_BLOCK}", f"j{n - 1}"]
    read, full = answers(state_dir, picks)
    assert read == full
    assert read[1]["state"] == "READY" and any("pool gpu" in line for line in read[1]["reasons"])
    # One side job took this host's slot; the other waits for it, and says who holds it.
    assert {read[3]["state"], read[4]["state"]} == {"QUEUED", "READY"}
    ready = read[3] if read[3]["state"] == "READY" else read[4]
    assert any("this host" in line and "(side" in line for line in ready["reasons"]), ready


def test_a_finished_run_answers_without_a_rebuilt_core_and_unknown_jobs_are_refused(
        state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = Journaled(state_dir, make_plan({"a": {}, "b": {"deps": ["a"]}}))
    r.end("a", 0)
    r.end("b", 0, now=4.0)
    r.stop("succeeded")
    monkeypatch.setattr("wloadctl.client.journal_core", lambda *a: pytest.fail("the plan was loaded"))
    with RunClient(state_dir) as c:
        # A stopped run's flat rows hold every transition: a succeeded job's attempts are read there.
        assert c.store.attempts_at(c.run.id, [0, 1]) == {0: 1, 1: 1}
        w = c.why("b")
        assert w["state"] == "SUCCEEDED" and w["reasons"] == ["succeeded after 1 attempt(s)"]
        rep = c.control("why", ["nope"])
        assert rep["ok"] is False and rep["error"] == "unknown job(s): nope"
        assert c.store.actions(c.run.id)[-1][2:6] == ("why", "nope", "", "unknown job(s): nope")


def test_a_misspelt_job_id_is_answered_with_the_job_it_was_likely_meant_to_be(state_dir: Path) -> None:
    # (every verb said only "unknown job 'load_acount'", and the operator had to list the run to find the id)
    r = Journaled(state_dir, make_plan({"load_accounts": {}, "post_ledger": {"deps": ["load_accounts"]}}))
    r.end("load_accounts", 0)
    r.stop("interrupted")
    with RunClient(state_dir) as c:
        for read in (c.why, c.history, c.log_file, c.definition, c.lineage):
            with pytest.raises(ControlError, match=r"\(did you mean 'load_accounts'\?\)$"):
                read("load_acount")
        rep = c.control("hold", ["Post_Ledger", "nothing_like_it", "zz*"])
        assert rep["ok"] is False
        assert rep["error"] == ("unknown job(s): Post_Ledger (did you mean 'post_ledger'?), nothing_like_it; "
                                "no job matches 'zz*'")
        # A verb applied on the journal answers with the keys a live scheduler's reply has (`touched` was missing)
        rep = c.control("rerun", ["load_accounts"])
        assert rep["ok"] and rep["touched"] == 1 and rep["results"][0][:2] == ["load_accounts", True], rep


def test_a_glob_verb_on_a_stopped_run_journals_its_audit_rows_with_its_transitions_in_one_commit(
        state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (each job's audit row was committed alone after the transitions: `rerun 's0*'` over 4,750 jobs of a stopped
    # run took six minutes of fsyncs, and a crash between the commits kept the effect without its record)
    from wloadctl.store.base import Store as BaseStore

    n = 60
    r = Journaled(state_dir, make_plan({f"load_{k}": {} for k in range(n)}))
    for k in range(n):
        r.end(f"load_{k}", 0)
    r.stop("succeeded")
    turns: list[int] = []
    real = BaseStore.write_turn if "write_turn" not in type(r.store).__dict__ else type(r.store).write_turn

    def one_turn(self: Any, run: int, transitions: Any, *a: Any, actions: Any = (), **kw: Any) -> None:
        turns.append(len(actions))
        real(self, run, transitions, *a, actions=actions, **kw)

    monkeypatch.setattr(type(r.store), "write_turn", one_turn)
    monkeypatch.setattr(BaseStore, "record_action", lambda *a, **kw: pytest.fail("an audit row committed alone"))
    with RunClient(state_dir) as c:
        rep = c.control("rerun", ["load_*"], reason="bad feed")
        assert rep["ok"] and rep["touched"] == n, rep
        assert turns == [n]
        assert len([a for a in c.store.actions(c.run.id) if a[2] == "rerun" and a[6]]) == n
        assert c.verify_audit()["ok"], c.verify_audit()


def test_a_run_without_kept_facts_is_explained_from_its_plan(state_dir: Path) -> None:
    plan = make_plan({"a": {}, "b": {"deps": ["a"]}})
    st = Store.open(state_dir)
    run = st.create_run("r1", plan.name, "p.yaml", "digest-1", "name: t", plan.jobs.keys(), "2026-12-02", 1.0)
    st.set_plan_blob(run.id, encode_plan(plan))
    st.set_status(run.id, "interrupted", None)
    st.close()
    with RunClient(state_dir) as c:
        assert c._why_read({"jobs": ["b"], "user": "ann", "reason": ""}) is None
        assert c.why("b")["state"] == "WAITING"


def test_a_jobs_index_is_found_by_the_shapes_line_offsets_or_by_counting_lines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = make_plan({f"job_{k}": {"deps": [f"job_{k - 1}"]} if k else {} for k in range(50)})
    ids = list(plan.jobs)
    write_ids(tmp_path, "r1", ids)
    assert [index_of_id(tmp_path, "r1", j) for j in ("job_0", "job_17", "job_49")] == [0, 17, 49]
    write_shape(tmp_path, "r1", shape_of_core(SchedulerCore(plan, 1), {}, None))
    monkeypatch.setattr("wloadctl.runshape.find_id", lambda *a: pytest.fail("the lines were counted"))
    assert [index_of_id(tmp_path, "r1", j) for j in ids] == list(range(50))
    assert index_of_id(tmp_path, "r1", "job_") is None and index_of_id(tmp_path, "r1", "ob_3") is None
    assert index_of_id(tmp_path, "nope", "job_0") is None


def test_logs_of_a_loop_over_a_list_name_its_instances_whether_it_has_ended_or_not(state_dir: Path) -> None:
    # (only a loop over an upstream's output was told its instances have the logs; one over a list ended read
    # as any job that never ran, and one whose instances run as "has not run yet")
    from wloadctl.core.planfile import load_plan_text

    plan = load_plan_text("name: t\njobs:\n  fan: {command: 'echo {item}', for_each: [emea, amer]}\n")
    told = "(its for_each instances fan@ITEM have theirs)"
    r = Journaled(state_dir, plan)
    r.end("fan@emea", 0)
    r.stop("interrupted")
    with RunClient(state_dir) as c, pytest.raises(ControlError, match=r"\(state WAITING\), so it has no log ") as e:
        c.log_file("fan")
    assert e.value.message.endswith(told)
    r.store = Store.open(state_dir)
    r.end("fan@amer", 0)
    r.stop("succeeded")
    with RunClient(state_dir) as c, pytest.raises(ControlError, match=r"\(state SUCCEEDED\), so it has no log ") as e:
        c.log_file("fan")
    assert e.value.message.endswith(told)


def test_a_loop_over_a_list_reads_as_a_loop_its_instances_unended_refuse_hold_skip_and_set_ok(
        state_dir: Path) -> None:
    # (the run's facts flag loops over an upstream's output alone: one over a plan list read as a plain job, offering
    # the verbs its instances refuse and missing its loop line)
    from wloadctl.core.planfile import load_plan_text

    plan = load_plan_text("name: t\njobs:\n  open: {command: 'true'}\n"
                          "  fan: {command: 'echo {item}', depends_on: [open], for_each: [emea, amer]}\n"
                          "  post: {command: 'true', depends_on: [fan]}\n")

    def asked(sd: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """(`why fan` as the CLI asks it, as a core rebuilt from the whole journal says it)"""
        with RunClient(sd) as c:
            rep = c.control("why", ["fan"])
            assert rep["ok"], rep
            core = journal_core(c.store, c.run)
            return rep["why"][0], explain(core, core.index["fan"], time.time(), c._undispatched())

    # Given a run stopped while the loop's instances wait
    r = Journaled(state_dir, plan)
    r.end("open", 0)
    r.stop("interrupted")
    # Then `why` of the loop says it is one, and offers none of the verbs its unended instances refuse
    said, full = asked(state_dir)
    assert said == full
    assert said["verbs"] == [] and any("a for_each over [emea, amer]" in x for x in said["reasons"]), said
    # And, once the run has gone on and ended, that it was a loop
    r.store = Store.open(state_dir)
    for job in ("fan@emea", "fan@amer", "post"):
        r.end(job, 0)
    r.stop("succeeded")
    said, full = asked(state_dir)
    assert said == full and said["reasons"][0].endswith("(a for_each over [emea, amer])"), said


def test_status_says_the_time_left_of_a_retry_delay_as_why_does_not_the_delay_it_was_given(state_dir: Path) -> None:
    # Given a stopped run whose job failed 5 s ago and waits 60 s (backoff and jitter aside) for its retry
    t0 = time.time() - 5.0
    r = Journaled(state_dir, make_plan({"flaky": {"retry": RetryPolicy(count=2, delay=60.0)}}))
    r.end("flaky", 1, now=t0)
    given = r.core.reasons[0]
    delay = float(given.rsplit(" in ", 1)[1].rstrip("s"))
    r.stop("interrupted")
    with RunClient(state_dir) as c:
        # When status, --at a moment of the wait, and why are read
        job = c.status()["jobs"][0]
        then = c.status_at(t0 + 1.0)["jobs"][0]
        why = c._why_read({"jobs": ["flaky"], "user": "ann", "reason": ""})
    # Then status gives the time left now (the figure why gives), not the delay journaled 5 s ago
    assert why is not None
    ready = next(line for line in why["why"][0]["reasons"] if "becomes READY" in line)
    left = float(ready.rsplit("becomes READY in ", 1)[1].rstrip("s"))
    said = job["reason"]
    assert said.startswith("exit status 1; retry 1/2 in ") and said != given, said
    assert abs(float(said.rsplit(" in ", 1)[1].rstrip("s")) - left) <= 0.2, (said, ready)
    assert abs(job["retry_due"] - (t0 + delay)) < 0.01
    # and --at a moment gives the time left at that moment
    assert then["reason"] == f"exit status 1; retry 1/2 in {delay - 1.0:.1f}s", then
    # and once the delay is over it says the retry is due
    with RunClient(state_dir) as c:
        late = c.status_at(t0 + delay + 1.0)["jobs"][0]
    assert late["reason"] == "exit status 1; retry 1/2 due now", late
