"""Operator verbs on the core: hold, release, retry, rerun, kill, set-ok, skip, cancel, approve; checked, cascaded,
explained."""

from __future__ import annotations

import difflib
import fnmatch
from array import array
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from wloadctl.core.branches import REOPENED_BY
from wloadctl.core.commands import Reply
from wloadctl.core.events import OperatorEvent
from wloadctl.core.fanout import FanOut
from wloadctl.core.forcing import CALLED_OFF, CALLS_OFF, Forced
from wloadctl.core.holds import confirm_wait, held_by
from wloadctl.core.loops import instances_of
from wloadctl.core.plan import DynamicItems, JobSpec
from wloadctl.core.reach import descendants as _descendants
from wloadctl.core.states import TERMINAL, DepKind, JobState
from wloadctl.core.timers import Timers

S = JobState


class VerbTarget(Protocol):
    """What operator verbs read and change: the scheduling core's job table and the moves it allows."""

    n: int
    ids: list[str]
    state: bytearray
    attempt: array[int]
    attempt_base: dict[int, int]
    unmet: array[int]
    block: bytearray
    busy: int
    cancelled: bool
    specs: list[JobSpec]
    fanout: FanOut
    timers: Timers
    holds: dict[int, str]
    forcing: dict[int, Forced]
    down: array[int]
    down_start: array[int]
    _tx: list[tuple]

    @property
    def counts(self) -> Sequence[int]:
        """Jobs in each state, by state value (read only here)."""

    @property
    def index(self) -> Mapping[str, int]:
        """Job id -> index (read only here: a protocol's plain attribute would have to be the same mapping type)."""

    def set_state(self, i: int, to: int, reason: str = "", executor: int = -1,
                  exit_code: int | None = None) -> None:
        """Move job i to state `to` through the transition table."""

    def recompute(self, d: int) -> None:
        """Recount job d's unmet dependencies and blocks."""

    def downstream(self, i: int) -> list[int]:
        """The jobs that depend directly on job i."""

    def upstream(self, i: int) -> list[int]:
        """The jobs job i depends on directly."""

    def resolve(self, i: int) -> None:
        """Job i reached a terminal state: its dependents count it."""

    def enqueue(self, i: int) -> None:
        """Put READY job i on the ready queue."""

    def afresh(self, i: int) -> None:
        """Job i starts over, as in a fresh run: an `until` counts its iterations from none again."""

    def let_go(self, i: int) -> None:
        """WAITING job i has nothing left to wait for: READY, or its `if` judged again first."""

    def awaits_list(self, k: int) -> int | None:
        """The loop over output whose list (read again) instance k waits for, else None."""

    def reach_loop(self, d: int) -> None:
        """Loop parent d has nothing left to wait for: expand it, or end it."""

    def read_list_again(self, d: int) -> list[int]:
        """Loop over output d makes its instances again once its upstreams have ended; the instances changed."""

    def kill(self, i: int, reason: str, graceful: bool = False, requeue: bool = False) -> None:
        """Ask the shell to stop job i's running attempt."""

    def hold_again(self, i: int, why: str = "") -> None:
        """Job i, reopened while an operator's hold or a confirmation holds it, is HELD again."""

    def force_later(self, i: int, forced: Forced) -> None:
        """Job i's skip or set-ok waits for its upstreams to end (core/forcing.py)."""

    def drop_force(self, i: int) -> Forced | None:
        """Job i's pending skip or set-ok is called off; it, if there was one."""


class LoopStates(Protocol):
    """What loop_verbs reads of a core: the jobs' specs and states, and ids' indices."""

    @property
    def specs(self) -> Sequence[JobSpec]:
        """Job specs by index."""

    @property
    def state(self) -> bytearray:
        """Job states by index."""

    @property
    def index(self) -> Mapping[str, int]:
        """Job id -> index."""


class JobNames(Protocol):
    """Job ids in plan order and their index (what resolve_jobs reads, and never changes)."""

    @property
    def ids(self) -> Sequence[str]:
        """Job ids in plan order."""

    @property
    def index(self) -> Mapping[str, int]:
        """Job id -> its position in `ids`."""


VERB_FROM: dict[str, frozenset[JobState]] = {
    "hold": frozenset({S.WAITING, S.READY, S.RETRY_WAIT}),
    "release": frozenset({S.HELD}),
    "retry": frozenset({S.FAILED, S.TIMED_OUT, S.RETRY_WAIT}),
    "rerun": frozenset(TERMINAL),
    "kill": frozenset({S.QUEUED, S.RUNNING}),
    "set-ok": frozenset(
        {S.WAITING, S.READY, S.HELD, S.RETRY_WAIT, S.FAILED, S.TIMED_OUT, S.UPSTREAM_FAILED, S.SKIPPED,
         S.CANCELLED}
    ),
    "skip": frozenset(
        {S.WAITING, S.READY, S.HELD, S.RETRY_WAIT, S.FAILED, S.TIMED_OUT, S.UPSTREAM_FAILED, S.CANCELLED}
    ),
    "cancel": frozenset(JobState),
    "approve": frozenset({S.HELD}),
}
"""The states each verb applies to; a verb on a job in another state is refused."""

ITERATING = frozenset({S.QUEUED, S.RUNNING})
"""States of an `until` job's iteration, which a hold lets end and then holds it (see _hold_iterating)."""


VERBS: tuple[str, ...] = tuple(VERB_FROM)
"""Every operator verb."""

