"""Runs on one host draw on one capacity: real schedulers share `wloadctl host --slots`, by weight."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.helpers import job_states, read_evidence, wait_for

pytestmark = pytest.mark.ipc


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WLOADCTL_HOME": str(root)}
    env.pop("WLOADCTL_STATE_DIR", None)
    return env


def _wl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wloadctl", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def _plan(path: Path, name: str, out: Path, gate: Path, jobs: int, share: float = 1.0, cpu: float = 0.0,
          tail: float = 1.0, pids: Path | None = None) -> Path:
    # Each job leaves start/end evidence (and its pid in `pids`) and runs until the gate opens (at most a minute),
    # then `tail` seconds more, so the split can be seen while the runs share the host; `cpu` is its claim.
    pid = f"echo $$ > {pids}/$WLOADCTL_JOB; " if pids is not None else ""
    cmd = (f'{pid}echo "$WLOADCTL_JOB start $(date +%s.%N)" >> {out}; n=0; '
           f'while [ ! -e {gate} ] && [ $n -lt 600 ]; do n=$((n+1)); sleep 0.1; done; sleep {tail}; '
           f'echo "$WLOADCTL_JOB end $(date +%s.%N)" >> {out}')
    job: dict[str, Any] = {"command": cmd, **({"cpu": cpu} if cpu else {})}
    spec: dict[str, Any] = {"name": name, "share": share, "jobs": {f"{name}{k}": dict(job) for k in range(jobs)}}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _start(env: dict[str, str], plan: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--quiet"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def _running(out: Path) -> int:
    """Most jobs ever running at once, from every run's evidence."""
    marks = sorted((t, +1 if what == "start" else -1)
                   for ev in read_evidence(out).values() for what, t in ev)
    most = now = 0
    for _t, step in marks:
        now += step
        most = max(most, now)
    return most


