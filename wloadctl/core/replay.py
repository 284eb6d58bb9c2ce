"""What a resume rebuilds of a job from its journaled transitions beyond its state: the iterations its `until`
has completed, its attempts not counted against its retry policy, when its retry is due, whether a branch skipped
it, the job it follows, how often its executor was lost under it, whether it is held for a node that was lost, and
whether an operator's skip or set-ok waits for its upstreams; and of the run from its journaled actions, whether it
was cancelled."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from wloadctl.core.branches import BRANCH_SKIPS, FRESH_STARTS, UNTIL_AGAIN, UNTIL_UNJUDGED
from wloadctl.core.forcing import Forced, forced_candidates, forced_of
from wloadctl.core.holds import confirmed_journaled, holds_journaled
from wloadctl.core.states import TERMINAL, JobState
from wloadctl.core.timers import retry_due_journaled
from wloadctl.core.verbs import STARTS

S = JobState
_SENT = frozenset({S.QUEUED, S.RUNNING})
_BACK = frozenset({S.READY, S.WAITING})
_REOPENED = TERMINAL | {S.RETRY_WAIT}
"""States a rerun upstream sends a job back to WAITING from (RETRY_WAIT: a rerun with its downstream)."""

FOLLOWS, FOLLOWS_END = "follows ", ": starts when it succeeds"
"""How the reason of a job sent as a follower (SchedulerCore.follow) begins and ends, the job it follows between."""
LOST_AGAIN = "executor lost during attempt "
"""How the reason of a job run again at once because its executor was lost under it begins (counted: MAX_LOST)."""
RUN_DOWN = "was running when the run went down (attempt "
"""How the reason of a job run again because a resume found its executor gone with the run begins (not counted:
a loss of the whole run says nothing of the job, and a journal's LOST_AGAIN reasons, read before there was this
wording, still count as they did)."""
HELD_LOST = ("its executor was lost while it ran and it may not run twice (idempotent: false): check what it did, "
             "then release it to run it again, or set-ok or skip it")
"""The reason of a job that may not run twice held because its executor or agent was lost while it ran."""
_HELD_LOST_BEFORE = "interrupted, needs operator"
"""HELD_LOST as journals of earlier releases word it."""


def follows_reason(job: str) -> str:
    """The reason journaled when a job is sent as a follower of `job`."""
    return f"{FOLLOWS}{job}{FOLLOWS_END}"


@dataclass
class Journaled:
    """What SchedulerCore.restore takes from the journaled transitions beyond the jobs' states (see `journaled`)."""

    branch_skipped: set[int] = field(default_factory=set)
    """SKIPPED jobs a branch skipped (an `if` false, or an upstream's branch not taken), not an operator."""
    follows: dict[int, int] = field(default_factory=dict)
    """QUEUED jobs sent as followers: job -> the job it follows."""
    lost: dict[int, int] = field(default_factory=dict)
    """How many times each job was run again at once because its executor was lost under it."""
    held_lost: dict[int, int] = field(default_factory=dict)
    """HELD jobs held because their executor or agent was lost while they ran, with that attempt."""
    forced: dict[int, Forced] = field(default_factory=dict)
    """WAITING jobs whose last transition left them waiting on an operator's skip or set-ok (core/forcing.py)."""


def replayed_jobs(rows: Iterable[tuple[int, int, int]], also: Collection[int] = ()) -> list[int]:
    """The jobs of journaled (job, state, attempt) rows whose transitions a resume reads (`journaled`,
    `attempts_unspent`): those that have run and not ended, and those SKIPPED; and the jobs `also` names (`until`
    jobs, whose iterations it counts, when they have run)."""
    return [i for i, st, att in rows if (att and (st not in TERMINAL or i in also)) or st == S.SKIPPED]


