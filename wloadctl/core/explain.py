"""Why a job is not running now: a pure reading of the core's state, in words and as data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from wloadctl.core.branches import UNTIL_SPENT
from wloadctl.core.codes import RANK_MAX
from wloadctl.core.critical import rank_of
from wloadctl.core.durations import format_duration
from wloadctl.core.holding import HOST_CPU, HOST_UNLIMITED, LOCAL_PLACE
from wloadctl.core.states import JobState, SlaTier
from wloadctl.core.timers import retry_left
from wloadctl.core.verbs import (
    ITERATING,
    MUTATING_OFFLINE,
    STARTS,
    applicable_verbs,
    failed_upstream,
    loop_verbs,
    pending_force_verbs,
    pending_hold_verbs,
)

if TYPE_CHECKING:
    from wloadctl.core.engine import SchedulerCore
    from wloadctl.core.whyview import JobView

S = JobState


def why(core: SchedulerCore | JobView, i: int, now: float, stopped: str | None = None) -> dict[str, Any]:
    """Explain job i's state: unmet dependencies, hold, resources, slots, retry delay, deadline.

    Args:
        core: the scheduling core, or the part of a stopped run's core that job i's answer reads
            (core/whyview.py: made of the journal's rows without loading the plan).
        i: job index.
        now: current time (for retry countdowns).
        stopped: said first of a job that waits to be dispatched (READY, QUEUED, RETRY_WAIT) when no
            scheduler dispatches the run (the caller knows: a core rebuilt from the journal does not);
            the job then waits for no slot and for no executor.

    Returns:
        {"job", "state", "tier", "attempt", "reasons": [str, ...], "verbs": [...], "blocking": [...]}
    """
    st = S(core.state[i])
    spec = core.specs[i]
    reasons: list[str] = []
    blocking: list[dict[str, str]] = []
    host_wait: dict[str, int] = {}
    if st == S.WAITING or st == S.HELD:
        for k, dep in enumerate(spec.depends_on):
            u = core.index[dep]
            su = S(core.state[u])
            kind = spec.kind_of(k).name.lower()
            if su not in (S.SUCCEEDED, S.FAILED, S.TIMED_OUT, S.SKIPPED, S.CANCELLED, S.UPSTREAM_FAILED):
                blocking.append({"job": dep, "state": su.name, "needs": kind})
        if blocking:
            reasons.append(f"waiting for {len(blocking)} of {len(spec.depends_on)} dependencies: "
                           + ", ".join(f"{b['job']} ({b['state']})" for b in blocking[:10])
                           + (" ..." if len(blocking) > 10 else ""))
        elif st == S.WAITING and (loop := getattr(core, "awaits_list", lambda _: None)(i)) is not None:
            # (an instance rerun while its loop reads its list again: SchedulerCore.awaits_list)
            reasons.append(f"waiting for loop {core.ids[loop]} to read its list again (an upstream it reads runs "
                           "again): it runs if the list names its item")
        elif st == S.WAITING and spec.condition:
            # (a live run judges it the moment nothing is left to wait for: this is a stopped run's job, retried)
            reasons.append(f"its upstreams have ended: its `if` ({spec.condition}) is judged again when the run "
                           "resumes")
    forced = getattr(core, "forcing", {}).get(i) if st == S.WAITING else None
    if forced is not None and not blocking:
        # (a stopped run's job whose upstreams ended while no scheduler ran: the resume ends it)
        reasons.insert(0, f"{forced.pending()}: they have; the run's resume ends it so, unrun")
    elif forced is not None:
        reasons.insert(0, f"{forced.pending()}; it will not run, and its downstream waits for it meanwhile (an "
                          f"upstream's failure does not undo it); `wloadctl release {spec.id}` or `rerun` calls it off")
    if st == S.HELD and spec.confirm:
        reasons.insert(0, f"waiting for confirmation (confirm: true): an admin's `wloadctl approve {core.ids[i]}` "
                          "lets it run")
    elif st == S.HELD:
        reasons.insert(0, f"held: {core.reasons.get(i, 'by an operator')}; release it to let it run")
    elif st == S.READY:
        if stopped is not None:
            reasons.append(stopped)  # first: it waits for no slot, nothing dispatches
        lacking = [(r, a) for r, a in core.needs(i) if core.resources.res_free.get(r, 0) < a]
        if lacking:
            for r, a in lacking:
                holders = sorted(core.ids[h] for h in core.resources.res_holders.get(r, ()))
                cap = core.resources.capacity_of.get(r, 0)
                if r.startswith(("pool:", "agent:")):
                    kind, _, name = r.partition(":")
                    where = "this host" if r == LOCAL_PLACE else f"{kind} {name}"
                    reasons.append(f"waiting for {where}: no live agent offers it a slot" if cap == 0 and
                                   r != LOCAL_PLACE else f"waiting for a slot on {where}: all {cap} busy "
                                   f"({', '.join(holders[:8])})")
                    continue
                if r.startswith("host:"):
                    host_wait[r.removeprefix("host:")] = a
                    reasons.append(_host_wait(r, a, core.resources.res_free.get(r, 0), cap, holders))
                    continue
                reasons.append(f"waiting for resource {r}: needs {a}, {core.resources.res_free.get(r, 0)} free of "
                               f"{cap}; held by {', '.join(holders[:8]) or 'nobody'}")
        elif stopped is None and (core.paused or core.cancelled):
            reasons.append("the run is not dispatching (stopping or cancelled)")
        elif (due := core.timers.not_before.get(i)) is not None and now < due:
            reasons.append(f"not before {spec.not_before}: it may start in {format_duration(due - now)}")
        elif stopped is None:
            reasons.append(f"ready, waiting for a free slot ({core.busy} of {core.slots} slots busy; "
                           f"{core.counts[S.READY]} jobs ready)")
    elif st == S.RETRY_WAIT:
        if stopped is not None:
            reasons.append(stopped)
        due = core.timers.retry_due.get(i)
        # (the time left as `status` gives it: core/timers.py retry_left, "in 5.7s" or "due now")
        left = retry_left(due, now) if due else ""
        ready = f"becomes READY {left}" if left.startswith("in ") else "becomes READY" + (left and f" ({left})")
        reasons.append(f"in retry delay after attempt {core.attempt[i]}: {core.reasons.get(i, '')}; {ready}")
    elif st == S.QUEUED and stopped is not None:
        reasons.append(stopped)  # no executor takes it before a scheduler runs the run again
    elif st == S.QUEUED and i in (following := getattr(core, "following", {})):
        u = following[i]
        reasons.append(f"sent to the executors behind {core.ids[u]} ({S(core.state[u]).name}): its executor starts it "
                       "the moment that one succeeds, and hands it back if it does not or runs long")
    elif st == S.QUEUED:
        reasons.append("sent to the executors; not started yet")
    elif st == S.RUNNING:
        reasons.append(f"running (attempt {core.attempt[i]}) on executor {core.executor[i]}")
        if stopped is not None:
            # (as the journal last heard it: its executor goes on without a scheduler, and may have ended it since)
            reasons.append(f"{stopped}; it learns then whether this attempt ended meanwhile")
    holds: dict[int, str] = getattr(core, "holds", {})  # (a stopped run's view: none pending)
    if st in (S.QUEUED, S.RUNNING) and spec.until and i in holds:
        reasons.append(f"{holds[i]}: held once this iteration ends (its `until` starts no other until released)")
    elif st in (S.FAILED, S.TIMED_OUT, S.UPSTREAM_FAILED, S.CANCELLED, S.SKIPPED):
        said, why_ = st.name.lower().replace("_", " "), core.reasons.get(i, "")
        reasons.append(said if why_ in ("", said) else f"{said}: {why_}")
    elif st == S.SUCCEEDED and i in core.fanout.loops:
        reasons.append(f"succeeded: {core.reasons.get(i) or 'every instance finished'} "
                       f"(a for_each over {core.fanout.loops[i].text})")
    elif st == S.SUCCEEDED and not core.attempt[i] and core.reasons.get(i):
        reasons.append(f"succeeded: {core.reasons[i]}")  # without running: a loop's end, an operator's set-ok
    elif st == S.SUCCEEDED and core.reasons.get(i, "").startswith(UNTIL_SPENT):
        reasons.append(f"succeeded after {core.attempt[i]} attempt(s): {core.reasons[i]}")
    elif st == S.SUCCEEDED and core.attempt[i] > 1:
        # An attempt number counts dispatches, some of which may have come back unstarted (`history` counts
        # the attempts that ran).
        reasons.append(f"succeeded on attempt {core.attempt[i]}")
    elif st == S.SUCCEEDED:
        reasons.append(f"succeeded after {core.attempt[i]} attempt(s)")
    if i in core.fanout.loops and st == S.WAITING:
        made = core.fanout.expanded.get(i)
        unread = "its instances are made when the jobs it reads have finished"
        if not getattr(core, "started", True) and not getattr(core, "unmet", b"\x01")[i]:  # (a stopped run's core)
            unread = "it reads its list, and makes its instances, when the run is resumed"
        reasons.append(f"a for_each over {core.fanout.loops[i].text}: " + (
            f"waiting for its {made} instance(s) {spec.id}@..." if made is not None else unread))
    nb = core.timers.not_before.get(i)
    if nb is not None and now < nb and st in (S.WAITING, S.HELD, S.READY) and \
            not any(r.startswith("not before") for r in reasons):
        # It waits for its time too, whatever else it waits for: told, so no one takes an idle slot for a fault.
        reasons.append(f"not before {spec.not_before}: it may start in {format_duration(nb - now)} at the earliest")
    late = core.timers.lateness.get(i)
    if late:
        reasons.append(late)
    path = critical_path(core, i)
    if path is not None and st in (S.WAITING, S.HELD, S.READY, S.RETRY_WAIT):
        # Said in durations first: the rank (0 to RANK_MAX, the remaining work scaled to the longest path) only
        # orders ready jobs of one tier and priority, the most work ahead first.
        on = " (on the longest path)" if path["remaining"] >= path["longest"] * 0.999 else ""
        reasons.append(f"critical path: {format_duration(path['remaining'])} of work from here to the plan's end"
                       f"{on}, the longest being {format_duration(path['longest'])}; expected "
                       f"{format_duration(path['expected'])} itself; rank {path['rank']} of 0-{RANK_MAX} (among ready "
                       "jobs of its tier and priority, the lower starts first)")
    verbs = (pending_hold_verbs(st) if spec.until and i in holds and st in ITERATING else
             pending_force_verbs(st) if forced is not None else
             applicable_verbs(st, iterating=bool(spec.until)))
    if i in core.fanout.expanded and forced is None:
        # A loop's hold, skip, set-ok, retry and rerun are about its instances, which may refuse them (a loop is
        # never held while they run). (A stopped run's view is made for no loop: its core is the rebuilt one.)
        verbs = loop_verbs(cast("SchedulerCore", core), i, verbs)
    elif st != S.RETRY_WAIT and failed_upstream(cast("SchedulerCore", core), i) is not None:
        # Sent back to wait, it would end UPSTREAM_FAILED again without running: refused, so not offered.
        verbs = [v for v in verbs if v not in ("retry", "rerun")]
    return {
        "job": spec.id,
        "state": st.name,
        "tier": SlaTier(spec.sla).label,
        "attempt": core.attempt[i],
        "reasons": reasons,
        "blocking": blocking,
        "verbs": [v for v in verbs
                  if v != ("release" if spec.confirm else "approve")
                  and not (getattr(core, "cancelled", False) and v in STARTS)  # (nothing starts in a cancelled run)
                  and (stopped is None or v in MUTATING_OFFLINE)],  # (a stopped run takes no kill)
        "critical_path": path,
        **({"host_wait": list(host_wait), "host_need": host_wait} if host_wait else {}),
    }


def _host_wait(r: str, need: int, free: int, share: int, holders: list[str]) -> str:
    """Why a job waits for the host's cpu or memory, in the claim's own unit (CPUs, MiB)."""
    unit, scale = ("cpu", 1000) if r == HOST_CPU else ("memory MiB", 1)
    held = f"; this run's {', '.join(holders[:8])} hold{'s' if len(holders) == 1 else ''} some" if holders else ""
    if share >= HOST_UNLIMITED:
        return f"waiting for the host's {unit}: needs {need / scale:g}{held}"
    return (f"waiting for the host's {unit}: needs {need / scale:g}, {max(0, free) / scale:g} free of the "
            f"{share / scale:g} this run may hold now (`wloadctl host` shares it between runs){held}")


def critical_path(core: SchedulerCore | JobView, i: int) -> dict[str, Any] | None:
    """Job i's place on the critical path: {"rank" (0: the longest remaining path), "expected" seconds,
    "remaining" seconds of work from it to the end, "longest" such path of the plan}; None for a job
    made during the run (a loop's instance ranks as its loop)."""
    if i >= len(core.path):
        return None
    return {"rank": rank_of(core.key_base[i]), "expected": core.expected[i], "remaining": core.path[i],
            "longest": core.longest_path}
