"""Clock jumps in the core: retry delays keep their length when the wall clock is set back or forward; deadlines
are judged on the wall clock's new time."""

from __future__ import annotations

import pytest

from tests.conftest import make_plan
from wloadctl.core.commands import Dispatch, Flag
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import ClockJumpedEvent, JobExitedEvent, RunStartedEvent, TimerFiredEvent
from wloadctl.core.plan import RetryPolicy
from wloadctl.procs.clockwatch import ClockWatch

HOUR = 3600.0


def dispatched(cmds: list) -> list[tuple[int, int]]:
    return [t for c in cmds if isinstance(c, Dispatch) for t in c.tasks]


def failed_once(delay: float = 10.0) -> SchedulerCore:
    """A job whose first attempt failed at t=100 and waits `delay` seconds to be retried."""
    core = SchedulerCore(make_plan({"flaky": {"retry": RetryPolicy(count=2, delay=delay, jitter=0)}}), slots=1)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobExitedEvent(0, 1, 0, 1, 100.0))
    assert core.next_timer() == pytest.approx(100.0 + delay)
    return core


def test_a_clock_set_back_does_not_stall_a_retry_for_the_length_of_the_jump() -> None:
    core = failed_once()
    # Given the wall clock set back an hour 4 s into a 10 s retry delay
    core.handle(ClockJumpedEvent(104.0 - HOUR, -HOUR))
    # Then the retry is due 6 s later on the new clock, not an hour and 6 s later
    assert core.next_timer() == pytest.approx(110.0 - HOUR)
    assert dispatched(core.handle(TimerFiredEvent(109.0 - HOUR))) == []
    assert dispatched(core.handle(TimerFiredEvent(110.0 - HOUR))) == [(0, 2)]


def test_a_clock_set_forward_does_not_end_a_retry_delay_at_once() -> None:
    core = failed_once()
    # Given the wall clock set forward an hour 4 s into a 10 s retry delay
    cmds = core.handle(ClockJumpedEvent(104.0 + HOUR, HOUR))
    # Then nothing is retried at the jump: the delay still has its 6 s to run
    assert dispatched(cmds) == []
    assert core.next_timer() == pytest.approx(110.0 + HOUR)
    assert dispatched(core.handle(TimerFiredEvent(109.0 + HOUR))) == []
    assert dispatched(core.handle(TimerFiredEvent(110.0 + HOUR))) == [(0, 2)]


def test_deadlines_are_instants_of_the_wall_clock_and_a_jump_past_one_flags_it() -> None:
    # Given a job with a deadline at t=2000 that has not run yet (it waits for another one)
    plan = make_plan({"first": {}, "due": {"deps": ["first"]}})
    core = SchedulerCore(plan, slots=1)
    core.set_times({1: 2000.0}, {})
    core.handle(RunStartedEvent(0.0))
    # When the wall clock is set forward past it
    cmds = core.handle(ClockJumpedEvent(2500.0, 2400.0))
    # Then the job is flagged LATE at once: its deadline did not move with the jump
    flags = [c for c in cmds if isinstance(c, Flag)]
    assert (1, "LATE") in [(f.job, f.level) for f in flags]


def test_deadlines_do_not_move_when_the_clock_is_set_back() -> None:
    plan = make_plan({"first": {}, "due": {"deps": ["first"]}})
    core = SchedulerCore(plan, slots=1)
    core.set_times({1: 2000.0}, {})
    core.handle(RunStartedEvent(0.0))
    core.handle(ClockJumpedEvent(100.0 - HOUR, -HOUR))
    # the at-risk and late timers stay at the deadline's own instants
    assert [c for c in core.handle(TimerFiredEvent(1999.0 - HOUR)) if isinstance(c, Flag)] == []
    late = [c for c in core.handle(TimerFiredEvent(2000.0)) if isinstance(c, Flag)]
    assert (1, "LATE") in [(f.job, f.level) for f in late]


class Clocks:
    """A wall and a monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 1_000_000.0
        self.m = 50.0

    def wall(self) -> float:
        return self.t

    def mono(self) -> float:
        return self.m

    def tick(self, s: float) -> None:
        self.t += s
        self.m += s


def test_the_watch_tells_a_jump_from_time_passing_and_from_slow_drift() -> None:
    c = Clocks()
    w = ClockWatch(c.wall, c.mono)
    c.tick(30.0)
    assert w.jumped() is None  # time passed, both clocks together
    for _ in range(100):  # NTP slewing: 50 ms at a time, 5 s in all, never a jump
        c.t += 0.05
        c.tick(1.0)
        assert w.jumped() is None
    c.t -= HOUR
    assert w.jumped() == (c.t, pytest.approx(-HOUR))
    assert w.jumped() is None
    c.t += 120.0
    assert w.jumped() == (c.t, pytest.approx(120.0))


def test_why_a_ready_job_waits_for_its_not_before_time_says_so_then_not() -> None:
    """A READY job held by its `not_before` is not waiting for a slot: `why` says what it waits for, and how long."""
    import dataclasses

    from wloadctl.core.explain import why

    plan = make_plan({"early": {}})
    plan = dataclasses.replace(plan, jobs={"early": dataclasses.replace(plan.jobs["early"], not_before="02:30")})
    core = SchedulerCore(plan, slots=4)
    core.set_times({}, {0: 1000.0 + 2 * HOUR})
    assert dispatched(core.handle(RunStartedEvent(1000.0))) == []
    said = " ".join(why(core, 0, 1000.0 + HOUR)["reasons"])
    assert "not before 02:30: it may start in 1h" in said and "free slot" not in said, said
    # Once the time has come, a job still READY waits for a slot, and says that
    said = " ".join(why(core, 0, 1000.0 + 3 * HOUR)["reasons"])
    assert "not before" not in said and "waiting for a free slot" in said, said


def test_why_a_job_waiting_for_an_upstream_says_its_not_before_time_too() -> None:
    import dataclasses

    from wloadctl.core.explain import why

    plan = make_plan({"up": {}, "late": {"deps": ["up"]}})
    plan = dataclasses.replace(plan, jobs={**plan.jobs, "late": dataclasses.replace(plan.jobs["late"],
                                                                                   not_before="02:30")})
    core = SchedulerCore(plan, slots=4)
    core.set_times({}, {1: 1000.0 + 2 * HOUR})
    core.handle(RunStartedEvent(1000.0))
    # A job waiting for its upstream and for its time says both: the time is what holds it once the upstream ends
    said = why(core, 1, 1000.0 + HOUR)["reasons"]
    assert any(r.startswith("waiting for 1 of 1 dependencies: up") for r in said), said
    assert any(r.startswith("not before 02:30: it may start in 1h") for r in said), said
