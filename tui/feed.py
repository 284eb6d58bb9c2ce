"""The live feed: a thread following board and journal, posting coalescing messages."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from textual.message import Message

from tui.columns import Ranks
from tui.idlist import IdList
from tui.messages import (
    AgentView,
    ExecutorView,
    JobsChanged,
    LiveStatus,
    LoadStep,
    ModelLoaded,
    Note,
    NoteAdded,
    RunInfo,
    RunInfoChanged,
    StatusChanged,
)
from tui.sla import deadline_at
from tui.supervise import SchedulerSupervisor
from tui.view_model import JobsModel
from wloadctl.client import node_label, silent
from wloadctl.core.dag import Dag
from wloadctl.core.sla import RISK_WINDOW, risk_window
from wloadctl.core.states import JobState
from wloadctl.runshape import RunShape

POLL = 0.25
"""Seconds between looks at the board header while the run is live."""
IDLE_POLL = 2.0
"""Seconds between journal reads while no scheduler is live (offline verbs)."""
STATUS_EVERY = 1.0
"""Seconds between readings of the executors' heartbeats."""
DRILL_EVERY = 4
"""Turns of the feed between looks for a new drill report in the journal (about a second while live)."""
BATCH = 50_000
"""Transitions read from the journal at once."""


class Client(Protocol):
    """What the feed needs of wloadctl.client.RunClient (tests pass a canned twin)."""

    run: Any

    def board_header(self) -> Any: ...
    def ids(self) -> list[str]: ...
    def refresh_ids(self) -> list[str]: ...
    def plan(self) -> Any: ...
    def plan_dag(self) -> Dag: ...
    def job_rows(self) -> list[tuple]: ...
    def expected_history(self) -> dict[str, float]: ...
    def changes_since(self, seq: int, limit: int = ...) -> list[tuple]: ...
    def last_seq(self) -> int: ...
    def executors(self) -> list[dict[str, Any]]: ...
    def agents(self) -> list[dict[str, Any]]: ...
    def broker_lost(self) -> dict[str, Any] | None: ...
    def whoami(self) -> dict[str, Any]: ...
    def last_drill(self) -> dict[str, Any] | None: ...
    def reread_run(self) -> Any: ...
    def pause_reason(self, header: Any) -> str | None: ...
    # Read only of a client with a run shape (RunClient.shape), the journal's:
    def job_columns(self) -> Any: ...
    def rows_of(self, idxs: list[int]) -> dict[int, tuple]: ...
    def close(self) -> None: ...


def last_seq(client: Client) -> int:
    """The journal's latest transition number (one indexed read), so the feed follows from there."""
    return int(client.last_seq())


class RowSource:
    """Reads rows of jobs for the UI thread with a client of its own (opened there, at the first read)."""

    def __init__(self, open_client: Callable[[], Client] | None) -> None:
        self.open_client = open_client
        self.client: Client | None = None

    def _client(self) -> Any:
        if self.client is None:
            if self.open_client is None:
                raise RuntimeError("no client to read job rows with")
            self.client = self.open_client()
        return self.client

    def rows(self, idxs: list[int]) -> dict[int, tuple]:
        """Some jobs' rows by index."""
        return self._client().rows_of(idxs)  # type: ignore[no-any-return]

    def columns(self) -> Any:
        """Every job's row (the journal's columns)."""
        return self._client().job_columns()

    def flat(self) -> Any:
        """Every job's start, end, attempt and executor (the journal's flat rows; None: not kept)."""
        return self._client().flat_rows()

    def close(self) -> None:
        """Release the client."""
        if self.client is not None:
            self.client.close()
            self.client = None


