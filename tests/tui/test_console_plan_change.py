"""A console given a plan changed since its run was stopped: the scheduler's refusal in one line, and the change
taken with --accept-plan-change, as `resume` takes it (real schedulers)."""

from __future__ import annotations

import pytest
from console_helpers import LiveRun

from tests.integration.helpers import wait_for
from tui.supervise import SchedulerSupervisor
from wloadctl.client import RunClient
from wloadctl.core.states import JobState
from wloadctl.errors import UsageError


def _states(run: LiveRun) -> dict[str, str]:
    with RunClient(run.state_dir) as client:
        return {r[1]: JobState(r[2]).name for r in client.job_rows()}


def test_a_changed_plan_is_refused_in_one_line_and_taken_with_accept_plan_change(live_run: LiveRun) -> None:
    # Given a run the console started, stopped while its gated job runs
    plan = live_run.plan()
    first = live_run.supervisor(plan)
    first.attach_or_start()
    wait_for(lambda: _states(live_run).get("gate") == "RUNNING", timeout=30, what="gate running")
    assert first.stop(timeout=20)
    first.reap()
    # When a job is added to the plan and a console is started on it again
    plan.write_text(plan.read_text() + "  extra:\n    command: \"echo extra\"\n    depends_on: [report]\n")
    with pytest.raises(UsageError) as refused:
        live_run.supervisor(plan).attach_or_start()
    # Then the scheduler's refusal is said in one line, naming the option that takes the change
    said = str(refused.value)
    assert "\n" not in said and "the plan changed since run" in said and "--accept-plan-change" in said, said
    # And with --accept-plan-change the run goes on under the changed plan, its new job included
    taking = SchedulerSupervisor(live_run.state_dir, str(plan), executors=2, slots=2, accept_plan_change=True)
    live_run.supervisors.append(taking)
    taking.attach_or_start()
    live_run.open_gate()
    wait_for(lambda: _states(live_run).get("extra") == "SUCCEEDED", timeout=60, what="extra succeeded")
    assert set(_states(live_run).values()) == {"SUCCEEDED"}
