"""Textual-free projections of a run: the jobs model, sorting, rows, run figures."""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Collection, Iterable, MutableSequence, Sequence
from dataclasses import dataclass, field
from typing import Any

from tui.columns import NOT_YET, Sparse, Times
from tui.filters import JobFilter
from tui.idlist import IdIndex, IdList
from tui.labels import TIER_SHORT, fmt_clock, fmt_duration
from tui.order import FAST_FROM, backwards, pick, positions, sort_order
from wloadctl.client import node_label
from wloadctl.core.states import OK_STATES, TERMINAL, JobState, SlaTier

S = JobState

SORT_KEYS: tuple[str, ...] = (
    "plan",
    "id",
    "state",
    "tier",
    "start",
    "duration",
    "attempt",
    "executor",
)
"""Columns the job table sorts by; `plan` is the plan's own order. Ascending is the smallest value
first (state: trouble first; tier: critical first); jobs without a value come last either way."""

SORT_HEADINGS: dict[str, str] = {
    "state": "STATE",
    "id": "JOB",
    "tier": "TIER",
    "attempt": "ATT",
    "start": "START",
    "duration": "DUR",
    "executor": "EX",
}
"""The job table's column headings, by the sort key each column stands for (the heading names its
sort too: an operator types `sort dur` reading DUR)."""


def sort_key_named(word: str) -> str | None:
    """The sort key `word` names: one of SORT_KEYS or a column's heading, in any case (None: neither).

    Args:
        word: what the operator typed after `sort`.

    Returns:
        The sort key, or None.
    """
    w = word.lower()
    if w in SORT_KEYS:
        return w
    return next((key for key, heading in SORT_HEADINGS.items() if heading.lower() == w), None)


DESCENDING_FIRST: frozenset[str] = frozenset(("duration", "attempt"))
"""Sorts the S key and the palette open descending: an operator looks for the longest-running
and most-tried jobs first."""

NEW_ATTEMPT: frozenset[JobState] = frozenset((S.WAITING, S.READY, S.QUEUED, S.RUNNING))
"""States of a job whose next attempt waits or runs: the exit status of an earlier one is its history's, not
the job's (a retry's wait still shows the exit of the attempt it follows)."""
_NEW_ATTEMPT_VALUES = frozenset(int(s) for s in NEW_ATTEMPT)

_HIGH = bytes((b << 4) & 0xFF for b in range(256))
"""Byte translation moving a value 0-15 to the high half of the byte."""
_TERMINAL_VALUES = frozenset(int(s) for s in TERMINAL)