def load_model(
    client: Client, step: Callable[[str], None] = lambda _s: None, open_client: Callable[[], Client] | None = None
) -> tuple[RunInfo, JobsModel, Dag]:
    """Read a run once: graph, tiers, deadlines, critical path and every job's row.

    A run whose scheduler wrote its shape (wloadctl.runshape) is read from it and from the
    journal's current states (with `open_client`; rows are then read when shown) or columns, as
    flat arrays; an older run, or one that has made jobs since, from its plan.

    Args:
        client: the run's client.
        step: told what is being read (a large plan takes a while to parse).
        open_client: opens another client, with which the UI thread reads the rows of a big run
            when they are shown (without it every row is read now).
    """
    run = client.run
    read = getattr(client, "shape", None)
    shape = read() if read is not None else None
    ids = _id_list(client, shape) if shape is not None else None
    if shape is None or ids is None:
        return _load_from_plan(client, list(client.ids()), step)
    step(f"reading the jobs' states ({len(ids):,} jobs)")
    model = JobsModel(ids, shape.tier)
    for i, text in shape.deadlines.items():
        at = deadline_at(text, run.business_date, run.started, shape.timezone)
        if at is not None and i < len(ids):
            model.deadline[i] = at
            model.deadline_text[i] = text
    model.risk_window.update((i, w) for i, w in shape.windows.items() if i in model.deadline)
    model.loops = frozenset(i for i in shape.loops if i < len(ids))
    model.once = None if shape.once is None else frozenset(i for i in shape.once if i < len(ids))
    seq = last_seq(client)
    states = client.states() if open_client is not None else None  # type: ignore[attr-defined]
    if states is None or len(states) > len(ids):
        # Columns read after `seq` may hold some transitions past it: replayed again, they
        # leave each job where its latest transition put it.
        model.load_columns(client.job_columns())
    else:
        # States only (one byte a job): the rest of a row is read when it is shown.
        model.state = bytearray(states) + bytearray(len(ids) - len(states))
        model.known = bytearray(len(ids))
        model._recount()
        # What the panes show of every job at once: running jobs' executors, deadlines' ends.
        model.take_rows(client.rows_of(sorted(set(model.running) | set(model.deadline))))
        source = RowSource(open_client)
        model.fetch, model.fetch_all, model.release = source.rows, source.columns, source.close
        model.fetch_flat = source.flat
    model.seq = seq
    model.critical = frozenset(shape.critical_path())
    model.expected, model.remaining = shape.expected, shape.path
    model.rank = Ranks(shape.rank, len(shape))
    # The graph shares the model's ids and index: jobs the run adds later are not in it.
    dag = Dag.from_rows(model.ids, model.index, shape.up_off, shape.up, (shape.down_off, shape.down))
    return _info(client), model, dag


def _id_list(client: Client, shape: RunShape) -> IdList | None:
    """The run's ids over its id list file's bytes, when the file holds the shape's jobs and no
    more (a run that made jobs since is read from its plan)."""
    data = client.id_bytes()  # type: ignore[attr-defined]
    starts = shape.id_starts
    n = len(shape)
    if data is None or len(starts) != n + 1 or len(data) != starts[n] or (n and data[-1] != 10):
        return None
    return IdList(data, starts)


def _info(client: Client) -> RunInfo:
    run = client.run
    return RunInfo(
        run.run_id,
        run.plan_name,
        run.business_date,
        run.started,
        str(getattr(client, "state_dir", "")),
        getattr(run, "ended", None),
        getattr(client, "latest", True),
    )