FOUR_EYES_VERBS: tuple[str, ...] = tuple(v for v in VERBS if v != "approve")
"""Verbs a plan or the roles config may make need a second person's approve (`four_eyes:`)."""

MUTATING_OFFLINE: frozenset[str] = frozenset({"hold", "release", "set-ok", "skip", "retry", "rerun", "approve",
                                              "cancel"})
"""Verbs that also work on the journal of a run whose scheduler is not live (kill alone needs one: it signals)."""


def applicable_verbs(state: JobState, iterating: bool = False) -> list[str]:
    """The verbs that would apply to a job in `state` (for refusal messages and the console); `iterating`: an
    `until` job, which hold takes between its iterations too."""
    out = [v for v, states in VERB_FROM.items() if state in states and v != "cancel"]
    return ["hold", *out] if iterating and state in ITERATING else out


def pending_hold_verbs(state: JobState) -> list[str]:
    """The verbs that apply to an `until` job whose hold waits for its iteration to end: release calls it off."""
    return ["release", *applicable_verbs(state)]


def pending_force_verbs(state: JobState) -> list[str]:
    """The verbs that apply to a job whose skip or set-ok waits for its upstreams: release and rerun call it off."""
    return [*sorted(CALLS_OFF), *applicable_verbs(state)]


def refusal(job: str, state: JobState, verb: str, confirm: bool = False, cancelled: bool = False,
            offline: bool = False, blocked: bool = False) -> str:
    """The message for a verb that does not apply: names the job, its state and what would apply (`confirm`: a
    confirmation job, let go by approve, not release; `cancelled`: a live cancelled run, where nothing starts;
    `offline`: a run with no live scheduler, whose journal takes no kill, and whose job QUEUED or RUNNING may
    have ended meanwhile: its resume learns how; `blocked`: an upstream's end blocks the job, so no retry or rerun
    of it is taken: failed_upstream)."""
    others = [v for v in applicable_verbs(state) if v != ("release" if confirm else "approve")
              and not (cancelled and v in STARTS) and not (offline and v not in MUTATING_OFFLINE)
              and not (blocked and v in ("retry", "rerun"))]
    if others:
        would = f"; {', '.join(others)} would apply"
    elif offline and state in (S.QUEUED, S.RUNNING):
        would = ("; no verb applies to it while the run has no scheduler: `wloadctl resume` learns whether this "
                 "attempt ended meanwhile")
    else:
        would = "; no verb applies to it now"
    return f"job '{job}' is {state.name}: {verb} does not apply{would}"


def resolve_jobs(core: JobNames, names: list[str]) -> tuple[list[int], list[str]]:
    """Job indices named by ids or globs (`load_*`), in order, and the names that matched nothing."""
    found: list[int] = []
    seen: set[int] = set()
    unknown: list[str] = []
    for name in names:
        if any(c in name for c in "*?["):
            hits = [core.index[j] for j in fnmatch.filter(core.ids, name)]
        else:
            hits = [core.index[name]] if name in core.index else []
        if not hits:
            unknown.append(name)
        for h in hits:
            if h not in seen:
                seen.add(h)
                found.append(h)
    return found, unknown


SUGGEST_AMONG = 20_000
"""Job ids a misspelt one is compared with for a `did you mean` (about 0.4 s here; 200,000 would take 4 s): in a
bigger run only ids within two characters of its length are, when they are no more than this."""


