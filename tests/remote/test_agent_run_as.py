"""`run_as` and `limits: enforce` on agents: a job on another host runs as its user and under its limits, as here.

As root (CI) the agent runs on a host of its own (namespaces) and the job as an ordinary
user; anybody else runs the agent beside the test (a namespace's root could become nobody
else) and the job as themselves, through the same run_as path.
"""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import cli, wait_for
from tests.remote.conftest import NatsServer
from tests.remote.nodes import Node, unshare_available

pytestmark = pytest.mark.ipc

ROOT = os.geteuid() == 0
USER = "nobody" if ROOT else pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def agent(tmp_path: Path, nats_server: NatsServer) -> Iterator[Node]:
    """One agent of pool `etl` (on its own host as root), stopped at teardown whatever happened."""
    if ROOT and not unshare_available():
        pytest.fail("as root the agent runs in its own namespaces: util-linux unshare is needed", pytrace=False)
    node = Node("n1", nats_server.url, tmp_path / "n1", ["etl"], isolated=ROOT).start()
    try:
        wait_for(lambda: _alive(nats_server.url), timeout=30, what="the agent beating")
        yield node
    finally:
        node.stop()


def _alive(url: str) -> bool:
    p = cli("agents", "--broker", url, "--json")
    return p.returncode == 0 and any(a["agent"] == "n1" and a["state"] == "ALIVE" for a in json.loads(p.stdout))


# What a job reports: who it runs as, the limits it was given, the checkpoint it got back.
REPORT = ('printf \'{"who": "%s", "limits": "%s", "resumed": "%s"}\' "$(id -un)" "$WLOADCTL_LIMITS" '
          '"$WLOADCTL_CHECKPOINT" > "$WLOADCTL_RESULT_FILE"')


def test_run_as_and_limits_travel_to_the_agent(tmp_path: Path, nats_server: NatsServer, agent: Node) -> None:
    # Given a plan enforcing limits, with a run_as job on the pool that checkpoints, fails, and resumes
    plan = tmp_path / "plan.yaml"
    claims = {"memory": 64, "cpu": 0.5}
    plan.write_text(yaml.safe_dump({"name": "away_as", "limits": "enforce", "jobs": {
        "far": {"pool": "etl", "run_as": USER, "retries": {"count": 1, "delay": "0s"}, **claims,
                "command": 'if [ -z "$WLOADCTL_CHECKPOINT" ]; then echo chunk-9 > "$WLOADCTL_CHECKPOINT_FILE"; '
                           f"exit 1; fi; {REPORT}"},
        # the same job on this host: the agent must give the far one what a local executor gives it
        "near": {"run_as": USER, **claims, "command": REPORT},
        "check": {"command": "true", "depends_on": ["far", "near"],
                  "if": f'jobs["far"].result.who == "{USER}" and jobs["far"].result.resumed == "chunk-9" '
                        'and jobs["far"].result.limits == jobs["near"].result.limits'},
    }}))
    sd = tmp_path / "sd"
    # When it runs
    p = cli("run", str(plan), "--state-dir", str(sd), "--broker", nats_server.url, "--json", timeout=120)
    # Then the far job ran as the user, got its checkpoint back on its retry, and had the local job's limits
    assert p.returncode == 0, (p.stderr, agent.output())
    assert json.loads(p.stdout)["jobs"] == {"far": "SUCCEEDED", "near": "SUCCEEDED", "check": "SUCCEEDED"}, \
        (p.stdout, agent.output())
    near = json.loads(next((sd / "results").rglob("near.1")).read_text())
    assert near["who"] == USER and near["limits"].startswith("memory=64M cpu=0.5"), near
    # and its log on the agent's host is the user's
    logs = list((tmp_path / "n1" / "logs").rglob("far.*.log"))
    assert len(logs) == 2 and all(lg.stat().st_uid == pwd.getpwnam(USER).pw_uid for lg in logs)
