"""Four eyes in the core: confirmation jobs wait for approve, and the book of requests rebuilt from the journal."""

from __future__ import annotations

import dataclasses

from tests.conftest import make_plan
from wloadctl.core.commands import Dispatch, Reply
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import JobExitedEvent, OperatorEvent, RunStartedEvent
from wloadctl.core.explain import why
from wloadctl.core.foureyes import PendingBook, gated_jobs, pending_outcome, settled_outcome
from wloadctl.core.plan import Plan
from wloadctl.core.states import JobState as S


def confirm_plan() -> Plan:
    plan = make_plan({"open": {}, "post": {"deps": ["open"]}})
    jobs = dict(plan.jobs)
    jobs["post"] = dataclasses.replace(jobs["post"], confirm=True)
    return dataclasses.replace(plan, jobs=jobs)


def replies(cmds: list) -> list[tuple[int, bool, str]]:
    return [r for c in cmds if isinstance(c, Reply) for r in c.results]


def test_a_confirmation_job_is_held_at_the_start_and_only_approve_lets_it_run() -> None:
    core = SchedulerCore(confirm_plan(), slots=2)
    core.handle(RunStartedEvent(0.0))
    assert S(core.state[1]) is S.HELD
    assert "waiting for confirmation" in core.reasons[1]
    assert "wloadctl approve post" in why(core, 1, 1.0)["reasons"][0]
    assert "approve" in why(core, 1, 1.0)["verbs"] and "release" not in why(core, 1, 1.0)["verbs"]
    # release does not let a confirmation job go, and approve lets nothing else go
    assert replies(core.handle(OperatorEvent("release", (1,), 1.0))) == [
        (1, False, "job 'post' waits for confirmation: `wloadctl approve post` lets it run")]
    [(_, ok, msg)] = replies(core.handle(OperatorEvent("approve", (1,), 2.0, user="ana")))
    assert ok and msg == "job 'post' confirmed, now WAITING"
    # Then it runs once its upstream has
    cmds = core.handle(JobExitedEvent(job=0, attempt=core.attempt[0], executor=0, exit_code=0, now=3.0))
    assert S(core.state[1]) is S.QUEUED
    assert any(isinstance(c, Dispatch) and (1, 1) in c.tasks for c in cmds)


def test_approve_of_a_job_that_does_not_wait_for_confirmation_is_refused() -> None:
    core = SchedulerCore(make_plan({"a": {}}), slots=0)
    core.handle(RunStartedEvent(0.0))
    core.handle(OperatorEvent("hold", (0,), 1.0))
    [(_, ok, msg)] = replies(core.handle(OperatorEvent("approve", (0,), 1.0)))
    assert not ok and "does not wait for confirmation" in msg


def test_a_restored_run_does_not_hold_an_approved_confirmation_job_again() -> None:
    core = SchedulerCore(confirm_plan(), slots=2)
    # The journal says: post was held, then approved (WAITING again)
    core.restore([(1, int(S.WAITING), 0)], 5.0)
    core.handle(RunStartedEvent(5.0, cause_id="resume"))
    assert S(core.state[1]) is S.WAITING
    # A run that crashed before its first turn was journaled holds it still
    fresh = SchedulerCore(confirm_plan(), slots=2)
    fresh.restore([], 5.0)
    fresh.handle(RunStartedEvent(5.0, cause_id="resume"))
    assert S(fresh.state[1]) is S.HELD


def test_which_verbs_need_a_second_person() -> None:
    plan = make_plan({"a": {}, "b": {}})
    b = dataclasses.replace(plan.jobs["b"], four_eyes=("rerun",))
    assert gated_jobs("rerun", [plan.jobs["a"], b]) == ("b",)
    assert gated_jobs("kill", [plan.jobs["a"], b]) == ()
    assert gated_jobs("cancel", []) == ()


