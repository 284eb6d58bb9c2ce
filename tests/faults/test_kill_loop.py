"""A seeded loop of kill -9s at random moments: the scheduler, an executor, or everything at once.

Each round kills at a random moment of a running plan; the scheduler is brought back with
`wloadctl resume` when it was a victim. When the plan finishes, the round checks what a bank's
operator would: every job SUCCEEDED, no job started again after it had ended (nothing done
twice), no process, queue or segment of the run left, and a journal that passes its checks.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import (
    ENV,
    cli,
    evidence_plan,
    executor_pids,
    ipc_names,
    job_states,
    kill_all,
    read_evidence,
    reap_orphans,
    stop_proc,
    wait_for,
)
from wloadctl.core.states import JobState
from wloadctl.ipc.ctlsock import SOCKET_NAME
from wloadctl.procs.jobtree import become_subreaper
from wloadctl.store import Store

pytestmark = pytest.mark.ipc

SEED = int(os.environ.get("WLOADCTL_FAULT_SEED", "20261201"))
"""The loop's seed (set WLOADCTL_FAULT_SEED to replay another sequence)."""
KILLS = 50
"""kill -9s across the loop (at least 50)."""
VICTIMS = ("scheduler", "executor", "everything")


def plan_for(tmp: Path, rng: random.Random) -> tuple[Path, Path, dict[str, dict]]:
    """A layered plan of short jobs that leave evidence; every job is idempotent (retried after a kill)."""
    jobs: dict[str, dict] = {}
    for layer in range(3):
        for k in range(6):
            jid = f"l{layer}_{k}"
            jobs[jid] = {"sleep": round(rng.uniform(0.03, 0.3), 2), "retries": 10}
            if layer:
                jobs[jid]["depends_on"] = [f"l{layer - 1}_{k}", f"l{layer - 1}_{(k + 1) % 6}"]
    out = tmp / "evidence"
    return evidence_plan(tmp / "plan.yaml", out, jobs), out, jobs


def states(sd: Path) -> dict[str, str]:
    try:
        return job_states(sd)
    except ValueError:
        return {}


