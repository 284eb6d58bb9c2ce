"""One job of a stopped run as `why` reads a core, made of the journal's rows without the plan.

A core rebuilt from the journal (client.journal_core) loads the whole plan, ranks it and restores
every job's state: seconds at a million jobs, to explain one. `why` (core/explain.py) reads a
handful of things of that core for the job it explains: its spec, state, attempt and reason, its
upstreams' states, the counts, what running jobs hold, its critical-path figures. JobView holds
just those, with the core's names, and does to the job what the rebuilt core's restore does to
it (a WAITING job whose upstream has failed ends UPSTREAM_FAILED; a retry is due when its journaled
delay ends), so the same explain gives the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from wloadctl.core.codes import JOB_BITS
from wloadctl.core.condition import Condition
from wloadctl.core.engine import unmet_and_block
from wloadctl.core.forcing import Forced, forced_of
from wloadctl.core.holding import LOCAL_PLACE, Needs, Resources
from wloadctl.core.plan import JobSpec
from wloadctl.core.states import JobState

S = JobState
N = TypeVar("N", int, float)


@dataclass
class JobFigures(Generic[N]):
    """One job's value of a per-job array of the core (expected seconds, remaining path, ready key),
    indexed as the core's array is; its length is the plan's number of jobs."""

    n: int
    """Jobs the array covers."""
    values: dict[int, N]
    """The values known, by job index (a ready key is an int, as in the core's array)."""

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> N:
        return self.values[i]


@dataclass
class ViewTimers:
    """The timers `why` reads."""

    retry_due: dict[int, float] = field(default_factory=dict)
    """When jobs in RETRY_WAIT become READY."""
    lateness: dict[int, str] = field(default_factory=dict)
    """Deadline notes (a core rebuilt from the journal has none)."""
    not_before: dict[int, float] = field(default_factory=dict)
    """Earliest starts (the run's facts keep the times of day: they are read on the run's start and business date)."""


@dataclass
class ViewLoops:
    """The loops over output `why` reads (a view is made only for jobs that are none)."""

    loops: dict[int, Condition] = field(default_factory=dict)
    """Loop parents."""
    expanded: dict[int, int] = field(default_factory=dict)
    """Loop parents expanded."""


@dataclass(frozen=True, slots=True)
class JobSight:
    """What the journal says of one job: its spec as far as `why` reads it, state, attempt, reason."""

    spec: JobSpec
    """Its spec (id, dependencies, tier, the settings `why` reads)."""
    state: int
    """Its state."""
    attempt: int
    """Its attempts."""
    reason: str
    """The reason its last transition journaled ("" for none)."""
    retry_due: float | None = None
    """When it becomes READY, in RETRY_WAIT, by its journaled transitions (None: the journal does not say)."""
    executor: int = -1
    """The executor its latest attempt was given (-1: none)."""


class JobView:
    """The part of a stopped run's core that `why` of one job reads (see the module)."""

    def __init__(self, i: int, job: JobSight, ups: Mapping[int, tuple[str, int]], counts: Sequence[int],
                 active: Mapping[int, JobSpec], figures: tuple[int, float, float, float, int],
                 resources: Mapping[str, int], places: bool, now: float) -> None:
        """The part of a core that `why` of job i reads, as a core rebuilt from the journal would hold it.

        Args:
            i: the job's index.
            job: the job.
            ups: its upstreams: index -> (id, state).
            counts: jobs per state of the run (by state value; only READY, QUEUED and RUNNING are read, and only
                for a READY job).
            active: the run's QUEUED and RUNNING jobs (their specs): what they hold (read for a READY job).
            figures: (rank, expected seconds, remaining path, the plan's longest path, the plan's jobs).
            resources: the plan's declared resources.
            places: every job claims a slot of its place (the plan runs something on agents).
            now: the time the view is for.
        """
        spec = job.spec
        self.specs = {i: spec}
        self.ids = {i: spec.id} | {u: jid for u, (jid, _s) in ups.items()}
        self.index = {jid: u for u, (jid, _s) in ups.items()}
        self.state = {i: job.state} | {u: s for u, (_j, s) in ups.items()}
        self.attempt = {i: job.attempt}
        self.executor = {i: job.executor}
        self.reasons: dict[int, str] = {}
        self.counts = list(counts)
        self.busy = counts[S.QUEUED] + counts[S.RUNNING]
        self.slots = 0
        self.paused = False
        self.cancelled = False
        self.timers = ViewTimers()
        self.fanout = ViewLoops()
        self.forcing: dict[int, Forced] = {}
        """The job's skip or set-ok waiting for its upstreams, as its WAITING transition says (core/forcing.py)."""
        rank, expected, path, longest, n = figures
        self.key_base = JobFigures(n, {i: rank << JOB_BITS})
        self.expected = JobFigures(n, {i: expected})
        self.path = JobFigures(n, {i: path})
        self.longest_path = longest
        self.resources = Resources(dict(resources))
        st = job.state
        forced = forced_of(job.reason) if st == S.WAITING else None
        if st == S.WAITING:
            # As the rebuilt core's restore: a job whose upstream ended in a way that blocks it ends too (one an
            # operator's skip or set-ok waits on ends as the operator said, once its upstreams all have).
            unmet, block = unmet_and_block(spec, self.state, self.index, ())
            if forced is not None and block and not unmet:
                self.state[i] = forced.to
                self.reasons[i] = forced.ended(d for d in spec.depends_on
                                               if self.state[self.index[d]] not in (S.SUCCEEDED, S.SKIPPED))
            elif forced is not None:
                self.forcing[i] = forced
            elif block:
                self.state[i] = S.UPSTREAM_FAILED if block == 1 else S.SKIPPED
                self.reasons[i] = "upstream failed" if block == 1 else "condition not met"
        elif st == S.RETRY_WAIT:
            self.timers.retry_due[i] = job.retry_due if job.retry_due is not None else now
        if job.reason and self.state[i] == st:  # (as journal_core: a row's reason is of the state it names)
            self.reasons[i] = job.reason
        if st == S.READY:
            self._holders(i, spec, active, places)

    def _holders(self, i: int, spec: JobSpec, active: Mapping[int, JobSpec], places: bool) -> None:
        """What the run's QUEUED and RUNNING jobs hold, as the rebuilt core's restore takes it."""
        res = self.resources
        if places:
            res.add_place(LOCAL_PLACE, self.slots)
            res.places = True
        for k, s in ((i, spec), *active.items()):
            self.specs[k] = s
            self.ids[k] = s.id
            if places:
                res.claim(k, s)
        for k, s in active.items():
            if s.resources or k in res.claims:
                res.hold(k, self.needs(k))

    def needs(self, i: int) -> Needs:
        """What job i holds while it runs (as SchedulerCore.needs)."""
        return self.resources.needs(i, self.specs[i].resources)