def close_job(name: str, ids: Sequence[str]) -> str | None:
    """The job id an unknown one was likely meant to be (`wait_long`: `waits_long`; `OK_JOB`: `ok_job`), or None.

    Args:
        name: the id as given (a glob gets none: it names no one job).
        ids: the run's job ids, loop instances included.
    """
    if any(c in name for c in "*?[") or not ids:
        return None
    folded = name.casefold()
    same = next((j for j in ids if len(j) == len(name) and j.casefold() == folded), None)
    if same is not None:
        return same
    among = ids if len(ids) <= SUGGEST_AMONG else [j for j in ids if abs(len(j) - len(name)) <= 2]
    if len(among) > SUGGEST_AMONG:
        return None
    close = difflib.get_close_matches(name, among, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_text(unknown: list[str], ids: Sequence[str] = ()) -> str:
    """What resolve_jobs found nothing for, in words: ids that name no job (with the close one of `ids`, when
    given, each might have been meant for), patterns that match none."""
    named = [n for n in unknown if not any(c in n for c in "*?[")]
    globs = [n for n in unknown if n not in named]
    meant = {n: close_job(n, ids) for n in named[:5]}
    ids_ = [n + (f" (did you mean '{meant[n]}'?)" if meant.get(n) else "") for n in named]
    parts = [f"unknown job(s): {', '.join(ids_)}"] if ids_ else []
    parts += [f"no job matches {', '.join(repr(g) for g in globs)}"] if globs else []
    return "; ".join(parts)


STARTS = frozenset({"release", "approve", "retry", "rerun"})
"""Verbs that let jobs start: refused in a cancelled run, which starts nothing; applied to a cancelled run once
it has ended, they take its cancel back (`replay.run_cancelled`)."""


def apply_verb(core: VerbTarget, ev: OperatorEvent) -> Reply:
    """Apply an operator verb to the jobs it names and report, per job, what happened.

    Args:
        core: the scheduling core (mutated; its transitions go to the next Persist).
        ev: the operator's request.

    Returns:
        A Reply with one (job, applied, message) per named job and every job touched.
    """
    verb = ev.verb
    touched: list[int] = []
    results: list[tuple[int, bool, str]] = []
    if verb == "cancel":
        if core.cancelled and not any(core.state[i] in (S.WAITING, S.READY, S.HELD, S.RETRY_WAIT)
                                      for i in range(core.n)):
            # (told and audited as what it is: nothing to do, not a second cancel applied)
            return Reply(verb, [(-1, False, f"the run is cancelled already: {core.busy} running jobs finish")])
        core.cancelled = True
        running = {i for i in range(core.n) if core.state[i] in (S.QUEUED, S.RUNNING)}
        for i in range(core.n):
            if i in core.fanout.expanded and running.intersection(instances_of(core.specs[i], core.specs, core.index)):
                continue  # a loop whose instances run ends with them (cancelled with those that do not start)
            if core.state[i] in (S.WAITING, S.READY, S.HELD, S.RETRY_WAIT):
                core.drop_force(i)  # (a skip or set-ok that waited for its upstreams: the job ends cancelled)
                core.set_state(i, S.CANCELLED, reason=_why("run cancelled", ev))
                touched.append(i)
        return Reply(verb, [(-1, True, f"run cancelled: {len(touched)} jobs will not start; "
                                        f"{core.busy} running jobs finish")], touched)
    if verb not in VERB_FROM:
        return Reply(verb, [(-1, False, f"unknown verb '{verb}'; verbs: {', '.join(VERBS)}")])
    if core.cancelled and verb in STARTS:
        # Nothing is dispatched in a cancelled run: the jobs would wait READY and keep the drained run up.
        return Reply(verb, [(i, False, f"the run is cancelled: nothing new starts in it, so '{core.ids[i]}' would "
                                       f"not run; once the run has ended, `wloadctl rerun {core.ids[i]}` and "
                                       "`wloadctl resume` run it") for i in ev.jobs])
    walks = Walks(core)
    reset: set[int] = set()  # the jobs in `touched[:counted]`
    counted = 0
    order = list(ev.jobs)
    if verb in ("retry", "rerun"):
        # Jobs an upstream's end blocks come last: a job named with them may be that upstream, or reopen it, first
        # (`rerun 'rep*' open --downstream`).
        blocked = {i for i in order if core.state[i] != S.RETRY_WAIT and failed_upstream(core, i) is not None}
        order = [i for i in order if i not in blocked] + [i for i in order if i in blocked]
    for i in order:
        st = S(core.state[i])
        reset.update(touched[counted:])
        counted = len(touched)
        if i in core.forcing and (verb in CALLS_OFF or verb == "hold"):
            results.append((i, True, _call_off(core, i, ev, touched)))
            continue
        if st not in TERMINAL and verb in ("retry", "rerun") and i in reset:
            # Reset already by this verb (downstream of a job it named, or an instance of a loop it named).
            results.append((i, True, f"job '{core.ids[i]}' goes again with this {verb}: now {st.name}"))
            continue
        if i in core.fanout.expanded and verb in _LOOP_VERBS:
            results.append((i, *_loop_verb(core, i, ev, touched, walks)))
            continue
        if verb == "hold" and st in ITERATING and core.specs[i].until:
            results.append((i, True, _hold_iterating(core, i, ev)))
            continue
        if verb == "release" and st in ITERATING and core.specs[i].until and i in core.holds:
            del core.holds[i]  # (a hold asked for during its iteration, not applied yet)
            results.append((i, True, f"job '{core.ids[i]}' released: its hold after this iteration is called off"))
            continue
        if st not in VERB_FROM[verb]:
            msg = refusal(core.ids[i], st, verb, core.specs[i].confirm, core.cancelled, ev.offline,
                          blocked=st != S.RETRY_WAIT and failed_upstream(core, i) is not None)
            if i in core.forcing:
                msg += f" (its {core.forcing[i].verb} waits for its upstreams: release or rerun calls it off)"
            results.append((i, False, msg))
            continue
        # A confirmation job is let go by approve alone; approve lets go nothing else.
        if (verb == "approve" and not core.specs[i].confirm) or (verb == "release" and core.specs[i].confirm):
            results.append((i, False, _confirm_refusal(core, i, verb)))
            continue
        if verb == "rerun" and ev.downstream and (started := _started_downstream(core, i)):
            results.append((i, False, _started_refusal(core, i, started, ev.offline)))
            continue
        if verb in ("retry", "rerun") and st != S.RETRY_WAIT and (up := failed_upstream(core, i)) is not None:
            results.append((i, False, _failed_upstream_refusal(core, i, verb, up)))
            continue
        msg = _APPLY[verb](core, i, ev, touched, walks)
        results.append((i, True, msg))
    return Reply(verb, results, touched)


_LOOP_VERBS = frozenset({"retry", "rerun", "hold", "skip", "set-ok"})
"""Verbs that, on a loop, are about its instances (the loop runs nothing itself: it ends with them)."""

_ENDING_LOOP = frozenset({"hold", "skip", "set-ok"})
"""Loop verbs that would stop or end the loop itself: refused while an instance has not ended."""

_AGAIN: dict[str, frozenset[JobState]] = {"retry": frozenset({S.FAILED, S.TIMED_OUT}), "rerun": frozenset(TERMINAL)}
"""The instances a retry or rerun of a loop runs again: it is refused when none is so."""


def loop_takes(verb: str, instances: Iterable[int]) -> bool:
    """Whether `verb` on an expanded loop whose instances are in states `instances` gets past what the instances
    decide (_loop_verb): hold, skip and set-ok once they have all ended (the loop's own state decides then), retry
    while one has failed, rerun while one has ended (with --downstream, also while nothing downstream has started);
    a verb that is not about its instances is the loop's own."""
    if verb in _ENDING_LOOP:
        return all(s in TERMINAL for s in instances)
    again = _AGAIN.get(verb)
    return again is None or any(s in again for s in instances)


def loop_verbs(core: LoopStates, i: int, verbs: Iterable[str]) -> list[str]:
    """Those of `verbs` (what loop i's state would take) that its instances let apply (loop_takes), with the retry and
    rerun its instances take in any state of the loop: what `why` offers for a loop, in VERBS' order."""
    mine = [core.state[k] for k in instances_of(core.specs[i], core.specs, core.index)]
    offered = {v for v in verbs if v not in _LOOP_VERBS or loop_takes(v, mine)}
    # A retry or rerun of a loop is of its instances, whatever the loop's own state: a loop still waiting for some
    # instances takes a retry of one that failed (and a rerun of one that ended) as a loop that has ended does.
    offered.update(v for v in _AGAIN if loop_takes(v, mine))
    return [v for v in VERBS if v in offered]


def _loop_verb(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], walks: Walks) -> tuple[bool, str]:
    """retry or rerun of a loop: of its instances that failed (retry) or of all of them (rerun), the loop then
    waiting for them again; hold, skip or set-ok of a loop whose instances have not all ended is refused (it
    would end while they run), the instances being named instead. (applied, message)"""
    verb, job = ev.verb, core.ids[i]
    mine = instances_of(core.specs[i], core.specs, core.index)
    left = [k for k in mine if core.state[k] not in TERMINAL]
    if verb in _ENDING_LOOP:
        if not loop_takes(verb, (core.state[k] for k in mine)):
            return False, (f"'{job}' is a loop: it ends with its instances, and {len(left)} of them have not ended; "
                           f"{verb} them ('{job}@*') instead")
        st = S(core.state[i])
        if st not in VERB_FROM[verb]:
            return False, refusal(job, st, verb, cancelled=core.cancelled, offline=ev.offline)
        return True, _APPLY[verb](core, i, ev, touched, walks)
    again = [k for k in mine if core.state[k] in _AGAIN[verb]]
    if again and verb == "rerun" and ev.downstream and (started := _started_downstream(core, i)):
        return False, _started_refusal(core, i, started, ev.offline)
    if not again:
        what = "failed instance" if verb == "retry" else "ended instance"
        return False, f"loop '{job}' has no {what} to {verb}" + (f" ({len(left)} have not ended)" if left else "")
    for k in again:
        _again(core, k, ev, touched, verb, walks)
    if core.state[i] in TERMINAL:  # (a failed loop was reopened with its instances; a succeeded one is now)
        _again(core, i, ev, touched, verb, walks)
    return True, f"loop '{job}' will run again: {len(again)} of its {len(mine)} instance(s)"


