"""Operator verbs on the core: what each does, what it refuses and why, and what it cascades."""

from __future__ import annotations

from tests.conftest import make_plan
from tests.core.test_engine import dispatched, finish, states
from wloadctl.core.commands import Kill, Persist, Reply, RunFinished
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import ExecutorLostEvent, JobStartedEvent, OperatorEvent, RunStartedEvent
from wloadctl.core.explain import why
from wloadctl.core.states import JobState
from wloadctl.core.verbs import SUGGEST_AMONG, applicable_verbs, close_job, resolve_jobs, unknown_text

S = JobState


def op(core: SchedulerCore, verb: str, *jobs: str, downstream: bool = False) -> tuple[Reply, list]:
    cmds = core.handle(OperatorEvent(verb, tuple(core.index[j] for j in jobs), 9.0, user="ana",
                                     reason="test", downstream=downstream))
    reply = next(c for c in cmds if isinstance(c, Reply))
    return reply, cmds


def chain() -> SchedulerCore:
    core = SchedulerCore(make_plan({"a": {}, "b": {"deps": ["a"]}, "c": {"deps": ["b"]}, "x": {}}), slots=10)
    core.handle(RunStartedEvent(0.0))
    return core


def test_hold_keeps_a_waiting_job_from_starting_until_release() -> None:
    core = chain()
    rep, _ = op(core, "hold", "b")
    assert rep.results[0][1]
    assert dispatched(finish(core, "a")) == []
    assert states(core)["b"] == "HELD"
    rep, cmds = op(core, "release", "b")
    assert states(core)["b"] == "QUEUED"
    assert dispatched(cmds) == [(1, 1)]
    core.validate()


def test_refusal_names_job_state_and_what_would_apply() -> None:
    core = chain()
    rep, _ = op(core, "release", "a")
    ok, msg = rep.results[0][1], rep.results[0][2]
    assert not ok
    assert msg == "job 'a' is QUEUED: release does not apply; kill would apply"


def test_retry_of_failed_job_reopens_its_upstream_failed_dependents() -> None:
    core = chain()
    finish(core, "a", code=1)
    assert states(core)["c"] == "UPSTREAM_FAILED"
    rep, cmds = op(core, "retry", "a")
    assert rep.results[0][1]
    assert states(core) == {"a": "QUEUED", "b": "WAITING", "c": "WAITING", "x": "QUEUED"}
    assert (0, 2) in dispatched(cmds)
    finish(core, "a")
    finish(core, "b")
    finish(core, "c")
    assert states(core)["c"] == "SUCCEEDED"
    core.validate()


def test_rerun_downstream_reruns_exactly_the_descendants() -> None:
    core = chain()
    for j in ("a", "x", "b", "c"):
        finish(core, j)
    rep, _cmds = op(core, "rerun", "b", downstream=True)
    st = states(core)
    assert st == {"a": "SUCCEEDED", "b": "QUEUED", "c": "WAITING", "x": "SUCCEEDED"}
    assert sorted(core.ids[i] for i in rep.touched) == ["b", "c"]


def test_rerun_without_downstream_leaves_succeeded_dependents() -> None:
    core = chain()
    for j in ("a", "x", "b", "c"):
        finish(core, j)
    op(core, "rerun", "a")
    assert states(core) == {"a": "QUEUED", "b": "SUCCEEDED", "c": "SUCCEEDED", "x": "SUCCEEDED"}


def test_rerun_pulls_a_ready_dependent_back_to_waiting() -> None:
    core = SchedulerCore(make_plan({"a": {}, "b": {"deps": ["a"]}}), slots=1)
    core.handle(RunStartedEvent(0.0))
    op(core, "hold", "b")
    finish(core, "a")
    op(core, "rerun", "a")
    assert core.unmet[1] == 1
    op(core, "release", "b")
    assert states(core)["b"] == "WAITING"


def test_kill_asks_the_shell_and_the_exit_is_final_without_retry() -> None:
    core = chain()
    core.handle(JobStartedEvent(0, 1, 0, 4242, 1.0))
    _rep, cmds = op(core, "kill", "a")
    assert any(isinstance(c, Kill) and c.job == 0 for c in cmds)
    finish(core, "a", code=137, signal=9)
    assert states(core)["a"] == "FAILED"
    assert core.reasons[0].startswith("killed by ana")


def test_set_ok_unblocks_dependents() -> None:
    core = chain()
    finish(core, "a", code=1)
    _rep, _cmds = op(core, "set-ok", "a")
    assert states(core)["a"] == "SUCCEEDED"
    assert states(core)["b"] == "QUEUED"


