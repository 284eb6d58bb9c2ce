"""The failover drill: kill the active scheduler of a live run on purpose, measure the takeover, journal a report.

`wloadctl drill failover` (its command line is wloadctl.cli_drill) kills (SIGKILL) or freezes (SIGSTOP)
the active scheduler of a run that has a live standby, and measures the takeover and the first job the
new active starts from the journal; it checks that no job that had succeeded ran again and that the old
active is fenced. With `--broker` (wloadctl.remote.faildrill) the pair may span hosts: the drill asks the
active over the broker to strike itself, and watches the journal and the broker; it measures and checks
the same way (`measure_failover`, with a `Target` for each way to reach the active).
`wloadctl drill agent-loss` (wloadctl.remote.agentdrill) does the same for an agent.
Each report is journaled as an action of the run's audit trail (verb `drill`), which `status`, `audit`
and the console show.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Protocol

from wloadctl.core.states import JobState
from wloadctl.drillreport import (
    DrillReport,
    EventTail,
    JournalWatch,
    is_wloadctl,
    journal_report,
    wait_until,
)
from wloadctl.errors import UsageError
from wloadctl.procs.health import pid_alive
from wloadctl.store import RunRow, Store, journal_url

# -- failover -------------------------------------------------------------------------------------


def failover(state_dir: Path | None, mode: str, timeout: float) -> DrillReport:
    """Kill or freeze the active scheduler of a live run with a standby; measure and check the takeover.

    Args:
        state_dir: The run's state directory (None: the server journal's latest run).
        mode: kill (SIGKILL) or stop (SIGSTOP, then SIGCONT once taken over: it must stand down).
        timeout: Longest wait for the takeover, and again for the first start and the fencing.

    Returns:
        The report, already journaled in the run's audit trail.

    Raises:
        UsageError: no live run, the active is on another host, or no live standby to take over.
    """
    from wloadctl.client import RunClient

    with RunClient(state_dir) as c:
        run, sd = c.run, c.state_dir
        hdr = c.board_header()
        if hdr is None:
            if c.leased():
                host = c.store.holder_host(run.id) or "another host"
                raise UsageError(f"run {run.run_id}: its active scheduler (pid {run.scheduler_pid}) runs on "
                                 f"{host}, not here; drill it through the broker",
                                 hint="`wloadctl drill failover --broker URL --journal URL`")
            raise UsageError(f"no live run in {sd if state_dir else c.store.where}: run {run.run_id} is "
                             f"{'interrupted' if run.status == 'running' else run.status}",
                             hint="a drill runs on a live run with a standby")
        active, standby = hdr.scheduler_pid, hdr.standby_pid
        if not is_wloadctl(active):
            raise UsageError(f"run {run.run_id}: scheduler pid {active} is not a wloadctl process of this host")
        if not standby or not pid_alive(standby):
            far = " on this host (a standby of another host is seen through the broker: `--broker URL`)" \
                if journal_url() else ""
            raise UsageError(f"run {run.run_id} has no live standby to take over from scheduler pid {active}{far}",
                             hint=f"start one: `wloadctl scheduler --standby --state-dir {sd}`")
        rep = DrillReport("failover", run.run_id, facts={
            "mode": mode, "active_pid": active, "standby_pid": standby, "epoch_from": hdr.epoch})
        measure_failover(c.store, run, rep, timeout, LocalTarget(sd, run.run_id, active))
    journal_report(state_dir, run.id, rep)
    return rep


class Target(Protocol):
    """How a failover drill strikes the active scheduler, and what it can see of it afterwards."""

    def strike(self, mode: str) -> float:
        """Kill (kill) or freeze (stop) the active; when it was struck."""
        ...

    def took_at(self, row: RunRow) -> float | None:
        """When the journal granted the new epoch, by the new active's own word (None: not known)."""
        ...

    def thaw(self) -> None:
        """A frozen active was taken over: wake it (it must stand down)."""
        ...

    def release(self) -> None:
        """Nobody took a frozen active over: it goes on as it was."""
        ...

    def old_active(self, mode: str, timeout: float) -> tuple[str, str | None]:
        """How the old active left the run, and a problem when it did not within `timeout`."""
        ...

    def old_epoch_dispatches(self, epoch: int, since: float) -> int:
        """Tasks of `epoch` dispatched after the takeover at `since` (a fenced active dispatched them)."""
        ...


