"""An agent's slots are all used: a task it holds starts on an idle executor, never waits behind a busy one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli, wait_for
from tests.procs.test_payload_lifecycle import Rig, rig  # noqa: F401 (the pool over in-memory queues)
from tests.remote.conftest import NatsServer, _alive
from tests.remote.nodes import Node, unshare_available
from tests.remote.test_agent_runs import plan_file
from wloadctl.ipc import protocol as P

pytestmark = pytest.mark.ipc


def started(out: Path) -> set[str]:
    """Jobs whose start line is in the evidence file."""
    lines = out.read_text().splitlines() if out.exists() else []
    return {ln.split()[0] for ln in lines if ln.split()[1:2] == ["start"]}


@pytest.fixture
def node(tmp_path: Path, nats_server: NatsServer) -> Iterator[Node]:
    """One agent of pool `etl` with 4 executors of 1 slot, on its own host."""
    if not unshare_available():
        pytest.fail("this test puts the agent in its own namespaces: it needs util-linux unshare, and root "
                    "or unprivileged user namespaces", pytrace=False)
    n = Node("n1", nats_server.url, tmp_path / "n1", ["etl"], slots=4, extra=("--executors", "4")).start()
    try:
        wait_for(lambda: _alive(nats_server.url, "n1"), timeout=30, what="the agent beating")
        yield n
    finally:
        n.stop()


ROUNDS = 2
"""Rounds of jobs for every slot: in each, the first runs when the others reach the agent (which executor takes
each of those was a race on the code before, lost when one took two, or the busy one took one)."""


def test_an_agent_runs_as_many_jobs_at_once_as_it_has_slots(tmp_path: Path, nats_server: NatsServer,
                                                             node: Node) -> None:
    # Given an agent of 4 slots, and rounds of 4 jobs for it, each held once started until its round's gate
    # exists; the rest of a round are sent once its first has started (a local job waits for that)
    out = tmp_path / "evidence"
    jobs: dict[str, dict] = {}
    for k in range(ROUNDS):
        after = [f"{j}{k - 1}" for j in "abcd"] if k else []
        gate = str(tmp_path / f"gate{k}")
        jobs[f"a{k}"] = {"pool": "etl", "gate": gate, "sleep": 0, "depends_on": after}
        jobs[f"t{k}"] = {"command": f"while ! grep -q '^a{k} start' {out}; do sleep 0.02; done",
                         "depends_on": after}
        for j in "bcd":
            jobs[f"{j}{k}"] = {"pool": "etl", "gate": gate, "sleep": 0, "depends_on": [f"t{k}"]}
    plan = plan_file(tmp_path / "p.yaml", out, jobs)
    run = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(tmp_path / "sd"),
                            "--broker", nats_server.url, "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        for k in range(ROUNDS):
            # When a round's jobs are on the agent: all run at once, one on each of its executors
            pair = {f"{j}{k}" for j in "abcd"}
            try:
                wait_for(lambda pair=pair: pair <= started(out), timeout=20, what=f"round {k} running at once")
            except AssertionError:
                pytest.fail(f"round {k}: only {sorted(pair & started(out))} started on an agent with 4 slots: the "
                            f"rest wait behind them\n{node.output()}", pytrace=False)
            finally:
                (tmp_path / f"gate{k}").touch()
        # Then the run ends with every job done
        stdout, stderr = run.communicate(timeout=60)
        assert run.returncode == 0, stderr
        assert set(json.loads(stdout)["jobs"].values()) == {"SUCCEEDED"}
    finally:
        if run.poll() is None:  # (a failed round: SIGTERM stops its executors and removes its queues)
            run.send_signal(signal.SIGTERM)
            try:
                run.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                run.kill()
                run.communicate()


def test_executors_that_take_nothing_ahead_are_sent_one_task_a_message(rig: Rig) -> None:  # noqa: F811
    # Given a pool of 2 executors that take nothing ahead (an agent's), and 4 tasks dispatched at once
    for i in range(4):
        rig.book.queue(i, 1)
    rig.pool.submit([(i, 1) for i in range(4)])
    # When the pool sends them
    rig.pool.pump()
    # Then each goes alone: an executor with one slot free takes one, never one more to keep behind its busy slot
    sizes = []
    while (data := rig.pool.objs.req.recv_nowait()) is not None:
        sizes.append(len(P.decode_tasks(data)))
    assert sizes == [1, 1, 1, 1]


def test_slots_an_agents_executors_cannot_share_evenly_are_refused_and_odd_slots_take_one_executor() -> None:
    """(`--slots 3` on the default 2 executors ran 4 jobs at once: each executor took 2)"""
    from wloadctl.errors import UsageError
    from wloadctl.remote.agent_cli import executors_for

    assert [executors_for(s, None) for s in (1, 2, 3, 4, 7)] == [1, 2, 1, 2, 1]
    assert executors_for(6, 3) == 3
    with pytest.raises(UsageError) as caught:
        executors_for(3, 2)
    assert caught.value.message == "--slots 3 cannot be shared evenly by --executors 2 (each runs as many jobs)"
    assert caught.value.hint == "give --slots 2 or 4, or --executors 1, 3"
    p = cli("agent", "--broker", "nats://127.0.0.1:1", "--name", "odd", "--slots", "3", "--executors", "2")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "cannot be shared evenly" in p.stderr, p.stderr


@pytest.mark.parametrize(("given", "said"), [
    (["--cpus", "-2"], "--cpus -2: give 0 or more (0: no limit)"),
    (["--cpus", "nan"], "--cpus nan: give 0 or more (0: no limit)"),
    (["--memory", "-5"], "--memory -5: give 0 or more (0: no limit)"),
    (["--memory", "inf"], "--memory must be MiB or a size like 4G, not 'inf'"),
])
def test_an_agent_offering_a_negative_or_endless_capacity_is_refused_in_one_line(given: list[str], said: str) -> None:
    """(`--cpus -2` started an agent whose every job claiming cpu failed to start; `--memory inf` ended in an
    internal error)"""
    p = cli("agent", "--broker", "nats://127.0.0.1:1", "--name", "neg", *given)
    assert p.returncode == 2 and p.stderr == f"wloadctl: {said}\n", p.stderr


def test_an_agent_whose_state_directory_cannot_be_made_is_refused_in_one_line(
        tmp_path: Path, nats_server: NatsServer) -> None:
    """(A file where the directory should be, or a path under /proc, ended in an internal error once the broker
    had answered.)"""
    (tmp_path / "afile").touch()
    for sd, why in ((tmp_path / "afile", "it is not a directory"), (Path("/proc/wloadctl-none"), "No such file")):
        p = cli("agent", "--broker", nats_server.url, "--name", "nodir", "--state-dir", str(sd))
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith(f"wloadctl: cannot use {sd} as a state directory: {why}"), p.stderr
        assert p.stderr.count("\n") == 1, p.stderr