def test_skip_of_waiting_job_lets_dependents_run() -> None:
    core = chain()
    op(core, "skip", "b")
    finish(core, "a")
    assert states(core)["b"] == "SKIPPED"
    assert states(core)["c"] == "QUEUED"


def test_cancel_drains_the_run() -> None:
    core = chain()
    _rep, _ = op(core, "cancel")
    assert states(core)["b"] == "CANCELLED"
    assert states(core)["a"] == "QUEUED"
    assert dispatched(finish(core, "a")) == []


def test_a_second_cancel_is_not_applied_again() -> None:
    core = chain()
    rep, _ = op(core, "cancel")
    assert rep.results[0][1] and "2 jobs will not start" in rep.results[0][2]
    rep, _ = op(core, "cancel")
    assert rep.results == [(-1, False, "the run is cancelled already: 2 running jobs finish")]


def test_a_cancelled_run_refuses_verbs_that_would_start_jobs_and_ends() -> None:
    """Nothing is dispatched in a cancelled run: a job rerun or released there would wait READY for good, and keep
    the drained run from ending."""
    core = chain()
    op(core, "cancel")
    for verb in ("rerun", "retry", "release"):
        rep, _ = op(core, verb, "b")
        assert [(ok, msg.startswith("the run is cancelled: nothing new starts in it")) for _i, ok, msg in rep.results] \
            == [(False, True)], rep.results
    assert states(core)["b"] == "CANCELLED"
    # And what a refusal names as applying leaves them out (it named rerun, refused in its turn)
    rep, _ = op(core, "hold", "b")
    assert rep.results[0][2] == "job 'b' is CANCELLED: hold does not apply; set-ok, skip would apply", rep.results
    finish(core, "a")
    finish(core, "x")
    assert core.is_finished()


def test_a_cancelled_run_whose_running_job_loses_its_executor_ends() -> None:
    """The lost job would be READY again, which nothing dispatches in a cancelled run: the run would never end."""
    core = chain()
    core.handle(JobStartedEvent(0, 1, 0, 100, 1.0))
    op(core, "cancel")
    finish(core, "x")
    cmds = core.handle(ExecutorLostEvent(0, 10.0))
    assert states(core)["a"] == "CANCELLED" and dispatched(cmds) == []
    assert any(isinstance(c, RunFinished) for c in cmds) and core.is_finished()
    core.validate()


def test_a_cancel_ends_an_until_job_after_its_iteration_and_a_loop_with_its_running_instances() -> None:
    from tests.core.test_conditions import exit_with, with_fields
    from wloadctl.core.loops import expand_for_each
    from wloadctl.core.plan import Plan

    base = make_plan({"poll": {}, "each": {"command": "echo {item}"}, "after": {"deps": ["each"]}})
    plan = with_fields(base, poll={"until": "result.ready == 1", "max_iterations": 50},
                       each={"for_each": ("a", "b")})
    plan = expand_for_each(Plan(plan.name, plan.jobs, plan.resources, plan.variables))
    core = SchedulerCore(plan, slots=2)  # each@a and each@b run, poll waits for a slot
    core.handle(RunStartedEvent(0.0))
    assert states(core)["poll"] == "READY" and states(core)["each@a"] == "QUEUED"
    finish(core, "each@b")  # (poll takes its slot)
    assert states(core)["poll"] == "QUEUED"
    op(core, "cancel")
    # the loop, whose instance runs, is not cancelled under it
    assert states(core)["each"] == "WAITING"
    exit_with(core, "poll", 0, {"ready": 0})  # until not met: no iteration starts in a cancelled run
    assert states(core)["poll"] == "CANCELLED"
    finish(core, "each@a")
    assert states(core)["each"] == "SUCCEEDED" and states(core)["after"] == "CANCELLED"
    assert core.is_finished()
    core.validate()


def test_a_confirmation_job_cancelled_before_its_approve_waits_for_one_again_on_rerun() -> None:
    from tests.core.test_conditions import with_fields

    core = SchedulerCore(with_fields(make_plan({"gate": {}, "x": {}}), gate={"confirm": True}), slots=2)
    core.handle(RunStartedEvent(0.0))
    op(core, "cancel")
    finish(core, "x")
    assert states(core)["gate"] == "CANCELLED"
    core.cancelled = False  # (as a core rebuilt from the journal of the ended run is)
    rep, cmds = op(core, "rerun", "gate")
    assert rep.results[0][2] == "job 'gate' waits for confirmation again: `wloadctl approve gate` lets it run"
    assert states(core)["gate"] == "HELD" and dispatched(cmds) == []
    core.validate()