def journaled(transitions: Mapping[int, Iterable[tuple]], index: Mapping[str, int]) -> Journaled:
    """What the jobs' journaled transitions say beyond their states (Journaled).

    Args:
        transitions: transitions (from, to, attempt, ts, executor, exit_code, reason, ...) in order, by job.
        index: job index by id (to name the job a follower follows).
    """
    out = Journaled()
    for i, ts in transitions.items():
        last: tuple | None = None
        n = 0
        for t in ts:
            reason = t[6] or ""
            if t[1] == S.SKIPPED and reason.startswith(BRANCH_SKIPS):
                out.branch_skipped.add(i)  # (as live: once a branch skipped it, Branches.branch_skipped keeps it)
            elif reason.startswith(LOST_AGAIN):
                n += 1
            last = t
        if n:
            out.lost[i] = n
        if last is None:
            continue
        to, reason = S(last[1]), last[6] or ""
        if to == S.QUEUED and reason.startswith(FOLLOWS) and reason.endswith(FOLLOWS_END):
            u = index.get(reason[len(FOLLOWS):-len(FOLLOWS_END)])
            if u is not None:
                out.follows[i] = u
        elif to == S.HELD and reason in (HELD_LOST, _HELD_LOST_BEFORE):
            out.held_lost[i] = last[2]
        elif to == S.WAITING and (forced := forced_of(reason)) is not None:
            out.forced[i] = forced
    return out


def iterations_journaled(transitions: Iterable[tuple]) -> int:
    """How many iterations an `until` job has completed since it last started afresh.

    Args:
        transitions: the job's (from, to, attempt, ts, executor, exit_code, reason, ...), in order.
    """
    n = 0
    for t in transitions:
        frm, to, reason = t[0], t[1], t[6] or ""
        if (to == S.WAITING and S(frm) in _REOPENED and reason.startswith(FRESH_STARTS[:2] + FRESH_STARTS[3:])) or \
                reason.startswith(FRESH_STARTS[2]):
            n = 0
        elif reason.startswith(UNTIL_AGAIN):
            n = int(reason[len(UNTIL_AGAIN):].partition("/")[0])
        elif reason.startswith(UNTIL_UNJUDGED):
            n += 1  # (the iteration ran and was counted; only its judging failed)
    return n


def attempts_ran(transitions: Iterable[tuple]) -> tuple[int, int]:
    """How many of a job's attempts started (a process ran), and how many dispatches came back before they
    started (a follower handed back, one requeued unstarted under a number that never ran after).

    A job's attempt number counts its dispatches, so it is no count of the times it ran.

    Args:
        transitions: the job's (from, to, attempt, ...), in order.

    Returns:
        (ran, unstarted)
    """
    ran: set[int] = set()
    back: set[int] = set()
    for t in transitions:
        if t[1] == S.RUNNING:
            ran.add(t[2])
        elif t[0] == S.QUEUED and t[1] in _BACK:
            back.add(t[2])
    return len(ran), len(back - ran)


def attempts_unspent(transitions: Iterable[tuple]) -> int:
    """How many of a job's attempt numbers its retry policy does not count (the engine's attempt_base): those
    before an operator's retry or rerun (or one upstream, or a loop listing it again), and each attempt sent
    back under its number rather than failed (an `until` iteration, a preempted or stopped copy, one rerun after
    its executor was lost, a follower handed back). An attempt given back under the number before it (lost
    before it started) took no number.

    Args:
        transitions: the job's (from, to, attempt, ...), in order.
    """
    base = last = 0
    for t in transitions:
        frm, to, att = S(t[0]), S(t[1]), t[2]
        if (frm in TERMINAL and to in _BACK) or (frm == S.RETRY_WAIT and to == S.WAITING):
            base = att
        elif frm in _SENT and to in _BACK and att == last:
            base += 1
        last = att
    return base


def retry_dues(transitions: Mapping[int, Iterable[tuple]]) -> dict[int, float]:
    """When each job in RETRY_WAIT becomes READY, by its journaled transitions (timers.retry_due_journaled);
    jobs whose journal does not say are left out.

    Args:
        transitions: the transitions of jobs in RETRY_WAIT, by job.
    """
    out: dict[int, float] = {}
    for i, ts in transitions.items():
        due = retry_due_journaled(ts)
        if due is not None:
            out[i] = due
    return out