def test_the_book_of_requests_is_rebuilt_from_the_journals_actions() -> None:
    book = PendingBook()
    r1 = book.open("kill", ["load"], "alice", "stuck", 1.0)
    r2 = book.open("rerun", ["post", "fx_*"], "alice", "", 2.0, downstream=True)
    r3 = book.open("cancel", [], "bob", "", 3.0)
    rows = [
        (1.0, "alice", "kill", "load", "stuck", pending_outcome(r1), False),
        (2.0, "alice", "rerun", "post; fx_*", "", pending_outcome(r2), False),
        (2.5, "alice", "approve", "R1", "", "approve of R1 refused: alice asked for it", False),
        (3.0, "bob", "cancel", "*", "", pending_outcome(r3), False),
        (4.0, "bob", "approve", "R1", "", settled_outcome("approved", r1, "bob"), True),
        (5.0, "bob", "reject", "R3", "", settled_outcome("withdrawn", r3, "bob"), True),
    ]
    again = PendingBook.from_actions(rows)
    assert list(again.requests) == ["R2"]
    assert again.requests["R2"] == r2
    assert again.open("skip", ["x"], "carol", "", 6.0).id == "R4"


def test_a_verb_reaches_the_jobs_it_names_a_loops_instances_and_with_rerun_downstream_everything_below() -> None:
    from tests.core.test_loops import dynamic, finish_list
    from wloadctl.core.reach import reached

    core = SchedulerCore(dynamic(), slots=10)
    core.handle(RunStartedEvent(0.0))
    finish_list(core, {"files": ["a", "b"]})

    def ids(verb: str, *jobs: str, downstream: bool = False) -> list[str]:
        return [core.ids[i] for i in reached(core, verb, [core.index[j] for j in jobs], downstream)]

    assert ids("rerun", "list") == ["list"]
    assert ids("rerun", "list", downstream=True) == ["list", "load", "post"]
    assert ids("retry", "load") == ["load", "load@a", "load@b"]
    assert ids("rerun", "load", downstream=True) == ["load", "load@a", "load@b", "post"]
    assert ids("skip", "load") == ["load"]  # (skip, set-ok and hold of a loop are about the loop itself)
    assert ids("kill", "list", downstream=True) == ["list"]  # (--downstream is rerun's alone)


def test_a_request_keeps_the_four_eyes_jobs_it_reaches_and_its_approve_covers_no_others() -> None:
    from wloadctl.core.foureyes import request_words, second_message, uncovered

    book = PendingBook()
    r1 = book.open("rerun", ["load"], "alice", "bad feed", 1.0, downstream=True, gated=["post_ledger", "post_gl"])
    row = (1.0, "alice", "rerun", "load", "bad feed", pending_outcome(r1), False)
    assert pending_outcome(r1) == ("pending R1: needs another person's `wloadctl approve R1` (with downstream); four "
                                   "eyes of post_ledger, post_gl")
    assert PendingBook.from_actions([row]).requests["R1"] == r1
    assert r1.describe() == "rerun load with downstream (reaching post_ledger, post_gl) by alice"
    assert request_words(r1.as_dict()) == "rerun load with downstream (reaching post_ledger, post_gl)"
    assert second_message(r1).startswith("R1: rerun needs a second person (it reaches post_ledger, post_gl, whose "
                                         "four_eyes name rerun): ")
    assert uncovered(r1, ["post_ledger", "load"]) == []
    assert uncovered(r1, ["post_ledger", "post_fx"]) == ["post_fx"]
    # A request asked before requests kept these still reads back (its approve covers the jobs it named)
    old = (2.0, "bob", "kill", "load", "", "pending R2: needs another person's `wloadctl approve R2`", False)
    assert PendingBook.from_actions([old]).requests["R2"].gated == ()


def test_reject_of_a_word_that_is_no_request_id_says_so() -> None:
    from wloadctl.core.foureyes import judge

    book = PendingBook()
    req, why = judge("reject", ["xyz"], "ana", book, lambda _n: False)
    assert req is None and why == ("'xyz' is not a pending request id (ids read R1, R2, ...; `wloadctl pending` "
                                   "lists those open)")
    _, why = judge("reject", ["R9"], "ana", book, lambda _n: False)
    assert why is not None and why.startswith("no pending request R9")
