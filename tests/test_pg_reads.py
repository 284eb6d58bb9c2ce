"""Reads of a run whose journal is PostgreSQL, from where its files are not: `runs --journal URL` lists the journal's
runs, and `top` and the other read verbs on another host (its own IPC namespace and host name) read a live run from
the journal, naming the host of its scheduler."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, stop_proc, wait_for
from tests.remote.nodes import host_command, unshare_available

pytestmark = pytest.mark.ipc


@dataclass
class GatedRun:
    """A run on a PostgreSQL journal whose job `wait` runs until `gate` exists, then `end`."""

    url: str
    state_dir: Path
    gate: Path
    proc: subprocess.Popen[str]
    env: dict[str, str]

    def wl(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """`wloadctl ARGS` of an operator with no state directory of their own (and `extra` in the environment)."""
        return subprocess.run([sys.executable, "-m", "wloadctl", *args], capture_output=True, text=True, timeout=60,
                              env={**self.env, **extra})

    def elsewhere(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`wloadctl ARGS` on a host of its own (hostc), where the run's board is not and its files are hidden."""
        script = f"mount -t tmpfs tmpfs {self.state_dir} && exec \"$@\""
        return subprocess.run(host_command(["sh", "-c", script, "op", sys.executable, "-m", "wloadctl", *args],
                                           hostname="hostc"), capture_output=True, text=True, timeout=60, env=self.env)

    def finish(self) -> None:
        """Open the gate and wait for the run to end."""
        self.gate.touch()
        assert self.proc.wait(60) == 0


@pytest.fixture
def gated(tmp_path: Path, pg_url: str) -> Iterator[GatedRun]:
    """A gated run of plan `pgreads` under way: its job `wait` RUNNING."""
    sd, gate, home = tmp_path / "sd", tmp_path / "go", tmp_path / "home"
    home.mkdir()
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: pgreads\njobs:\n  wait: {{command: 'while [ ! -e {gate} ]; do sleep 0.05; done'}}\n"
                    "  end: {command: 'echo done', depends_on: [wait]}\n")
    env = {k: v for k, v in ENV.items() if k not in ("WLOADCTL_STATE_DIR", "WLOADCTL_JOURNAL")}
    env["WLOADCTL_HOME"] = str(home)  # a state root with no run in it
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd), "--journal",
                             pg_url, "--executors", "1", "--quiet"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, text=True)
    run = GatedRun(pg_url, sd, gate, proc, env)
    try:
        wait_for(lambda: json.loads(run.wl("status", "--journal", pg_url, "--json").stdout)["counts"].get("RUNNING"),
                 timeout=60, what="`wait` running")
        yield run
    finally:
        gate.touch()
        stop_proc(proc, grace=60, term=False)  # (the gate open, the run ends of itself)


def test_runs_lists_the_runs_of_a_postgresql_journal_given_by_option_or_environment(gated: GatedRun) -> None:
    # Given a run of a PostgreSQL journal under way, and an operator whose state root holds no run
    run_id = json.loads(gated.wl("status", "--journal", gated.url, "--json").stdout)["run"]
    # When they list the runs with --journal URL
    p = gated.wl("runs", "--journal", gated.url, "--json")
    # Then the journal's run is listed, live, with its plan, its counts and its state directory
    assert p.returncode == 0, p.stderr
    (e,) = json.loads(p.stdout)
    assert (e["run"], e["plan"], e["status"], e["done"], e["total"]) == (run_id, "pgreads", "running", 0, 2), e
    assert e["counts"] == {"WAITING": 1, "RUNNING": 1} and e["state_dir"] == str(gated.state_dir) and e["latest"]
    # And so with $WLOADCTL_JOURNAL, as a table
    p = gated.wl("runs", WLOADCTL_JOURNAL=gated.url)
    assert p.returncode == 0, p.stderr
    header, row = p.stdout.splitlines()
    assert header.split()[:2] == ["RUN", "PLAN"] and row.split()[:6] == [run_id, "pgreads", e["business_date"],
                                                                         "running", "0/2", "-"], p.stdout
    # And once it ended, it is listed as it ended
    gated.finish()
    (e,) = json.loads(gated.wl("runs", "--journal", gated.url, "--json").stdout)
    assert (e["run"], e["status"], e["done"], e["total"]) == (run_id, "succeeded", 2, 2), e


def test_a_read_from_a_state_directory_that_is_not_the_runs_names_the_journals_run_in_one_line(
        gated: GatedRun, tmp_path: Path) -> None:
    # Given a run of a PostgreSQL journal under way
    run_id = json.loads(gated.wl("status", "--journal", gated.url, "--json").stdout)["run"]
    mine = tmp_path / "mine"
    mine.mkdir()
    # When an operator reads with a state directory of their own, which has no run in that journal
    for args in (["status"], ["top", "--once"], ["why", "end"], ["history", "wait"], ["audit"]):
        p = gated.wl(*args, "--state-dir", str(mine), "--journal", gated.url)
        # Then they are told in one line that it has none, which run the journal's latest is and how to read it
        said = p.stderr.strip()
        assert p.returncode == 2 and "\n" not in said and "Traceback" not in said, (args, said)
        assert f"no run of {mine}" in said and run_id in said and "leave out --state-dir" in said, (args, said)


def test_top_and_the_reads_of_another_host_read_the_live_run_from_the_journal_naming_its_host(
        gated: GatedRun) -> None:
    if not unshare_available():
        pytest.fail("this test reads from a host of its own: it needs util-linux unshare, and root or unprivileged "
                    "user namespaces", pytrace=False)
    here = socket.gethostname()
    # Given a run of a PostgreSQL journal under way on this host, read from host C where its board is not
    st = json.loads(gated.elsewhere("status", "--journal", gated.url, "--json").stdout)
    assert st["live"] and st["scheduler_host"] == here, st
    # When `top` reads it there
    p = gated.elsewhere("top", "--once", "--journal", gated.url)
    # Then the run is live, its scheduler's pid and host named as status names them, read from the journal
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert f"live, pid {st['scheduler_pid']} on {here}, epoch {st['epoch']}" in lines[0], p.stdout
    assert lines[1].startswith(f"scheduler on {here}: read from the journal"), p.stdout
    assert lines[2] == "jobs: WAITING 1  RUNNING 1", p.stdout
    view = json.loads(gated.elsewhere("top", "--json", "--journal", gated.url).stdout)
    assert (view["live"], view["from_journal"], view["scheduler_host"]) == (True, True, here), view
    assert view["counts"] == {"WAITING": 1, "RUNNING": 1}, view
    # And every other read answers there from the journal
    for args in (["why", "end"], ["history", "wait"], ["pending"], ["lineage", "end"], ["audit"], ["runs"]):
        p = gated.elsewhere(*args, "--journal", gated.url)
        assert p.returncode == 0 and p.stdout and not p.stderr, (args, p.stdout, p.stderr)
    # And a job's log, which is on the scheduler's host, is said to be there, in one line
    p = gated.elsewhere("logs", "wait", "--journal", gated.url)
    said = p.stderr.strip()
    assert p.returncode == 1 and "\n" not in said and f"kept on {here}" in said, said
    assert os.path.exists(gated.state_dir / "logs")  # (hidden from host C only)