def latest(sd: Path) -> tuple[str, str] | None:
    """(run id, status) of the state directory's run, None before the journal holds it."""
    if not (sd / "journal.db").exists():
        return None
    try:
        con = sqlite3.connect(f"file:{sd / 'journal.db'}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT run_id, status FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return (row[0], row[1]) if row else None


def run_id_of(sd: Path) -> str | None:
    got = latest(sd)
    return got[0] if got else None


def succeeded(sd: Path) -> bool:
    got = latest(sd)
    return got is not None and got[1] == "succeeded"


def ended_otherwise(sd: Path) -> str | None:
    """The status of the state directory's run when it ended other than succeeded (no resume brings it back)."""
    got = latest(sd)
    return got[1] if got is not None and got[1] not in ("running", "succeeded") else None


def launch(sd: Path, plan: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start the run's scheduler: `resume` once the journal holds the run, else `run` (a kill came first)."""
    args = ["resume", "--state-dir", str(sd)] if run_id_of(sd) else \
        ["run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "3"]
    with open(log, "ab") as f:
        f.write(f"$ wloadctl {' '.join(args)}\n".encode())
        f.flush()
        return subprocess.Popen([sys.executable, "-m", "wloadctl", *args], stdout=subprocess.DEVNULL, stderr=f,
                                env=ENV, start_new_session=True)


def kill_one(rng: random.Random, proc: subprocess.Popen[bytes], run_id: str | None) -> str:
    """Kill -9 a victim picked by the seed; say which."""
    victim = rng.choice(VICTIMS)
    execs = executor_pids(run_id) if run_id and victim != "scheduler" else []
    deadline = time.monotonic() + 15
    while victim == "executor" and not execs and run_id and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # a loaded machine starts the executors late: an executor kill waits for one
        execs = executor_pids(run_id)
    if victim == "executor" and execs:
        os.kill(rng.choice(execs), signal.SIGKILL)
        return victim
    if victim == "everything":
        kill_all([proc.pid, *execs])
    else:
        kill_all([proc.pid])
    proc.wait()
    return "scheduler" if victim == "executor" else victim


def who_holds(run_id: str) -> str:
    """The pids a run's boards name, and what each is now (for a failure message)."""
    from wloadctl.ipc.naming import ROLE_BOARD, ROLE_EXECUTORS, object_name
    from wloadctl.ipc.shm import ExecutorBoard, StateBoard

    pids: list[int] = []
    try:
        b = StateBoard.open(object_name(run_id, ROLE_BOARD))
        h = b.read_header()
        b.close()
        pids += [h.scheduler_pid, h.standby_pid]
        e = ExecutorBoard.open(object_name(run_id, ROLE_EXECUTORS))
        pids += [s.pid for s in e.read_all()]
        e.close()
    except Exception as exc:
        return f"boards unreadable: {exc}"
    out = []
    for pid in pids:
        try:
            out.append(f"{pid}: {Path(f'/proc/{pid}/stat').read_text().split(')')[-1].split()[:2]} "
                       f"{Path(f'/proc/{pid}/cmdline').read_bytes()[:80]!r}")
        except OSError:
            out.append(f"{pid}: gone")
    return "; ".join(out)


def reap_strays() -> None:
    """Reap the processes re-parented to this test (executors of a killed scheduler), as init would."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return


@pytest.fixture
def as_init() -> Iterator[None]:
    """This test stands in for init: what the kills orphan is re-parented here and reaped.

    (Where init leaves zombies, a killed run's executors would look alive to its cleanup.)
    """
    assert become_subreaper()
    try:
        yield
    finally:
        become_subreaper(False)
        reap_strays()


def test_a_seeded_loop_of_kill_9s_loses_nothing_and_repeats_nothing(tmp_path: Path, as_init: None) -> None:
    rng = random.Random(SEED)
    kills: list[str] = []
    rounds = 0
    while len(kills) < KILLS:
        rounds += 1
        tmp = tmp_path / f"round{rounds}"
        tmp.mkdir()
        plan, out, jobs = plan_for(tmp, rng)
        sd = tmp / "sd"
        log = tmp / "schedulers.log"
        proc = launch(sd, plan, log)
        run_id = None
        try:
            # Given a run, killed at random moments until it is done (or the loop has its kills)
            while len(kills) < KILLS:
                # A random moment once the scheduler listens (its executors start with it)
                listening = sd / SOCKET_NAME
                wait_for(lambda p=proc, at=listening: p.poll() is not None or at.exists(), timeout=60,  # type: ignore[misc]
                         every=0.02, what="a scheduler")
                time.sleep(rng.uniform(0.03, 0.4))
                run_id = run_id or run_id_of(sd)
                if proc.poll() is not None:
                    if succeeded(sd):
                        break
                    # (a run that ended failed is not resumed: said now, rather than resumed in vain forever)
                    assert not ended_otherwise(sd), f"round {rounds}: the run ended {ended_otherwise(sd)}; " \
                        f"{states(sd)}; {log.read_text()[-3000:]}"
                    proc = launch(sd, plan, log)
                    continue
                kills.append(kill_one(rng, proc, run_id))
                if proc.poll() is not None and not succeeded(sd):
                    proc = launch(sd, plan, log)
            # When the last scheduler is left alone to finish
            proc.wait(120)
            if not succeeded(sd):
                proc = launch(sd, plan, log)
                assert proc.wait(120) == 0, f"round {rounds}: {log.read_text()[-3000:]}"
        finally:
            stop_proc(proc)
        run_id = run_id or run_id_of(sd)
        assert run_id is not None
        # Then nothing is lost: every job succeeded
        final = states(sd)
        assert set(final.values()) == {"SUCCEEDED"}, f"round {rounds}: {final}"
        assert set(final) == set(jobs)
        # nothing was done twice: one success per job in the journal, and no copy of a job
        # started after its success was journaled (a copy whose executor died with it may
        # have run again before that: the job is idempotent, and was retried under its policy)
        evidence = read_evidence(out)
        with Store.open(sd, readonly=True) as st:
            run = st.latest_run()
            assert run is not None
            for idx, jid in enumerate(st.job_ids(run.id)):
                done = [t[3] for t in st.transitions_of(run.id, idx) if t[1] == JobState.SUCCEEDED]
                assert len(done) == 1, f"round {rounds}: {jid} succeeded {len(done)} times"
                starts = [ts for kind, ts in evidence[jid] if kind == "start"]
                assert max(starts) <= done[0], f"round {rounds}: {jid} ran after its success: {evidence[jid]}"
                assert evidence[jid][-1][0] == "end", f"round {rounds}: {jid}: {evidence[jid]}"
        # nothing is left behind
        reap_orphans(run_id)
        reap_strays()
        assert executor_pids(run_id) == []
        if ipc_names(run_id):
            # A kill between the final status and the removal of the run's objects leaves
            # them: they are a crashed run's, and `cleanup` (or the next start) removes them
            # once they are older than its grace for starting runs.
            wait_for(lambda r=run_id: cli("cleanup").returncode == 0 and not ipc_names(r),  # type: ignore[misc]
                     timeout=40, every=2.0, what="cleanup of a crashed run's objects")
        assert ipc_names(run_id) == [], f"round {rounds}: IPC objects left; {who_holds(run_id)}"
        # and the journal holds
        con = sqlite3.connect(sd / "journal.db")
        try:
            assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            con.close()
        assert cli("audit", "--verify", "--state-dir", str(sd)).returncode == 0
    assert len(kills) >= 50 and set(kills) == set(VICTIMS), kills
