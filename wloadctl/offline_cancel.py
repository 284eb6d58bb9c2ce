"""`cancel` of a run no scheduler runs (interrupted, crashed, ended holding), on its journal: what it had in flight
settled first as a resume would settle it, then nothing left of it starts, and the run ends cancelled."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from wloadctl.core.commands import Command
from wloadctl.core.events import Event
from wloadctl.core.holding import LOCAL_PLACE, place_of
from wloadctl.core.states import JobState
from wloadctl.procs.health import pid_alive
from wloadctl.procs.prestart import ORPHAN_TIMEOUT
from wloadctl.store import RunRow, Store

if TYPE_CHECKING:
    from wloadctl.core.engine import SchedulerCore
    from wloadctl.procs.recovery import Settled

OPEN = ("running", "interrupted", "held")
"""Run statuses of a run that has not ended (a resume goes on with it): the runs a cancel applies to."""
NAMED = 5
"""Jobs named one by one in a refusal (the rest are counted)."""


def _some(names: list[str]) -> str:
    return ", ".join(names[:NAMED]) + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


def cancel_refusal(core: SchedulerCore, run: RunRow, executor_pids: list[int], far_host: str | None) -> str | None:
    """Why a cancel cannot be applied on the journal of a run that has no live scheduler (None: it can).

    A cancel must not leave anything running unnoticed: a job the run had in flight on an executor that is still
    alive (a scheduler killed alone, or stopped with Ctrl-C, leaves its executors running their jobs) could end
    after it, its end never journaled; one on an agent, or on another host's executors, is out of reach here.

    Args:
        core: the run's core rebuilt from the journal.
        run: the run's row.
        executor_pids: the pids of the run's executors alive on this host.
        far_host: the host of the run's scheduler when it is not this host (its executors are there).
    """
    if run.status not in OPEN:
        return f"run {run.run_id} has ended ({run.status}): there is nothing to cancel"
    from wloadctl.procs.recovery import in_flight  # (the cancel's alone: other offline verbs need none of it)

    busy = in_flight(core.state)
    if not busy:
        return None
    names = [core.ids[i] for i in busy]
    remote = [core.ids[i] for i in busy if place_of(core.specs[i]) != LOCAL_PLACE]
    if remote:
        return (f"run {run.run_id} had {len(remote)} job(s) in flight on agents when it stopped ({_some(remote)}): "
                "their ends reach only the run's scheduler, so cancel it live: hold what would start "
                "(`wloadctl hold '*'`), resume it, then cancel")
    if far_host is not None:
        return (f"run {run.run_id} had {len(names)} job(s) in flight on {far_host} when it stopped ({_some(names)}): "
                f"its executors and their journals are there: cancel it on {far_host}")
    if executor_pids:
        pids = " ".join(str(p) for p in executor_pids)
        return (f"run {run.run_id} has no scheduler, but its executor(s) pid {pids} are alive and may still run "
                f"{len(names)} of its job(s) ({_some(names)}): stop them with `kill -TERM {pids}` (it stops their "
                f"jobs too), or let those jobs end (an idle executor exits {ORPHAN_TIMEOUT:.0f}s after its last "
                "job), then cancel again")
    return None


def live_executor_pids(executors: list[dict[str, object]]) -> list[int]:
    """The pids of the executors (as client.executor_health lists them) whose process is alive."""
    return sorted({int(str(e["pid"])) for e in executors if pid_alive(int(str(e["pid"])))})


@dataclass
class Settling:
    """What settling the jobs in flight before a cancel did: the core's commands (to journal first), and how."""

    commands: list[Command] = field(default_factory=list)
    """The core's commands, in order (their transitions are journaled before the cancel's)."""
    settled: Settled | None = None
    """How the jobs in flight were settled (None: none was)."""
    unsure: list[str] = field(default_factory=list)
    """Jobs that may not run twice, lost or stopped with the run while they ran (held, then cancelled): what they
    did is to be checked."""
    note: str | None = None
    """What the executors' journals say the run's journal lacks (journal_behind), if anything."""


def settle_in_flight(store: Store, run: RunRow, core: SchedulerCore, state_dir: Path) -> Settling:
    """Settle the jobs the run had in flight, its executors gone (cancel_refusal said so), as a resume would: the
    ends their executors journaled are applied, the rest are lost with the run (what may live on of them stopped).
    Nothing is dispatched: the core is paused.

    Raises:
        StoreError: the run's journal lost turns that recorded jobs which may not run twice (journal_behind).
    """
    from wloadctl.paths import result_path
    from wloadctl.procs.recovery import JournalSettler, executor_results, in_flight, journal_behind, stopped_with_run
    from wloadctl.procs.recovery import settle_in_flight as settle
    from wloadctl.procs.reports import ReportReader
    from wloadctl.procs.runctx import read_result

    out = Settling()
    busy = in_flight(core.state)
    if not busy:
        return out
    core.paused = True
    journals = executor_results(state_dir, run.run_id)
    out.note = journal_behind(core, journals, store.loss)
    reader = ReportReader(core.want, lambda _r: "",
                          lambda i, a: read_result(result_path(state_dir, run.run_id, core.ids[i], a)))

    def feed(ev: Event) -> None:
        out.commands.extend(core.handle(ev))

    stopped = stopped_with_run(store, run.id, core, store.actions(run.id))
    out.settled = settle(JournalSettler(run.run_id, reader), core, feed, journals, stopped=stopped)
    # (held: lost, or stopped with the run, while they ran; the cancel ends them, but what they did is unknown)
    out.unsure = [core.ids[i] for i in busy if core.state[i] == JobState.HELD]
    return out


def cancelled_message(run: RunRow, cancelled: int, settling: Settling) -> str:
    """The reply to a cancel applied on the journal: what will not start, and what became of the jobs in flight."""
    said = f"run {run.run_id} cancelled (it had no scheduler): {cancelled} job(s) will not start"
    s = settling.settled
    if s is not None:
        parts = [f"{s.applied} had ended (their executors journaled it)"] if s.applied else []
        if s.returned:
            parts.append(f"{s.returned} were handed back unstarted")
        if s.lost:
            parts.append(f"{s.lost} were lost with their executors (what was left of them is stopped)")
        said += f"; of the {s.inflight} job(s) running when the run went down, {', '.join(parts)}"
    if settling.unsure:
        said += (f"; {len(settling.unsure)} of them may not run twice and may have done part of their work: check "
                 f"what {_some(settling.unsure)} did")
    if settling.note:
        said += f"; {settling.note}"
    return said
