"""skip and set-ok of a job whose upstreams have not all ended: it waits for them, never runs, then ends as the
operator said; its downstream waits for its upstreams as before. Called off by release, rerun or hold; journaled."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import make_plan
from tests.core.test_engine import dispatched, finish, states
from tests.core.test_verbs import op
from wloadctl.core.commands import Persist
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import RunStartedEvent
from wloadctl.core.explain import why
from wloadctl.core.forcing import Forced, forced_of
from wloadctl.core.holds import holds_journaled
from wloadctl.core.plan import Plan
from wloadctl.core.replay import journaled
from wloadctl.core.states import JobState

S = JobState


def night(confirm: bool = False) -> SchedulerCore:
    """load_accounts -> validate -> post_ledger, and check (a second upstream of validate, none of post_ledger's)."""
    plan = make_plan({"load_accounts": {}, "check": {}, "validate": {"deps": ["load_accounts", "check"]},
                      "post_ledger": {"deps": ["validate"]}})
    if confirm:
        plan = Plan(plan.name, {**plan.jobs, "validate": dataclasses.replace(plan.jobs["validate"], confirm=True)},
                    plan.resources)
    core = SchedulerCore(plan, slots=4)
    core.handle(RunStartedEvent(0.0))
    return core


def sent(cmds: list, core: SchedulerCore) -> list[str]:
    return [core.ids[i] for i, _a in dispatched(cmds)]


@pytest.mark.parametrize(("verb", "ends"), [("set-ok", "SUCCEEDED"), ("skip", "SKIPPED")])
def test_a_waiting_job_skipped_or_set_ok_waits_for_its_upstreams_and_never_runs(verb: str, ends: str) -> None:
    core = night()
    v = core.index["validate"]
    # When the operator sets ok (skips) validate while both its upstreams run
    rep, cmds = op(core, verb, "validate")
    [(_i, ok, msg)] = rep.results
    words = "set ok" if verb == "set-ok" else "skipped"
    assert ok and msg == (f"job 'validate' will be {words} once its upstreams have ended ('load_accounts' (QUEUED), "
                          "'check' (QUEUED) not yet), without running; its downstream waits until then; "
                          "`wloadctl release validate` calls it off")
    # Then it stays WAITING, and so does its downstream; the journal says what waits, and who asked
    assert states(core)["validate"] == "WAITING" and states(core)["post_ledger"] == "WAITING"
    [tx] = [t for c in cmds if isinstance(c, Persist) for t in c.transitions if t[0] == v]
    said = f"will be {words} when its upstreams end, by ana: test"
    assert (S(tx[1]), S(tx[2]), tx[7]) == (S.WAITING, S.WAITING, said)
    assert why(core, v, 9.0)["reasons"][0].startswith(f"will be {words} when its upstreams end, by ana: test; it "
                                                      "will not run")
    assert why(core, v, 9.0)["verbs"][:2] == ["release", "rerun"]
    # When one upstream ends, it still waits for the other
    assert sent(finish(core, "load_accounts", now=10.0), core) == []
    assert states(core)["validate"] == "WAITING"
    # When the last one ends: it ends as the operator said, unrun, and its downstream starts
    assert sent(finish(core, "check", now=11.0), core) == ["post_ledger"]
    assert states(core)["validate"] == ends and core.attempt[v] == 0
    assert core.reasons[v] == f"{words} by ana: test (asked while its upstreams ran; they have ended)"
    assert not core.forcing and not core.gate[v]
    core.validate()


def test_an_upstream_that_fails_meanwhile_does_not_undo_the_operators_word() -> None:
    core = night()
    op(core, "set-ok", "validate")
    # When load_accounts fails while check still runs: validate waits on (no UPSTREAM_FAILED), post_ledger too
    assert sent(finish(core, "load_accounts", code=1, now=10.0), core) == []
    assert states(core)["validate"] == "WAITING" and states(core)["post_ledger"] == "WAITING"
    # When check ends: validate is set ok, as asked, and post_ledger runs
    assert sent(finish(core, "check", now=11.0), core) == ["post_ledger"]
    v = core.index["validate"]
    assert states(core)["validate"] == "SUCCEEDED"
    assert core.reasons[v] == ("set ok by ana: test (asked while its upstreams ran; they have ended; upstream "
                               "load_accounts did not succeed)")
    core.validate()


def test_release_calls_the_pending_verb_off_and_the_job_runs_after_its_upstreams() -> None:
    core = night()
    op(core, "skip", "validate")
    rep, _ = op(core, "release", "validate")
    assert rep.results[0][1:] == (True, "job 'validate': its skip by ana is called off; it runs once its upstreams "
                                        "have ended")
    assert not core.forcing and states(core)["validate"] == "WAITING"
    finish(core, "load_accounts", now=10.0)
    assert sent(finish(core, "check", now=11.0), core) == ["validate"]
    core.validate()


def test_a_call_off_after_an_upstream_failed_ends_the_job_as_that_failure_would_have() -> None:
    core = night()
    op(core, "skip", "validate")
    finish(core, "load_accounts", code=1, now=10.0)
    rep, _ = op(core, "rerun", "validate")
    assert rep.results[0][1:] == (True, "job 'validate': its skip by ana is called off; now UPSTREAM_FAILED")
    assert states(core)["validate"] == "UPSTREAM_FAILED" and states(core)["post_ledger"] == "UPSTREAM_FAILED"
    core.validate()


def test_hold_calls_the_pending_verb_off_and_holds_the_job() -> None:
    core = night()
    op(core, "set-ok", "validate")
    rep, _ = op(core, "hold", "validate")
    assert rep.results[0][1:] == (True, "job 'validate' held: its set-ok by ana is called off")
    finish(core, "load_accounts", now=10.0)
    finish(core, "check", now=11.0)
    assert states(core)["validate"] == "HELD" and not core.forcing
    core.validate()


def test_a_second_skip_or_set_ok_replaces_the_first_and_a_cancel_ends_it() -> None:
    core = night()
    op(core, "set-ok", "validate")
    op(core, "skip", "validate")
    assert core.forcing[core.index["validate"]] == Forced(int(S.SKIPPED), "ana", "test")
    op(core, "cancel")
    assert states(core)["validate"] == "CANCELLED" and not core.forcing
    core.validate()


def test_a_verb_that_does_not_apply_says_what_calls_it_off() -> None:
    core = night()
    op(core, "skip", "validate")
    rep, _ = op(core, "retry", "validate")
    assert rep.results[0][1:] == (False, "job 'validate' is WAITING: retry does not apply; hold, set-ok, skip would "
                                         "apply (its skip waits for its upstreams: release or rerun calls it off)")


def test_a_held_job_set_ok_while_its_upstreams_run_is_no_longer_held_and_waits_for_them() -> None:
    core = night()
    op(core, "hold", "validate")
    op(core, "set-ok", "validate")
    assert states(core)["validate"] == "WAITING" and not core.holds
    finish(core, "load_accounts", now=10.0)
    assert sent(finish(core, "check", now=11.0), core) == ["post_ledger"]
    assert states(core)["validate"] == "SUCCEEDED"
    core.validate()


def test_a_confirmation_job_whose_pending_set_ok_is_called_off_waits_for_its_approve_again() -> None:
    core = night(confirm=True)
    assert states(core)["validate"] == "HELD"
    op(core, "set-ok", "validate")
    assert states(core)["validate"] == "WAITING"
    rep, _ = op(core, "release", "validate")
    assert rep.results[0][1:] == (True, "job 'validate': its set-ok by ana is called off; it waits for confirmation "
                                        "again: `wloadctl approve validate` lets it run")
    finish(core, "load_accounts", now=10.0)
    assert sent(finish(core, "check", now=11.0), core) == []
    assert states(core)["validate"] == "HELD"
    # (a resume reads the same from the journaled actions)
    actions = [(1.0, "ana", "set-ok", "validate", "test", "job 'validate' will be set ok ...", True),
               (2.0, "ana", "release", "validate", "test", rep.results[0][2], True)]
    held = holds_journaled(actions, core)  # type: ignore[arg-type]
    assert held == {core.index["validate"]: "waiting for confirmation: `wloadctl approve validate`"}
    core.validate()


def test_an_if_is_not_judged_for_a_job_skipped_while_its_upstreams_ran() -> None:
    plan = make_plan({"a": {}, "b": {"deps": ["a"]}, "c": {"deps": ["b"]}})
    plan = Plan(plan.name, {**plan.jobs, "b": dataclasses.replace(plan.jobs["b"], condition="vars.nope == 1")},
                plan.resources)
    core = SchedulerCore(plan, slots=4)
    core.handle(RunStartedEvent(0.0))
    op(core, "skip", "b")
    assert sent(finish(core, "a", now=10.0), core) == ["c"]
    assert states(core)["b"] == "SKIPPED" and core.index["b"] not in core.branches.branch_skipped
    core.validate()


def test_an_immediate_skip_still_ends_a_job_whose_upstreams_have_ended() -> None:
    core = night()
    op(core, "hold", "validate")
    finish(core, "load_accounts", now=10.0)
    finish(core, "check", now=11.0)
    rep, cmds = op(core, "skip", "validate")
    assert rep.results[0][1:] == (True, "job 'validate' is now SKIPPED") and sent(cmds, core) == ["post_ledger"]


def test_a_resume_reads_the_pending_verb_back_from_the_jobs_last_transition() -> None:
    # Given a run whose validate was set ok while its upstreams ran, then the scheduler died
    core = night()
    journal: dict[int, list[tuple]] = {}
    cmds = op(core, "set-ok", "validate")[1]
    for c in cmds:
        if isinstance(c, Persist):
            for t in c.transitions:
                journal.setdefault(t[0], []).append(t[1:])
    rows = [(i, core.state[i], core.attempt[i]) for i in range(core.n)]
    # When a new core is restored from the journal
    again = SchedulerCore(core.plan, slots=4)
    j = journaled(journal, again.index)
    assert j.forced == {again.index["validate"]: Forced(int(S.SUCCEEDED), "ana", "test")}
    again.restore(rows, 20.0, journaled=j)
    again.handle(RunStartedEvent(20.0, cause_id="resume"))
    # Then validate waits on its set-ok, and ends so when its upstreams end
    assert states(again)["validate"] == "WAITING"
    finish(again, "load_accounts", now=21.0)
    assert sent(finish(again, "check", now=22.0), again) == ["post_ledger"]
    assert states(again)["validate"] == "SUCCEEDED" and again.attempt[again.index["validate"]] == 0
    again.validate()


def test_a_pending_verb_whose_upstreams_ended_while_no_scheduler_ran_ends_at_the_resume() -> None:
    core = night()
    v = core.index["validate"]
    rows = [(core.index["load_accounts"], int(S.FAILED), 1), (core.index["check"], int(S.SUCCEEDED), 1),
            (v, int(S.WAITING), 0)]
    again = SchedulerCore(core.plan, slots=4)
    waits = (0, 0, 0, 1.0, -1, None, Forced(int(S.SKIPPED), "ana").pending())
    again.restore(rows, 20.0, journaled=journaled({v: [waits]}, again.index))
    assert states(again)["validate"] == "SKIPPED"
    assert sent(again.handle(RunStartedEvent(20.0, cause_id="resume")), again) == ["post_ledger"]
    again.validate()


def test_the_pending_words_read_back() -> None:
    for f in (Forced(int(S.SUCCEEDED), "alice", "known ok"), Forced(int(S.SKIPPED), "broker:bob", "a: b"),
              Forced(int(S.SKIPPED)), Forced(int(S.SUCCEEDED), "", "why")):
        assert forced_of(f.pending()) == f
    assert forced_of("upstream rerun") is None and forced_of("will be run") is None


@pytest.mark.parametrize(("verb", "ends"), [("set-ok", "SUCCEEDED"), ("skip", "SKIPPED")])
def test_a_job_held_after_a_resume_for_its_lost_executor_is_set_ok_or_skipped_at_once(verb: str, ends: str) -> None:
    from wloadctl.core.events import JobExitedEvent

    plan = make_plan({"load": {}, "post": {"deps": ["load"], "idempotent": False}, "report": {"deps": ["post"]}})
    core = SchedulerCore(plan, slots=4)
    # Given a run resumed while post (which may not run twice) ran, its upstream long succeeded
    rows = [(core.index["load"], int(S.SUCCEEDED), 1), (core.index["post"], int(S.RUNNING), 1)]
    core.restore(rows, 20.0)
    core.handle(RunStartedEvent(20.0, cause_id="resume"))
    # and held once its executor is found lost
    core.handle(JobExitedEvent(core.index["post"], 1, 0, -1, 21.0, lost=True, cause_id="recovery"))
    assert states(core)["post"] == "HELD"
    # When the operator, who checked it ran to its end, sets it ok (or skips it)
    rep, cmds = op(core, verb, "post")
    # Then it ends so at once, and its downstream goes on
    assert rep.results[0][1:] == (True, f"job 'post' is now {ends}")
    assert sent(cmds, core) == ["report"]
    core.validate()