class LocalTarget:
    """The active of a pair on this host: signalled by pid, watched through the run's events and executors."""

    def __init__(self, sd: Path, run_id: str, active: int) -> None:
        self.sd, self.run_id, self.active = sd, run_id, active
        self.events = EventTail(sd / "events.jsonl")
        """The run's events from the drill's start (the standby's takeover, the old active's fencing)."""

    def strike(self, mode: str) -> float:
        """SIGKILL or SIGSTOP the active's pid."""
        at = time.time()
        os.kill(self.active, signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
        return at

    def took_at(self, row: RunRow) -> float | None:
        """The standby's takeover event's claim time."""
        take = wait_until(lambda: self.events.find("takeover", from_pid=self.active), 1.0)
        return float(take["claimed_at"]) if take else None

    def thaw(self) -> None:
        """SIGCONT: it wakes, finds the newer epoch, and must leave the run."""
        os.kill(self.active, signal.SIGCONT)

    def release(self) -> None:
        """SIGCONT the frozen active, if it lives."""
        if pid_alive(self.active):
            os.kill(self.active, signal.SIGCONT)

    def old_active(self, mode: str, timeout: float) -> tuple[str, str | None]:
        """Gone (killed, or fenced by its own word) or still running."""
        gone = wait_until(lambda: not pid_alive(self.active), timeout)
        if not gone:
            return "still running", f"the old active (pid {self.active}) is still running {timeout:g}s after the " \
                "takeover"
        fenced = self.events.find("fenced", pid=self.active)
        if fenced:
            return f"fenced ({fenced.get('how') or 'stood down'})", None
        return ("killed" if mode == "kill" else "gone"), None

    def old_epoch_dispatches(self, epoch: int, since: float) -> int:
        """Tasks of `epoch` the run's executors accepted after `since`."""
        return _old_epoch_dispatches(self.sd, self.run_id, epoch, since)


def measure_failover(store: Store, run_row: RunRow, rep: DrillReport, timeout: float, target: Target) -> None:
    """Strike the active, then measure and check the takeover (the report's facts and problems).

    Args:
        store: The run's journal (read-only).
        run_row: The run as it stood before the strike.
        rep: The report: its facts hold `mode` and `epoch_from`; figures and findings are added.
        timeout: Longest wait for the takeover, and again for the first start and the fencing.
        target: How the active is struck and seen (this host's pids, or the broker).
    """
    f, run, rid = rep.facts, run_row.id, run_row.run_id
    epoch0, mode = f["epoch_from"], f["mode"]
    watch = JournalWatch(store, run)
    before = watch.succeeded()
    f["succeeded_before"] = len(before)
    killed = target.strike(mode)
    f["killed_at"] = round(killed, 6)
    thawed = False
    try:
        row = wait_until(lambda: (r := store.get_run(rid)) is not None and r.epoch > epoch0 and r, timeout)
        if row is None:
            rep.problems.append(f"no takeover within {timeout:g}s")
            return
        took = target.took_at(row) or time.time()
        f.update(epoch_to=row.epoch, new_pid=row.scheduler_pid, takeover_s=round(took - killed, 3))
        if mode == "stop":
            target.thaw()
            thawed = True
        first = wait_until(FirstStart(watch, took), timeout)
        if first is not None:
            f.update(first_job=first[0], first_dispatch_s=round(first[1] - killed, 3),
                     first_start_s=round(first[2] - killed, 3))
        elif (now := store.get_run(rid)) is None or now.status != "running":
            f["first_start_s"] = None
            f["note"] = "the run had nothing left to start after the takeover"
        else:
            rep.problems.append(f"the new active started no job within {timeout:g}s of the takeover")
        f["old_active"], problem = target.old_active(mode, timeout)
        if problem:
            rep.problems.append(problem)
        late = target.old_epoch_dispatches(epoch0, took)
        f["old_epoch_dispatches"] = late
        if late:
            rep.problems.append(f"{late} task(s) of the old epoch {epoch0} were taken after the takeover")
        reran = watch.reran(before)
        ids = store.job_ids(run)
        f["reran"] = [ids[i] if i < len(ids) else str(i) for i in reran]
        if reran:
            rep.problems.append(f"{len(reran)} job(s) that had succeeded ran again: {', '.join(f['reran'][:5])}")
    finally:
        if mode == "stop" and not thawed:
            target.release()  # nobody took over: the frozen active goes on as it was
    rep.ok = not rep.problems


class FirstStart:
    """The first job dispatched at or after a time that has started, found as the journal grows."""

    def __init__(self, watch: JournalWatch, since: float) -> None:
        self.watch, self.since = watch, since
        self.queued: dict[tuple[int, int], float] = {}
        """(job index, attempt) -> when it was queued, of the attempts dispatched since then."""

    def __call__(self) -> tuple[str, float, float] | None:
        """(job, queued at, started at), or None while no such job has started."""
        for _seq, i, _frm, to, att, ts, *_ in self.watch.read():
            if to == JobState.QUEUED and ts >= self.since:
                self.queued.setdefault((i, att), ts)
            elif to == JobState.RUNNING and (i, att) in self.queued:
                ids = self.watch.store.job_ids(self.watch.run)
                return (ids[i] if i < len(ids) else str(i)), self.queued[(i, att)], ts
        return None


def _old_epoch_dispatches(sd: Path, run_id: str, epoch: int, since: float) -> int:
    """Tasks of `epoch` the run's executors accepted after `since` (a fenced scheduler dispatched them)."""
    from wloadctl.ipc import protocol as P
    from wloadctl.procs.localpool import read_results, result_journals

    return sum(1 for _ex, _pid, path in result_journals(sd, run_id) for r in read_results(path)
               if r.kind == P.RES_ACCEPTED and not r.flags & P.FLAG_STARTING and r.epoch == epoch
               and r.started > since)