@dataclass
class JobsModel:
    """Every job's latest state as the console knows it, kept by journaled transitions.

    Columns are parallel sequences indexed like the plan, so 100,000 jobs cost a few
    megabytes and one transition costs a few assignments.
    """

    ids: MutableSequence[str]
    """Job ids in plan order (a list, or an IdList over the run's id file)."""
    tier: bytearray
    """SLA tier value per job."""
    state: bytearray = field(default_factory=bytearray)
    """State value per job."""
    attempt: array[int] = field(default_factory=lambda: array("i"))
    """Attempts so far per job."""
    executor: array[int] = field(default_factory=lambda: array("i"))
    """Executor of the latest attempt (-1 none)."""
    exit_code: Sparse[int] = field(default_factory=lambda: Sparse())
    """Exit status of the latest attempt that reported one (None: none yet), kept as the journal's row keeps
    it while a new attempt waits or runs: views read `last_exit`."""
    started: Sparse[float] | Times = field(default_factory=lambda: Sparse())
    """When the latest attempt started (None: never); Times once every job's is read (`ensure_all`)."""
    ended: Sparse[float] | Times = field(default_factory=lambda: Sparse())
    """When the job last reached a terminal state (None while it is not in one); Times as `started`."""
    stopped: Sparse[float] = field(default_factory=lambda: Sparse())
    """When the latest attempt stopped running, for the jobs whose `ended` does not say it, where the
    transitions applied tell it: a failed job skipped or set ok later ended at the operator's act."""
    retry_from: Sparse[float] = field(default_factory=lambda: Sparse())
    """When each job waiting for its retry last moved to RETRY_WAIT: its delay runs from then (from the attempt's
    end, or from an operator's release of the job held meanwhile, which journals the rest of the delay)."""
    reason: Sparse[str] = field(default_factory=lambda: Sparse(""))
    """Latest reason recorded for the job (failure, hold, skip)."""
    deadline: dict[int, float] = field(default_factory=dict)
    """Absolute deadline (epoch seconds) of jobs that have one."""
    deadline_text: dict[int, str] = field(default_factory=dict)
    """Deadlines as written in the plan."""
    risk_window: dict[int, float] = field(default_factory=dict)
    """At-risk windows of jobs with a deadline whose timeout widens them past the core's RISK_WINDOW
    (wloadctl.core.sla.risk_window)."""
    critical: frozenset[int] = frozenset()
    """Jobs on the run's critical path."""
    loops: frozenset[int] = frozenset()
    """Jobs with an `until`, which a hold takes between iterations too (QUEUED or RUNNING)."""
    once: frozenset[int] | None = frozenset()
    """Jobs that may not run twice (idempotent: false): a stop of the run holds those it stops running
    until an operator releases them, where it runs the others again. None: not known (a run whose shape
    file does not keep them)."""
    expected: array[float] = field(default_factory=lambda: array("d"))
    """Expected seconds of each job (its `expected:` key, else its history's median, else 1)."""
    remaining: array[float] = field(default_factory=lambda: array("d"))
    """Each job's remaining critical path: expected seconds of work from it to the end of the plan."""
    rank: Sequence[int] = field(default_factory=lambda: array("i"))
    """Each job's critical-path rank, as its ready key has it (0: the longest remaining path starts first)."""
    guessed: bytearray = field(default_factory=bytearray)
    """1 for each job whose expected seconds are a default: no `expected:` key, no history."""
    seq: int = 0
    """Last journal transition applied."""
    version: int = 0
    """Bumped at every change, so views know when to repaint."""
    touched_at: dict[int, int] = field(default_factory=dict)
    """Version at which each job last changed (job detail follows its job with it)."""
    known: bytearray | None = None
    """1 for each job whose row (attempt, executor, times, reason) is read; None: every job's is.
    A big run is attached with its states only: rows are read when shown (`ensure`)."""
    fetch: Callable[[list[int]], dict[int, tuple]] | None = None
    """Reads some jobs' rows (state, attempt, executor, exit_code, started, ended, reason) by index."""
    fetch_all: Callable[[], Any] | None = None
    """Reads every job's row as the journal's columns (wloadctl.turns.JobColumns)."""
    fetch_flat: Callable[[], Any] | None = None
    """Reads every job's start, end, attempt and executor as the journal's flat rows
    (wloadctl.turns.FlatRows; None when the journal keeps none for the run)."""
    release: Callable[[], None] | None = None
    """Releases what `fetch` reads with (the console calls it when it leaves the run)."""

    def __post_init__(self) -> None:
        n = len(self.ids)
        self.index: IdIndex | dict[str, int] = (
            IdIndex(self.ids) if isinstance(self.ids, IdList) else {j: i for i, j in enumerate(self.ids)}
        )
        """Index by job id."""
        if len(self.state) != n:
            self.state = bytearray(n)
            self.attempt = array("i", bytes(4 * n))
            self.executor = array("i", [-1]) * n
        self.counts: list[int] = [0] * len(JobState)
        """Jobs per state value."""
        self.running: set[int] = set()
        """Jobs RUNNING now (the node panel names them per executor)."""
        self.tier_counts: list[list[int]] = [[0] * len(JobState) for _ in SlaTier]
        """Jobs per tier value and state value."""
        self.last_change: float | None = None
        """When the latest transition known was journaled (a stopped run stopped then)."""
        self._recount()

    def __len__(self) -> int:
        return len(self.ids)

    def _recount(self) -> None:
        """Counts per state and per tier and state, and the running jobs: a few passes of C."""
        state, n = bytes(self.state), len(self.state)
        self.counts = [state.count(s) for s in range(len(JobState))]
        self.running = set(positions(state, int(S.RUNNING)))
        # Tier in the high half of a byte, state in the low: one byte per job, counted per value.
        both = bytes(self.tier).translate(_HIGH)
        pairs = (int.from_bytes(both, "little") | int.from_bytes(state, "little")).to_bytes(n, "little")
        self.tier_counts = [[pairs.count((t << 4) | s) if self.counts[s] else 0 for s in range(len(JobState))]
                            for t in range(len(SlaTier))]

    def rank_jobs(self, plan: Any, dag: Any, history: dict[str, float]) -> None:
        """Rank every job on the critical path as the scheduler does (wloadctl/core/critical.py)."""
        from wloadctl.core.codes import JOB_BITS
        from wloadctl.core.critical import expected_durations, guessed_durations, rank_bits, remaining_paths

        specs = [plan.jobs[j] for j in self.ids if j in plan.jobs]
        if len(specs) != len(self.ids):
            return  # jobs made during the run (loop instances): not ranked
        weights = expected_durations(specs, history)
        index = dag.index
        ups = [[index[d] for d in s.depends_on if d in index] for s in specs]
        downs: list[list[int]] = [[] for _ in specs]
        for i, row in enumerate(ups):
            for u in row:
                downs[u].append(i)
        path = remaining_paths([tuple(d) for d in downs], weights)
        self.expected = weights
        self.remaining = array("d", path)
        self.rank = array("i", (b >> JOB_BITS for b in rank_bits(path)))
        self.guessed = guessed_durations(specs, history)

    def critical_place(self, i: int) -> int | None:
        """Job i's place among the plan's jobs in critical-path order (1: the longest remaining path,
        which starts first; equal paths share a place); None when unknown or too costly (a huge run)."""
        path = self.remaining
        if not 0 <= i < len(path) or len(path) > PLACE_LIMIT:
            return None
        mine = path[i]
        return 1 + sum(1 for p in path if p > mine)

    def expected_is_guess(self, i: int) -> bool:
        """Whether job i's expected seconds are the default for want of an `expected:` key and a history
        (known from the plan; a run read from its shape tells by the default value)."""
        from wloadctl.core.critical import DEFAULT_EXPECTED

        if self.guessed:
            return i < len(self.guessed) and bool(self.guessed[i])
        return 0 <= i < len(self.expected) and self.expected[i] == DEFAULT_EXPECTED

    def load_rows(self, rows: Iterable[Sequence[Any]]) -> None:
        """Take every job's journal row.

        Rows are (idx, job_id, state, attempt, executor, exit, started, ended, reason).
        """
        for idx, _jid, st, att, ex, code, started, ended, reason in rows:
            i = int(idx)
            if i >= len(self.ids):
                continue
            self.state[i] = int(st)
            self.attempt[i] = int(att)
            self.executor[i] = int(ex)
            self.exit_code.put(i, code)
            self.started.put(i, started)
            self.ended.put(i, ended)
            self.reason.put(i, str(reason or ""))
        self._recount()
        self.version += 1

    def load_columns(self, cols: Any) -> None:
        """Take every job's row as the journal's columns hold them (wloadctl.turns.JobColumns):
        flat arrays of states, attempts and executors, and only the jobs that have the rest."""
        n = len(self.ids)
        self.state = bytearray(cols.state[:n])
        self.state.extend(bytes(n - len(self.state)))
        att = cols.attempt[:n]
        self.attempt = array("i", att.tobytes()) if att.itemsize == 4 else array("i", att)
        self.attempt.extend(array("i", bytes(4 * (n - len(self.attempt)))))
        self.executor = array("i", cols.executor[:n])
        self.executor.extend(array("i", [-1]) * (n - len(self.executor)))
        self.started, self.ended = Sparse(), Sparse()
        for mine, theirs in ((self.exit_code, cols.exit_code), (self.started, cols.started),
                             (self.ended, cols.ended), (self.reason, cols.reason)):
            mine.clear()
            mine.update((i, v) for i, v in theirs.items() if i < n)
        self._recount()
        self.version += 1

    def load_flat(self, flat: Any) -> None:
        """Take every job's start, end, attempt and executor from the journal's flat rows
        (wloadctl.turns.FlatRows) as arrays; exit statuses and reasons are still read when shown."""
        n = len(self.ids)
        if len(flat) != n:  # jobs the run made since (or more than the model holds)
            more = max(0, n - len(flat))
            flat.attempt = flat.attempt[:n] + array("i", bytes(4 * more))
            flat.executor = flat.executor[:n] + array("i", [-1]) * more
            flat.started = flat.started[:n] + array("d", [NOT_YET]) * more
            flat.ended = flat.ended[:n] + array("d", [NOT_YET]) * more
        self.attempt, self.executor = flat.attempt, flat.executor
        self.started, self.ended = Times(flat.started), Times(flat.ended)
        self.version += 1

    def take_rows(self, rows: dict[int, tuple]) -> None:
        """Take some jobs' rows as read (state, attempt, ...); the model's states, which follow the
        transitions, are kept."""
        known = self.known
        for i, (_st, att, ex, code, started, ended, reason) in rows.items():
            if i >= len(self.ids):
                continue
            self.attempt[i] = int(att)
            self.executor[i] = int(ex)
            self.exit_code.put(i, code)
            self.started.put(i, started)
            self.ended.put(i, ended)
            self.reason.put(i, str(reason or ""))
            if known is not None and i < len(known):
                known[i] = 1

    def ensure(self, idxs: Iterable[int]) -> None:
        """Read the rows of these jobs if they are not read yet (a big run's rows are read when shown)."""
        known = self.known
        if known is None or self.fetch is None:
            return
        want = sorted({i for i in idxs if 0 <= i < len(known) and not known[i]})
        if want:
            self.take_rows(self.fetch(want))

    def ensure_all(self) -> None:
        """Read every job's start, end, attempt and executor (a sort by one of them needs them all): from
        the journal's flat rows, else every job's row."""
        if self.known is None or isinstance(self.started, Times):
            return
        flat = self.fetch_flat() if self.fetch_flat is not None else None
        if flat is not None:
            self.load_flat(flat)
        elif self.fetch_all is not None:
            self.load_columns(self.fetch_all())
            self.known = None

    def grow(self, ids: Sequence[str]) -> bool:
        """Add jobs the run made (loop instances `job@item`, in the parent's SLA tier), WAITING.

        Returns:
            Whether any job was added.
        """
        once: list[int] = []
        for jid in ids:
            if jid in self.index:
                continue
            parent = self.index.get(jid.rsplit("@", 1)[0])
            t = self.tier[parent] if parent is not None else int(SlaTier.STANDARD)
            self.index[jid] = len(self.ids)
            self.ids.append(jid)
            self.tier.append(t)
            self.state.append(int(S.WAITING))
            self.attempt.append(0)
            self.executor.append(-1)
            if self.known is not None:
                self.known.append(1)  # a new job's row is all in its transitions
            if self.once is not None and parent in self.once:
                once.append(self.index[jid])  # (an instance is its loop's job, item apart)
            self.counts[S.WAITING] += 1
            self.tier_counts[t][S.WAITING] += 1
        if once and self.once is not None:
            self.once = self.once.union(once)  # (once for them all: a loop may add a hundred thousand)
        if ids:
            self.version += 1
        return bool(ids)

    def apply(self, changes: Sequence[Sequence[Any]]) -> set[int]:
        """Apply journaled transitions.

        Each is (seq, idx, from, to, attempt, ts, executor, exit_code, reason).

        It mirrors how the journal updates a job's row: model and `job_rows()` agree.

        Returns:
            The indices of the jobs that changed.
        """
        touched: set[int] = set()
        n = len(self.ids)
        counts, tier_counts = self.counts, self.tier_counts
        for seq, idx, frm, to, att, ts, ex, code, reason in changes:
            self.seq = max(self.seq, int(seq))
            i = int(idx)
            if i >= n:
                continue
            to_v = int(to)
            old = self.state[i]
            if old != to_v:
                if to_v == S.RUNNING:
                    self.running.add(i)
                elif old == S.RUNNING:
                    self.running.discard(i)
                counts[old] -= 1
                counts[to_v] += 1
                row = tier_counts[self.tier[i]]
                row[old] -= 1
                row[to_v] += 1
                self.state[i] = to_v
            self.attempt[i] = int(att)
            if int(ex) >= 0:
                self.executor[i] = int(ex)
            if code is not None:
                self.exit_code[i] = int(code)
            self.reason.put(i, str(reason or ""))
            if self.last_change is None or ts > self.last_change:
                self.last_change = float(ts)
            # `stopped` is kept only where `ended` will not say when the attempt ended, so a big run
            # holds a few of them. The transition's own from-state tells whether an attempt ended
            # here: the feed may replay transitions a row read already has.
            ran = frm in (S.RUNNING, S.QUEUED)
            if to_v == S.RUNNING:
                self.started[i] = float(ts)
                self.stopped.pop(i, None)
            elif to_v in _TERMINAL_VALUES:
                if ran:
                    self.stopped.pop(i, None)  # the job ended with its attempt, at `ended`
                elif i not in self.stopped and (end := self.ended[i]) is not None:
                    # An ended job skipped or set ok: its attempt ended when the job did, as its row says.
                    self.stopped[i] = end
            elif ran and to_v != S.QUEUED:
                # An attempt ended without ending the job (a retry to wait for, a lost executor).
                self.stopped[i] = float(ts)
            if to_v in _TERMINAL_VALUES:
                self.ended[i] = float(ts)
            else:
                self.ended.pop(i, None)
            if to_v == S.RETRY_WAIT:
                self.retry_from[i] = float(ts)
            else:
                self.retry_from.pop(i, None)
            touched.add(i)
        if touched:
            self.version += 1
            for i in touched:
                self.touched_at[i] = self.version
        return touched

    # -- figures -------------------------------------------------------------------

    def done_count(self) -> int:
        """Jobs in a terminal state."""
        return sum(self.counts[s] for s in _TERMINAL_VALUES)

    def duration(self, i: int, now: float) -> float | None:
        """Seconds the latest attempt ran (so far, while it runs; None for a job that never ran)."""
        start = self.started[i]
        if start is None:
            return None
        st = self.state[i]
        if st in (S.RUNNING, S.QUEUED):
            return max(0.0, now - start)
        end = self.ended[i]
        if end is None:
            # The job has not ended; its attempt has when it waits for a retry (`stopped`, for transitions
            # followed). Else (held, reopened, a row read) how long it ran is not known here.
            end = self.stopped.get(i)
            if end is None or st != S.RETRY_WAIT:
                return None
        else:
            end = self.stopped.get(i, end)  # (not known for rows read: the job ended with its attempt)
        return max(0.0, end - start) if end >= start else None

    def last_exit(self, i: int) -> int | None:
        """Exit status of job i's latest ended attempt; None while a new attempt waits or runs (the model, as
        the journal's row, still holds the status of the attempt before it: its history's) or when none ended."""
        if self.state[i] in _NEW_ATTEMPT_VALUES:
            return None
        code: int | None = self.exit_code[i]
        return code

    def running_on(self, executor: int) -> list[str]:
        """Ids of the jobs running on one executor (from the journal's view)."""
        return sorted(self.ids[i] for i in self.running if self.executor[i] == executor)


