"""A job's whole process tree ends with it: what left its process group is caught (cgroup or subreaper)."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import ENV, cli, job_states, reap_orphans, start, wait_for
from wloadctl.procs.jobtree import MODE_ENV, detect, run_group

pytestmark = pytest.mark.ipc

MODES = ["subreaper", pytest.param("cgroup", marks=pytest.mark.skipif(
    detect().mode != "cgroup", reason=f"no delegated cgroup v2 here: {detect().why}"))]


def escaping_plan(path: Path, tag: str, timeout: int | None) -> Path:
    """A job that starts a setsid'd sleeper, a double-forked one, one in a session of its own with an empty
    environment (no marker names its job: a subreaper left it running), then waits."""
    cmd = (f"setsid sleep 600.{tag}1 & (sleep 600.{tag}2 &) ; "
           f"sh -c 'sh -c \"sleep 600.{tag}3\" &' ; env -i setsid sleep 600.{tag}5 >/dev/null 2>&1 & "
           f"sleep 600.{tag}4")
    job: dict[str, object] = {"command": cmd}
    if timeout:
        job["timeout"] = timeout
    path.write_text(yaml.safe_dump({"name": "escape", "jobs": {"esc": job}}))
    return path


def sleepers(tag: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", f"^sleep 600\\.{tag}"], capture_output=True, text=True).stdout
    return out.splitlines()


@pytest.mark.parametrize("mode", MODES)
def test_a_timed_out_job_leaves_nothing_running(tmp_path: Path, mode: str, no_ipc_leaks: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    tag = secrets.token_hex(3).translate(str.maketrans("abcdef", "123456"))
    monkeypatch.setitem(ENV, MODE_ENV, mode)
    plan = escaping_plan(tmp_path / "plan.yaml", tag, timeout=2)
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"))
    assert p.returncode == 1, p.stderr
    assert json.loads(cli("status", "--state-dir", str(tmp_path / "sd"), "--json").stdout)["counts"]
    assert job_states(tmp_path / "sd") == {"esc": "TIMED_OUT"}
    # Then every sleeper, in the job's group or out of it, is gone
    wait_for(lambda: not sleepers(tag), timeout=10, what="escaped processes gone")


@pytest.mark.parametrize("mode", MODES)
def test_a_killed_job_leaves_nothing_running(tmp_path: Path, mode: str, no_ipc_leaks: None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    tag = secrets.token_hex(3).translate(str.maketrans("abcdef", "123456"))
    monkeypatch.setitem(ENV, MODE_ENV, mode)
    plan = escaping_plan(tmp_path / "plan.yaml", tag, timeout=None)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        # Given the job running with its five sleepers, three of them out of its process group
        wait_for(lambda: len(sleepers(tag)) == 5, timeout=30, what="five sleepers")
        pgids = {os.getpgid(int(line.split()[0])) for line in sleepers(tag)}
        assert len(pgids) >= 2
        # When an operator kills it
        assert cli("kill", "esc", "--state-dir", str(sd)).returncode == 0
        assert proc.wait(60) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            reap_orphans(json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["run"])
    # Then none is left
    wait_for(lambda: not sleepers(tag), timeout=10, what="escaped processes gone")
    assert job_states(sd) == {"esc": "FAILED"}


@pytest.mark.skipif(detect().mode != "cgroup", reason=f"no delegated cgroup v2 here: {detect().why}")
def test_a_job_starts_in_its_own_group_without_a_shell(tmp_path: Path, no_ipc_leaks: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a command with no shell syntax (run directly) and one that needs the shell
    monkeypatch.setitem(ENV, MODE_ENV, "cgroup")
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "groups", "jobs": {
        "plain": {"command": "cat /proc/self/cgroup"},
        "shelled": {"command": "cat /proc/self/cgroup; sleep 0.2; echo parent $(cat /proc/$PPID/comm) "
                               "$(grep ^0:: /proc/$PPID/cgroup)"}}}))
    sd = tmp_path / "sd"
    # When they run
    p = cli("run", str(plan), "--state-dir", str(sd))
    assert p.returncode == 0, p.stderr
    # Then each was in its own attempt's group from its start: cat is the job itself, not a child of a
    # shell that moved it there
    for job in ("plain", "shelled"):
        text = cli("logs", job, "--state-dir", str(sd)).stdout
        line = next(x for x in text.splitlines() if x.startswith("0::"))
        assert "/wloadctl." in line and re.search(r"/e\d+\.\d+-[0-9a-f]+\.g\d+$", line), text
    # And the executor, the shell's parent, went back to its own group once the job had started
    parent = next(x for x in cli("logs", "shelled", "--state-dir", str(sd)).stdout.splitlines()
                  if x.startswith("parent "))
    assert parent.startswith("parent python") and "0::" in parent, parent
    assert not re.search(r"/e\d+\.\d+-[0-9a-f]+\.g\d+$", parent), parent


@pytest.mark.skipif(detect().mode != "cgroup", reason=f"no delegated cgroup v2 here: {detect().why}")
def test_a_group_serves_the_next_job_only_once_its_job_left_nothing(tmp_path: Path, no_ipc_leaks: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Given one executor and a chain: two clean jobs, one that leaves a sleeper behind, then two more
    tag = secrets.token_hex(3).translate(str.maketrans("abcdef", "123456"))
    monkeypatch.setitem(ENV, MODE_ENV, "cgroup")
    show = "grep ^0:: /proc/self/cgroup"
    jobs: dict[str, dict[str, object]] = {
        "a": {"command": show},
        "b": {"command": show, "depends_on": ["a"]},
        "c": {"command": f"{show}; setsid sleep 600.{tag} & sleep 0.1", "depends_on": ["b"]},
        "d": {"command": show, "depends_on": ["c"]},
        "e": {"command": show, "depends_on": ["d"]},
    }
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "reuse", "jobs": jobs}))
    sd = tmp_path / "sd"
    # When it runs
    p = cli("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    assert p.returncode == 0, p.stderr
    group = {j: next(x for x in cli("logs", j, "--state-dir", str(sd)).stdout.splitlines()
                     if x.startswith("0::")) for j in jobs}
    # Then the clean jobs ran one after the other in the same group, made once
    assert group["a"] == group["b"] == group["c"], group
    # And the sleeper c left was ended with its job, its group not given to d
    wait_for(lambda: not sleepers(tag), timeout=10, what="c's sleeper gone")
    assert group["d"] != group["c"] and group["d"] == group["e"], group
    # And no job group is left once the run is over
    run_id = json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["run"]
    base = detect().base
    assert base is not None and not run_group(base, run_id).exists(), "the run's groups are removed"