def run_cancelled(actions: Iterable[tuple]) -> bool:
    """Whether the run stands cancelled, by its journaled actions (ts, user, verb, job, reason, outcome, applied),
    oldest first: a resumed run that was cancelled starts nothing and ends cancelled. A verb that lets jobs start
    (`verbs.STARTS`), applied after the cancel (once the run had ended: a cancelled run refuses them), takes it
    back: `rerun X` then `resume` runs X."""
    cancelled = False
    for a in actions:
        if a[6]:
            if a[2] == "cancel":
                cancelled = True
            elif a[2] in STARTS:
                cancelled = False
    return cancelled


class JournalReads(Protocol):
    """What `restore_journaled` reads of a journal (wloadctl.store.Store)."""

    def job_states(self, run: int) -> Sequence[tuple[int, int, int]]: ...

    def transitions_of_jobs(self, run: int, idxs: Iterable[int]) -> dict[int, list[tuple]]: ...

    def actions(self, run: int) -> list[tuple]: ...


def restore_journaled(store: JournalReads, run: int, core: Any, now: float) -> list[tuple]:
    """Bring a fresh core to where the run's journal left it, as a resume and the offline verbs both see it: the
    jobs' states, and what their transitions say beyond them (branch skips, followers, losses, retry delays, `until`
    iterations, attempts the retry policy does not count), and the operators' holds. Returns the run's journaled
    actions (oldest first); whether they leave the run cancelled (`run_cancelled`) is the caller's to judge.

    `core` is a wloadctl.core.engine.SchedulerCore (not named here: the engine imports this module)."""
    rows = store.job_states(run)
    actions = store.actions(run)
    # WAITING jobs an applied skip or set-ok named: their last transition says whether it still waits for their
    # upstreams (core/forcing.py). They are few, and read beside the jobs a resume reads anyway.
    replayed = replayed_jobs(rows, core.branches.untils)
    moved = {i for i, st, _a in rows if st != S.WAITING} | set(replayed)  # (a job with no row is WAITING)
    forced = sorted(forced_candidates(actions, core.index) - moved)
    # HELD jobs too (few): what held them, which `why` says ("held by ana: treasury sign-off", "its executor was
    # lost while it ran..."), is their last transition's reason.
    held = [i for i, st, _a in rows if st == S.HELD]
    read = store.transitions_of_jobs(run, sorted({*replayed, *forced, *held}))
    transitions = {i: read[i] for i in (*replayed, *forced) if i in read}
    dues = retry_dues({i: transitions[i] for i, st, _a in rows if st == S.RETRY_WAIT and i in transitions})
    core.restore(rows, now, dues, journaled(transitions, core.index))
    for i, st, _a in rows:
        if st == S.RETRY_WAIT and i in transitions:
            # What made it wait (`why` names it: "exit status 1; retry 1/2 in 30.0s"), as the live core had it.
            waits = [t[6] for t in transitions[i] if t[1] == S.RETRY_WAIT]
            if waits and waits[-1]:
                core.reasons[i] = waits[-1]
    untils, state, attempt = core.branches.untils, core.state, core.attempt
    for i, ts in transitions.items():
        if not attempt[i] or (state[i] in TERMINAL and i not in untils):
            continue
        if i in untils:  # a resume goes on with its loop
            core.branches.iterations[i] = iterations_journaled(ts)
        if state[i] not in TERMINAL:  # a rerun, an iteration or a preemption leaves it its retries
            core.attempt_base[i] = max(core.attempt_base.get(i, 0), attempts_unspent(ts))
    # A confirmation job approved while it waited (WAITING, a state the journal's rows leave out) is not held for
    # its approve again at the start (it was, its approval lost, when its `if` kept it WAITING).
    given = confirmed_journaled(actions, core.index)
    core.to_confirm = [i for i in core.to_confirm if i not in given]
    core.holds = holds_journaled(actions, core)  # (held jobs an upstream's retry must not let run)
    for i in held:
        why = [t[6] for t in read.get(i, ()) if t[1] == S.HELD]
        if why and why[-1] and core.state[i] == S.HELD:
            core.reasons[i] = why[-1]
    return actions
