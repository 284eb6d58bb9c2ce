"""What one benchmark run shares: sizes, settings, scratch plans and results."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from wloadctl.bench.figures import Figure, Ratio, Section
from wloadctl.bench.runs import RunResult, run_wloadctl
from wloadctl.gen import Shape, write_plan

JobKind = Literal["noop", "shell", "noop@bench"]
"""Generated jobs either do nothing (`noop`) or run `true` (`shell`); `noop@bench`: no-op
jobs that all run on the agents of pool `bench` (`pool: bench` in the plan's defaults)."""


@dataclass(frozen=True)
class Sizes:
    """How big each measurement is."""

    engine: tuple[int, ...]
    """Bank-shape plans for dependency evaluation."""
    engine_chain: int
    """A chain for the same comparison, where re-scanning is quadratic."""
    rescan_cap: float
    """Seconds the re-scanning reference loop may run per plan before it is stopped."""
    e2e: tuple[int, ...]
    """No-op plans run end to end."""
    big: int
    """The large end-to-end run that scheduler memory per job is read from."""
    shell: int
    """Shell jobs per shape (bank, wide, chain) beside ninja and make."""
    latency: int
    """No-op chain for completion-to-dependent-start latency."""
    dask: tuple[int, ...]
    """No-op plans given to dask's threaded scheduler."""
    remote: int
    """No-op plan run through two agents and a broker, beside the local path and Dask distributed."""
    remote_dask: int
    """The same bank DAG for Dask distributed, smaller at full size: its time per job grows with the
    graph (about 260 jobs/s at 4,000 jobs here, and a 20,000-job graph did not finish in 1,000 s)."""
    first_job: int = 1_000_000
    """Bank plan (one job a line, and one key a line) for plan load and time to the first job."""


FULL = Sizes(
    engine=(100_000, 1_000_000),
    engine_chain=100_000,
    rescan_cap=60.0,
    e2e=(10_000, 100_000),
    big=1_000_000,
    shell=10_000,
    latency=1_000,
    dask=(10_000, 100_000),
    remote=20_000,
    remote_dask=4_000,
)
"""The sizes the issue asks for."""

QUICK = Sizes(
    engine=(2_000, 10_000),
    engine_chain=1_000,
    rescan_cap=1.0,
    e2e=(2_000,),
    big=2_000,
    shell=60,
    latency=100,
    dask=(2_000,),
    remote=500,
    remote_dask=500,
    first_job=2_000,
)
"""Small sizes that run everything in well under a minute (used by the tests)."""


@dataclass(frozen=True)
class Settings:
    """How the suite runs."""

    sizes: Sizes
    """Sizes of every measurement."""
    quick: bool
    """Small sizes (`--quick`)."""
    repeat: int
    """Repeats of each measurement; figures are medians."""
    sections: tuple[Section, ...]
    """Sections to run."""
    seed: int
    """Seed of every generated plan."""
    journal_sync: str
    """`--journal-sync` of every wloadctl run."""
    executors: int
    """Executors of the no-op runs (throughput, latency, memory)."""
    slots: int
    """Slots per executor of the no-op runs."""
    shell_parallel: int
    """Executors (1 slot each) of the shell runs, and `-j` of ninja and make."""
    pg: str = ""
    """PostgreSQL server of the `postgres` section (a scratch database is made there; "": the default)."""
    prefetch: int | None = None
    """`--prefetch` of every wloadctl run (None: the command's default)."""


SCRATCH_PREFIX = "wloadctl-bench-"
"""Scratch directories are made in the system's temporary directory with this prefix."""
OWNER_FILE = "owner.pid"
"""Holds the pid of the benchmark that owns a scratch directory."""


def new_scratch() -> Path:
    """A fresh scratch directory, marked with this process as its owner."""
    root = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    (root / OWNER_FILE).write_text(str(os.getpid()))
    return root


def clean_stale_scratch() -> list[str]:
    """Remove scratch directories of benchmarks that were killed before they cleaned up.

    A directory is stale when its owner is gone and no live process names it
    (a run started from it finishes on its own first). Directories without an
    owner file, or of other users, are left alone.

    Returns:
        The directories removed.
    """
    from wloadctl.bench.runs import run_processes
    from wloadctl.procs.health import pid_alive

    gone = []
    for d in Path(tempfile.gettempdir()).glob(SCRATCH_PREFIX + "*"):
        try:
            if d.stat().st_uid != os.getuid():
                continue
            owner = int((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if pid_alive(owner) or run_processes(str(d)):
            continue
        shutil.rmtree(d, ignore_errors=True)
        gone.append(str(d))
    return gone


def run_timeout(jobs: int) -> float:
    """Seconds a run of this many jobs may take: generous, never hours."""
    return max(120.0, jobs / 250)


@dataclass
class Context:
    """A benchmark run in progress."""

    settings: Settings
    """What to measure."""
    root: Path = field(default_factory=lambda: new_scratch())
    """Scratch directory for plans, build files and state dirs (removed at the end)."""
    figures: list[Figure] = field(default_factory=list)
    """Every figure measured so far."""
    ratios: list[Ratio] = field(default_factory=list)
    """Every ratio computed so far."""
    notes: list[str] = field(default_factory=list)
    """Remarks for the reader (skipped comparisons, generation times)."""
    run_ids: list[str] = field(default_factory=list)
    """Ids of every wloadctl run started (their IPC names carry them)."""
    leftovers: list[str] = field(default_factory=list)
    """Objects or processes runs left behind (then removed): should stay empty."""
    say: Callable[[str], None] = field(default=lambda _m: None)
    """Progress lines for the terminal."""
    _plans: dict[tuple[int, str, str], Path] = field(default_factory=dict)
    _runs: dict[tuple[str, int], list[RunResult]] = field(default_factory=dict)
    _serial: int = 0

    def plan(self, jobs: int, shape: Shape, kind: JobKind) -> Path:
        """A generated plan file (made once per run of the suite)."""
        key = (jobs, shape, kind)
        if key not in self._plans:
            path = self.root / f"{shape}-{kind.replace('@', '-')}-{jobs}.yaml"
            t0 = time.perf_counter()
            job_type, _, pool = kind.partition("@")
            write_plan(
                path,
                jobs,
                shape,
                self.settings.seed,
                job_type="shell" if job_type == "shell" else "noop",
                command="true" if kind == "shell" else None,
                pool=pool or None,
            )
            self.notes.append(
                f"generated {path.name} in {time.perf_counter() - t0:.1f}s"
            )
            self._plans[key] = path
        return self._plans[key]

    def scratch(self, name: str) -> Path:
        """A new empty directory under the scratch root."""
        self._serial += 1
        d = self.root / f"{name}-{self._serial}"
        d.mkdir(parents=True)
        return d

    def run(
        self,
        plan: Path,
        jobs: int,
        *,
        executors: int,
        slots: int,
        keep_records: bool = False,
        cache: str = "",
        timeout: float | None = None,
        keep_state: bool = False,
        journal: str | None = None,
        broker: str | None = None,
        prefetch: int | None = None,
    ) -> RunResult:
        """One `wloadctl run` of a plan, recorded for the cleanup check.

        Args:
            plan: the plan file.
            jobs: its job count.
            executors: `--executors`.
            slots: `--slots`.
            keep_records: keep the executors' result records.
            cache: when given, the result is kept under (cache, jobs).
            timeout: seconds before the run is stopped (default: run_timeout(jobs)).
            keep_state: leave its state directory until the scratch directory is removed.
            journal: a PostgreSQL journal URL (None: SQLite in the state directory).
            broker: the broker URL of the agents that run the plan's `pool:` jobs.
            prefetch: `--prefetch` (None: the command's default).
        """
        self._serial += 1
        state_dir = self.root / f"state-{self._serial}"
        res = run_wloadctl(
            plan,
            state_dir,
            jobs,
            executors=executors,
            slots=slots,
            journal_sync=self.settings.journal_sync,
            timeout=timeout if timeout is not None else run_timeout(jobs),
            keep_records=keep_records,
            keep_state=keep_state,
            journal=journal,
            broker=broker,
            prefetch=prefetch if prefetch is not None else self.settings.prefetch,
        )
        if res.run_id:
            self.run_ids.append(res.run_id)
        self.leftovers += res.leftovers
        if cache:
            self._runs.setdefault((cache, jobs), []).append(res)
        return res

    @property
    def last_state_dir(self) -> Path:
        """The state directory of the latest run (kept only when it was run with keep_state)."""
        return self.root / f"state-{self._serial}"

    def cached_runs(self, cache: str, jobs: int) -> list[RunResult]:
        """Runs kept under (cache, jobs) by `run`."""
        return self._runs.get((cache, jobs), [])

    def find(
        self, section: Section, name: str, tool: str, shape: str, jobs: int
    ) -> Figure | None:
        """The figure measured for these, if any."""
        for f in self.figures:
            if (f.section, f.name, f.tool, f.shape, f.jobs) == (
                section,
                name,
                tool,
                shape,
                jobs,
            ):
                return f
        return None

    def add_ratio(self, r: Ratio | None) -> None:
        """Keep a ratio when both of its figures were measured."""
        if r is not None:
            self.ratios.append(r)

    def cleanup(self) -> None:
        """Remove the scratch directory and everything in it."""
        shutil.rmtree(self.root, ignore_errors=True)


def progress(quiet: bool) -> Callable[[str], None]:
    """A `say` that writes one line to stderr (or nothing)."""

    def say(msg: str) -> None:
        if not quiet:
            print(f"bench: {msg}", file=sys.stderr, flush=True)

    return say