def awaits_confirmation(core: VerbTarget, i: int) -> bool:
    """Whether job i is a confirmation job that has not been approved yet (`confirm: true`, HELD)."""
    return core.state[i] == S.HELD and core.specs[i].confirm


def _confirm_refusal(core: VerbTarget, i: int, verb: str) -> str:
    job = core.ids[i]
    if verb == "approve":
        return f"job '{job}' does not wait for confirmation: approve takes a job with `confirm: true` or a request id"
    return f"job '{job}' waits for confirmation: `wloadctl approve {job}` lets it run"


def _why(text: str, ev: OperatorEvent) -> str:
    who = f" by {ev.user}" if ev.user else ""
    because = f": {ev.reason}" if ev.reason else ""
    return f"{text}{who}{because}"


def _hold(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], walks: Walks | None = None) -> str:
    if core.state[i] != S.RETRY_WAIT:
        core.timers.retry_due.pop(i, None)  # (a retry delay it left another way is none its release waits out)
    core.holds[i] = held_by(ev.user, ev.reason)  # (the operator's until released, whatever reopens it meanwhile)
    core.set_state(i, S.HELD, reason=core.holds[i])
    touched.append(i)
    return f"job '{core.ids[i]}' held"


def _hold_iterating(core: VerbTarget, i: int, ev: OperatorEvent) -> str:
    """Hold an `until` job between its iterations: the one under way ends, the next starts only once released
    (one that runs without a break is never WAITING or READY, where a hold takes a job)."""
    core.holds[i] = held_by(ev.user, ev.reason)  # (SchedulerCore._again_until holds it instead of running it again)
    return (f"job '{core.ids[i]}' will be held after its current iteration (attempt {core.attempt[i]}): it "
            "starts no other until released")


def _settle(core: VerbTarget, i: int, touched: list[int]) -> None:
    """Put a job whose dependencies were recounted into the state they call for."""
    core.recompute(i)
    if core.block[i] == 1:
        core.set_state(i, S.UPSTREAM_FAILED, reason="upstream failed")
        core.resolve(i)
    elif core.block[i] == 2:
        core.set_state(i, S.SKIPPED, reason="condition not met")
        core.resolve(i)
    elif i in core.holds:
        core.hold_again(i)
    elif core.unmet[i] == 0 and i in core.fanout.loops:
        if core.state[i] != S.WAITING:
            core.set_state(i, S.WAITING)
        core.reach_loop(i)  # a loop over output expands (again), or ends when its instances have
    elif core.unmet[i] == 0:
        core.let_go(i)  # (an `if` is judged again, as in a fresh run)
    elif core.state[i] != S.WAITING:
        core.set_state(i, S.WAITING)
    touched.append(i)