def _load_from_plan(
    client: Client, ids: list[str], step: Callable[[str], None]
) -> tuple[RunInfo, JobsModel, Dag]:
    """load_model by parsing the run's plan (runs without a shape file, canned clients)."""
    run = client.run
    step(f"reading the plan ({len(ids):,} jobs)")
    plan = client.plan()
    step("building the graph")
    dag = client.plan_dag()
    specs = plan.jobs
    tier = bytearray(int(specs[j].sla) if j in specs else 2 for j in ids)
    model = JobsModel(ids, tier)
    model.loops = frozenset(i for i, j in enumerate(ids) if (spec := specs.get(j)) is not None and spec.until)
    model.once = frozenset(i for i, j in enumerate(ids) if (spec := specs.get(j)) is not None and not spec.idempotent)
    for i, j in enumerate(ids):
        spec = specs.get(j)
        if spec is not None and spec.deadline:
            at = deadline_at(
                spec.deadline, run.business_date, run.started, plan.timezone
            )
            if at is not None:
                model.deadline[i] = at
                model.deadline_text[i] = spec.deadline
                if (window := risk_window(spec.timeout)) > RISK_WINDOW:
                    model.risk_window[i] = window
    step("reading the jobs' states")
    seq = last_seq(client)
    # Rows read after `seq` already include some of the transitions past it; replaying
    # those again leaves each job where its latest transition put it.
    model.load_rows(client.job_rows())
    model.seq = seq
    durations = {
        ids[i]: end - start
        for i, end in model.ended.items()
        if (start := model.started[i]) is not None
    }
    step("finding the critical path")
    # A validated plan has no cycle, so this cannot raise CycleError.
    path = dag.critical_path(durations or None)
    model.critical = frozenset(model.index[j] for j in path if j in model.index)
    step("ranking the jobs on the critical path")
    model.rank_jobs(plan, dag, client.expected_history())
    return _info(client), model, dag


RETRY_TIMES_LIMIT = 100
"""Jobs waiting for a retry whose wait's start is read from the journal when a run is loaded, a read of history
each before the console shows the run (more are shown with the delay they were given, not the time left)."""


def read_retry_times(client: Client, model: JobsModel) -> None:
    """When each job loaded in RETRY_WAIT began to wait (its row does not say, and the countdown in its
    INFO counts from there, as the scheduler's timer and `why` do): one read of its history each."""
    history = getattr(client, "history", None)
    if history is None:
        return
    k, n = model.state.find(int(JobState.RETRY_WAIT)), 0
    while k >= 0 and n < RETRY_TIMES_LIMIT:
        n += 1
        try:
            moves = history(model.ids[k])["transitions"]
        except Exception:
            return  # best effort: the delay given is shown instead
        waits = [t["ts"] for t in moves if t["to"] == "RETRY_WAIT"]
        if waits and k not in model.stopped:
            model.stopped[k] = float(waits[-1])
        k = model.state.find(int(JobState.RETRY_WAIT), k + 1)


ATTEMPT_ENDS_LIMIT = 100
"""Jobs an operator ended after their attempt had (skipped, set ok or cancelled once it failed) whose
attempt's end is read from the journal when a run is loaded (more show the time to the operator's act)."""

_ENDING_VERBS = frozenset({"skip", "set-ok", "cancel"})
_ENDED_BY_ACT = (int(JobState.SKIPPED), int(JobState.CANCELLED), int(JobState.SUCCEEDED))


def read_attempt_ends(client: Client, model: JobsModel) -> None:
    """When the last attempt of each job an operator ended stopped running. The job's row ends at the
    act, so a job killed after 36 s and skipped a minute later showed a DUR of the whole time; watched
    live, the transitions tell it. The audit trail names the jobs, one read of history each."""
    actions, history = getattr(client, "actions", None), getattr(client, "history", None)
    if actions is None or history is None:
        return
    try:
        acts = actions()
    except Exception:
        return  # best effort: the time to the act is shown instead
    jobs = dict.fromkeys(
        a["job"] for a in acts if a.get("applied") and a.get("verb") in _ENDING_VERBS and a.get("job")
    )
    n = 0
    for job in jobs:
        k = model.index[job] if job in model.index else -1
        if k < 0 or model.state[k] not in _ENDED_BY_ACT or k in model.stopped:
            continue
        n += 1
        if n > ATTEMPT_ENDS_LIMIT:
            return
        try:
            moves = history(job)["transitions"]
        except Exception:
            return
        ran = [t["ts"] for t in moves if t["from"] in ("RUNNING", "QUEUED") and t["to"] != "RUNNING"]
        if ran and moves and float(ran[-1]) < float(moves[-1]["ts"]):
            model.stopped[k] = float(ran[-1])


