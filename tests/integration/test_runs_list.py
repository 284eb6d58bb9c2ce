"""`wloadctl runs`: every run under a state root, live or finished, from real runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import wait_for
from wloadctl.core.states import TERMINAL, JobState

pytestmark = pytest.mark.ipc


def wl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wloadctl", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def plan(path: Path, name: str, jobs: dict[str, str]) -> Path:
    path.write_text(yaml.safe_dump({"name": name, "jobs": {j: {"command": c} for j, c in jobs.items()}}))
    return path


def listed(env: dict[str, str], *args: str) -> dict[str, dict]:
    p = wl(env, "runs", "--json", *args)
    assert p.returncode == 0, p.stderr
    return {r["plan"]: r for r in json.loads(p.stdout)}


def test_runs_lists_finished_and_live_runs_made_under_the_root(tmp_path: Path, no_ipc_leaks: None) -> None:
    root = tmp_path / "home"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WLOADCTL_HOME": str(root)}
    env.pop("WLOADCTL_STATE_DIR", None)
    # Given a finished run and a live one, both started without --state-dir
    done = plan(tmp_path / "a.yaml", "ledger", {"a1": "true", "a2": "exit 3"})
    assert wl(env, "run", str(done), "--quiet").returncode == 1
    live_plan = plan(tmp_path / "b.yaml", "statements", {"b1": "true", "b2": "sleep 60"})
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(live_plan), "--business-date", "2024-03-29"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        got = wait_for(lambda: (r := listed(env)).get("statements", {}).get("status") == "running"
                       and r["statements"]["done"] == 1 and r, what="the live run listed")
        # Then both are listed with their state directories under the root
        ledger, stmts = got["ledger"], got["statements"]
        assert ledger["state_dir"] == str(root / "ledger") and stmts["state_dir"] == str(root / "statements")
        assert (ledger["status"], ledger["done"], ledger["total"]) == ("failed", 2, 2)
        assert ledger["counts"] == {"SUCCEEDED": 1, "FAILED": 1}
        assert (stmts["business_date"], stmts["total"]) == ("2024-03-29", 2)
        assert stmts["counts"] == {"SUCCEEDED": 1, "RUNNING": 1}
        assert {"run", "at_risk", "late", "started"} <= set(stmts) and stmts["at_risk"] == stmts["late"] == 0
        # --root gives the same list as $WLOADCTL_HOME
        other = {k: v for k, v in env.items() if k != "WLOADCTL_HOME"}
        assert set(listed(other, "--root", str(root))) == {"ledger", "statements"}
        text = wl(env, "runs").stdout
        assert "ledger" in text and "1/2" in text and "running" in text
    finally:
        proc.send_signal(signal.SIGTERM)  # stops its jobs too (Ctrl-C would leave them running)
        proc.wait(60)
    assert listed(env)["statements"]["status"] == "interrupted"


def test_runs_under_an_empty_or_missing_root(tmp_path: Path) -> None:
    env = {**os.environ, "WLOADCTL_HOME": str(tmp_path / "none")}
    assert json.loads(wl(env, "runs", "--json").stdout) == []
    bad = wl(env, "runs", "--root", str(tmp_path / "missing"))
    assert bad.returncode == 2 and "no such directory" in bad.stderr


@pytest.mark.parametrize("verb", [["set-ok", "load_accounts"], ["rerun", "load_accounts", "--downstream"]],
                         ids=["set-ok", "rerun-downstream"])
def test_runs_counts_a_stopped_run_as_status_does_after_an_operator_verb(
        tmp_path: Path, verb: list[str], no_ipc_leaks: None) -> None:
    root = tmp_path / "home"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WLOADCTL_HOME": str(root)}
    env.pop("WLOADCTL_STATE_DIR", None)
    sd = root / "eod"
    # Given a failed run: load_accounts failed, post_ledger upstream-failed, fees succeeded
    spec = {"name": "eod", "jobs": {"load_accounts": {"command": "exit 3"},
                                    "post_ledger": {"command": "true", "depends_on": ["load_accounts"]},
                                    "fees": {"command": "true"}}}
    (tmp_path / "eod.yaml").write_text(yaml.safe_dump(spec))
    assert wl(env, "run", str(tmp_path / "eod.yaml"), "--state-dir", str(sd)).returncode == 1
    assert listed(env)["eod"]["counts"] == {"SUCCEEDED": 1, "FAILED": 1, "UPSTREAM_FAILED": 1}
    # When an operator's verb changes its jobs with no scheduler running it
    p = wl(env, *verb, "--state-dir", str(sd), "--reason", "checked by hand")
    assert p.returncode == 0, p.stderr
    # Then `runs` counts its jobs as `status` does
    st = wl(env, "status", "--state-dir", str(sd), "--json")
    assert st.returncode == 0, st.stderr
    counts = json.loads(st.stdout)["counts"]
    assert counts != {"SUCCEEDED": 1, "FAILED": 1, "UPSTREAM_FAILED": 1}
    entry = listed(env)["eod"]
    assert entry["counts"] == counts
    assert entry["done"] == sum(n for s, n in counts.items() if JobState[s] in TERMINAL)


def test_runs_table_lines_up_plans_named_in_wide_characters(tmp_path: Path, no_ipc_leaks: None) -> None:
    from rich.cells import cell_len

    root = tmp_path / "home"
    env = {**os.environ, "WLOADCTL_HOME": str(root)}
    env.pop("WLOADCTL_STATE_DIR", None)
    # Given a finished run of a plan named in Japanese beside one named in ASCII
    for name in ("日次締め処理", "ledger"):
        assert wl(env, "run", str(plan(tmp_path / f"{len(name)}.yaml", name, {"a": "true"})), "--quiet").returncode == 0
    p = wl(env, "runs")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 3, p.stdout
    # Then every row's status starts at the terminal column of the STATUS heading
    at = [cell_len(line[: line.index(word)])
          for line, word in zip(lines, ("STATUS", "succeeded", "succeeded"), strict=True)]
    assert at[0] == at[1] == at[2], p.stdout
