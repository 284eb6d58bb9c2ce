"""`wloadctl show JOB`: what a job is, from the plan as its run has it (not the plan file as it is now)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.helpers import cli

pytestmark = pytest.mark.ipc

PLAN = """\
name: show-me
defaults:
  retries: {count: 2, delay: 5s}
jobs:
  extract:
    description: Pull the day's trades from the front office
    command: [/bin/echo, extracting, "two words"]
    sla: critical
    timeout: 10m
  per_region:
    for_each: [emea, apac]
    command: echo "region $WLOADCTL_ITEM"
    depends_on: [extract]
    pool: local
  report:
    command: |
      echo one
      echo two
    depends_on:
      per_region: success
      extract: done
    idempotent: false
"""


def test_show_tells_a_job_as_the_run_has_it_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text(PLAN)
    sd = tmp_path / "sd"
    ran = cli("run", str(plan), "--state-dir", str(sd), timeout=60)
    assert ran.returncode == 0, ran.stderr
    # (what the run had, not the file as it is now)
    plan.write_text(PLAN.replace("Pull the day's trades", "CHANGED"))
    got = cli("show", "extract", "--state-dir", str(sd))
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == [
        f"extract  (defined at {plan}:5)",
        "  description: Pull the day's trades from the front office",
        "  command:     /bin/echo extracting 'two words'  (argv, no shell)",
        "  tier critical, timeout 10m, retries 2 (delay 5s x2, at most 1h)",
    ]
    # A loop's instance says its item; a command of several lines shows whole, and the upstream's kind
    inst = cli("show", "per_region@apac", "--state-dir", str(sd))
    assert inst.returncode == 0, inst.stderr
    assert "  command:     echo \"region $WLOADCTL_ITEM\"  (/bin/sh -c)" in inst.stdout
    assert "  item:        apac" in inst.stdout and "  depends on:  extract" in inst.stdout
    rep = cli("show", "report", "--state-dir", str(sd))
    assert "  command:     echo one\n               echo two\n" in rep.stdout, rep.stdout
    assert "extract (done)" in rep.stdout and "not idempotent" in rep.stdout
    js = json.loads(cli("show", "report", "--state-dir", str(sd), "--json").stdout)
    assert js["command"] == "echo one\necho two\n" and js["shell"] is True and js["idempotent"] is False
    assert js["line"] == 15 and js["plan"] == str(plan)
    # An unknown job: one line, exit 1
    bad = cli("show", "nope", "--state-dir", str(sd))
    assert bad.returncode == 1 and bad.stderr.strip() == f"wloadctl: unknown job 'nope' in run {js_run(sd)}"


def js_run(sd: Path) -> str:
    """The run id of a state directory's run."""
    return json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["run"]
