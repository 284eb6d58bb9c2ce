"""Queue shapes chosen from the kernel's limits: fifty of the largest runs fit one user's default quota."""

from __future__ import annotations

import resource

import pytest
from ipc_fixtures import IpcTracker

from wloadctl.ipc import protocol as P
from wloadctl.ipc.mq import MessageQueue
from wloadctl.ipc.quota import BIG_RUN, RUNS_FLOOR, RUNS_GOAL, KernelLimits, queue_budget, run_shapes

DEFAULT = KernelLimits(quota=819200, hard=819200, msg_max=10, msgsize_max=8192)


def test_a_run_takes_a_fiftieth_of_the_default_quota_and_a_big_one_a_twentieth() -> None:
    for n_jobs, runs, least in ((BIG_RUN, RUNS_GOAL, 30), (1_000_000, RUNS_FLOOR, 150)):
        shapes = run_shapes(n_jobs, DEFAULT)
        assert runs * shapes.charge <= DEFAULT.quota
        for q, record in ((shapes.request, P.TASK), (shapes.response, P.RESULT)):
            assert q.messages >= 2 and q.size <= 8192
            assert (q.size - P.HEADER.size) // record.size >= least  # records a message


def test_a_small_run_takes_only_what_its_jobs_can_fill() -> None:
    small, large = run_shapes(3, DEFAULT), run_shapes(1_000_000, DEFAULT)
    assert small.charge < large.charge
    assert P.tasks_per_message(small.request.size) >= 3
    assert P.results_per_message(small.response.size) >= 6


def test_without_a_quota_queues_take_the_kernels_caps() -> None:
    shapes = run_shapes(1_000_000, KernelLimits(None, None, 10, 8192))
    assert (shapes.request.messages, shapes.request.size) == (10, 8192)
    assert (shapes.response.messages, shapes.response.size) == (10, 8192)


def test_a_tight_quota_or_lower_caps_still_give_usable_queues() -> None:
    for limits in (KernelLimits(100_000, None, 10, 8192), KernelLimits(819200, None, 1, 1024)):
        s = run_shapes(1_000_000, limits)
        for q in (s.request, s.response):
            assert 1 <= q.messages <= limits.msg_max and q.size <= limits.msgsize_max
            assert P.results_per_message(q.size) >= 1 and P.tasks_per_message(q.size) >= 1


def test_a_run_has_two_queues_and_they_get_its_whole_share() -> None:
    # Operator verbs come over the control socket: no control queue takes a part of the share.
    shapes = run_shapes(BIG_RUN, DEFAULT)
    assert shapes.charge == shapes.request.charge + shapes.response.charge
    assert queue_budget(DEFAULT, BIG_RUN) == DEFAULT.quota // RUNS_GOAL


@pytest.mark.exclusive
@pytest.mark.parametrize(("n_jobs", "runs"), [(BIG_RUN, RUNS_GOAL), (1_000_000, RUNS_FLOOR)])
def test_fifty_runs_or_twenty_of_the_largest_fit_the_default_quota(ipc: IpcTracker, n_jobs: int,
                                                                     runs: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_MSGQUEUE)
    if soft == resource.RLIM_INFINITY or soft > DEFAULT.quota:
        # The suite's limit is the default one on CI; a raised one is lowered for this test.
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (DEFAULT.quota, hard))
    try:
        shapes = run_shapes(n_jobs)
        # Given fifty runs' queues (twenty of the largest runs') made side by side as one user
        for _ in range(runs):
            rid = ipc.run_id()
            for role, q in (("req", shapes.request), ("rsp", shapes.response)):
                ipc.track(MessageQueue.create(ipc.name(role, rid), q.messages, q.size))
    finally:
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (soft, hard))


@pytest.mark.parametrize("n_jobs", [1, 17, 5000])
def test_records_of_a_run_fit_its_messages(n_jobs: int) -> None:
    s = run_shapes(n_jobs, DEFAULT)
    tasks = [P.TaskRecord(i, 1, P.TASK_NOOP, 0, 1, 0, 0) for i in range(P.tasks_per_message(s.request.size))]
    assert len(P.encode_tasks(tasks)) <= s.request.size
