"""The plan model: frozen, slotted dataclasses for a plan, its jobs, retry policies and resources."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from wloadctl.core.states import DepKind, SlaTier

JOB_TYPES = ("shell", "noop")
"""`shell` runs `command`; `noop` is completed by the executor without spawning a process."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed attempt is retried: exponential backoff with jitter, and which failures qualify."""

    count: int = 0
    """Retries after the first attempt (0 = no retry)."""
    delay: float = 10.0
    """Seconds before the first retry."""
    backoff: float = 2.0
    """Factor applied to the delay for each further retry."""
    max_delay: float = 3600.0
    """Upper bound on any single delay, in seconds."""
    jitter: float = 0.1
    """Random spread as a fraction of the delay (0.1 = +/-10%)."""
    exit_codes: tuple[tuple[int, int], ...] | None = None
    """Inclusive ranges of exit codes that are retried; None = every non-zero code."""
    on_timeout: bool = True
    """Retry an attempt killed by its timeout."""
    on_signal: bool = True
    """Retry an attempt killed by a signal (other than an operator kill)."""
    on_lost: bool = True
    """Retry an attempt whose executor died (only for idempotent jobs)."""
    on_max_output: bool = True
    """Retry an attempt whose output passed its `max_output` (it was stopped, its log cut back)."""

    def retries_exit(self, code: int) -> bool:
        """Whether a non-zero exit `code` may be retried under this policy."""
        if self.exit_codes is None:
            return True
        return any(lo <= code <= hi for lo, hi in self.exit_codes)


NO_RETRY = RetryPolicy()
"""The default: no retries."""


JOB_ID_MAX = 200
"""The longest job id: an id names its job's files (a log is `<id>.<attempt>.log`), and a file name holds at
most 255 bytes."""
EXEC_ARG_MAX = 128 * 1024
"""Bytes of one argument or environment string a process can be started with, its NUL included (Linux's
MAX_ARG_STRLEN): a text command is one argument of `/bin/sh -c`."""
EXEC_TOTAL_MAX = 2 * 1024 * 1024 - 256 * 1024
"""Bytes a job's command and env may take together, counted as exec counts them (each string with its NUL
and its pointer): the OS's ARG_MAX of 2 MiB, less 256 KiB kept for the executor's own environment and the
WLOADCTL_* variables of the run. The payload arena (16 MiB) holds any payload under this."""
DEFAULT_MAX_ITEMS = 1000
"""Most instances a `for_each` over an upstream's output may make unless the plan says otherwise."""
DEFAULT_MAX_OUTPUT = 4 << 30
"""Bytes of output an attempt may write to its log unless the plan says otherwise (`max_output`, 4 GiB): a
runaway job must not fill the disk that holds the run's journal, and a job that prints a gigabyte on purpose (a
verbose extract) must not fail for it."""


@dataclass(frozen=True, slots=True)
class DynamicItems:
    """A `for_each` over what an upstream job produced: known only when that job has finished."""

    expr: str
    """An expression over upstream results giving the list, e.g. `jobs.list_files.result.files`."""
    max_items: int = DEFAULT_MAX_ITEMS
    """More items than this fail the loop instead of flooding the run."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of a plan, with defaults already applied."""

    id: str
    """Unique id within the plan."""
    command: str | tuple[str, ...] | None
    """A string run by `/bin/sh -c`, or an argv list run with no shell; None for `noop` jobs."""
    depends_on: tuple[str, ...] = ()
    """Upstream job ids."""
    dep_kinds: tuple[DepKind, ...] | None = None
    """What each upstream must end in, parallel to `depends_on`; None means all SUCCESS (saves memory)."""
    type: str = "shell"
    """One of JOB_TYPES."""
    sla: SlaTier = SlaTier.STANDARD
    """SLA tier: orders the ready queue and shapes recovery."""
    priority: int = 0
    """Higher runs first within a tier."""
    timeout: float | None = None
    """Seconds before the whole process group is killed; None = no limit."""
    max_output: int | None = DEFAULT_MAX_OUTPUT
    """Bytes an attempt's output log may reach: past them the job is stopped as a timeout stops it, and its log
    cut back to them; None = no cap."""
    retry: RetryPolicy = NO_RETRY
    """Retry policy (often shared with the plan's defaults)."""
    resources: tuple[tuple[str, int], ...] = ()
    """(resource name, amount) pairs held while the job runs."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables."""
    cwd: str | None = None
    """Working directory (relative paths are relative to the plan file's folder)."""
    idempotent: bool = True
    """Whether running it twice is harmless; non-idempotent jobs are held, not retried, after a lost executor."""
    deadline: str | None = None
    """`HH:MM[:SS]` on the business date, or a duration from the run's start (`+2h`)."""
    not_before: str | None = None
    """`HH:MM[:SS]`: the job does not start before this time of the business date."""
    preemptible: bool = False
    """A critical job short of slots may stop this one and requeue it."""
    condition: str | None = None
    """`if` expression on upstream results or plan variables; false makes the job SKIPPED."""
    until: str | None = None
    """Repeat the job after each success until this expression on its own result holds."""
    max_iterations: int = 10
    """Most runs of an `until` job; the last one ends it whatever the expression says."""
    for_each: tuple[str, ...] | str | DynamicItems | None = None
    """Items to make one instance of the job for, `vars.NAME` naming a list variable (both expanded at load),
    or a list an upstream job produces (expanded when that upstream has finished)."""
    item: str | None = None
    """The `for_each` item this job instance runs for (also in WLOADCTL_ITEM)."""
    unfit: str | None = None
    """Why this instance's item cannot be given to its command, cwd or env safely: it fails to start, saying
    so, and never runs (None: it runs)."""
    group: str | None = None
    """Fair-share group (the plan's `groups` give each a weight of the slots)."""
    pool: str | None = None
    """Pool of agents (hosts) that runs it; None runs it on this host's executors."""
    agent: str | None = None
    """One agent (host) by name that must run it; None lets its pool choose."""
    cpu: float = 0.0
    """CPUs the job needs on its executor (0 = no claim); an executor starts it only when they are free."""
    memory: int = 0
    """Memory in MiB the job needs on its executor (0 = no claim)."""
    expected: float | None = None
    """Seconds the job is expected to take (its critical-path weight); None: learned from its history."""
    run_as: str | None = None
    """User the job runs as (its process, files and logs are theirs); needs a scheduler running as root."""
    confirm: bool = False
    """The job waits (HELD) for an operator's `approve` before it starts (a confirmation job)."""
    four_eyes: tuple[str, ...] = ()
    """Operator verbs on this job that need a second person's `approve` before they apply."""
    description: str = ""
    """Free text for operators."""
    line: int = 0
    """Line of the job in its plan file (for error messages)."""

    def kind_of(self, i: int) -> DepKind:
        """The dependency kind of `depends_on[i]`."""
        return DepKind.SUCCESS if self.dep_kinds is None else self.dep_kinds[i]