def _release(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], walks: Walks | None = None) -> str:
    core.holds.pop(i, None)
    due = core.timers.retry_due.pop(i, None)
    if due is not None and due > ev.now and core.state[i] == S.HELD:
        # Held while it waited for its retry: the rest of the delay still applies (a retry delay keeps its
        # length, whoever holds the job meanwhile).
        used = core.attempt[i] - core.attempt_base.get(i, 0)
        core.set_state(i, S.RETRY_WAIT, reason=_why("released", ev)
                       + f"; retry {used}/{core.specs[i].retry.count} in {due - ev.now:.1f}s")
        core.timers.wait_retry(i, due, core.attempt[i])
        touched.append(i)
        return f"job '{core.ids[i]}' released, now RETRY_WAIT (its retry in {due - ev.now:.1f}s)"
    core.set_state(i, S.WAITING, reason=_why("released", ev))
    _settle(core, i, touched)
    return f"job '{core.ids[i]}' released, now {S(core.state[i]).name}"


def _approve(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], walks: Walks | None = None) -> str:
    core.holds.pop(i, None)
    core.set_state(i, S.WAITING, reason=_why("confirmed", ev))
    _settle(core, i, touched)
    return f"job '{core.ids[i]}' confirmed, now {S(core.state[i]).name}"


def _lists_again(core: VerbTarget, i: int, jobs: list[int]) -> list[int]:
    """The loops over output among job i's descendants `jobs` that make their instances again from the list they
    read once i has run again (not a loop i is an instance of: a rerun of its own instance leaves it its list)."""
    return [d for d in jobs if d in core.fanout.expanded and isinstance(core.specs[d].for_each, DynamicItems)
            and i not in instances_of(core.specs[d], core.specs, core.index)]


def _started_downstream(core: VerbTarget, i: int) -> list[int]:
    """Job i's descendants sent to an executor (QUEUED or RUNNING): a rerun of i with its downstream would leave
    them running on beside it, on what i gave before, and their own dependents starting meanwhile. (The instances
    of a loop that makes them again from a new list are let go: their ends are no longer the loop's.)"""
    desc = _descendants(core, i)
    free = {k for d in _lists_again(core, i, desc) for k in instances_of(core.specs[d], core.specs, core.index)}
    return [d for d in desc if core.state[d] in (S.QUEUED, S.RUNNING) and d not in free]


def failed_upstream(core: VerbTarget, i: int) -> int | None:
    """An upstream whose end job i needs success from and did not get (FAILED, TIMED_OUT, UPSTREAM_FAILED,
    CANCELLED): job i, sent back to wait, would end UPSTREAM_FAILED again at once, without running. None: none."""
    spec = core.specs[i]
    for k, dep in enumerate(spec.depends_on):
        u = core.index[dep]
        if spec.kind_of(k) == DepKind.SUCCESS and core.state[u] in _NO_SUCCESS:
            return u
    return None


_NO_SUCCESS = frozenset({S.FAILED, S.TIMED_OUT, S.UPSTREAM_FAILED, S.CANCELLED})
"""Ends of an upstream that block a dependent on its success (SKIPPED passes it on, as success does)."""


def _failed_upstream_refusal(core: VerbTarget, i: int, verb: str, u: int) -> str:
    """Why a retry or rerun of job i is refused while its upstream u's end blocks it (nothing changed): the verbs
    that would let u, then i, run."""
    job, up, st = core.ids[i], core.ids[u], S(core.state[u])
    first, *others = [v for v in ("retry", "rerun", "set-ok") if st in VERB_FROM[v]]
    also = f" (or {', '.join(others)})" if others else ""
    return (f"job '{job}' not {'retried' if verb == 'retry' else 'rerun'}: its upstream '{up}' is {st.name}, so it "
            f"would end UPSTREAM_FAILED again without running; `wloadctl {first} {up}`{also} lets it run after that "
            "one")


def _started_refusal(core: VerbTarget, i: int, started: list[int], offline: bool = False) -> str:
    """Why a rerun with its downstream is refused while some of that downstream has started (nothing changed);
    `offline`: a run with no live scheduler, where no kill applies and only a resume learns how they ended."""
    job, names = core.ids[i], [core.ids[d] for d in started]
    shown = ", ".join(f"'{n}' ({S(core.state[d]).name})" for n, d in zip(names[:5], started, strict=False))
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    again = f"then `wloadctl rerun {job} --downstream` runs them again after it"
    if offline:
        return (f"job '{job}' not rerun: downstream job(s) {shown}{more} had started when the run stopped and would "
                f"not wait for it; `wloadctl resume` learns whether they ended (`wloadctl kill` applies to them "
                f"then); {again}")
    return (f"job '{job}' not rerun: downstream job(s) {shown}{more} have started and would not wait for it; let "
            f"them end, or `wloadctl kill {' '.join(names[:5])}`, {again}")


