"""What a resume rebuilds of a job from its journaled transitions beyond its state: the iterations its `until`
has completed, its attempts not counted against its retry policy, when its retry is due; and of the run from its
journaled actions, whether it was cancelled."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from wloadctl.core.branches import FRESH_STARTS, UNTIL_AGAIN, UNTIL_UNJUDGED
from wloadctl.core.states import TERMINAL, JobState
from wloadctl.core.timers import retry_due_journaled

S = JobState
_SENT = frozenset({S.QUEUED, S.RUNNING})
_BACK = frozenset({S.READY, S.WAITING})
_REOPENED = TERMINAL | {S.RETRY_WAIT}
"""States a rerun upstream sends a job back to WAITING from (RETRY_WAIT: a rerun with its downstream)."""


def iterations_journaled(transitions: Iterable[tuple]) -> int:
    """How many iterations an `until` job has completed since it last started afresh.

    Args:
        transitions: the job's (from, to, attempt, ts, executor, exit_code, reason, ...), in order.
    """
    n = 0
    for t in transitions:
        frm, to, reason = t[0], t[1], t[6] or ""
        if (to == S.WAITING and S(frm) in _REOPENED and reason.startswith(FRESH_STARTS[:2])) or \
                reason.startswith(FRESH_STARTS[2]):
            n = 0
        elif reason.startswith(UNTIL_AGAIN):
            n = int(reason[len(UNTIL_AGAIN):].partition("/")[0])
        elif reason.startswith(UNTIL_UNJUDGED):
            n += 1  # (the iteration ran and was counted; only its judging failed)
    return n


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
    """Whether an operator cancelled the run, by its journaled actions (ts, user, verb, job, reason, outcome,
    applied): a resumed run that was cancelled starts nothing and ends cancelled."""
    return any(a[2] == "cancel" and a[6] for a in actions)
