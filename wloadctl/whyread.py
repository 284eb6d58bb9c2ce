"""`why` of jobs of a stopped run read from the journal without loading the run's plan or replaying it.

A stopped run's `why` once rebuilt the run's core from the whole journal (client.journal_core): its
plan loaded and ranked and every job restored, seconds at a million jobs to explain one. Here the
journal gives only what the jobs' answers read: the blocks of current states that hold them and
their upstreams, their upstreams' ids, their attempts (from the flat rows when those hold every
transition and no reason is read, else their rows through the turn index), the counts only for a
READY job, and the facts the run's scheduler kept of its plan (store/facts.py). core/whyview.py
makes of them the part of a core that core/explain.py reads, so the answer is the one the rebuilt
core gives.

It also says, for `status` and `status --at`, how long a job waiting for its retry still waits (retry_now), as
`why` says it.
"""

from __future__ import annotations

from typing import Any

from wloadctl.core.explain import why as explain
from wloadctl.core.plan import JobSpec
from wloadctl.core.sla import instant
from wloadctl.core.states import JobState
from wloadctl.core.timers import retry_due_journaled, retry_reason_at
from wloadctl.core.whyview import JobSight, JobView
from wloadctl.store import RunRow, Store

_NO_REASON = frozenset({JobState.SUCCEEDED, JobState.READY})
"""States whose answer does not read the job's row (core/explain.py), but for a success without an attempt (a loop's
end, an operator's set-ok) or after several (an `until` ended by its max_iterations): its row is read then. (That of
a QUEUED or RUNNING job names its executor.)"""


def why_of_stopped(store: Store, run: RunRow, idx: list[int], now: float,
                   stopped: str | None = None) -> list[dict[str, Any]] | None:
    """Explain these jobs (by index) of a run no scheduler holds, as a core rebuilt from its journal would.

    Args:
        store: the run's journal.
        run: the run.
        idx: the jobs.
        now: the time of the answer.
        stopped: what is said first of a job waiting to be dispatched, no scheduler holding the run
            (explain.why).

    Returns:
        One explain.why answer per job; None when the journal cannot answer so (the run's scheduler kept
        no facts of its plan, a plan changed since they were kept, loops): rebuild the core then.
    """
    if store.expansions(run.id):
        return None  # loop instances are no job of the plan the facts were kept of
    got = store.job_facts(run.id, idx)
    if got is None or got[0].digest != run.plan_digest:
        return None
    meta, facts = got
    if any(facts[i].loop for i in idx):
        return None
    ups = sorted({u for i in idx for u in facts[i].ups})
    states = store.states_at(run.id, [*idx, *ups])
    if states is None:
        return None
    ids = store.ids_at(run.id, [*idx, *ups])
    if any(ids[u].startswith(f"{ids[i]}@") for i in idx for u in facts[i].ups):
        # A loop over a list: its instances (`JOB@item`) are its upstreams. Its answer reads them and the list (what
        # they let it take, its for_each), which the facts do not keep (they flag loops over output alone).
        return None
    # Jobs in these states are explained without their reason: their attempts may come from the flat rows.
    plain = [i for i in idx if states[i] in _NO_REASON]
    attempts = store.attempts_at(run.id, plain) if plain else {}
    if attempts:
        # (a success with no attempt, or after several (an `until` that max_iterations ended says so), reads its row)
        attempts = {i: a for i, a in attempts.items() if a == 1 or (a and states[i] != JobState.SUCCEEDED)}
    rows = store.rows_of(run.id, [i for i in idx if attempts is None or i not in attempts])
    counts = [0] * len(JobState)
    active: dict[int, JobSpec] = {}
    if any(states[i] == JobState.READY for i in idx):
        # A READY job's answer counts the ready and busy jobs, and names what busy jobs hold.
        every = store.current_states(run.id)
        if every is None:
            return None
        for s in (JobState.READY, JobState.QUEUED, JobState.RUNNING):
            counts[s] = every.count(s)
        if meta.places or meta.resources:
            busy = sorted(k for s in (JobState.QUEUED, JobState.RUNNING) for k in _found(every, s))
            held = store.job_facts(run.id, busy)
            if held is None:
                return None
            names = store.ids_at(run.id, busy)
            active = {k: held[1][k].spec(names[k], None) for k in busy}
    out = []
    for i in idx:
        f = facts[i]
        row = rows.get(i)
        attempt, reason = (row[1], row[6] or "") if row is not None else (attempts[i], "")  # type: ignore[index]
        due = retry_due_journaled(store.transitions_of(run.id, i)) if states[i] == JobState.RETRY_WAIT else None
        job = JobSight(f.spec(ids[i], ids), states[i], attempt, reason, due, row[2] if row is not None else -1)
        view = JobView(i, job, {u: (ids[u], states[u]) for u in f.ups}, counts, active,
                       (f.rank, f.expected, f.path, meta.longest, meta.jobs), meta.resources, meta.places, now)
        if job.spec.not_before:
            # read as the run's scheduler read it (core/sla.py), from the run's start and business date
            view.timers.not_before[i] = instant(job.spec.not_before, run.business_date, run.started,
                                                meta.timezone, roll=False)
        out.append(explain(view, i, now, stopped))
    return out


def _found(states: bytearray, state: int) -> list[int]:
    """Indices of the jobs in one state."""
    out: list[int] = []
    k = states.find(state)
    while k >= 0:
        out.append(k)
        k = states.find(state, k + 1)
    return out


def retry_now(store: Store, run: int, jobs: dict[int, dict[str, Any]], now: float) -> None:
    """Say of each job waiting for its retry when it runs again, as seen at `now` (`why` says the same): its
    reason gets the time left in place of the delay it was journaled with (core/timers.py retry_reason_at),
    and `retry_due` the moment it is due (None: the journal does not say). One read of the journal for them all.

    Args:
        store: the run's journal.
        run: the run's key.
        jobs: job rows as `status --json` gives them, by job index (changed in place).
        now: the moment the rows are of (`status --at` passes its moment).
    """
    waiting = [i for i, j in jobs.items() if j["state"] == "RETRY_WAIT"]
    if not waiting:
        return
    for i, moves in store.transitions_of_jobs(run, waiting).items():
        due = retry_due_journaled(t for t in moves if t[3] <= now)
        job = jobs[i]
        job["retry_due"] = due
        if job.get("reason"):
            job["reason"] = retry_reason_at(job["reason"], due, now)
