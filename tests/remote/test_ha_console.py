"""The console of another host: it watches and steers a run whose scheduler and agents are on hosts of their own,
through the journal and the broker alone, and shows the output of a job that ran on an agent's host."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Log

from tests.integration.helpers import cli, wait_for
from tests.remote.conftest import NatsServer, broker_threads
from tests.remote.nodes import Node, SchedulerHost, unshare_available
from tests.remote.test_agent_runs import TRUSTING, plan_file
from tests.remote.test_ha_hosts import BEAT, _agents_alive, journal_run
from tui.app import ConsoleApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.job_detail import JobDetailScreen
from tui.widgets.job_table import JobTable
from wloadctl.client import RunClient
from wloadctl.core.states import JobState
from wloadctl.errors import WloadError
from wloadctl.paths import log_path
from wloadctl.remote.broker import BrokerOptions

pytestmark = pytest.mark.ipc


@pytest.fixture
def agent(tmp_path: Path, nats_server: NatsServer) -> Iterator[Node]:
    """One agent of pool `etl` on its own host."""
    if not unshare_available():
        pytest.fail("this test puts each process on a host of its own: it needs util-linux unshare, and root "
                    "or unprivileged user namespaces", pytrace=False)
    node = Node("n1", nats_server.url, tmp_path / "n1", ["etl"]).start()
    try:
        wait_for(lambda: _agents_alive(nats_server.url) >= 1, timeout=30, what="the agent beating")
        yield node
    finally:
        node.stop()


def _started(url: str) -> bool:
    try:
        return journal_run(url)[1] > 0
    except (AssertionError, WloadError):
        return False  # no schema or no run yet


async def until(pilot: Pilot[Any], pred: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_the_console_of_another_host_watches_and_holds_a_job_of_a_run_there(
        tmp_path: Path, nats_server: NatsServer, agent: Node, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a run on host A whose first job waits for a gate file
    gate = tmp_path / "gate"
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "plan.yaml", out, {
        "wait": {"pool": "etl", "command": f"while [ ! -e {gate} ]; do sleep 0.05; done"},
        "load": {"pool": "etl", "depends_on": ["wait"]},
        "report": {"pool": "etl", "depends_on": ["load"]},
    }, name="far", extra=TRUSTING)  # the test's broker authenticates nobody: the plan makes its callers operators
    active = SchedulerHost("hosta", nats_server.url, tmp_path / "a" / "sd",
                           ["run", str(plan), "--broker", nats_server.url, "--journal", pg_url, "--quiet", *BEAT])
    active.start()
    broker = BrokerOptions(nats_server.url)
    monkeypatch.setenv("WLOADCTL_JOURNAL", pg_url)  # this host's console reads the journal of host A's run
    try:
        wait_for(lambda: _started(pg_url), timeout=60, what="the run started")
        # When the console of this host opens it with the journal and the broker
        app = ConsoleApp(Path("."), open_client=lambda: RunClient(None, broker=broker), poll=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.loaded.is_set(), "the run loaded")
            await until(pilot, lambda: app.model is not None and
                        app.model.state[app.model.index["wait"]] == JobState.RUNNING, "wait RUNNING on screen")
            # Then it shows the run live, with the scheduler of host A
            assert app.status is not None and app.status.live
            # and the operator holds `load` by its key: the scheduler of host A applies it
            table = app.screen.query_one(JobTable)
            assert table.select_job("load")
            await pilot.press("h")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
            await pilot.press("y")
            await until(pilot, lambda: app.model is not None and
                        app.model.state[app.model.index["load"]] == JobState.HELD, "load HELD on screen")
            # and releases it again once its upstream is done
            gate.touch()
            await until(pilot, lambda: app.model is not None and
                        app.model.state[app.model.index["wait"]] == JobState.SUCCEEDED, "wait done")
            assert app.model is not None and app.model.state[app.model.index["load"]] == JobState.HELD
            assert table.select_job("load")
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
            await pilot.press("y")
            await until(pilot, lambda: app.model is not None and
                        app.model.state[app.model.index["report"]] == JobState.SUCCEEDED, "the run done", 60)
            app.exit()  # as `q` does: the actions' client and its broker connection are closed
        assert active.wait(60) == 0, active.output()
    finally:
        active.stop()
    status, _epoch, states = journal_run(pg_url)
    assert status == "succeeded" and set(states.values()) == {JobState.SUCCEEDED}
    assert broker_threads() == []


async def test_the_log_view_shows_the_output_of_a_job_that_ran_on_an_agents_host(
        tmp_path: Path, nats_server: NatsServer, agent: Node) -> None:
    # Given a run of this host whose job ran on the agent of another host, its log written there
    plan = plan_file(tmp_path / "plan.yaml", tmp_path / "evidence", {
        "far": {"pool": "etl", "command": 'echo "far says hello from $WLOADCTL_AGENT"'}}, name="farlog")
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--broker", nats_server.url, "--json", timeout=120)
    assert p.returncode == 0, p.stderr
    here = log_path(sd, json.loads(p.stdout)["run"], "far", 1)
    assert not here.exists(), "the output stays on the agent's host until someone reads it"
    # When the console opens the run and the job's detail
    app = ConsoleApp(sd, open_client=lambda: RunClient(sd), poll=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.loaded.is_set(), "the run loaded")
        assert app.screen.query_one(JobTable).select_job("far")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobDetailScreen), "the job's detail")
        # Then its log view shows what the job printed on the agent's host, fetched through the broker
        await until(pilot, lambda: "far says hello from n1" in "\n".join(app.screen.query_one("#log", Log).lines),
                    "the agent's log on screen")
        app.exit()
    assert broker_threads() == []