PLACE_LIMIT = 200_000
"""Jobs above which the DAG pane does not count a job's critical-path place (a walk of every job)."""


# -- sorting and filtering ---------------------------------------------------------


def view_order(
    model: JobsModel,
    flt: JobFilter,
    sort_key: str = "plan",
    reverse: bool = False,
    now: float = 0.0,
    flags: Collection[int] = frozenset(),
) -> Sequence[int]:
    """The job indices the table shows, filtered and sorted.

    Args:
        model: the jobs.
        flt: which jobs to show.
        sort_key: one of SORT_KEYS.
        reverse: descending order.
        now: the time (durations of running jobs grow with it).
        flags: with an `sla:` filter, the jobs the SLA pane names (tui.sla.flagged: that module reads this
            one's model, so the caller works them out).

    Returns:
        Indices into the model, in display order (a range when every job is shown in plan order).
    """
    n = len(model)
    if sort_key in _NEED_ROWS:
        model.ensure_all()
    if n >= FAST_FROM and not flt.sla:
        picked = pick(model, flt.states, flt.tiers, flt.pattern)
        if sort_key == "plan" or sort_key not in SORT_KEYS:
            return backwards(picked) if reverse else picked
        return sort_order(model, picked, sort_key, reverse, now, _STATE_RANK)
    idx: Iterable[int] = range(n)
    if flt.sla:
        st, states = model.state, flt.states
        idx = [i for i in idx if st[i] in states or i in flags]
    elif flt.states:
        st, states = model.state, flt.states
        idx = [i for i in idx if st[i] in states]
    if flt.tiers:
        tr, tiers = model.tier, flt.tiers
        idx = [i for i in idx if tr[i] in tiers]
    if flt.pattern:
        match, ids = flt.matcher(), model.ids
        if isinstance(ids, IdList):
            if flt.states or flt.tiers:
                keep = set(ids.matching(flt.pattern))
                idx = [i for i in idx if i in keep]
            else:
                idx = ids.matching(flt.pattern)
        else:
            idx = [i for i in idx if match(ids[i])]
    out = list(idx)
    if sort_key == "plan" or sort_key not in SORT_KEYS:
        if reverse:
            out.reverse()
        return out
    key: Callable[[int], Any]
    if sort_key == "id":
        ids = model.ids
        key = ids.__getitem__
    elif sort_key == "state":
        # Trouble first: a sort by state is how an operator finds what needs them.
        rank = _STATE_RANK
        st = model.state
        key = lambda i: rank[st[i]]  # noqa: E731
    elif sort_key == "tier":
        key = model.tier.__getitem__
    else:
        return _by_value(out, value_of(model, sort_key, now), reverse)
    # mypy narrows `key` to the union of what was assigned; each returns a sortable.
    out.sort(key=key, reverse=reverse)  # type: ignore[arg-type]
    return out


