"""The pipeline meter: figures of the scheduler's own machinery, measured in its loop and published each beat.

The loop calls the meter at three points (a turn's end, a journal commit with its
transitions, and the beat); the meter keeps latency histograms (see wloadctl.latency) and
counters, and at most once a second writes `pipeline.json` in the state directory, which
`wloadctl top`, the console and the Prometheus exporter read. Nothing here blocks: a
failed write of the file is retried at the next beat.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wloadctl.latency import Histogram, Rate
from wloadctl.paths import pipeline_path

if TYPE_CHECKING:
    from wloadctl.procs.pools import Pools
    from wloadctl.procs.supervisor import RunObjects

PUBLISH_EVERY = 1.0
"""Seconds between writes of the pipeline file (the loop's beat may be faster)."""
_READY, _QUEUED, _RUNNING = 1, 2, 3
_ENDS = frozenset((4, 5, 6, 9, 10, 11))
"""JobState values that end a job (SUCCEEDED, FAILED, TIMED_OUT, SKIPPED, CANCELLED, UPSTREAM_FAILED)."""


@dataclass
class ExecutorFigures:
    """What the meter saw of one executor's starts."""

    start: Histogram = field(default_factory=Histogram)
    """Dispatch (QUEUED) to RUNNING on this executor."""
    started: int = 0
    """Attempts started on it since this scheduler began."""


@dataclass
class PipelineMeter:
    """Latencies, rates and depths of one scheduler's pipeline."""

    state_dir: Path
    """Where the pipeline file goes."""
    run_id: str
    """The run measured."""
    epoch: int = 0
    """The scheduler's epoch (a reader tells a stale file from a successor's)."""
    dispatch: Histogram = field(default_factory=Histogram)
    """READY to QUEUED: how long a ready job waits for a slot and a send."""
    release: Histogram = field(default_factory=Histogram)
    """An upstream's end to its released dependent's start (RUNNING)."""
    commit: Histogram = field(default_factory=Histogram)
    """Seconds of each journal commit."""
    turn: Histogram = field(default_factory=Histogram)
    """Seconds of each loop turn that did work (from the poll's return to the turn's end)."""
    commits: int = 0
    """Journal commits since start."""
    rows: int = 0
    """Transitions journaled since start."""
    turns: int = 0
    """Loop turns since start."""
    entered: list[int] = field(default_factory=lambda: [0] * 16)
    """Transitions into each JobState since start (the finished ones by outcome)."""
    executors: dict[int, ExecutorFigures] = field(default_factory=dict)
    """Per executor index."""
    figures: dict[str, Any] = field(default_factory=dict)
    """The latest published figures."""
    _last_end: float = 0.0
    """When the last job end journaled so far happened (what a follower's start is measured from)."""
    _ready: list[float] = field(default_factory=list)
    _queued: list[float] = field(default_factory=list)
    _released: list[float] = field(default_factory=list)
    _rates: dict[str, Rate] = field(default_factory=dict)
    _last_write: float = 0.0

    # -- called by the loop ----------------------------------------------------------------

    def turn_done(self, began: float, now: float) -> None:
        """A loop turn that began at `began` (perf_counter) ended at `now` (perf_counter)."""
        self.turns += 1
        self.turn.observe(now - began, time.time())

    def committed(self, transitions: Sequence[tuple], seconds: float, n_jobs: int) -> None:
        """A journal commit of `transitions` took `seconds`; note what they say about the pipeline.

        Each transition is (job, from, to, attempt, ts, executor, exit_code, reason, cause);
        `n_jobs` is how many jobs the run has now (loop instances add some).
        """
        wall = time.time()
        self.commits += 1
        self.rows += len(transitions)
        self.commit.observe(seconds, wall)
        if len(self._ready) < n_jobs:
            more = [0.0] * (n_jobs - len(self._ready))
            self._ready.extend(more)
            self._queued.extend(more)
            self._released.extend(more)
        # Times by job in plain lists (0.0: none): cheaper than dictionaries in the loop's hot path.
        ready, queued, released, entered = self._ready, self._queued, self._released, self.entered
        waits: list[float] = []
        releases: list[float] = []
        starts: dict[int, list[float]] = {}
        started: dict[int, int] = {}
        follower_starts: list[float] = []
        last_end = 0.0
        for i, frm, to, _att, ts, ex, _code, _reason, _cause in transitions:
            entered[to] += 1
            if to == _READY:
                ready[i] = ts
                if frm == 0 and last_end:
                    # Released in the turn that journaled an upstream's end: measured from that end.
                    released[i] = last_end
            elif to == _QUEUED:
                t = ready[i]
                if t:
                    waits.append(ts - t)
                elif frm == 0:
                    released[i] = -1.0  # a follower (never READY): released by its upstream's end
                queued[i] = ts
            elif to == _RUNNING:
                started[ex] = started.get(ex, 0) + 1
                t = queued[i]
                if t:
                    got = starts.get(ex)
                    if got is None:
                        got = starts[ex] = []
                    got.append(ts - t)
                t = released[i]
                if t:
                    if t < 0:
                        follower_starts.append(ts)
                    else:
                        releases.append(ts - t)
                    released[i] = 0.0  # a retry's start is not a release
            elif to in _ENDS and ts > last_end:
                last_end = ts
        # A follower's start is reported with (or just after) its upstream's end: measured from the last end.
        end = last_end or self._last_end
        if end:
            releases.extend(max(0.0, ts - end) for ts in follower_starts)
        self._last_end = max(self._last_end, last_end)
        self.dispatch.observe_many(waits, wall)
        self.release.observe_many(releases, wall)
        for ex, count in started.items():
            fig = self.executors.get(ex)
            if fig is None:
                fig = self.executors[ex] = ExecutorFigures()
            fig.started += count
            fig.start.observe_many(starts.get(ex, []), wall)

    def beat(self, now: float, objs: RunObjects, pools: Pools, last: bool = False) -> None:
        """Take the depths and rates, and publish the figures if a second has passed since the last write.

        Args:
            now: the time.
            objs: the run's queues and arena.
            pools: the run's pools (their batch counters, backlog and agents' rows).
            last: the run's end: published whenever the last write was (what a reader finds of a finished
                run is its end, not a backlog of its first second).
        """
        if now - self._last_write < PUBLISH_EVERY and not last:
            return
        self._last_write = now
        try:
            self.figures = self._figures(now, objs, pools)
            _write_json(pipeline_path(self.state_dir), self.figures)
        except (OSError, ValueError):
            pass  # a full disk or a vanished segment: the next beat tries again

    # -- figures ---------------------------------------------------------------------------

    def _rate(self, name: str, now: float, value: int) -> float:
        r = self._rates.get(name)
        if r is None:
            r = self._rates[name] = Rate()
        return round(r.update(now, value), 3)

    def _figures(self, now: float, objs: RunObjects, pools: Pools) -> dict[str, Any]:
        req, rsp, arena = objs.req, objs.rsp, objs.arena
        executors = []
        for ex in sorted(self.executors):
            fig = self.executors[ex]
            if ex < 0:
                continue
            executors.append({"executor": ex, "started": fig.started,
                              "started_per_s": self._rate(f"ex{ex}", now, fig.started),
                              "dispatch_to_start": fig.start.summary(now)})
        agents = [row for row in pools.health(now) if "agent" in row]
        sent, received = pools.traffic()
        commits_per_s = self._rate("commits", now, self.commits)
        rows_per_s = self._rate("rows", now, self.rows)
        # Rows per commit of the last few seconds; before the second reading, of the whole run so far.
        per_commit = rows_per_s / commits_per_s if commits_per_s else (self.rows / self.commits if self.commits
                                                                       else 0.0)
        return {
            "ts": round(now, 3), "run": self.run_id, "pid": os.getpid(), "epoch": self.epoch,
            "queues": {
                "request": {"depth": req.current_messages, "max": req.max_messages,
                            "batches": sent,
                            "batches_per_s": self._rate("req", now, sent),
                            "backlog": pools.backlog()},
                "response": {"depth": rsp.current_messages, "max": rsp.max_messages,
                             "batches": received,
                             "batches_per_s": self._rate("rsp", now, received)},
            },
            "arena": {"used": arena.used, "capacity": arena.capacity, "live": arena.live},
            "latency": {"ready_to_dispatch": self.dispatch.summary(now),
                        "finish_to_dependent_start": self.release.summary(now)},
            "journal": {"commit": self.commit.summary(now), "commits": self.commits, "rows": self.rows,
                        "commits_per_s": commits_per_s, "rows_per_commit": round(per_commit, 2)},
            "loop": {"turn": self.turn.summary(now), "turns": self.turns,
                     "turns_per_s": self._rate("turns", now, self.turns)},
            "executors": executors,
            "agents": agents,
        }


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    """Replace a file atomically: a reader sees the old figures or the new, never half of them."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, separators=(",", ":")))
    os.replace(tmp, path)


def read_pipeline(state_dir: Path) -> dict[str, Any] | None:
    """The figures a scheduler last published for its run (None when it never did)."""
    try:
        obj = json.loads(pipeline_path(state_dir).read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None