@dataclass(frozen=True, slots=True)
class Schedule:
    """When runs of a plan start: a cron expression, on the business days of a calendar."""

    cron: str
    """Five-field cron expression in the plan's time zone (e.g. `30 18 * * 1-5`)."""
    business_days: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Weekdays that are business days (0 = Monday)."""
    holidays: tuple[str, ...] = ()
    """ISO dates that are not business days."""


@dataclass(slots=True)
class PlanEdges:
    """The dependency edges the loader resolved while it read the jobs, kept for the first job table.

    A job table derives the same from the specs with a dictionary lookup per edge: at millions of jobs
    every lookup misses the CPU's caches, and that is most of the build. Valid only for the `jobs`
    mapping they were read with, unchanged (see `for_jobs`). The first table takes them (`take`): the
    run does not keep a second index of a million ids; a later table of the same plan looks them up.
    """

    jobs: dict[str, JobSpec]
    """The jobs mapping they belong to (the very object)."""
    ids: list[str]
    """Job ids by index (file order)."""
    index: dict[str, int]
    """Index by job id."""
    up: array
    """Upstream indices of every job, in its `depends_on` order, job after job."""
    up_off: array
    """Where each job's upstreams start in `up` (one more entry than jobs)."""

    def for_jobs(self, jobs: dict[str, JobSpec]) -> bool:
        """Whether these edges are those of `jobs` as it is now (and not taken yet)."""
        n = len(jobs)
        return (self.jobs is jobs and len(self.ids) == n == len(self.index) and len(self.up_off) == n + 1
                and self.up_off[n] == len(self.up))

    def take(self) -> tuple[list[str], dict[str, int], array, array]:
        """(ids, index, up, up_off), handed over: these edges hold nothing afterwards."""
        got = (self.ids, self.index, self.up, self.up_off)
        self.ids, self.index, self.up, self.up_off = [], {}, array("i"), array("i", [0])
        return got


@dataclass(frozen=True, slots=True)
class Plan:
    """A whole plan as loaded and validated."""

    name: str
    """The plan's name."""
    jobs: dict[str, JobSpec]
    """Jobs by id, in file order."""
    resources: dict[str, int] = field(default_factory=dict)
    """Named counted semaphores and their capacity."""
    variables: dict[str, object] = field(default_factory=dict)
    """Plan variables usable in conditions and loops."""
    on_failure: str | None = None
    """Hook command run (by the scheduler's host) when a job fails for good."""
    timezone: str | None = None
    """IANA time zone for `not_before` and `deadline`; None = local time."""
    path: str = ""
    """The file the plan came from."""
    groups: dict[str, float] = field(default_factory=dict)
    """Fair-share weights of job groups: busy slots are shared in these proportions within a tier."""
    schedule: Schedule | None = None
    """When runs of the plan are triggered (cron and business calendar), if it says."""
    digest: str = ""
    """SHA-256 of the plan file's bytes; a resumed run compares it."""
    share: float = 1.0
    """Weight of the plan's runs in the host's fair share of slots (`share:`, default 1)."""
    read_by_lines: bool = False
    """Its jobs were one-line jobs read without the YAML parser: reading the text again is about as
    quick as decoding a stored copy, so a run keeps none."""
    limits: str = "claim"
    """`claim`: cpu/memory only decide where and when a job starts; `enforce`: also cgroup limits."""
    roles: dict[str, dict[str, list[str]]] | None = None
    """Roles of Unix users and groups, and of broker users, in the run (wloadctl.access), added to the config file's."""
    four_eyes: tuple[str, ...] = ()
    """Operator verbs that need a second person's `approve` on every job of the run (four eyes)."""
    edges: PlanEdges | None = field(default=None, compare=False, repr=False)
    """The edges as the loader resolved them (None for a plan made otherwise)."""
