"""HA with real processes: standbys take over killed or frozen schedulers, fencing."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import (
    ENV,
    cli,
    evidence_plan,
    executor_pids,
    job_states,
    read_evidence,
    reap_orphans,
    wait_for,
)
from wloadctl.errors import Fenced
from wloadctl.ipc import protocol as P
from wloadctl.ipc.naming import ROLE_BOARD, ROLE_EXECUTORS, ROLE_RESPONSE, object_name
from wloadctl.ipc.shm import StateBoard, remove_run_objects
from wloadctl.procs.localpool import read_results, result_journals
from wloadctl.procs.standby import verify

pytestmark = pytest.mark.ipc

TAKEOVER_BUDGET = 3.0
"""Seconds from the active's death to the takeover, with default heartbeat settings."""
QUICK_BEAT = ("--heartbeat-interval", "0.1", "--heartbeat-timeout", "0.75")
"""Heartbeat settings of a Cluster's schedulers unless a test asks for the defaults (0.25 s, 1.5 s): a
takeover comes about a second sooner (the HA tests across hosts beat as often)."""


@dataclass
class Cluster:
    """The processes of one HA test; all stopped and their IPC objects removed after."""

    tmp: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    jobs: int = 0
    beat: tuple[str, ...] = QUICK_BEAT
    """Heartbeat arguments of the active (start_run) and the standbys."""

    @property
    def sd(self) -> Path:
        return self.tmp / "sd"

    @property
    def out(self) -> Path:
        return self.tmp / "evidence"

    def spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """Start `wloadctl ARGS` in its own session, its stdout and stderr kept in `<name>.out` and `<name>.err`."""
        with open(self.tmp / f"{name}.err", "wb") as err, open(self.tmp / f"{name}.out", "wb") as out:
            p = subprocess.Popen(
                [sys.executable, "-m", "wloadctl", *args],
                stdout=out,
                stderr=err,
                env=ENV,
                start_new_session=True,
            )
        self.procs.append(p)
        return p

    def helper(self, code: str, *args: str) -> subprocess.Popen[bytes]:
        """Start a small Python helper process; its output goes to `helper.out`."""
        with open(self.tmp / "helper.out", "wb") as out:
            p = subprocess.Popen(
                [sys.executable, "-c", code, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=ENV,
                start_new_session=True,
            )
        self.procs.append(p)
        return p

    def stderr(self, name: str) -> str:
        return (self.tmp / f"{name}.err").read_text()

    def stdout(self, name: str) -> str:
        return (self.tmp / f"{name}.out").read_text()

    @property
    def gate(self) -> Path:
        return self.tmp / "gate"

    def start_run(
        self, layers: int = 5, sleep: float = 0.6, tail: float = 0.0, gate_layer: int | None = None
    ) -> subprocess.Popen[bytes]:
        """Layers of 4 evidence jobs (and a last job of `tail` seconds), 2 x 2 slots.

        The jobs of `gate_layer` run until `open_gate`: the run stays in its middle, with
        jobs running and jobs left to start, as long as a test needs it there.
        """
        width = 4
        jobs: dict[str, dict[str, Any]] = {}
        for layer in range(layers):
            for k in range(width):
                up = [f"l{layer - 1}_{k}", f"l{layer - 1}_{(k + 1) % width}"]
                jobs[f"l{layer}_{k}"] = {"depends_on": up} if layer else {}
                if layer == gate_layer:
                    jobs[f"l{layer}_{k}"]["gate"] = str(self.gate)
        if tail:
            last = [f"l{layers - 1}_{k}" for k in range(width)]
            jobs["tail"] = {"depends_on": last, "sleep": tail}
        self.jobs = len(jobs)
        plan = evidence_plan(self.tmp / "plan.yaml", self.out, jobs, sleep=sleep)
        sd = str(self.sd)
        return self.spawn(
            "active", "run", str(plan), "--state-dir", sd, "--executors", "2",
            "--slots", "2", "--quiet", *self.beat,
        )  # fmt: skip

    def open_gate(self) -> None:
        """Let the jobs of the gated layer end."""
        self.gate.touch()

    def standby(self, name: str = "standby") -> subprocess.Popen[bytes]:
        return self.spawn(name, "scheduler", "--standby", "--state-dir", str(self.sd), *self.beat)

    def run_id(self) -> str:
        con = sqlite3.connect(self.sd / "journal.db")
        try:
            row = con.execute("SELECT run_id FROM runs ORDER BY id DESC LIMIT 1")
            return str(row.fetchone()[0])
        finally:
            con.close()

    def events(self, kind: str) -> list[dict[str, Any]]:
        path = self.sd / "events.jsonl"
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["event"] == kind]

    def wait_event(self, kind: str, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait for events of a kind; on a timeout, say what the schedulers said."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if got := self.events(kind):
                return got
            time.sleep(0.05)
        said = {p.stem: p.read_text() for p in self.tmp.glob("*.err")}
        raise AssertionError(f"no {kind} event in {timeout}s: {said}")

    def wait_mid_run(self) -> None:
        """Until some jobs succeeded and at least two run now."""

        def mid() -> bool:
            if not (self.sd / "journal.db").exists():
                return False
            try:
                vals = list(job_states(self.sd).values())
            except (json.JSONDecodeError, ValueError):
                return False
            return vals.count("SUCCEEDED") >= 4 and vals.count("RUNNING") >= 2

        wait_for(mid, timeout=30, what="a run in the middle")

    def board_header(self) -> P.BoardHeader:
        board = StateBoard.open(object_name(self.run_id(), ROLE_BOARD))
        try:
            return board.read_header()
        finally:
            board.close()

    def results(self) -> list[P.ResultRecord]:
        """Every report the executors journaled."""
        journals = result_journals(self.sd, self.run_id())
        return [r for _ex, _pid, path in journals for r in read_results(path)]

    def assert_exactly_once(self) -> None:
        assert set(job_states(self.sd).values()) == {"SUCCEEDED"}
        ev = read_evidence(self.out)
        assert len(ev) == self.jobs
        for jid, lines in ev.items():
            assert [k for k, _ in lines] == ["start", "end"], f"{jid} ran: {lines}"

    def assert_fenced_once(self, old: subprocess.Popen[bytes], by: int) -> None:
        """The old active left the run exactly once: fenced on waking, or killed by the
        standby because it froze holding the journal's write lock."""
        code = old.wait(15)
        fenced = [e for e in self.events("fenced") if e["pid"] == old.pid]
        assert [e["by_pid"] for e in fenced] == [by]
        if fenced[0]["how"].startswith("killed"):
            assert code == -signal.SIGKILL
        else:
            assert code == Fenced.exit_code
            assert "fenced" in self.stderr("active")

    def stop(self) -> None:
        self.open_gate()
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)  # a frozen process must wake to die
                p.kill()
            p.wait()
        if (self.sd / "journal.db").exists():
            rid = self.run_id()
            reap_orphans(rid, timeout=5.0)
            remove_run_objects(rid)