def value_of(model: JobsModel, sort_key: str, now: float) -> Callable[[int], float | None]:
    """A job's value for a sort by start, duration, attempt or executor (None: it has none: never
    started, no duration or one of 0, no attempt, no executor)."""
    if sort_key == "start":
        return model.started.__getitem__
    if sort_key == "duration":
        return lambda i: model.duration(i, now) or None
    column = model.attempt if sort_key == "attempt" else model.executor
    least = 1 if sort_key == "attempt" else 0
    return lambda i: column[i] if column[i] >= least else None


def _by_value(idx: list[int], value: Callable[[int], float | None], reverse: bool) -> list[int]:
    """`idx` sorted by value, ascending (descending when `reverse`); jobs without a value follow in
    plan order either way, so a sort by duration descending starts with the longest, not with the
    jobs that never ran."""
    has = [(v, i) for i in idx if (v := value(i)) is not None]
    # Python's sort is stable in both directions: jobs of equal value stay in plan order.
    has.sort(key=lambda vi: vi[0], reverse=reverse)
    some = {i for _v, i in has}
    return [i for _v, i in has] + [i for i in idx if i not in some]


_NEED_ROWS = frozenset(("start", "duration", "attempt", "executor"))
"""Sorts that read every job's row."""

_STATE_ORDER = (
    S.FAILED,
    S.TIMED_OUT,
    S.UPSTREAM_FAILED,
    S.HELD,
    S.RETRY_WAIT,
    S.RUNNING,
    S.QUEUED,
    S.READY,
    S.WAITING,
    S.CANCELLED,
    S.SKIPPED,
    S.SUCCEEDED,
)
_STATE_RANK = [0] * len(JobState)
for _rank, _s in enumerate(_STATE_ORDER):
    _STATE_RANK[_s] = _rank


