"""An executor's job groups (cgroup mode): made once, served again while their jobs leave nothing, and those of a
run killed whole removed by `wloadctl cleanup`."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli, stop_proc, wait_for
from wloadctl.procs.jobtree import WARM_ENV, JobTrees, children_of, detect, grouped_runs, remove_run_groups, run_group
from wloadctl.procs.spawning import Spawner, reap

pytestmark = pytest.mark.skipif(detect().mode != "cgroup", reason=f"no delegated cgroup v2 here: {detect().why}")


def _run_one(trees: JobTrees, spawner: Spawner, task: int, argv: list[str]) -> str:
    """Start `argv` as attempt 1 of `task` in the group the trees give it, wait for it, end it; its group."""
    join = trees.prepare(task, 1, {}, 0.0, 0, False)
    assert join is not None
    log = os.open(os.devnull, os.O_WRONLY)
    try:
        sp = spawner.spawn(argv, dict(os.environ), None, log, join=join)
    finally:
        os.close(log)
    assert reap(sp) == 0
    trees.end(task, 1, sp.pid)
    return os.path.dirname(join)


@pytest.fixture
def trees() -> Iterator[JobTrees]:
    run = f"test-{secrets.token_hex(4)}"
    t = JobTrees(run, 0, detect(run))
    yield t
    t.close()
    remove_run_groups(run)


def test_a_group_left_empty_serves_the_next_job_and_one_removed_from_outside_is_not_used(trees: JobTrees) -> None:
    spawner = Spawner()
    spawner.home_group = trees.home_group()
    spawner.enter = trees.enter
    # Given a job that ran and left nothing
    first = _run_one(trees, spawner, 0, ["/bin/true"])
    assert trees.spare == [first]
    # When the next one runs, it runs in the same group
    assert _run_one(trees, spawner, 1, ["/bin/true"]) == first
    # And when that group is removed from outside (a cleanup), the next job gets a new one
    os.rmdir(first)
    third = _run_one(trees, spawner, 2, ["/bin/true"])
    assert third != first and Path(third).is_dir()
    # And this process is back in its own group after each start
    own = Path("/proc/self/cgroup").read_text()
    assert f"wloadctl.{trees.run_id}" not in own, own


def test_cleanup_removes_the_empty_groups_of_a_run_whose_processes_are_all_gone(trees: JobTrees) -> None:
    spawner = Spawner()
    spawner.home_group = trees.home_group()
    spawner.enter = trees.enter
    # Given a run's groups left behind (no board, no process: killed whole), and an agent's
    _run_one(trees, spawner, 0, ["/bin/true"])
    base = detect().base
    assert base is not None
    agent = run_group(base, f"agent-{secrets.token_hex(3)}")
    agent.mkdir()
    try:
        assert trees.run_id in grouped_runs()
        # When an operator cleans up
        p = cli("cleanup")
        # Then the run's groups are gone and said so, the agent's kept
        assert p.returncode == 0, p.stderr
        assert f"empty job group folder(s) left by crashed run {trees.run_id}" in p.stdout, p.stdout
        assert not run_group(base, trees.run_id).exists()
        assert agent.is_dir()
    finally:
        agent.rmdir()
    trees.spare.clear()  # removed with the run's folder


def _writes(pid: int) -> int:
    """Write calls `pid` has made (/proc/PID/io `syscw`)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("syscw:"):
            return int(line.split()[1])
    raise AssertionError(f"no syscw in /proc/{pid}/io")


@pytest.mark.parametrize("every", ["0.005", "0"])
def test_an_executor_keeps_group_moves_fast_while_its_jobs_run(tmp_path: Path, every: str) -> None:
    """Without favordynmods a job's start waits for an RCU grace period unless a move came shortly before: while
    jobs run, the executor writes itself into its own group every $WLOADCTL_CGROUP_WARM seconds (0: never)."""
    plan = tmp_path / "p.yaml"
    plan.write_text("name: warm\njobs:\n  nap: {command: 'sleep 2'}\n")
    env = {**ENV, WARM_ENV: every}
    run = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(tmp_path / "sd"),
                            "--executors", "1", "--slots", "1"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        def busy_executor() -> int | None:
            for pid in children_of(run.pid):
                if "wloadctl.procs.executor" in Path(f"/proc/{pid}/cmdline").read_text() and children_of(pid):
                    return pid
            return None

        executor = wait_for(busy_executor, what="the executor running the job")
        before = _writes(executor)
        time.sleep(0.5)
        writes = _writes(executor) - before
        # Then with the setting on it wrote about 100 times in that half second (at least 25 even on a loaded
        # machine), and with it off hardly at all (its log and beats write nothing while the job sleeps)
        if every == "0":
            assert writes < 10, writes
        else:
            assert writes >= 25, writes
        assert run.wait(timeout=30) == 0, run.stderr.read() if run.stderr else ""
    finally:
        stop_proc(run, group=True)


