"""Operator verbs over many jobs: one request's downstream walks reach only what leads to a blocked or held job, and
end exactly as a whole walk per job did."""

from __future__ import annotations

import random

import pytest

from tests.conftest import make_plan
from tests.core.test_engine import dispatched
from tests.core.test_loops import dynamic, finish_list
from wloadctl.core import verbs
from wloadctl.core.commands import Persist, Reply
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import JobExitedEvent, OperatorEvent, RunStartedEvent
from wloadctl.core.states import TERMINAL, JobState

S = JobState
VERBS = ("rerun", "retry", "set-ok", "skip", "hold", "release")
EVERY_WALK_WHOLE = 10**9
"""FULL_WALKS under which every walk is a whole one, as before walks were pruned."""


def run_all(core: SchedulerCore, cmds: list, fail: set[str]) -> None:
    """Finish every job dispatched, and every one it lets start, failing those in `fail`."""
    todo = dispatched(cmds)
    while todo:
        nxt = []
        for i, attempt in todo:
            if core.state[i] in (S.QUEUED, S.RUNNING) and core.attempt[i] == attempt:
                code = 1 if core.ids[i] in fail else 0
                nxt += dispatched(core.handle(JobExitedEvent(i, attempt, 0, code, 1.0)))
        todo = nxt


def night(seed: int) -> tuple[SchedulerCore, random.Random]:
    """A random DAG of 30 jobs run to its end: some failed (their downstream UPSTREAM_FAILED), some held, some
    `failure` and `done` dependencies."""
    rnd = random.Random(seed)
    spec: dict[str, dict] = {}
    for k in range(30):
        ups = rnd.sample(range(k), min(k, rnd.choice((0, 1, 1, 2, 3))))
        spec[f"j{k:02}"] = {"deps": {f"j{u:02}": rnd.choice(("success",) * 6 + ("failure", "done")) for u in ups}}
    core = SchedulerCore(make_plan(spec), slots=4)
    cmds = core.handle(RunStartedEvent(0.0))
    held = [j for j in rnd.sample(sorted(spec), 3) if core.state[core.index[j]] == S.WAITING]
    if held:
        core.handle(OperatorEvent("hold", tuple(core.index[j] for j in held), 0.5, user="ana"))
    run_all(core, cmds, {j for j in spec if rnd.random() < 0.15})
    return core, rnd


def outcome(core: SchedulerCore, requests: list[tuple[str, tuple[int, ...]]]) -> list:
    """Each request's reply and journaled transitions, then the jobs' states and reasons."""
    seen = []
    for verb, jobs in requests:
        cmds = core.handle(OperatorEvent(verb, jobs, 9.0, user="ana", reason="test"))
        reply = next(c for c in cmds if isinstance(c, Reply))
        tx = [row for c in cmds if isinstance(c, Persist) for row in c.transitions]
        seen.append((reply.results, reply.touched, tx))
    core.validate()
    return [seen, bytes(core.state), sorted(core.reasons.items()), dict(core.holds)]


def pruned_and_whole(monkeypatch: pytest.MonkeyPatch, make: object, requests: object) -> tuple[list, list]:
    out = []
    for full in (0, EVERY_WALK_WHOLE):
        monkeypatch.setattr(verbs, "FULL_WALKS", full)
        core = make()  # type: ignore[operator]
        out.append(outcome(core, requests(core)))  # type: ignore[operator]
    return out[0], out[1]


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("verb", ["rerun", "retry", "set-ok", "skip"])
def test_a_verb_of_many_jobs_ends_as_a_whole_walk_per_job_did(monkeypatch: pytest.MonkeyPatch, seed: int,
                                                              verb: str) -> None:
    def requests(core: SchedulerCore) -> list[tuple[str, tuple[int, ...]]]:
        rnd = random.Random(seed)
        ended = [i for i in range(core.n) if core.state[i] in TERMINAL]
        rnd.shuffle(ended)
        # Then more: they find what the first reopened blocked again, or held
        return [(verb, tuple(ended)), ("rerun", tuple(rnd.sample(range(core.n), 12))),
                *((rnd.choice(VERBS), tuple(rnd.sample(range(core.n), 20))) for _ in range(3))]

    pruned, whole = pruned_and_whole(monkeypatch, lambda: night(seed)[0], requests)
    assert pruned == whole