def test_glob_resolution_and_unknown_names() -> None:
    core = SchedulerCore(make_plan({"load_eu": {}, "load_us": {}, "post": {}}), slots=1)
    found, unknown = resolve_jobs(core, ["load_*", "nope", "post"])
    assert [core.ids[i] for i in found] == ["load_eu", "load_us", "post"]
    assert unknown == ["nope"]


def test_a_misspelt_id_is_told_with_the_close_one_and_a_glob_or_a_far_one_with_none() -> None:
    ids = ["load_eu", "load_us", "post", "fx@emea", "fx@amer"]
    assert close_job("laod_eu", ids) == "load_eu"
    assert close_job("POST", ids) == "post"
    assert close_job("fx@eme", ids) == "fx@emea"
    assert close_job("load_*", ids) is None and close_job("zzzzzz", ids) is None and close_job("x", []) is None
    assert unknown_text(["laod_eu", "zzzzzz", "q*"], ids) == (
        "unknown job(s): laod_eu (did you mean 'load_eu'?), zzzzzz; no job matches 'q*'")
    assert unknown_text(["laod_eu"]) == "unknown job(s): laod_eu"
    # A run too big to compare with every id is compared with those of about its length, if they are few enough
    big = [f"job_{i:06d}" for i in range(SUGGEST_AMONG + 1)] + ["a_much_longer_name_than_that"]
    assert close_job("a_much_longer_name_than_tht", big) == "a_much_longer_name_than_that"
    assert close_job("jb_000042", big) is None and close_job("JOB_000042", big) == "job_000042"


def test_a_glob_rerun_of_succeeded_jobs_walks_no_job_downstream_when_none_is_blocked_or_held() -> None:
    # (each job a glob named walked its whole downstream: `rerun 's0*'` over 4,750 jobs of a 30,000-job run took
    # minutes of the scheduler's turn, or of a stopped run's verb, for blocked and held jobs there were none of)
    n = 200
    core = SchedulerCore(make_plan({f"j{k}": {"deps": [f"j{k - 1}"]} if k else {} for k in range(n)}), slots=1)
    core.handle(RunStartedEvent(0.0))
    for k in range(n):
        finish(core, f"j{k}")
    walked = [0]
    real = core.downstream

    def counted(i: int) -> list[int]:
        walked[0] += 1
        return real(i)

    core.downstream = counted  # type: ignore[method-assign]
    rep, _ = op(core, "rerun", *(f"j{k}" for k in range(n)))
    assert all(ok for _i, ok, _msg in rep.results)
    assert walked[0] <= 2 * n, walked  # (each job's own dependents, once: a walk each would be n * n / 2)
    assert states(core)["j0"] == "QUEUED" and {states(core)[f"j{k}"] for k in range(1, n)} == {"WAITING"}
    core.validate()
    # A held job downstream is still named, as before
    core.downstream = real  # type: ignore[method-assign]
    for k in range(n):
        finish(core, f"j{k}")
    op(core, "rerun", f"j{n - 3}", downstream=True)
    assert op(core, "hold", f"j{n - 1}")[0].results[0][1]
    finish(core, f"j{n - 3}")
    finish(core, f"j{n - 2}")
    rep, _ = op(core, "rerun", f"j{n - 4}")
    assert "1 held job(s) stay held" in rep.results[0][2], rep.results


def test_applicable_verbs() -> None:
    assert applicable_verbs(S.FAILED) == ["retry", "rerun", "set-ok", "skip"]
    assert applicable_verbs(S.RUNNING) == ["kill"]


def test_a_job_held_while_waiting_for_its_retry_waits_out_the_rest_of_its_delay_once_released() -> None:
    from wloadctl.core.events import TimerFiredEvent
    from wloadctl.core.plan import RetryPolicy

    core = SchedulerCore(make_plan({"r": {"retry": RetryPolicy(count=3, delay=600.0, backoff=1.0, jitter=0.0)}}),
                         slots=1)
    core.handle(RunStartedEvent(0.0))
    finish(core, "r", code=1, now=1.0)
    assert states(core)["r"] == "RETRY_WAIT"
    op(core, "hold", "r")  # (at 9.0)
    rep, cmds = op(core, "release", "r")
    # (it ran at once, about ten minutes early)
    assert states(core)["r"] == "RETRY_WAIT" and dispatched(cmds) == []
    assert rep.results[0][2] == "job 'r' released, now RETRY_WAIT (its retry in 592.0s)"
    assert core.reasons[0].endswith("; retry 1/3 in 592.0s")
    assert dispatched(core.handle(TimerFiredEvent(300.0))) == []
    assert dispatched(core.handle(TimerFiredEvent(601.0))) == [(0, 2)]
    # held past its due time, it goes at once when released
    finish(core, "r", code=1, now=602.0)
    op(core, "hold", "r")
    core.handle(TimerFiredEvent(1300.0))
    cmds = core.handle(OperatorEvent("release", (0,), 1300.0, user="ana"))
    assert dispatched(cmds) == [(0, 3)]
    core.validate()