def _reopen(core: VerbTarget, i: int, jobs: list[int], touched: list[int], only_blocked: bool,
            why: str = "upstream rerun") -> list[int]:
    """Send job i's finished descendants `jobs` back to WAITING, then settle them upstream-first.

    Unless only the blocked ones go back, those waiting for a retry go back too (their next attempt would run
    before i has run again), and a loop over output among them makes its instances again from the list it
    reads then: its instances are downstream of what it reads, though no edge says so, and the list may change
    (a rerun of one of its own instances leaves it its list). Returns those loops."""
    reopened = []
    for d in jobs:
        st = core.state[d]
        # (a loop over output that made instances runs nothing itself: FAILED, it was failed by one of them)
        if only_blocked and st != S.UPSTREAM_FAILED and not (st == S.FAILED and d in core.fanout.expanded):
            continue
        if st in TERMINAL or (st == S.RETRY_WAIT and not only_blocked):
            core.set_state(d, S.WAITING, reason=why)
            core.timers.retry_due.pop(d, None)
            core.attempt_base[d] = core.attempt[d]
            core.afresh(d)
            reopened.append(d)
    lists = [] if only_blocked else _lists_again(core, i, jobs)
    for d in lists:
        touched.extend(core.read_list_again(d))
    for d in reopened:
        core.recompute(d)
    for d in reopened:
        if core.state[d] == S.WAITING and (core.unmet[d] == 0 or d in core.holds):
            _settle(core, d, touched)  # (one an operator held is held again)
        else:
            touched.append(d)
    touched.extend(d for d in lists if d not in reopened)
    return lists


FULL_WALKS = 8
"""Walks of a job's whole downstream one request makes before the rest go only where a blocked or held job is
(Walks.blocked_reach): a verb of a few jobs pays for no map of where those are."""

REACH_AMONG = 64
"""Most jobs blocked, held or failed a request maps its named jobs' reach to (Walks.reach): beyond, it walks."""

REACH_MADE = 4
"""Most times one request maps that reach (each job newly blocked or held makes it again): beyond, it walks."""

_NOTED = frozenset({S.UPSTREAM_FAILED, S.HELD, S.FAILED})
"""States of the jobs a retry, rerun, skip or set-ok reopens among its downstream (UPSTREAM_FAILED, a loop over
output failed by an instance) or names (HELD): with every job in `holds`, the jobs a walk must reach."""


class Walks:
    """The downstream walks of one operator request, each reaching only the jobs that lead to a blocked or held one.

    A retry, rerun, skip or set-ok of a job reopens the blocked jobs downstream of it and names the held ones. A
    glob naming thousands of jobs walked each one's whole downstream: quadratic, `rerun 's0*'` over 4,750 jobs of a
    30,000-job run with one job held took minutes of the scheduler's turn. After the first FULL_WALKS, each walk
    enters only `near`: the jobs from which a job blocked, held or in `holds` can be reached (themselves among
    them), made once per request by a walk upstream from those jobs, and grown, before each walk, from the
    transitions the request has made meanwhile (the core's `_tx`, kept until the next Persist) into such a state.
    `near` holds every upstream of its jobs, so every path from a named job to one of them runs inside it: the walk
    reaches the same such jobs, in the same order (nearest first, then as the edges go), as a whole walk would.
    When those jobs are few (REACH_AMONG), one walk of `near` maps which of them each job reaches (`reach`): a named
    job that reaches one of them at most takes it from the map, with no walk (two or more: a walk says their order).
    A loop that expands or reads its list again changes the edges: `near` and `reach` are made again then.

    Jobs blocked downstream of many named jobs are still reopened (and blocked again, while what blocks them has
    not run again) once for each of them, as they were: that work is the verb's, not the walk's.
    """

    def __init__(self, core: VerbTarget) -> None:
        self.core = core
        """The core the request acts on."""
        self.walked = 0
        """Walks made so far in this request."""
        self.near: set[int] | None = None
        """Jobs from which a job blocked or held (or in `holds`) can be reached; None: not made yet."""
        self.seen = 0
        """Transitions of `_tx` already looked at for `near`."""
        self.bit: dict[int, int] = {}
        """The jobs `near` was made upstream from (blocked, held, failed or in `holds` when it was), each's bit."""
        self.reach: dict[int, int] | None = None
        """Per job of `near`, the bits of those jobs downstream of it (None: to be made again); made only when they
        are few (REACH_AMONG), and at most REACH_MADE times a request."""
        self.made = 0
        """Times `reach` was made in this request."""
        self.edges: tuple[int, object, object] = (-1, None, None)
        """The core's job count and edge arrays `near` was made from (held: a new array is never taken for them)."""

    def blocked_reach(self, i: int) -> list[int]:
        """Job i's descendants a verb of i reopens (blocked) or names (held) among, nearest first; every one of those
        is in it, with, once pruned, only jobs from which such a one can be reached.

        None to walk when the run has no job blocked (UPSTREAM_FAILED, a loop over output failed by an instance) or
        held (a glob naming thousands of jobs of such a run walks none)."""
        core = self.core
        counts = core.counts
        if not (counts[S.UPSTREAM_FAILED] or counts[S.HELD]
                or any(core.state[d] == S.FAILED for d in core.fanout.expanded)):
            return []
        self.walked += 1
        if self.walked <= FULL_WALKS:
            return _descendants(core, i)
        near = self._near()
        few = self._few(i)
        if few is not None:
            return few
        seen = {i}
        order: list[int] = []
        todo = deque((i,))
        while todo:
            u = todo.popleft()
            for d in core.downstream(u):
                if d in near and d not in seen:
                    seen.add(d)
                    order.append(d)
                    todo.append(d)
        return order

    def _near(self) -> set[int]:
        core = self.core
        edges = (core.n, core.down, core.down_start)
        tx = core._tx
        n, down, start = self.edges
        if self.near is None or core.n != n or core.down is not down or core.down_start is not start:
            self.near, self.edges, self.seen, self.bit, self.reach = set(), edges, len(tx), {}, None
            state = core.state
            self._add([*(d for s in _NOTED for d in _positions(state, s)), *core.holds])
            return self.near
        fresh = [row[0] for row in tx[self.seen:] if row[2] in _NOTED]
        self.seen = len(tx)
        self._add(fresh)
        return self.near

    def _few(self, i: int) -> list[int] | None:
        """The jobs downstream of i that a walk is for (blocked, held, or in `holds`) when there is at most one (no
        order to keep among them), read from `reach`; None: there may be more, or `reach` is not made."""
        if self.reach is None:
            if len(self.bit) > REACH_AMONG or self.made >= REACH_MADE:
                return None
            self.reach = self._reach()
            self.made += 1
        mask = self.reach.get(i, 0) & ~(1 << self.bit[i] if i in self.bit else 0)
        if mask.bit_count() > REACH_AMONG:
            return None
        core = self.core
        state, holds = core.state, core.holds
        jobs = [d for d, b in self.bit.items() if mask >> b & 1 and (state[d] in _NOTED or d in holds)]
        return jobs if len(jobs) <= 1 else None

    def _reach(self) -> dict[int, int]:
        """Per job of `near`, the bits of the jobs of `bit` downstream of it (itself included): one walk of `near`."""
        near, bit, downstream = self.near, self.bit, self.core.downstream
        assert near is not None
        reach: dict[int, int] = {}
        kids: dict[int, list[int]] = {}
        for root in near:
            todo = [root]
            while todo:
                x = todo[-1]
                if x in reach:
                    todo.pop()
                    continue
                if x not in kids:
                    kids[x] = [d for d in downstream(x) if d in near]
                    todo.extend(d for d in kids[x] if d not in reach)
                    continue
                mask = 1 << bit[x] if x in bit else 0
                for d in kids.pop(x):
                    mask |= reach[d]
                reach[x] = mask
                todo.pop()
        return reach

    def _add(self, jobs: list[int]) -> None:
        """Put `jobs` and every job upstream of them in `near` (a job in it already has its upstreams in it), and
        give each of `jobs` a bit of `reach` (made again then, as it no longer says where they all are)."""
        near, upstream, bit = self.near, self.core.upstream, self.bit
        assert near is not None
        for d in jobs:
            if d not in bit:
                bit[d] = len(bit)
                self.reach = None
        todo = [d for d in jobs if d not in near]
        near.update(todo)
        while todo:
            for u in upstream(todo.pop()):
                if u not in near:
                    near.add(u)
                    todo.append(u)