@pytest.mark.parametrize("every", ["0.005", "0"])
def test_an_executor_started_ahead_keeps_moves_fast_while_it_waits_to_be_taken(tmp_path: Path, every: str) -> None:
    """Its first job's start must not wait a grace period either: while it waits for its scheduler's go, it writes
    itself into its own group as it does while jobs run; and it still ends when its scheduler goes."""
    from wloadctl.procs.prestart import AWAIT_FLAG

    sd = tmp_path / "sd"
    sd.mkdir()
    argv = [sys.executable, "-m", "wloadctl.procs.executor", "--run", "20000101-000000-abcdef", "--index", "0",
            "--state-dir", str(sd), AWAIT_FLAG]
    waiting = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**ENV, WARM_ENV: every})
    try:
        time.sleep(0.5)  # its imports done
        before = _writes(waiting.pid)
        time.sleep(0.5)
        writes = _writes(waiting.pid) - before
        if every == "0":
            assert writes < 10, writes
        else:
            assert writes >= 25, writes
        assert waiting.poll() is None
        assert waiting.stdin is not None
        waiting.stdin.close()  # its scheduler is gone
        assert waiting.wait(timeout=10) == 0
    finally:
        stop_proc(waiting)
    assert list(sd.iterdir()) == []


def test_an_idle_executor_keeps_moves_fast_for_a_while_after_its_start_then_stops(tmp_path: Path) -> None:
    """A job is likely soon after an executor starts or its last job ends (WARM_IDLE): the writes go on that long
    with no job running, then stop, so an idle executor does not wake every few milliseconds for ever."""
    from wloadctl.procs.jobtree import WARM_IDLE

    plan, gate = tmp_path / "p.yaml", tmp_path / "gate"
    # (the job runs until the measuring is done: the gate opens then)
    plan.write_text(f"name: idle\njobs:\n  nap: {{command: 'while [ ! -e {gate} ]; do sleep 0.05; done'}}\n")
    run = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(tmp_path / "sd"),
                            "--executors", "2", "--slots", "1"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, env={**ENV, WARM_ENV: "0.005"}, start_new_session=True)
    try:
        def executors() -> list[int] | None:
            found = [pid for pid in children_of(run.pid)
                     if "wloadctl.procs.executor" in Path(f"/proc/{pid}/cmdline").read_text()]
            return found if len(found) == 2 and any(children_of(p) for p in found) else None

        idle = next(p for p in wait_for(executors, what="an executor running the job") if not children_of(p))
        before = _writes(idle)
        time.sleep(0.3)
        early = _writes(idle) - before
        time.sleep(WARM_IDLE + 0.5 - 0.3)
        before = _writes(idle)
        time.sleep(0.5)
        late = _writes(idle) - before
        assert early >= 15, early  # about 60 in those 0.3 s
        assert late < 10, late  # none but what its beats may write
        gate.touch()
        assert run.wait(timeout=30) == 0, run.stderr.read() if run.stderr else ""
    finally:
        gate.touch()
        stop_proc(run, group=True)


def test_an_executor_never_kills_a_group_another_executor_of_its_run_and_index_made_since(trees: JobTrees) -> None:
    """Job groups are one cgroup tree for every pid namespace of the host: two executors of one node name (two
    agents of a name on one host, or one started again without its processes) have the same run id and index,
    and often the same pid in their own namespaces (as here, in one process). What one made must not be the
    other's: once one of them killed its job's group, the other's next group is not that group made again
    (removed meanwhile by an agent's start), or the first one's tidy kills the second one's job in it."""
    spawner = Spawner()
    spawner.home_group = trees.home_group()
    spawner.enter = trees.enter
    log = os.open(os.devnull, os.O_WRONLY)
    other = JobTrees(trees.run_id, trees.executor, trees.how)
    job = None
    try:
        # Given an executor whose job ended leaving a process in its group: the group is killed, and dies
        # (slowly: a group below it, which the job made, keeps it from being removed until it goes too)
        join = trees.prepare(0, 1, {}, 0.0, 0, False)
        assert join is not None
        sp = spawner.spawn(["sh", "-c", "sleep 30 & exit 0"], dict(os.environ), None, log, join=join)
        assert reap(sp) == 0
        dead = Path(os.path.dirname(join))
        (dead / "below").mkdir()
        trees.end(0, 1, sp.pid)
        assert dead in trees.dying
        wait_for(lambda: b"populated 0" in (dead / "cgroup.events").read_bytes(), timeout=10, every=0.01,
                 what="the killed group empty")
        (dead / "below").rmdir()
        # and an agent of its node's name starting on the host, which removes the node's empty groups
        remove_run_groups(trees.run_id)
        assert not dead.exists()
        # When the other executor starts a job in a group of its own
        join = other.prepare(0, 1, {}, 0.0, 0, False)
        assert join is not None
        job = spawner.spawn(["sleep", "30"], dict(os.environ), None, log, join=join)
        # and the first one tidies, past the grace of the group it killed
        for g in trees.dying:
            trees.dying[g] -= 2.0
        trees.tidy()
        # Then the other executor's job runs on: it ends by the SIGTERM sent it now, not by a SIGKILL sent before
        os.kill(job.pid, signal.SIGTERM)
        ended, job = reap(job), None
        assert ended == -signal.SIGTERM, "the job was killed by an executor whose group it is not in"
    finally:
        os.close(log)
        if job is not None:
            os.kill(job.pid, signal.SIGKILL)
            reap(job)
        other.end(0, 1, 0)
        other.close()