@pytest.mark.parametrize("verb", ["rerun", "retry"])
def test_a_verb_of_a_loop_failed_by_an_instance_and_its_upstream_ends_as_a_whole_walk_per_job_did(
        monkeypatch: pytest.MonkeyPatch, verb: str) -> None:
    def failed_loop() -> SchedulerCore:
        core = SchedulerCore(dynamic(handlers=True), slots=10)
        cmds = core.handle(RunStartedEvent(0.0))
        run_all(core, cmds + finish_list(core, {"files": ["x", "y", "z"]}), {"load@y"})
        assert core.state[core.index["load"]] == S.FAILED and core.state[core.index["post"]] == S.UPSTREAM_FAILED
        return core

    def requests(core: SchedulerCore) -> list[tuple[str, tuple[int, ...]]]:
        every = tuple(i for i in range(core.n) if core.state[i] in TERMINAL)
        return [(verb, every), ("set-ok", (core.index["load@y"],))]

    pruned, whole = pruned_and_whole(monkeypatch, failed_loop, requests)
    assert pruned == whole


def test_a_glob_rerun_of_5000_jobs_above_a_held_one_walks_each_job_downstream_no_more() -> None:
    # (each job a glob named walked its whole downstream to name the held job at its end: 12.5 million steps
    # for a chain of 5,000, minutes of the scheduler's turn)
    n = 5000
    spec: dict[str, dict] = {f"j{k:04}": {"deps": [f"j{k - 1:04}"]} if k else {} for k in range(n)}
    spec |= {"held": {"deps": [f"j{n - 1:04}"]}, "bad": {}, "blocked": {"deps": ["bad"]}}
    core = SchedulerCore(make_plan(spec), slots=1)
    cmds = core.handle(RunStartedEvent(0.0))
    core.handle(OperatorEvent("hold", (core.index["held"],), 0.5, user="ana"))
    run_all(core, cmds, {"bad"})
    assert core.state[core.index["held"]] == S.HELD and core.state[core.index["blocked"]] == S.UPSTREAM_FAILED
    walked = [0]
    real = core.downstream

    def counted(i: int) -> list[int]:
        walked[0] += 1
        return real(i)

    core.downstream = counted  # type: ignore[method-assign]
    cmds = core.handle(OperatorEvent("rerun", tuple(range(n)), 9.0, user="ana"))
    rep = next(c for c in cmds if isinstance(c, Reply))
    assert walked[0] <= 20 * n, walked  # (a whole walk each: n * n / 2)
    assert all(ok and "1 held job(s) stay held ('held'" in msg for _i, ok, msg in rep.results), rep.results[:3]
    assert core.state[0] == S.QUEUED and {core.state[k] for k in range(1, n)} == {S.WAITING}
    assert core.state[core.index["held"]] == S.HELD and core.state[core.index["blocked"]] == S.UPSTREAM_FAILED
    core.validate()


def test_a_job_held_while_a_request_goes_on_is_reached_by_its_later_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a run whose one held job is downstream of no other, and a request's map of where such jobs are
    monkeypatch.setattr(verbs, "FULL_WALKS", 0)
    spec: dict[str, dict] = {f"j{k}": {"deps": [f"j{k - 1}"]} if k else {} for k in range(6)}
    core = SchedulerCore(make_plan({**spec, "h": {}}), slots=1)
    cmds = core.handle(RunStartedEvent(0.0))
    core.handle(OperatorEvent("hold", (core.index["h"],), 0.5, user="ana"))
    run_all(core, cmds, set())
    walks = verbs.Walks(core)
    assert walks.blocked_reach(0) == []
    # When a job downstream of the next one named is held meanwhile (as a verb's settling may hold one)
    core.set_state(core.index["j5"], S.WAITING)
    core.set_state(core.index["j5"], S.HELD)
    # Then that job's walk reaches it, as a whole walk would
    assert walks.blocked_reach(1) == [core.index["j5"]]
