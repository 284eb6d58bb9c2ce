"""An operator verb given as a glob over thousands of jobs, with real processes: the pair, the audit, the client."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli, reap_orphans, status, wait_for
from wloadctl.core.states import JobState
from wloadctl.ipc.shm import remove_run_objects
from wloadctl.store import Store

pytestmark = pytest.mark.ipc

JOBS = 5000
"""Jobs the glob names: a few thousand, as a night's fan-out under one gate."""


class Pair:
    """A run of JOBS jobs waiting on a gate job, its processes stopped and its IPC objects removed after."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.sd = tmp / "sd"
        self.gate = tmp / "gate"
        self.procs: list[subprocess.Popen[bytes]] = []
        plan = tmp / "plan.yaml"
        with open(plan, "w") as f:
            f.write(f'name: globs\njobs:\n  gate: {{command: "while [ ! -e {self.gate} ]; do sleep 0.1; done"}}\n')
            f.writelines(f'  x{i:05d}: {{command: "true", depends_on: [gate]}}\n' for i in range(JOBS))
        self.plan = plan

    def spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{name}.err", "wb") as err:
            p = subprocess.Popen([sys.executable, "-m", "wloadctl", *args], stdout=subprocess.DEVNULL, stderr=err,
                                 env={**ENV, **(env or {})}, start_new_session=True)
        self.procs.append(p)
        return p

    def start(self, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        active = self.spawn("active", "run", str(self.plan), "--state-dir", str(self.sd), "--quiet", env=env)
        wait_for(lambda: status(self.sd)["counts"].get("RUNNING") == 1, timeout=60, what="the gate running")
        return active

    def stop(self) -> None:
        self.gate.touch()
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
            p.wait()
        if (self.sd / "journal.db").exists():
            with Store.open(self.sd, create=False) as st:
                run = st.latest_run()
            if run is not None:
                reap_orphans(run.run_id, timeout=10.0)
                remove_run_objects(run.run_id)


@pytest.fixture
def pair(no_ipc_leaks: None, tmp_path: Path) -> Iterator[Pair]:
    p = Pair(tmp_path)
    try:
        yield p
    finally:
        p.stop()


def test_a_glob_verb_over_thousands_of_jobs_is_answered_and_the_standby_does_not_take_over(pair: Pair) -> None:
    # Given a run of thousands of waiting jobs, with a standby watching its active (default heartbeats)
    active = pair.start()
    standby = pair.spawn("standby", "scheduler", "--standby", "--state-dir", str(pair.sd))
    wait_for(lambda: status(pair.sd).get("standby_pid") == standby.pid, what="the standby")
    epoch = status(pair.sd)["epoch"]
    # When an operator holds them all by a glob
    p = cli("hold", "x*", "--state-dir", str(pair.sd), "--reason", "bulk")
    # Then the client gets the verb's answer
    assert p.returncode == 0, p.stderr
    assert f"and {JOBS - 40} more" in p.stdout
    # and the active kept the run: no takeover, both schedulers still up, the same epoch
    st = status(pair.sd)
    assert (st["live"], st["epoch"], st["scheduler_pid"]) == (True, epoch, active.pid), st
    assert active.poll() is None and standby.poll() is None, (pair.tmp / "standby.err").read_text()
    assert "took the run over" not in (pair.tmp / "standby.err").read_text()
    assert st["counts"].get("HELD") == JOBS
    # and every job's hold is in the audit trail, whose chain holds
    with Store.open(pair.sd, create=False) as js:
        run = js.latest_run()
        assert run is not None
        rows = [r for r in js.actions(run.id) if r[2] == "hold"]
        assert len(rows) == JOBS and all(r[6] and r[4] == "bulk" for r in rows)
        assert js.actions(run.id, "x00042")[0][5] == rows[42][5]
        assert js.verify_audit(run.id).ok


def test_a_scheduler_killed_right_after_a_glob_verb_leaves_an_audit_row_for_every_transition(pair: Pair) -> None:
    # Given a run of thousands of waiting jobs whose scheduler SIGKILLs itself right after the journal
    # commit of a verb's transitions
    active = pair.start(env={"WLOADCTL_FAILPOINT": "after-verb-commit"})
    # When an operator holds them all by a glob
    p = cli("hold", "x*", "--state-dir", str(pair.sd))
    assert active.wait(30) == -signal.SIGKILL
    # Then the client, its request delivered and unanswered, says so in one line and applies nothing itself
    assert p.returncode == 3, p.stderr
    assert p.stderr.strip().count("\n") == 0 and "Traceback" not in p.stderr
    assert "no answer from the scheduler; the hold may have been applied" in p.stderr
    # and every job the journal shows held has its applied audit row, and no other row was written
    with Store.open(pair.sd, create=False) as js:
        run = js.latest_run()
        assert run is not None
        ids = js.job_ids(run.id)
        held = {ids[i] for i, state, _att in js.job_states(run.id) if state == JobState.HELD}
        rows = js.actions(run.id)
        assert held and held == {r[3] for r in rows if r[2] == "hold" and r[6]}
        assert len(rows) == len(held)
        assert js.verify_audit(run.id).ok