@dataclass(frozen=True)
class JobRow:
    """The cells of one job table row, as text."""

    state: JobState
    """The job's state."""
    job: str
    """Job id."""
    tier: str
    """Short tier label."""
    attempt: str
    """Attempts so far."""
    start: str
    """Start time of the latest attempt."""
    duration: str
    """Duration of the latest attempt."""
    executor: str
    """Executor of the latest attempt."""
    info: str
    """Reason, exit status or deadline."""


_RETRY_IN = re.compile(r"^(\d+/\d+) in (\d+(?:\.\d+)?)s$")
"""The end of a RETRY_WAIT reason, "1/3 in 55.6s" (the delay as the scheduler journaled it: see
wloadctl.core.timers.retry_due_journaled)."""


def retry_countdown(model: JobsModel, i: int, retry: str, now: float) -> str:
    """`1/3 in 38s` for job i, waiting for its retry: the time left now, not the delay it was given.

    The retry is due at the move to RETRY_WAIT (when the attempt stopped, or when an operator released the job
    held meanwhile) plus the journaled delay, as the scheduler and `why` have it.
    """
    m = _RETRY_IN.match(retry)
    since = model.retry_from.get(i) or model.stopped.get(i) or model.ended[i]
    if m is None or since is None:
        return retry
    left = since + float(m.group(2)) - now
    return f"{m.group(1)} in {fmt_duration(left)}" if left > 0 else f"{m.group(1)} due now"


def job_row(model: JobsModel, i: int, now: float) -> JobRow:
    """The text of job i's row."""
    st = JobState(model.state[i])
    att = model.attempt[i]
    ex = model.executor[i]
    info = model.reason[i]
    code = model.last_exit(i)
    if not info and code not in (None, 0):
        info = f"exit status {code}"
    elif st == JobState.RETRY_WAIT and "; retry " in info:
        # When it runs again first: a narrow column cuts the end ("exit status 3; retry 1/3 in 2.2s").
        why, _, retry = info.partition("; retry ")
        info = f"retry {retry_countdown(model, i, retry, now)}; {why}"
    dl = model.deadline_text.get(i)
    if dl and st not in OK_STATES:
        info = f"due {dl}" + (f"; {info}" if info else "")
    return JobRow(
        st,
        model.ids[i],
        TIER_SHORT[SlaTier(model.tier[i])],
        str(att) if att else "",
        fmt_clock(model.started[i]),
        fmt_duration(model.duration(i, now)),
        node_label(ex) if att else "",
        info,
    )

