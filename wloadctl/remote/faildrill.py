"""The failover drill of a pair that spans hosts: asked of the active over the broker, watched from any host.

`wloadctl drill failover --broker URL --journal URL` runs anywhere. It takes the run holding the
journal's lease and a standby beating on the broker (`PFX.pair.RUN`, see wloadctl.procs.standby),
asks the active by request/reply on the run's operator subject to strike itself (verb `drill`,
admin only; wloadctl.procs.selfdrill), then watches the journal and the broker: the takeover (the
new epoch in the journal, timed by the standby's own `took-over` word), the new active's first
dispatch and start, nothing that had succeeded running again, and the old active fenced (kill: the
lease went to another holder and the old epoch fell silent; stop: it said it stood down). Measuring
and the report are the local drill's (wloadctl.drill.measure_failover).

Each time comes from the clock of the host that journals it (the active's for the strike, the new
active's for the takeover and its dispatches): the figures assume the hosts' clocks agree (NTP), as
the journal's own times do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wloadctl.drill import measure_failover
from wloadctl.drillreport import DrillReport, journal_report, wait_until
from wloadctl.errors import ControlError, UsageError, WloadError
from wloadctl.ipc.ctlsock import this_process
from wloadctl.remote import messages as M
from wloadctl.remote import wire
from wloadctl.remote.broker import BrokerOptions, Subjects
from wloadctl.remote.link import BrokerLink
from wloadctl.remote.operators import OperatorLink
from wloadctl.store import RunRow, Store, journal_url

STANDBY_WAIT = 2.5
"""Longest wait for a standby's beat (a standby beats at least every second)."""
ASK_TIMEOUT = 10.0
"""Seconds to wait for the active's answer to the drill."""
STANDING = ("standing-by", "suspects-partition")
"""States of a standby that would take over."""


@dataclass(frozen=True, slots=True)
class Heard:
    """A message of the run heard on the broker."""

    kind: str
    """pair (the pair's notices), beat (the active's beats) or dispatch (a dispatch batch)."""
    body: Any
    """The decoded message (PairBeat, SchedulerBeat or wire.DispatchBatch)."""
    at: float
    """When this drill took it from its link (this host's clock): no earlier than its arrival."""


def failover_far(options: BrokerOptions, mode: str, timeout: float) -> DrillReport:
    """Have the active of the journal's live run strike itself; measure and check the takeover from here.

    Args:
        options: The broker the pair and its agents use.
        mode: kill (the active SIGKILLs itself) or stop (it SIGSTOPs itself; a waker of its host wakes
            it once the run was taken over, and it must stand down).
        timeout: Longest wait for the takeover, and again for the first start and the fencing.

    Returns:
        The report, already journaled in the run's audit trail.

    Raises:
        UsageError: no server journal, no run holding the lease, no standby beating on the broker, or the
            active refused the drill (it needs the admin role).
        ControlError: the active did not answer.
    """
    if journal_url() is None:
        raise UsageError("a failover drill through the broker reads the run's server journal: give --journal URL",
                         hint="e.g. --journal postgresql://USER@HOST/DB, or set WLOADCTL_JOURNAL")
    with Store.open(None, create=False, readonly=True) as store:
        run = store.latest_run()
        if run is None:
            raise UsageError(f"no run recorded in {store.where}", hint="a drill runs on a live run with a standby")
        if run.status != "running" or run.lease_until <= time.time():
            what = run.status if run.status != "running" else "running with a lapsed lease (no live scheduler)"
            raise UsageError(f"no run holds the lease in {store.where}: run {run.run_id} is {what}",
                             hint="a drill runs on a live run with a standby")
        host = store.holder_host(run.id) or "?"
        with BrokerLink.open(options, name=f"drill-{os.getpid()}") as link:
            target = BrokerTarget(link, Subjects(options.prefix), store, run, (host, run.scheduler_pid or 0), timeout)
            standby = target.standby()
            if standby is None:
                raise UsageError(f"run {run.run_id} has no live standby beating on the broker {options.shown()} "
                                 f"to take over from scheduler pid {run.scheduler_pid} on {host}",
                                 hint="start one on another host: `wloadctl scheduler --standby --broker URL "
                                      "--journal URL`")
            if target.find("beat", epoch=run.epoch) is None and wait_until(
                    lambda: target.find("beat", epoch=run.epoch), STANDBY_WAIT) is None:
                raise UsageError(f"run {run.run_id}: its active scheduler (pid {run.scheduler_pid} on {host}) does "
                                 f"not beat on the broker {options.shown()}, so it cannot be asked to strike itself",
                                 hint="an active reaches the broker when its plan runs jobs on agents (pool:/agent:)")
            rep = DrillReport("failover", run.run_id, facts={
                "mode": mode, "via": "broker", "active_pid": run.scheduler_pid, "active_host": host,
                "standby_pid": standby.pid, "standby_host": standby.host, "epoch_from": run.epoch})
            measure_failover(store, run, rep, timeout, target)
            if "epoch_to" in rep.facts:
                rep.facts["new_host"] = store.holder_host(run.id)
    journal_report(None, run.id, rep)
    return rep