class Feed:
    """Follows a run from a thread: ModelLoaded once, then JobsChanged, StatusChanged.

    Transitions wait in `pending` until the UI thread takes them, so a JobsChanged that
    Textual drops in favour of a newer one loses nothing.
    """

    def __init__(
        self,
        open_client: Callable[[], Client],
        post: Callable[[Message], Any],
        supervisor: SchedulerSupervisor | None = None,
        clock: Callable[[], float] = time.time,
        poll: float = POLL,
    ) -> None:
        self.open_client = open_client
        """Opens the feed's own client (its own journal connection)."""
        self.post = post
        """Posts a message to the app (thread-safe)."""
        self.supervisor = supervisor
        """Restarts the scheduler when it dies; None when the console only watches."""
        self.clock = clock
        self.poll = poll
        """Seconds between board looks while live."""
        self.stop_event = threading.Event()
        """Set to end the loop."""
        self.pending: list[tuple] = []
        """Transitions fetched and not yet taken by the UI thread."""
        self.lock = threading.Lock()
        self.pids: dict[int, int] = {}
        """Last pid seen in each executor slot."""
        self.restarts: dict[int, int] = {}
        """Replacements seen per executor slot."""
        self.wake = threading.Event()
        """Set to look at the run now (after an operator action)."""
        self.known = 0
        """Jobs the model holds: a transition of a later index names a job the run made since."""
        self.new_ids: list[str] = []
        """Ids of jobs made since the model was loaded, not yet taken by the UI thread."""

    def take(self) -> list[tuple]:
        """Hand the pending transitions to the UI thread."""
        with self.lock:
            out, self.pending = self.pending, []
        return out

    def take_ids(self) -> list[str]:
        """Hand the UI thread the ids of jobs the run made since (loop instances), to add before `take`."""
        with self.lock:
            out, self.new_ids = self.new_ids, []
        return out

    def stop(self) -> None:
        """End the loop at its next look."""
        self.stop_event.set()
        self.wake.set()

    def run(self) -> None:
        """The thread's body: load, then follow until stopped."""
        client = None
        while client is None and not self.stop_event.is_set():
            try:
                self.post(LoadStep("opening the journal"))
                client = self.open_client()
                info, model, dag = load_model(client, lambda s: self.post(LoadStep(s)), self.open_client)
            # The journal may not exist yet (a scheduler just starting): say why, retry.
            except Exception as e:
                if client is not None:
                    client.close()
                    client = None
                self.post(
                    StatusChanged(
                        LiveStatus(
                            False, None, 0, None, error=f"cannot read the run: {e}"
                        )
                    )
                )
                self.stop_event.wait(1.0)
        if client is None:
            return
        seq = model.seq
        self.known = len(model)
        read_retry_times(client, model)
        read_attempt_ends(client, model)
        last = client.changes_since(max(0, seq - 1), 1)
        if last and (model.last_change is None or last[-1][5] > model.last_change):
            model.last_change = float(last[-1][5])
        self.post(ModelLoaded(info, model, dag))
        try:
            self._follow(client, seq, info)
        finally:
            client.close()

    def _follow(self, client: Client, seq: int, info: RunInfo) -> None:
        last_beat: float | None = -1.0
        last_read = 0.0
        last_status = 0.0
        was_live: bool | None = None
        drill_seen = self.clock()  # a drill of before the console opened is in `status`, not a note
        turns = 0
        while not self.stop_event.is_set():
            now = self.clock()
            try:
                header = client.board_header()
                beat = header.beat if header is not None else None
                # The scheduler publishes the board only when states changed, so an
                # unchanged beat means nothing new in the journal either.
                if (
                    beat != last_beat
                    or now - last_read >= IDLE_POLL
                    or self.wake.is_set()
                ):
                    self.wake.clear()
                    last_read, last_beat = now, beat
                    seq = self._read_changes(client, seq)
                if self.supervisor is not None:
                    for ev in self.supervisor.check():
                        self.post(
                            NoteAdded(Note(ev.text, ev.level, now, ("scheduler",)))
                        )
                live = header is not None
                if now - last_status >= STATUS_EVERY or live != was_live:
                    last_status, was_live = now, live
                    if not live:
                        # A run resumed since it was read has ended again, or is about to: its end moved.
                        client.reread_run()
                        fresh = _info(client)
                        if fresh != info:
                            info = fresh
                            self.post(RunInfoChanged(info))
                    self.post(StatusChanged(self._status(client, header, now)))
                turns += 1
                if turns % DRILL_EVERY == 0:
                    drill = client.last_drill()
                    if drill is not None and drill["ts"] > drill_seen:
                        drill_seen = drill["ts"]
                        level = "information" if drill["ok"] else "warning"
                        self.post(NoteAdded(Note(drill["summary"], level, now, ("scheduler",))))
            # Any failure (a journal being replaced, a board torn down mid-read) is
            # shown on screen and retried: the feed must outlive it.
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
                self.post(StatusChanged(LiveStatus(False, None, 0, None, error=error)))
                was_live = None
                self.stop_event.wait(1.0)
            self.wake.wait(
                self.poll if last_beat is not None else min(IDLE_POLL, self.poll * 4)
            )

    def _read_changes(self, client: Client, seq: int) -> int:
        while True:
            rows = client.changes_since(seq, limit=BATCH)
            if not rows:
                return seq
            seq = rows[-1][0]
            top = max(r[1] for r in rows)
            grown = client.refresh_ids()[self.known :] if top >= self.known else []
            with self.lock:
                # New ids first: the transitions naming them are applied after them.
                self.new_ids.extend(grown)
                self.known += len(grown)
                self.pending.extend(rows)
            self.post(JobsChanged())
            if len(rows) < BATCH:
                return seq

    def _status(self, client: Client, header: Any, now: float) -> LiveStatus:
        views = []
        for e in client.executors() if header is not None else []:
            k, pid = int(e["executor"]), int(e["pid"])
            old = self.pids.get(k)
            if old is not None and old != pid:
                self.restarts[k] = self.restarts.get(k, 0) + 1
                self.post(
                    NoteAdded(
                        Note(
                            f"executor {k} restarted: pid {old} -> {pid}",
                            "warning",
                            now,
                            ("executor",),
                        )
                    )
                )
            self.pids[k] = pid
            views.append(
                ExecutorView(
                    k,
                    pid,
                    str(e["health"]),
                    float(e["beat_age"]),
                    int(e["running"]),
                    int(e["slots"]),
                    float(e["load1"]),
                    int(e["rss_kb"]),
                    int(e["jobs_done"]),
                    self.restarts.get(k, 0),
                )
            )
        sup = (
            self.supervisor.describe()
            if self.supervisor is not None
            else "watching only (read-only)"
        )
        if header is None:
            return LiveStatus(False, None, 0, None, (), sup)
        age = max(0.0, now - header.beat)
        return LiveStatus(
            True,
            header.scheduler_pid,
            header.epoch,
            age,
            tuple(views),
            sup,
            agents=tuple(
                AgentView(str(a["agent"]), node_label(int(a.get("index", -1))),
                          str(a["state"]), ",".join(a.get("pools") or []),
                          int(a.get("slots_used") or 0), int(a.get("slots") or 0), float(a.get("load1") or 0.0),
                          int(a.get("jobs_held") or 0), a.get("age"))
                for a in client.agents()
            ),
            paused=client.pause_reason(header) or "",
            broker_lost=_broker_lost_text(client.broker_lost()),
            responding=not silent(header, age),
        )


def _broker_lost_text(lost: dict[str, Any] | None) -> str:
    """What the node pane says of a lost broker ("" when it is there)."""
    if lost is None:
        return ""
    since = time.strftime("%H:%M:%S", time.localtime(lost["since"]))
    return (f"BROKER LOST: {lost['broker']} does not answer since {since}: agents as last heard, their jobs' ends "
            "and kills go through once it is back")