def test_a_retry_delay_a_job_left_another_way_is_none_its_hold_and_release_wait_out() -> None:
    core = chain()
    b = core.index["b"]
    core.timers.retry_due[b] = 5000.0  # (left by a delay it ended otherwise: set-ok, skip, then a rerun)
    op(core, "hold", "b")
    op(core, "release", "b")
    assert states(core)["b"] == "WAITING" and b not in core.timers.retry_due
    core.validate()


def test_a_verb_refused_on_a_confirmation_job_names_approve_not_release() -> None:
    from wloadctl.core.planfile import load_plan_text

    core = SchedulerCore(load_plan_text("name: c\njobs:\n  conf: {command: 'true', confirm: true}\n"), slots=1)
    core.handle(RunStartedEvent(0.0))
    rep, _ = op(core, "hold", "conf")
    # (release is refused on it: approve is what lets it go)
    assert rep.results[0][2] == "job 'conf' is HELD: hold does not apply; set-ok, skip, approve would apply"


def test_a_job_blocked_by_one_upstream_names_it_though_another_upstream_ended_last_and_succeeded() -> None:
    # Given finale after slow, other and after_fail, whose upstream hard failed
    core = SchedulerCore(make_plan({"start": {}, "slow": {"deps": ["start"]}, "hard": {"deps": ["start"]},
                                    "other": {"deps": ["start"]}, "after_fail": {"deps": ["hard"]},
                                    "finale": {"deps": ["slow", "other", "after_fail"]}}), slots=10)
    core.handle(RunStartedEvent(0.0))
    finish(core, "start")
    finish(core, "hard", code=1)
    # When slow fails, hard is set ok (after_fail runs again), and the other upstreams end last, successfully
    finish(core, "slow", code=1)
    op(core, "set-ok", "hard")
    finish(core, "after_fail")
    finish(core, "other")
    # Then finale is UPSTREAM_FAILED for slow, not for an upstream that succeeded
    assert states(core)["finale"] == "UPSTREAM_FAILED"
    assert core.reasons[core.index["finale"]] == "upstream slow FAILED"


def test_why_of_a_job_running_when_the_run_stopped_offers_no_kill_and_says_it_may_have_ended() -> None:
    from wloadctl.core.events import JobStartedEvent as Started
    from wloadctl.core.explain import why

    core = chain()
    core.handle(Started(0, core.attempt[0], 0, 100, 1.0))
    assert "kill" in why(core, 0, 2.0)["verbs"]
    stopped = "the run is interrupted: no scheduler dispatches its jobs now (`wloadctl resume` goes on)"
    said = why(core, 0, 2.0, stopped)
    assert said["verbs"] == []  # (kill needs a live scheduler; hold, skip and the like do not apply to it)
    assert said["reasons"][1] == f"{stopped}; it learns then whether this attempt ended meanwhile"


def test_a_set_ok_of_a_failed_job_says_what_reopened_its_blocked_downstream() -> None:
    # (they read "upstream rerun", though nothing was rerun)
    from wloadctl.core.branches import UNTIL_AGAIN
    from wloadctl.core.commands import Persist
    from wloadctl.core.replay import iterations_journaled

    core = chain()
    finish(core, "a", code=1)
    assert states(core)["b"] == "UPSTREAM_FAILED"
    _rep, cmds = op(core, "set-ok", "a")
    b = core.index["b"]
    reopened = [t for c in cmds if isinstance(c, Persist) for t in c.transitions if t[0] == b and t[2] == S.WAITING]
    assert [t[7] for t in reopened] == ["reopened: upstream a set ok by ana"]
    assert states(core)["b"] == "QUEUED"
    # And a replay of the journal starts an `until` loop afresh there, as the engine did (afresh)
    journaled = [(S.RUNNING, S.WAITING, 1, 1.0, 0, 0, f"{UNTIL_AGAIN}2/5"),
                 (S.UPSTREAM_FAILED, S.WAITING, 1, 9.0, -1, None, reopened[0][7])]
    assert iterations_journaled(journaled[:1]) == 2 and iterations_journaled(journaled) == 0