def _host(env: dict[str, str]) -> dict[str, Any]:
    p = _wl(env, "host", "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)  # type: ignore[no-any-return]


def _stop(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        p.communicate(timeout=60)


def test_runs_share_the_hosts_slots_by_weight_and_why_names_the_run_in_front(tmp_path: Path,
                                                                             no_ipc_leaks: None) -> None:
    root, out, gate = tmp_path / "home", tmp_path / "ev", tmp_path / "gate"
    env = _env(root)
    assert _wl(env, "host", "--slots", "3").returncode == 0
    # Given a run of weight 2 that fills the host alone
    heavy = _start(env, _plan(tmp_path / "a.yaml", "ledger", out, gate, 6, share=2, tail=0.5))
    light = None
    try:
        wait_for(lambda: sum(1 for k in read_evidence(out) if k.startswith("ledger")) == 3, what="ledger on 3")
        # When a run of weight 1 starts beside it
        light = _start(env, _plan(tmp_path / "b.yaml", "stmts", out, gate, 6, tail=0.5))
        sd = root / "stmts"
        wait_for(lambda: sd.joinpath("journal.db").exists() and job_states(sd).get("stmts0") == "READY",
                 what="stmts ready")
        # Then its ready jobs wait behind the other run, and `why` says so
        why = json.loads(_wl(env, "why", "stmts0", "--state-dir", str(sd), "--json").stdout)
        assert why["state"] == "READY"
        assert [b["plan"] for b in why["behind_runs"]] == ["ledger"], why
        assert any("waiting behind ledger" in r for r in why["reasons"]), why
        # And once the gate lets jobs end, the host settles at two slots to one, by weight
        gate.touch()
        shares: dict[str, int] = {}

        def settled() -> bool:
            rows = {r["plan"]: r for r in _host(env)["runs"]}
            shares.update({k: r["fair"] for k, r in rows.items()})
            return shares == {"ledger": 2, "stmts": 1}

        wait_for(settled, what=f"a 2:1 split (last seen {shares})", every=0.05)
        # And both finish, never having run more than the host's three jobs at once
        for p in (heavy, light):
            _o, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        assert _running(out) <= 3
        assert len(read_evidence(out)) == 12
        assert _host(env)["runs"] == []  # a finished run's slots went back
    finally:
        gate.touch()
        _stop(heavy, *([light] if light is not None else []))


def test_a_crashed_runs_slots_go_back_to_the_host(tmp_path: Path, no_ipc_leaks: None) -> None:
    root, out, gate = tmp_path / "home", tmp_path / "ev", tmp_path / "gate"
    env = _env(root)
    assert _wl(env, "host", "--slots", "2").returncode == 0
    first = _start(env, _plan(tmp_path / "a.yaml", "first", out, gate, 2, tail=0.2))
    second = None
    try:
        wait_for(lambda: len(read_evidence(out)) == 2, what="first on both slots")
        # Given the first run's scheduler killed (its row stays in the ledger)
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate(timeout=30)
        assert [r["plan"] for r in json.loads(_wl(env, "host", "--json").stdout)["runs"]] == []
        # When a second run starts, then it gets the host's slots
        gate.touch()
        second = _start(env, _plan(tmp_path / "b.yaml", "second", out, tmp_path / "open", 2, tail=0.2))
        (tmp_path / "open").touch()
        _o, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
    finally:
        gate.touch()
        _stop(*([second] if second is not None else []))
        # The killed run's executors and objects: a resume of it finishes and removes them.
        _wl(env, "resume", "--state-dir", str(root / "first"))


def _claim_plan(path: Path, name: str, out: Path, gate: Path, jobs: int, pids: Path | None = None) -> Path:
    """Jobs that each claim both of the host's CPUs and end as the gate opens."""
    return _plan(path, name, out, gate, jobs, cpu=2, tail=0, pids=pids)


def _why(env: dict[str, str], job: str, state_dir: Path) -> dict[str, Any]:
    p = _wl(env, "why", job, "--state-dir", str(state_dir), "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)  # type: ignore[no-any-return]


def test_runs_never_hold_more_of_the_hosts_cpus_than_it_has_and_why_names_the_run_holding_them(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    root, out, gate = tmp_path / "home", tmp_path / "ev", tmp_path / "gate"
    env = _env(root)
    assert _wl(env, "host", "--cpus", "2").returncode == 0
    # Given a run whose jobs each claim both of the host's CPUs, its first one running
    first = _start(env, _claim_plan(tmp_path / "a.yaml", "ledger", out, gate, 2))
    second = None
    try:
        wait_for(lambda: len(read_evidence(out)) == 1, what="ledger0 running")
        # When a second run of such jobs starts beside it
        second = _start(env, _claim_plan(tmp_path / "b.yaml", "stmts", out, gate, 2))
        sd = root / "stmts"
        wait_for(lambda: sd.joinpath("journal.db").exists() and job_states(sd).get("stmts0") == "READY",
                 what="stmts ready")
        # Then its jobs wait READY (not failing) behind the first run, and `why` names it
        why = _why(env, "stmts0", sd)
        assert why["state"] == "READY" and why["host_wait"] == ["cpu"], why
        assert [(b["plan"], b["holds"]) for b in why["behind_runs"]] == [("ledger", {"cpu": 2000})], why
        assert any("waiting behind ledger" in r for r in why["reasons"]), why
        assert len(read_evidence(out)) == 1  # nothing else started meanwhile
        held = {r["plan"]: r["held"] for r in _host(env)["runs"]}
        assert held["ledger"] == {"cpu": 2000} and not any(held["stmts"].values()), held
        # And once the jobs may end, all four run, one at a time
        gate.touch()
        for p in (first, second):
            _o, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        assert len(read_evidence(out)) == 4
        assert _running(out) == 1
        assert _host(env)["runs"] == []
    finally:
        gate.touch()
        _stop(first, *([second] if second is not None else []))


def test_a_killed_runs_cpu_claim_stays_while_its_job_can_run_and_then_comes_back(tmp_path: Path,
                                                                                no_ipc_leaks: None) -> None:
    root, out, gate, pids = tmp_path / "home", tmp_path / "ev", tmp_path / "gate", tmp_path / "pids"
    pids.mkdir()
    env = _env(root)
    assert _wl(env, "host", "--cpus", "2").returncode == 0
    first = _start(env, _claim_plan(tmp_path / "a.yaml", "first", out, gate, 1, pids))
    second = None
    try:
        wait_for(lambda: len(read_evidence(out)) == 1, what="first0 running")
        # Given the first run's scheduler killed -9 while its job runs (its executors keep it running)
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate(timeout=30)
        second = _start(env, _claim_plan(tmp_path / "b.yaml", "second", out, tmp_path / "open", 1))
        (tmp_path / "open").touch()
        sd = root / "second"
        wait_for(lambda: sd.joinpath("journal.db").exists() and job_states(sd).get("second0") == "READY",
                 what="second ready")
        # Then its claim still counts, and the second run's job waits behind it
        rows = _host(env)["runs"]
        gone = next(r for r in rows if r["plan"] == "first")
        assert not gone["live"] and gone["held"] == {"cpu": 2000}, rows
        assert [b["plan"] for b in _why(env, "second0", sd)["behind_runs"]] == ["first"]
        # When its executors and its job are killed -9 too, the claim comes back and the second run finishes
        for pid, _started in gone["holders"]:
            os.kill(pid, signal.SIGKILL)
        job = int((pids / "first0").read_text())
        os.killpg(os.getpgid(job), signal.SIGKILL)
        _o, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
        assert [k for k in read_evidence(out)] == ["first0", "second0"]
        assert _host(env)["runs"] == []
    finally:
        gate.touch()
        _stop(*([second] if second is not None else []))
        # The killed run's queues and segments: a resume of it finishes and removes them.
        _wl(env, "resume", "--state-dir", str(root / "first"))
