"""The run's share of the host's cpu and memory: claimed jobs wait READY for it; the rest never look."""

from __future__ import annotations

from tests.conftest import make_plan
from wloadctl.core.commands import Dispatch
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import HostClaimsEvent, JobsFinishedEvent, RunStartedEvent
from wloadctl.core.explain import why
from wloadctl.core.holding import HOST_CPU, HOST_UNLIMITED
from wloadctl.core.states import JobState
from wloadctl.hostshare import claims_of

S = JobState


def names(core: SchedulerCore, cmds: list) -> list[str]:
    return sorted(core.ids[i] for c in cmds if isinstance(c, Dispatch) for i, _a in c.tasks)


def claimed() -> SchedulerCore:
    spec = {f"big{k}": {"cpu": 2} for k in range(3)}
    spec["small"] = {"cpu": 0.5, "memory": 1024}
    spec["plain"] = {}
    spec["remote"] = {"cpu": 4, "pool": "etl"}
    return SchedulerCore(make_plan(spec), slots=8)


def test_claims_count_only_once_the_host_shares_cpu_and_memory() -> None:
    core = claimed()
    cmds = core.handle(RunStartedEvent(0.0))
    # Without a host share every local job goes at once (executors alone bound their claims)
    assert names(core, cmds) == ["big0", "big1", "big2", "plain", "small"]
    assert not core.resources.host
    core.validate()


def test_claimed_jobs_wait_ready_for_the_runs_share_and_plain_jobs_do_not() -> None:
    core = claimed()
    # Given a share of two CPUs and no memory limit before the run starts
    core.feed(HostClaimsEvent(2000, HOST_UNLIMITED, False, 0.0))
    cmds = core.handle(RunStartedEvent(0.0))
    # Then one two-CPU job goes (the most urgent in line), the plain job too, the rest wait READY
    assert names(core, cmds) == ["big0", "plain"]
    for j in ("big1", "big2", "small"):
        assert core.state[core.index[j]] == S.READY
    w = why(core, core.index["big1"], 0.0)
    assert w["host_wait"] == ["cpu"]
    assert any("waiting for the host's cpu: needs 2, 0 free of the 2" in r and "big0" in r for r in w["reasons"])
    # And the run tells the host what it holds and what waits, most urgent first: [tier, cpu, memory]
    held, waiting = claims_of(core)
    assert held == {"cpu": 2000}
    assert waiting == [[2, 2000, 0], [2, 2000, 0], [2, 500, 1024]]
    # When big0 ends, the next in line takes its two CPUs; the small one does not overtake it
    cmds = core.handle(JobsFinishedEvent([(core.index["big0"], 1, 0, 0)], 1.0))
    assert names(core, cmds) == ["big1"]
    # When the share grows by half a CPU, the job at the head still does not fit: nothing goes
    assert names(core, core.handle(HostClaimsEvent(2500, HOST_UNLIMITED, False, 2.0))) == []
    # When it grows to four, big2 fits, and the small one behind it in what is left
    assert names(core, core.handle(HostClaimsEvent(4500, HOST_UNLIMITED, False, 3.0))) == ["big2", "small"]
    core.validate()


def test_a_share_given_while_jobs_run_counts_what_they_hold() -> None:
    core = claimed()
    core.handle(RunStartedEvent(0.0))
    # Given every local job running before the host shared its CPUs
    core.handle(HostClaimsEvent(2000, HOST_UNLIMITED, False, 1.0))
    # Then they hold their claims at once (over the share: nothing new starts until they end)
    assert core.resources.res_free[HOST_CPU] == 2000 - 6500
    core.handle(JobsFinishedEvent([(core.index[j], 1, 0, 0) for j in ("big0", "big1", "big2", "small")], 2.0))
    assert core.resources.res_free[HOST_CPU] == 2000
    core.validate()


def test_while_other_runs_wait_a_finished_jobs_claim_goes_back_to_the_host() -> None:
    core = claimed()
    core.feed(HostClaimsEvent(2000, HOST_UNLIMITED, True, 0.0))
    assert names(core, core.handle(RunStartedEvent(0.0))) == ["big0", "plain"]
    # When big0 ends while another run waits, its two CPUs leave this run's share: big1 waits for the next beat
    assert names(core, core.handle(JobsFinishedEvent([(core.index["big0"], 1, 0, 0)], 1.0))) == []
    assert core.resources.capacity_of[HOST_CPU] == 0
    core.validate()
    # When the host grants them again, big1 goes
    assert names(core, core.handle(HostClaimsEvent(2000, HOST_UNLIMITED, True, 2.0))) == ["big1"]
    core.validate()