@pytest.fixture
def cluster(no_ipc_leaks: None, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def test_kill_9_of_the_active_the_standby_takes_over_and_every_job_runs_once(
    cluster: Cluster,
) -> None:
    # Given a run in the middle, with jobs running, and a standby watching it (default heartbeats: the budget's)
    cluster.beat = ()
    active = cluster.start_run(layers=4, sleep=0.3, gate_layer=2)
    standby = cluster.standby()
    cluster.wait_mid_run()
    wait_for(lambda: cluster.board_header().standby_pid == standby.pid, what="standby")
    # When the active scheduler is killed outright
    killed_at = time.time()
    os.kill(active.pid, signal.SIGKILL)
    active.wait()
    # Then the standby takes over within the budget, under the next epoch
    take = cluster.wait_event("takeover")[0]
    delay = take["ts"] - killed_at
    assert (take["from_pid"], take["pid"]) == (active.pid, standby.pid)
    assert take["epoch"] == take["from_epoch"] + 1
    assert delay < TAKEOVER_BUDGET
    hdr = cluster.board_header()
    assert (hdr.scheduler_pid, hdr.epoch) == (standby.pid, take["epoch"])
    # and `wloadctl resume` refuses while the new active holds the lease (the dead
    # active's flock is free now)
    p = cli("resume", "--state-dir", str(cluster.sd))
    assert p.returncode == 2
    assert f"scheduler pid {standby.pid} holds the lease" in p.stderr
    # and a new standby can be started for the new active
    second = cluster.standby("second")
    wait_for(lambda: cluster.board_header().standby_pid == second.pid, what="second")
    # and the run completes with every job's side effect exactly once
    cluster.open_gate()
    assert standby.wait(30) == 0, cluster.stderr("standby")
    assert second.wait(10) == 0, cluster.stderr("second")
    cluster.assert_exactly_once()
    assert "reattached to 2 executor(s)" in cluster.stderr("standby")
    # and the standby's terminal shows the run going on and how it ended, as a resume's would; the second
    # standby, which took nothing over, says nothing there
    said = cluster.stdout("standby").splitlines()
    assert said[-1].startswith(f"run {cluster.run_id()} succeeded: {cluster.jobs} succeeded in "), said
    assert any(line.split()[1:] == ["SUCCEEDED", "l3_0"] for line in said), said
    assert cluster.stdout("second") == ""
    new = [r.started for r in cluster.results() if r.epoch == take["epoch"]]
    print(f"takeover {delay:.3f}s after kill -9, first dispatch "
          f"{min(new) - killed_at:.3f}s")  # fmt: skip
    reap_orphans(cluster.run_id())
    assert executor_pids(cluster.run_id()) == []


def test_a_frozen_active_is_fenced_and_only_the_new_active_dispatches(
    cluster: Cluster,
) -> None:
    # Given a run in the middle and a standby
    active = cluster.start_run(layers=4, sleep=0.3, gate_layer=2)
    standby = cluster.standby()
    cluster.wait_mid_run()
    # When the active is frozen past the heartbeat timeout
    os.kill(active.pid, signal.SIGSTOP)
    take = cluster.wait_event("takeover")[0]
    # and wakes up while the run goes on under the standby
    cluster.open_gate()
    time.sleep(0.5)
    os.kill(active.pid, signal.SIGCONT)
    # Then the old active leaves the run to the new one, which completes it once
    cluster.assert_fenced_once(active, by=standby.pid)
    assert standby.wait(30) == 0, cluster.stderr("standby")
    cluster.assert_exactly_once()
    assert len(cluster.events("takeover")) == 1
    # and no executor took work of the old epoch once the new epoch was published
    accepted = [r for r in cluster.results() if r.kind == P.RES_ACCEPTED]
    old = [r for r in accepted if r.epoch == take["from_epoch"]]
    assert all(r.started < take["ts"] for r in old)
    assert any(r.epoch == take["epoch"] for r in accepted)


def test_an_active_frozen_holding_the_journal_lock_is_killed_by_the_takeover(
    cluster: Cluster,
) -> None:
    # Given a busy run (journal writes all the time) and a standby (default heartbeats: a busy active's
    # beats are not to be late for a short timeout here)
    cluster.beat = ()
    jobs: dict[str, dict[str, Any]] = {f"j{k}": {} for k in range(240)}
    plan = evidence_plan(cluster.tmp / "plan.yaml", cluster.out, jobs, sleep=0.05)
    cluster.jobs = len(jobs)
    sd = str(cluster.sd)
    # (every commit synced: the write lock is held longer, so a freeze catches it more often)
    active = cluster.spawn("active", "run", str(plan), "--state-dir", sd, "--quiet", "--journal-sync", "full")
    standby = cluster.standby()
    wait_for(lambda: cluster.sd.joinpath("journal.db").exists(), what="the journal")
    wait_for(lambda: cluster.events("scheduler_start"), what="the active")
    # When the active is frozen in the middle of a journal transaction (frozen at once
    # and thawed again, well inside the timeout, until one freeze catches it there)
    # (mid-run: a freeze inside the run's last transaction, its status, leaves nothing to take over)
    for _ in range(100):
        os.kill(active.pid, signal.SIGSTOP)
        if journal_locked(cluster.sd) and len(read_evidence(cluster.out)) < len(jobs) - 40:
            break
        os.kill(active.pid, signal.SIGCONT)
        time.sleep(0.03)
    else:
        pytest.skip("the active was never caught inside a journal transaction")
    # Then the standby, unable to write the journal, kills it and takes over
    take = cluster.wait_event("takeover")[0]
    assert take["from_killed"] is True
    cluster.assert_fenced_once(active, by=standby.pid)
    assert standby.wait(60) == 0, cluster.stderr("standby")
    cluster.assert_exactly_once()


def journal_locked(sd: Path) -> bool:
    """Whether some process holds the journal's write lock now."""
    con = sqlite3.connect(sd / "journal.db", timeout=0.05, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        con.close()


def test_reports_a_woken_predecessor_takes_are_found_in_the_executors_journals(
    cluster: Cluster,
) -> None:
    # Given a frozen active, and a reader of the old epoch ready on the response queue
    active = cluster.start_run(layers=6, sleep=0.3)
    standby = cluster.standby()
    cluster.wait_mid_run()
    rid = cluster.run_id()
    thief = cluster.helper(
        THIEF, object_name(rid, ROLE_BOARD), object_name(rid, ROLE_RESPONSE)
    )
    os.kill(active.pid, signal.SIGSTOP)
    # When the standby takes over and the reader takes reports meant for it, as a
    # predecessor frozen mid-drain does when it wakes, before it notices the fence
    cluster.wait_event("takeover")
    thief.wait(20)
    out = (cluster.tmp / "helper.out").read_text()
    stolen = [int(k) for k in out.split()]
    assert stolen, out
    os.kill(active.pid, signal.SIGCONT)
    # Then the new active finds what was taken in the executors' journals, and the
    # run completes once
    cluster.assert_fenced_once(active, by=standby.pid)
    assert standby.wait(30) == 0, cluster.stderr("standby")
    cluster.assert_exactly_once()
    if P.RES_EXITED in stolen:
        found = cluster.events("report_recovered")
        assert any(P.RES_EXITED in e["kinds"] for e in found)


THIEF = """
import sys, time
from wloadctl.ipc import protocol as P
from wloadctl.ipc.mq import MessageQueue
from wloadctl.ipc.shm import StateBoard
board = StateBoard.open(sys.argv[1])
first = board.read_header().epoch
while board.read_header().epoch == first:
    time.sleep(0.01)
q = MessageQueue.open(sys.argv[2])
end = time.time() + 2.0
while time.time() < end:
    data = q.recv(0.05)
    if data:
        print(*(r.kind for r in P.decode_results(data)), flush=True)
q.close()
board.close()
"""
"""Once a new epoch is on the board, takes result messages off the response queue
for two seconds and prints their kinds."""


def test_two_standbys_only_one_takes_over(cluster: Cluster) -> None:
    # Given two standbys watching the same active
    active = cluster.start_run(layers=4, sleep=0.3, gate_layer=2)
    first, second = cluster.standby("first"), cluster.standby("second")
    cluster.wait_mid_run()
    # When the active dies
    os.kill(active.pid, signal.SIGKILL)
    active.wait()
    cluster.wait_event("takeover")
    cluster.open_gate()
    # Then exactly one takes over, the other stands by, and the run completes once
    assert first.wait(30) == 0, cluster.stderr("first")
    assert second.wait(30) == 0, cluster.stderr("second")
    takes = cluster.events("takeover")
    assert len(takes) == 1, takes
    assert takes[0]["pid"] in (first.pid, second.pid)
    starts = cluster.events("scheduler_start")
    assert len({e["epoch"] for e in starts}) == len(starts)
    cluster.assert_exactly_once()


def test_a_standby_that_an_executor_contradicts_suspects_a_partition(
    cluster: Cluster,
) -> None:
    # Given a frozen active, and an executor that still hears it (a network split)
    active = cluster.start_run(layers=4, sleep=0.3, gate_layer=2)
    standby = cluster.standby()
    cluster.wait_mid_run()
    epoch = cluster.board_header().epoch
    board = object_name(cluster.run_id(), ROLE_EXECUTORS)
    witness = cluster.helper(WITNESS, board, str(epoch))
    os.kill(active.pid, signal.SIGSTOP)
    # Then the standby reports a suspected partition and does not take over
    sus = cluster.wait_event("partition_suspected")
    assert sus[0]["hearing"] == [7] and sus[0]["active_pid"] == active.pid
    time.sleep(1.0)
    assert cluster.events("takeover") == []
    assert "suspected partition" in cluster.stderr("standby")
    # When the witness goes quiet too, the standby takes over and the run completes
    witness.kill()
    witness.wait()
    cluster.wait_event("takeover")
    cluster.open_gate()
    os.kill(active.pid, signal.SIGCONT)
    cluster.assert_fenced_once(active, by=standby.pid)
    assert standby.wait(30) == 0, cluster.stderr("standby")
    cluster.assert_exactly_once()


WITNESS = """
import os, sys, time
from wloadctl.ipc.protocol import ExecutorSlot
from wloadctl.ipc.shm import ExecutorBoard
board = ExecutorBoard.open(sys.argv[1])
while True:
    now = time.time()
    board.write(7, ExecutorSlot(executor=7, pid=os.getpid(), state=1, beat=now, slots=1,
                                seen_epoch=int(sys.argv[2]), seen_scheduler_beat=now))
    time.sleep(0.1)
"""
"""A stand-in executor (slot 7) that keeps saying it hears the active scheduler."""


def test_verify_counts_only_live_executors_that_beat_since_the_silence() -> None:
    now = 1000.0

    def slot(ex: int, beat: float, heard: float) -> P.ExecutorSlot:
        return P.ExecutorSlot(executor=ex, pid=10 + ex, beat=now - beat, seen_epoch=3,
                              seen_scheduler_beat=now - heard)  # fmt: skip

    slots = [slot(0, 0.1, 5.0), slot(1, 0.1, 0.5), slot(2, 9.0, 0.1), slot(3, 0.1, 0.1)]
    alive = {10, 11, 12}.__contains__
    v = verify(slots, epoch=3, since=now - 1.0, now=now, timeout=1.5, alive=alive)
    assert v.asked == (0, 1) and v.hearing == (1,) and v.partitioned
    v = verify(slots[:1], epoch=3, since=now - 1.0, now=now, timeout=1.5, alive=alive)
    assert v.asked == (0,) and not v.partitioned
    assert not verify([], epoch=3, since=now, now=now, timeout=1.5).partitioned
    v = verify(slots[1:2], epoch=4, since=now - 1.0, now=now, timeout=1.5, alive=alive)
    assert not v.partitioned  # it hears an older scheduler than the one in question


def test_a_standby_with_no_run_to_follow_names_what_to_do(tmp_path: Path) -> None:
    from wloadctl.procs.standby import _start_hint
    from wloadctl.store import Store

    # Given a journal whose run was stopped (interrupted: no scheduler holds it)
    with Store.open(tmp_path) as st:
        st.create_run("r1", "p", "/p.yaml", "d", "", ["a"], "2026-12-07", time.time(), "{}")
        st.set_status(st.latest_run().id, "interrupted", None)
        run = st.latest_run()
        # Then the standby that gave up waiting says to resume that run, naming it
        assert _start_hint(run, None, tmp_path) == (
            f"run r1 is interrupted, with no scheduler: resume it (`wloadctl resume --state-dir {tmp_path}`), "
            "then stand by for it")
        # and one given an unknown run id says the journal has none, not that a directory of that name is empty
        assert _start_hint(None, "nosuch", tmp_path) == \
            "the journal holds no run nosuch: `wloadctl runs` lists the runs"
        st.set_status(run.id, "succeeded", None)
        assert _start_hint(st.latest_run(), None, tmp_path).startswith("start the run first")