class BrokerTarget:
    """The active of a pair that spans hosts: asked to strike itself, watched through the broker and the journal."""

    def __init__(self, link: BrokerLink, subjects: Subjects, store: Store, run: RunRow, holder: tuple[str, int],
                 wake_after: float) -> None:
        self.link, self.subjects, self.store, self.run = link, subjects, store, run
        self.holder = holder
        """(host, pid) of the active (as its answer gives them, once it answered)."""
        self.wake_after = wake_after
        """Longest freeze in stop mode: the active's waker wakes it then even if nobody took over."""
        self.heard: list[Heard] = []
        """The run's messages heard since the drill began."""
        self.seen_takeover = float("inf")
        """When this drill saw the new epoch in the journal (this host's clock)."""
        link.subscribe(subjects.pair(run.run_id), source="pair")
        link.subscribe(subjects.beat(run.run_id), source="beat")
        # Dispatch batches are stored by their stream and seen here too: a fenced active's would show.
        link.subscribe(subjects.dispatch_all, source="dispatch")

    def listen(self) -> list[Heard]:
        """The run's messages heard so far (those arrived since the last look are decoded and added)."""
        now = time.time()
        decoders: dict[str, Callable[[bytes], M.PairBeat | M.SchedulerBeat | wire.DispatchBatch]] = {
            "pair": M.PairBeat.decode, "beat": M.SchedulerBeat.decode, "dispatch": wire.decode_dispatch}
        for m in self.link.drain():
            decode = decoders.get(m.source)
            try:
                body = decode(m.data) if decode is not None else None
            except WloadError:
                continue
            if body is not None and body.run == self.run.run_id:
                self.heard.append(Heard(m.source, body, now))
        return self.heard

    def find(self, kind: str, **match: Any) -> Heard | None:
        """The first message of a kind whose fields match."""
        return next((h for h in self.listen() if h.kind == kind and
                     all(getattr(h.body, k) == v for k, v in match.items())), None)

    def standby(self) -> M.PairBeat | None:
        """A standby beating for the run's current epoch (None: none beat within STANDBY_WAIT)."""
        got = wait_until(lambda: next((h for h in self.listen() if h.kind == "pair" and h.body.role == "standby"
                                       and h.body.state in STANDING and h.body.epoch == self.run.epoch), None),
                         STANDBY_WAIT)
        return got.body if got is not None else None

    def strike(self, mode: str) -> float:
        """Ask the active to strike itself; when it did, by its answer (sent just before the strike).

        Raises:
            ControlError: no answer.
            UsageError: a refusal (the admin role is needed).
        """
        rid = self.run.run_id
        req = {"verb": "drill", "jobs": [], "mode": mode, "epoch": self.run.epoch, "wake_after": self.wake_after,
               "reason": f"failover drill ({mode})", "user": this_process().user}
        got = OperatorLink(self.link.options, self.link).ask(rid, req, ASK_TIMEOUT)
        if got is None:
            raise ControlError(f"no answer through the broker from the active of run {rid} within "
                               f"{ASK_TIMEOUT:g}s: nothing to measure",
                               hint="its audit trail says whether the request reached it (`wloadctl audit`)")
        if not got.get("ok"):
            # A refusal (the role, a drill under way) drilled nothing: exit 2 as the others, not a failed check.
            raise UsageError(f"the active of run {rid} refused the drill: {got.get('error') or 'no reason given'}")
        self.holder = (str(got.get("host", self.holder[0])), int(got.get("pid", self.holder[1])))
        return float(got["at"])

    def took_at(self, row: RunRow) -> float | None:
        """The standby's `took-over` time for the new epoch (it says so before it rebuilds the run)."""
        if self.seen_takeover == float("inf"):
            # What arrived until now is from before the takeover (messages are timed as they are taken).
            self.listen()
            self.seen_takeover = time.time()
        said = wait_until(lambda: self.find("pair", role="standby", state="took-over", epoch=row.epoch), 1.0)
        return said.body.at if said is not None else None

    def thaw(self) -> None:
        """Nothing from here: the waker on the active's host sends SIGCONT once it sees the takeover."""

    def release(self) -> None:
        """Nothing from here: with nobody taking over, the active's waker wakes it after `wake_after`."""

    def old_active(self, mode: str, timeout: float) -> tuple[str, str | None]:
        """kill: the lease went to another holder; stop: it said it stood down. Neither beats at its epoch."""
        host, pid = self.holder
        epoch = self.run.epoch
        who = f"the old active (pid {pid} on {host})"
        if mode == "stop":
            said = wait_until(lambda: self.find("pair", role="active", state="stood-down", host=host, pid=pid,
                                                epoch=epoch), timeout)
            if said is None:
                return "silent", f"{who} did not say it stood down within {timeout:g}s of the takeover"
            how = "fenced (stood down: it found the newer epoch)"
        else:
            row = self.store.get_run(self.run.run_id)
            now = (self.store.holder_host(self.run.id) or "?", row.scheduler_pid if row else 0)
            if now == (host, pid):
                return "still holding the lease", f"{who} still holds the run's lease after the takeover"
            how = f"killed (the lease went to {now[0]}:{now[1]})"
        late = [h for h in self.listen() if h.kind == "beat" and h.body.epoch == epoch and h.at > self.seen_takeover]
        if late:
            return "still beating", f"{who} beat {len(late)} time(s) at epoch {epoch} after the takeover"
        return how, None

    def old_epoch_dispatches(self, epoch: int, since: float) -> int:
        """Tasks of `epoch` heard dispatched after this drill saw the takeover (`since` is another host's time)."""
        return sum(len(h.body.tasks) for h in self.listen()
                   if h.kind == "dispatch" and h.body.epoch == epoch and h.at > self.seen_takeover)