def test_a_verb_refused_on_the_journal_of_a_stopped_run_names_no_kill_for_a_job_that_was_running() -> None:
    # (kill needs a live scheduler: offered there, it was refused in its turn, and why offers none)
    from wloadctl.core.events import JobStartedEvent as Started

    core = chain()
    finish(core, "a")
    core.handle(Started(1, core.attempt[1], 0, 100, 1.0))
    offline = OperatorEvent("rerun", (core.index["b"],), 9.0, user="ana", offline=True)
    reply = next(c for c in core.handle(offline) if isinstance(c, Reply))
    assert reply.results[0][2] == ("job 'b' is RUNNING: rerun does not apply; no verb applies to it while the run "
                                   "has no scheduler: `wloadctl resume` learns whether this attempt ended meanwhile")
    # And a rerun of its upstream with the downstream says the resume learns how b ended, not to kill it now
    offline = OperatorEvent("rerun", (core.index["a"],), 9.0, user="ana", downstream=True, offline=True)
    msg = next(c for c in core.handle(offline) if isinstance(c, Reply)).results[0][2]
    assert msg.startswith("job 'a' not rerun: downstream job(s) 'b' (RUNNING) had started when the run stopped"), msg
    assert "`wloadctl resume` learns whether they ended (`wloadctl kill` applies to them then)" in msg, msg
    assert states(core) == {"a": "SUCCEEDED", "b": "RUNNING", "c": "WAITING", "x": "QUEUED"}
    # While a live run's refusal still names the kill
    rep, _ = op(core, "rerun", "b")
    assert rep.results[0][2] == "job 'b' is RUNNING: rerun does not apply; kill would apply"


def test_a_rerun_or_retry_of_a_job_whose_upstream_did_not_succeed_is_refused_naming_what_lets_it_run() -> None:
    # (it was applied, said "will run again", and the job ended UPSTREAM_FAILED again at once without running)
    core = chain()
    finish(core, "a")
    finish(core, "b", code=1)
    # Given b FAILED, then its upstream a rerun and failed: c UPSTREAM_FAILED behind b
    op(core, "rerun", "a")
    finish(core, "a", code=1)
    assert states(core) == {"a": "FAILED", "b": "FAILED", "c": "UPSTREAM_FAILED", "x": "QUEUED"}
    # (and why offers neither verb of b and c, as it offers both of a, nor does a refusal of another verb name them)
    for job, offered in (("b", ["set-ok", "skip"]), ("c", ["set-ok", "skip"]), ("a", ["retry", "rerun", "set-ok",
                                                                                      "skip"])):
        assert why(core, core.index[job], core.now)["verbs"] == offered, job
    rep, _ = op(core, "hold", "c")
    assert rep.results == [(2, False, "job 'c' is UPSTREAM_FAILED: hold does not apply; set-ok, skip would apply")]
    # When b is retried, or rerun with its downstream
    for verb, downstream in (("retry", False), ("rerun", True)):
        rep, cmds = op(core, verb, "b", downstream=downstream)
        # Then it is refused, nothing changed, naming the upstream and the verbs that let it run
        said = "retried" if verb == "retry" else "rerun"
        assert rep.results == [(1, False, f"job 'b' not {said}: its upstream 'a' is FAILED, so it would end "
                                          "UPSTREAM_FAILED again without running; `wloadctl retry a` (or rerun, "
                                          "set-ok) lets it run after that one")], rep.results
        assert states(core) == {"a": "FAILED", "b": "FAILED", "c": "UPSTREAM_FAILED", "x": "QUEUED"}
        assert not [c for c in cmds if isinstance(c, Persist) and c.transitions]
    # And once a is retried, its blocked downstream waits for it again
    op(core, "retry", "a")
    assert states(core)["c"] == "UPSTREAM_FAILED" and states(core)["b"] == "FAILED"
    rep, _ = op(core, "retry", "b")
    assert rep.results[0][1] and states(core)["b"] == "WAITING"
    core.validate()
    # And named with the upstream that blocks it, in either order, it goes again with it
    core = chain()
    finish(core, "a", code=1)
    rep, _ = op(core, "rerun", "b", "a", downstream=True)
    assert [r[1] for r in rep.results] == [True, True], rep.results
    assert states(core) == {"a": "QUEUED", "b": "WAITING", "c": "WAITING", "x": "QUEUED"}