def _positions(state: bytearray, value: int) -> list[int]:
    """The jobs in state `value` (a find per job in it: a run has few blocked, held or failed jobs)."""
    out: list[int] = []
    at = state.find(value)
    while at >= 0:
        out.append(at)
        at = state.find(value, at + 1)
    return out


def _again(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], what: str,
           walks: Walks | None = None) -> str:
    core.attempt_base[i] = core.attempt[i]
    core.set_state(i, S.WAITING, reason=_why(what, ev))
    if what == "rerun":
        core.afresh(i)  # (a retry goes on with the job's `until` loop where its failed iteration left it)
    only_blocked = not (ev.downstream and ev.verb == "rerun")
    desc = (walks or Walks(core)).blocked_reach(i) if only_blocked else _descendants(core, i)
    before = len(touched)
    lists = _reopen(core, i, desc, touched, only_blocked=only_blocked)
    # Dependents that had counted this job (or a reopened one) as done must count it again.
    again = {i, *touched[before:]}
    for u in again:
        for d in core.downstream(u):
            if d not in again and core.state[d] in (S.WAITING, S.READY, S.HELD):
                core.recompute(d)
                if core.state[d] == S.READY and core.unmet[d] > 0:
                    core.set_state(d, S.WAITING, reason="upstream rerun")
    extra = len(set(desc).intersection(touched[before:]))
    _settle(core, i, touched)
    more = f" with {extra} downstream job(s)" if extra > 0 else ""
    if held := [d for d in desc if core.state[d] == S.HELD]:
        names = ", ".join(f"'{core.ids[d]}'" for d in held[:5]) + (" ..." if len(held) > 5 else "")
        more += f"; {len(held)} held job(s) stay held ({names}: run again after it once released)"
    if lists:
        named = ", ".join(f"'{core.ids[d]}'" for d in lists[:5]) + (" ..." if len(lists) > 5 else "")
        loop = f"loop {named} makes" if len(lists) == 1 else f"loops {named} make"
        more += (f"; {loop} its instances again from the list it reads then (those made before that succeeded or "
                 "run stay as they are, the others wait for it; each runs again if listed)")
    if core.specs[i].confirm and not core.attempt[i] and core.state[i] in (S.WAITING, S.READY):
        # Never confirmed (cancelled or skipped before its approve): it waits for one again, as at the start.
        core.holds[i] = confirm_wait(core.ids[i])
        core.set_state(i, S.HELD, reason=core.holds[i])
    if core.state[i] == S.HELD and i in core.holds and core.specs[i].confirm:
        return f"job '{core.ids[i]}' waits for confirmation again{more}: `wloadctl approve {core.ids[i]}` lets it run"
    if core.state[i] == S.HELD and i in core.holds:
        return (f"job '{core.ids[i]}' stays held, {core.holds[i]}{more}: `wloadctl release {core.ids[i]}` lets it "
                "run")
    waited = core.awaits_list(i) if core.state[i] == S.WAITING else None
    if waited is not None:
        return (f"job '{core.ids[i]}' will run again once loop '{core.ids[waited]}' has read its list again, if it "
                f"lists it{more}")
    if core.specs[i].condition and core.state[i] != S.READY:
        st = S(core.state[i])
        if st == S.WAITING and core.unmet[i] == 0:
            return (f"job '{core.ids[i]}' will run again if its `if` holds{more}: it is judged again when the run "
                    "resumes")
        if st in TERMINAL:
            return f"job '{core.ids[i]}' was judged again on its `if`: {st.name}{more}"
    return f"job '{core.ids[i]}' will run again{more}"


def _retry(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], walks: Walks | None = None) -> str:
    if core.state[i] == S.RETRY_WAIT:
        # Its policy's next attempt, now: the operator cuts the delay short (the cause was fixed, say).
        due = core.timers.retry_due.pop(i, None)
        core.set_state(i, S.READY, reason=_why("retry now", ev))
        core.enqueue(i)
        touched.append(i)
        left = f" ({due - ev.now:.0f}s of its delay cut)" if due is not None and due > ev.now else ""
        return f"job '{core.ids[i]}' retries now{left}"
    return _again(core, i, ev, touched, "retry", walks)


def _rerun(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], walks: Walks | None = None) -> str:
    return _again(core, i, ev, touched, "rerun", walks)


def _kill(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], walks: Walks | None = None) -> str:
    core.kill(i, _why("killed", ev))
    touched.append(i)
    return f"job '{core.ids[i]}' is being killed"


def _force(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], to: JobState,
           walks: Walks | None = None) -> str:
    was_terminal = core.state[i] in TERMINAL
    core.holds.pop(i, None)  # (the operator decided about this very job)
    if not was_terminal and core.unmet[i] > 0 and core.awaits_list(i) is None:
        # Some upstream has not ended: the job must not run, but its downstream must still wait for those upstreams
        # (an instance waiting for its loop's list has no downstream meanwhile: it ends at once).
        return _force_later(core, i, ev, touched, to)
    core.set_state(i, to, reason=_why("set ok" if to == S.SUCCEEDED else "skipped", ev))
    touched.append(i)
    if was_terminal:
        # Its dependents already counted it; the ones it had blocked get a fresh look.
        verb = "set ok" if to == S.SUCCEEDED else "skipped"
        _reopen(core, i, (walks or Walks(core)).blocked_reach(i), touched, only_blocked=True,
                why=f"{REOPENED_BY}{core.ids[i]} {verb} by {ev.user or 'an operator'}")
    else:
        core.timers.retry_due.pop(i, None)
        core.resolve(i)
    return f"job '{core.ids[i]}' is now {to.name}"


def _force_later(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], to: JobState) -> str:
    """skip or set-ok of a job one of whose upstreams has not ended: it ends so once they all have (core/forcing.py)."""
    forced = Forced(int(to), ev.user, ev.reason)
    core.force_later(i, forced)
    touched.append(i)
    job = core.ids[i]
    left = [u for u in core.upstream(i) if core.state[u] not in TERMINAL]
    names = ", ".join(f"'{core.ids[u]}' ({S(core.state[u]).name})" for u in left[:5]) + (" ..." if len(left) > 5
                                                                                           else "")
    return (f"job '{job}' will be {forced.words} once its upstreams have ended ({names} not yet), without running; "
            f"its downstream waits until then; `wloadctl release {job}` calls it off")


def _call_off(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int]) -> str:
    """release, rerun or hold of a job whose skip or set-ok waits for its upstreams: that is called off; the job
    waits and runs as any job (a confirmation job waits for its approve again), or is held."""
    forced = core.drop_force(i)
    assert forced is not None
    job = core.ids[i]
    what = f"its {forced.verb}" + (f" by {forced.user}" if forced.user else "") + f" is {CALLED_OFF}"
    if ev.verb == "hold":
        return f"{_hold(core, i, ev, touched)}: {what}"
    core.set_state(i, S.WAITING, reason=f"{_why('released' if ev.verb == 'release' else ev.verb, ev)}; {what}")
    if core.specs[i].confirm:
        core.holds[i] = confirm_wait(job)  # (the set-ok or skip had ended its wait for an approve)
    _settle(core, i, touched)
    if core.state[i] == S.HELD and core.specs[i].confirm:
        return f"job '{job}': {what}; it waits for confirmation again: `wloadctl approve {job}` lets it run"
    if core.state[i] == S.WAITING:
        return f"job '{job}': {what}; it runs once its upstreams have ended"
    return f"job '{job}': {what}; now {S(core.state[i]).name}"


def _set_ok(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], walks: Walks | None = None) -> str:
    return _force(core, i, ev, touched, S.SUCCEEDED, walks)


def _skip(core: VerbTarget, i: int, ev: OperatorEvent, touched: list[int], walks: Walks | None = None) -> str:
    return _force(core, i, ev, touched, S.SKIPPED, walks)


_APPLY = {
    "hold": _hold,
    "release": _release,
    "retry": _retry,
    "rerun": _rerun,
    "kill": _kill,
    "set-ok": _set_ok,
    "skip": _skip,
    "approve": _approve,
}
