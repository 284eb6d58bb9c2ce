"""The control API used by the CLI and the console: read a run's state, send operator verbs, read logs and history."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wloadctl import access
from wloadctl.core.replay import attempts_ran
from wloadctl.core.states import TERMINAL, JobState, is_holding
from wloadctl.core.verbs import close_job, unknown_text
from wloadctl.errors import (
    ControlError,
    NoReply,
    ProtocolError,
    StoreError,
    TransportError,
    Unanswered,
    UsageError,
    WloadError,
    printable,
)
from wloadctl.ipc import ctlsock
from wloadctl.ipc import protocol as P
from wloadctl.ipc.naming import ROLE_BOARD, ROLE_EXECUTORS, object_name
from wloadctl.ipc.shm import ExecutorBoard, StateBoard
from wloadctl.procs.health import pid_alive
from wloadctl.runplan import run_plan
from wloadctl.whyread import retry_now

__all__ = ["RunClient", "node_label", "pid_alive", "resolve_state_dir", "run_plan", "state_dir_for_plan"]
from wloadctl.paths import ids_path, log_path, named_state_dir, read_ids, read_journal_note, refuse_non_directory
from wloadctl.remote import AGENT_BASE
from wloadctl.runshape import RunShape, index_of_id, read_shape
from wloadctl.store import DB_NAME, RunRow, Store, default_state_dir, journal_exists, run_place

if TYPE_CHECKING:
    # The engine, plan loader and DAG are imported where used: `status` must answer fast.
    from wloadctl.core.dag import Dag
    from wloadctl.core.engine import SchedulerCore
    from wloadctl.core.plan import Plan
    from wloadctl.remote.broker import BrokerOptions
    from wloadctl.remote.operators import OperatorLink
    from wloadctl.turns import FlatRows, JobColumns

VERBS = ("hold", "release", "retry", "rerun", "kill", "set-ok", "skip", "cancel", "approve")
"""Operator verbs (the core's wloadctl.core.verbs.VERBS, repeated here to keep imports light; a test checks)."""

SILENT_AFTER = 3.0
"""Seconds without a board beat (beyond the lease the scheduler gave itself) after which a live
scheduler is reported not responding: it beats every quarter second, turns included."""
REPLY_TIMEOUT = 10.0
"""Seconds to wait for a live scheduler's answer."""
WHY_TIMEOUT = 3.0
"""Seconds `why` waits for a live scheduler before it reads the journal instead."""
READ_VERBS = ("why", "whoami", "pending")
"""Requests that change nothing: read from the journal when no scheduler answers, wherever its holder is."""


@dataclass
class JobView:
    """One job's row as shown by status."""

    id: str
    state: str
    attempt: int
    executor: int
    exit_code: int | None
    started: float | None
    ended: float | None
    reason: str


def node_label(executor: int) -> str:
    """How a job's node is shown: a local executor by its index, an agent as a0, a1... ("" for none)."""
    if executor < 0:
        return ""
    return f"a{executor - AGENT_BASE}" if executor >= AGENT_BASE else str(executor)


class RunClient:
    """A handle on the latest run of a state directory (or an earlier one, by its id), live or finished.

    With a server journal and no state directory it reads the journal's latest run of the
    namespace, whichever host its scheduler is on; with a broker as well, operator verbs go by
    request/reply to the scheduler holding the run's lease (journal + broker mode).
    """

    def __init__(self, state_dir: str | Path | None, broker: BrokerOptions | None = None,
                 run_id: str | None = None) -> None:
        self.log_broker: BrokerOptions | None = None
        """Broker of the run's agents, for the logs of their jobs (None: the run's own setting)."""
        self.broker = broker
        """The broker verbs travel through to a scheduler of another host (None: this host's queues)."""
        self._link: OperatorLink | None = None
        given = None if state_dir is None else Path(state_dir)
        if given is not None and not journal_exists(given):
            refuse_non_directory(given)
            url = read_journal_note(given)
            if url is not None:
                raise UsageError(f"no run journal in {given}: its runs are journaled in {url}",
                                 hint=f"add --journal {url} (or set WLOADCTL_JOURNAL)")
            raise UsageError(f"no run journal in {given}",
                             hint=f"start a run there with `wloadctl run PLAN --state-dir {given}`")
        self.store = Store.open(given, create=False, readonly=True)
        latest = self.store.latest_run()
        if latest is None and given is not None:
            # A standby that took over a run of a server journal keeps its own state directory: its run is
            # the one its scheduler there says it drives.
            latest = _driven_run(self.store, given)
        if latest is None:
            self.store.close()
            raise _no_run_error(given, self.store.where)
        run = latest if run_id is None else self.store.get_run(run_id)
        if run is None:
            self.store.close()
            raise UsageError(f"no run {run_id} in {given or self.store.where}", hint="`wloadctl runs` lists them")
        self.run: RunRow = run
        """The journal's record of the run."""
        self.latest = run.id == latest.id
        """Whether it is the latest run of its journal: an earlier one is read, never changed (verbs, a resume
        and the control socket are the latest run's)."""
        # A server journal read from anywhere: the run's files are where its settings say (maybe another host).
        self.state_dir = given or Path(json.loads(run.settings or "{}").get("state_dir") or ".")
        """The run's state directory."""
        self._ids: list[str] | None = None
        self._plan: Plan | None = None

    def close(self) -> None:
        """Release the journal (and the broker)."""
        if self._link is not None:
            self._link.close()
            self._link = None
        self.store.close()

    def __enter__(self) -> RunClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- liveness and boards ------------------------------------------------------------

    def board_header(self) -> P.BoardHeader | None:
        """The live scheduler's board header, or None when no scheduler is live.

        In journal + broker mode, a scheduler of another host holding the lease has no board
        here: its header is made from the journal (epoch, pid, lease; the beat is the lease's
        last renewal as far as the lease tells).
        """
        h = self._board_header()
        if h is not None or self.broker is None or not self.leased():
            return h
        r = self.run
        return P.BoardHeader(run_id=r.run_id, epoch=r.epoch, scheduler_pid=r.scheduler_pid or 0,
                             beat=min(time.time(), r.lease_until), started=r.started, lease_until=r.lease_until)

    def _board_header(self) -> P.BoardHeader | None:
        return live_header(self.run.run_id)

    def is_live(self) -> bool:
        """Whether a scheduler is running this run now."""
        return self._board_header() is not None

    def leased(self) -> bool:
        """Whether a scheduler (of any host) holds the run's lease now, by the journal (see lease_held)."""
        return lease_held(self.store, self.reread_run(), self.state_dir)

    def far_holder(self) -> str | None:
        """The host of the scheduler holding the run's lease by the journal when its board is not here (a
        scheduler of another host: `top` and the pipeline pane read the run from the journal then); None when
        the board is here or no scheduler holds the lease."""
        if self._board_header() is not None or not self.leased():
            return None
        return self.store.holder_host(self.run.id) or "another host"

    def journal_counts(self) -> dict[str, int]:
        """Jobs per state name, from the journal (read again at each call)."""
        names = [s.name for s in JobState]
        return {names[s]: n for s, n in self.store.state_counts(self.run.id) if s < len(names)}

    def reread_run(self) -> RunRow:
        """The run's record read again from the journal: a resume sets it running again, and its end
        moves when it ends again."""
        self.run = self.store.get_run(self.run.run_id) or self.run
        return self.run

    def ids(self) -> list[str]:
        """Job ids by index (from the run's id list file when it is there: cheaper than the journal)."""
        if self._ids is None:
            self._ids = read_ids(self.state_dir, self.run.run_id) or self.store.job_ids(self.run.id)
        return self._ids

    def refresh_ids(self) -> list[str]:
        """Job ids by index, read again (a run adds loop instances as it goes)."""
        self._ids = None
        return self.ids()

    def index_of(self, job: str) -> int | None:
        """A job's index from the run's id list when it is there (None: ask the journal)."""
        if self._ids is not None:
            return self._ids.index(job) if job in self._ids else None
        return index_of_id(self.state_dir, self.run.run_id, job)

    def job_row(self, job: str) -> tuple | None:
        """One job's row from the journal."""
        return self.store.job_row(self.run.id, job, self.index_of(job))

    def executors(self) -> list[dict[str, Any]]:
        """Health of each executor from the heartbeat board (empty when the run is not live)."""
        return executor_health(self.run.run_id)

    def agents(self) -> list[dict[str, Any]]:
        """The run's agents (nodes on other hosts) as its scheduler judges them: state, pools, slots, load."""
        from wloadctl.remote.agents import read_nodes

        return read_nodes(self.state_dir, time.time())

    def broker_lost(self) -> dict[str, Any] | None:
        """The broker the live run's scheduler has lost, and since when (None while it has it)."""
        from wloadctl.remote.agents import broker_lost

        lost = broker_lost(self.state_dir, time.time())
        return None if lost is None else {"broker": lost[0], "since": lost[1]}

    def agent_names(self) -> dict[int, str]:
        """Executor index -> name of each agent the run's schedulers numbered (the journal's numbers, the
        same on every host; a run numbered before the journal did has them in its agents file)."""
        from wloadctl.remote.agents import run_agent_names

        return run_agent_names(self.store, self.run.id, self.state_dir)

    def status(self, with_jobs: bool = True, only_unfinished: bool = False, limit: int = -1) -> dict[str, Any]:
        """The run's state: record, counts per state, scheduler, executors, and each job's state.

        Args:
            with_jobs: include the per-job list.
            only_unfinished: list only jobs not SUCCEEDED, SKIPPED or WAITING (what an operator looks at).
        """
        far = self.leased()
        h = self._board_header()
        live = h is not None
        # No board here but a lease held: the scheduler runs on another host; the journal tells.
        far = far and not live
        if not live and not far and self.run.status == "running":
            self.run = dataclasses.replace(self.run, status="interrupted")
        names = [s.name for s in JobState]
        jobs: list[dict[str, Any]] = []
        if live:
            assert h is not None
            try:
                board = StateBoard.open(object_name(self.run.run_id, ROLE_BOARD))
                snap = board.read()
                board.close()
                states = snap.states
            except WloadError:
                live, states = False, b""
        counts: dict[str, int] = {}
        if live:
            counts = {names[k]: c for k, c in enumerate(h.counts[: len(names)]) if c}  # type: ignore[union-attr]
            if with_jobs:
                ids = self.ids()
                skip = {0, 4, 9} if only_unfinished else set()
                found = [k for k in range(min(len(ids), len(states))) if states[k] not in skip]
                if limit >= 0:
                    found = found[:limit]
                jobs = [{"job": ids[k], "state": names[states[k]]} for k in found]
                if len(found) <= LIVE_ROWS:
                    # What a stopped run's status says of each job (attempt, exit, reason), read through the
                    # journal's index for these jobs alone: the board holds states only.
                    found_rows = self.store.rows_of(self.run.id, found)
                    for k, job in zip(found, jobs, strict=True):
                        row = found_rows.get(k)
                        if row is not None:
                            job.update(attempt=row[1], exit_code=row[3], started=row[4], ended=row[5],
                                       reason=row[6])
                    retry_now(self.store, self.run.id, dict(zip(found, jobs, strict=True)), time.time())
        else:
            counts = {names[s]: n for s, n in self.store.state_counts(self.run.id)}
            if with_jobs:
                rows = self.store.job_rows(self.run.id, exclude_states=(0, 4, 9) if only_unfinished else (),
                                           limit=limit)
                jobs = [{"job": r[1], "state": names[r[2]], "attempt": r[3], "exit_code": r[5],
                         "started": r[6], "ended": r[7], "reason": r[8]} for r in rows]
                retry_now(self.store, self.run.id, {r[0]: j for r, j in zip(rows, jobs, strict=True)}, time.time())
        holding = live and h is not None and is_holding(h.counts)
        beat_age = round(max(0.0, time.time() - h.beat), 3) if live and h is not None else None
        return {
            "run": self.run.run_id, "plan": self.run.plan_name, "business_date": self.run.business_date,
            "status": self.run.status if not live else ("holding" if holding else "running"), "live": live or far,
            "held": (held := self.held(states if live else None) if counts.get("HELD") else []),
            "confirm": self.awaiting_confirmation(held), "pending": self.pending_requests(),
            "started": self.run.started, "ended": self.run.ended, "epoch": h.epoch if h else self.run.epoch,
            "scheduler_pid": h.scheduler_pid if h else (self.run.scheduler_pid if far else None),
            "scheduler_host": self.store.holder_host(self.run.id) if far or live else None,
            "standby_pid": (h.standby_pid or None) if h else None,
            "paused": self.pause_reason(h) if live else None,
            "lease_until": h.lease_until if h else self.run.lease_until,
            "scheduler_beat_age": beat_age,
            "responding": None if not (live or far) else (beat_age is None or not silent(h, beat_age)),
            # A stopped run's executors still alive are listed too: they run on the jobs they had, until those end.
            "executors": self.executors() if live else [e for e in self.executors() if e["health"] != "dead"],
            "agents": self.agents() if live else [],
            "broker_lost": self.broker_lost() if live else None,
            "counts": counts, "total": sum(counts.values()), "jobs": jobs,
            "flags": self.flags(None if live or far else time.time()),
            "last_drill": self.last_drill(),
        }

    def pause_reason(self, h: P.BoardHeader | None) -> str | None:
        """Why the live scheduler does not dispatch, in words (None when it does)."""
        if h is None or not h.paused:
            return None
        if h.paused == P.PAUSE_STATE_DIR_FULL:
            return f"no space left on device in {self.state_dir}"
        if h.paused == P.PAUSE_SHM_FULL:
            return "no space left in /dev/shm for the payload arena (jobs wait to be sent)"
        if h.paused == P.PAUSE_JOURNAL_LOST:
            return "journal unreachable, retrying"
        if h.paused == P.PAUSE_CANCELLED:
            return "run cancelled: running jobs finish, nothing new starts"
        if h.paused == P.PAUSE_STOPPING:
            return "the scheduler is stopping"
        return f"paused (reason code {h.paused})"

    def held(self, states: bytes | None = None, limit: int = 50) -> list[str]:
        """Ids of the first `limit` HELD jobs: from the board's states when given, else from the journal."""
        if states is None:
            others = tuple(s for s in JobState if s != JobState.HELD)
            return [r[1] for r in self.store.job_rows(self.run.id, exclude_states=others, limit=limit)]
        ids, k = self.ids(), states.find(JobState.HELD)
        out: list[str] = []
        while k >= 0 and len(out) < limit:
            if k < len(ids):
                out.append(ids[k])
            k = states.find(JobState.HELD, k + 1)
        return out

    def awaiting_confirmation(self, held: list[str]) -> list[str]:
        """Those of `held` that wait for an operator's approve (`confirm: true`)."""
        if not held:
            return []
        jobs = self.plan().jobs
        return [j for j in held if j in jobs and jobs[j].confirm]

    def pending_requests(self) -> list[dict[str, Any]]:
        """Verbs waiting for a second person's approve (four eyes), oldest first, from the journal."""
        from wloadctl.core.foureyes import PendingBook

        return PendingBook.from_actions(self.store.actions(self.run.id)).listing()

    def pending(self) -> dict[str, Any]:
        """What waits for an operator's approve: requests for a second person, and confirmation jobs."""
        return {"run": self.run.run_id, "requests": self.pending_requests(),
                "confirm": self.awaiting_confirmation(self.held(limit=1000))}

    def flags(self, now: float | None = None) -> dict[str, str]:
        """Jobs flagged AT_RISK or LATE during the run (job -> its latest flag; one flagged AT_RISK that then
        finished before its deadline, flagged MET, is none); `now`, for a run no scheduler runs: one AT_RISK
        whose deadline has passed since is LATE."""
        from wloadctl.core.sla import standing_flags

        return standing_flags(self.store.alerts(self.run.id), now)

    # -- operator verbs ---------------------------------------------------------------------

    def control(self, verb: str, jobs: list[str], reason: str = "", downstream: bool = False) -> dict[str, Any]:
        """Apply an operator verb: through the live scheduler, or on the journal when none is live.

        Returns:
            {"ok": bool, "results": [[job, applied, message], ...], "live": bool, ...}

        Raises:
            UsageError: unknown verb.
            ControlError: the verb cannot be applied at all (no live scheduler for kill).
        """
        rep = self._control(verb, jobs, reason, downstream)
        unknown = rep.get("unknown")
        if unknown and rep.get("error") == unknown_text(unknown):
            # The close id of each misspelt one, found here rather than in the scheduler's turn: comparing with
            # every id of a big run takes a while, and only the operator who mistyped waits for it.
            rep["error"] = unknown_text(unknown, self.refresh_ids())
        return rep

    def _control(self, verb: str, jobs: list[str], reason: str, downstream: bool) -> dict[str, Any]:
        """control() through whichever way reaches the run: the broker, the scheduler's socket, the journal."""
        if verb not in VERBS and verb not in ("why", "ping", "whoami", "reject", "pending"):
            raise UsageError(f"unknown verb '{verb}'", hint=f"verbs: {', '.join(VERBS)}, why")
        if verb in VERBS:
            self._still_latest()
        if verb in VERBS and not self.latest:
            raise ControlError(f"run {self.run.run_id} is not the latest run of {self.state_dir}: it is read only",
                               hint="verbs apply to the latest run (`wloadctl runs` lists them)")
        # The run it is meant for goes with it: a scheduler of another run of the directory refuses it.
        # (the reason one line with no terminal escape, as the scheduler keeps it: the journal has it as it is said)
        req = {"verb": verb, "jobs": jobs, "reason": printable(reason), "downstream": downstream, "user": _user(),
               "run": self.run.run_id}
        if self.broker is not None:
            try:
                rep = self._ask_broker(req)
            except Unanswered:
                raise Unanswered(f"no answer through the broker from the scheduler of run {self.run.run_id}; the "
                                 f"{verb} may have been applied: check `wloadctl status` / `wloadctl audit`") from None
            if rep is not None:
                rep["live"] = True
                return rep
            if self.leased():
                raise ControlError(f"no answer through the broker from the scheduler of run {self.run.run_id} "
                                   f"within {REPLY_TIMEOUT:.0f}s", hint="check it with `wloadctl status`")
        if self.is_live() or self._listening():
            try:
                rep = self._ask(req, WHY_TIMEOUT if verb == "why" else REPLY_TIMEOUT)
                rep["live"] = True
                return rep
            except ProtocolError:
                raise  # the request itself cannot go (too large): said as it is, not as a scheduler out of reach
            except TransportError as e:
                if isinstance(e, Unanswered) and verb not in READ_VERBS:
                    raise  # delivered, perhaps applied: never applied again on the journal (below)
                if verb == "why" and isinstance(e, NoReply):
                    # A live scheduler that does not answer (stopped, frozen, swamped): the journal's view, said so.
                    rep = self._offline(req)
                    rep["unanswered"] = e.message
                    return rep
                # A board seen here may be another host's (a pid of its own namespace): the journal's lease
                # says who holds the run, and the refusal below names it.
                if self.is_live() and not self.leased():
                    raise
        if verb not in READ_VERBS:
            home = self._holder_dir()
            if home is not None:
                # The holder is a scheduler of this host whose state directory is not the run's (a standby
                # that took the run over): its own control socket takes the verb.
                rep = ctlsock.request(home, {**req, "id": secrets.token_hex(4)}, REPLY_TIMEOUT)
                rep["live"] = True
                return rep
            self._refuse_far_holder(verb)
        return self._offline(req)

    def _still_latest(self) -> None:
        """Refuse a verb meant for this client's run once another run has started in its journal since the
        client opened (a console left open on a finished run): verbs are the latest run's, and this one's
        would reach the other run's scheduler, or change this run's rows under it.

        Raises:
            ControlError: a newer run is there now.
        """
        if not self.latest:
            return
        now = self.store.latest_run()
        if now is None or now.id == self.run.id:
            return
        self.latest = False
        raise ControlError(f"run {self.run.run_id} is no longer the latest run of {self.state_dir}: run "
                           f"{now.run_id} of plan '{now.plan_name}' started there since, and verbs apply to it alone",
                           hint="open the console on the directory again, or give the verb with "
                                f"`wloadctl VERB JOB --state-dir {self.state_dir}`, to act on that run")

    def _holder_dir(self) -> Path | None:
        """The state directory of the scheduler holding the run's lease when it is a process of this host
        reachable here and its control socket answers there for this run (None otherwise): found from the
        files and the listening socket the process holds (a standby that took the run over keeps its own
        state directory)."""
        if not self.latest or not self.leased():
            return None
        host, pid = self.store.holder_host(self.run.id), self.run.scheduler_pid
        if not pid or (host is not None and host != socket.gethostname()):
            return None
        for home in _dirs_held(pid):
            if home != self.state_dir and _driven_run(self.store, home, self.run) is not None:
                return home
        return None

    def _refuse_far_holder(self, verb: str) -> None:
        """Refuse a verb that would change a run a live scheduler holds when none of its control sockets answered.

        Written here, with no epoch, it would race that scheduler's own writes (which never learn of it: a
        hold it would not keep, a release it would not dispatch): the verb goes to it instead.

        Raises:
            UsageError: the run's lease is in force (its holder of any host, this one included).
        """
        if not self.leased():
            return
        r = self.run
        host = self.store.holder_host(r.id) or socket.gethostname()
        until = time.strftime("%H:%M:%S", time.localtime(r.lease_until))
        if host == socket.gethostname() and r.scheduler_pid and pid_alive(r.scheduler_pid):
            # (told to reach it through a broker or from its host: it is here, starting, or stopped by a signal)
            raise UsageError(f"run {r.run_id} is held by scheduler pid {r.scheduler_pid} of this host, whose control "
                             f"socket does not answer yet: {verb} was not applied",
                             hint="a resume or takeover is starting it: try again in a moment (`wloadctl status` "
                                  "says LIVE once it answers)")
        raise UsageError(f"run {r.run_id} is held by scheduler pid {r.scheduler_pid} on {host} (epoch {r.epoch}, "
                         f"lease until {until}), and no control socket of it is reachable here: {verb} was not "
                         "applied",
                         hint="send verbs to it with --broker URL (the run's broker), or run them on that host "
                              "with --state-dir ITS_DIR")

    def _listening(self) -> bool:
        """Whether the run's control socket is there: the run of another user, whose board is theirs alone,
        is live when its scheduler answers on it (a socket left by a crashed one refuses the connection).
        The socket is the latest run's: an earlier run of the directory is never live."""
        return self.latest and ctlsock.socket_path(self.state_dir).exists()

    def _ask(self, req: dict[str, Any], timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        # The scheduler takes the caller's identity from the socket (SO_PEERCRED), not from `user`.
        return ctlsock.request(self.state_dir, {**req, "id": secrets.token_hex(4)}, timeout)

    def whoami(self) -> dict[str, Any]:
        """This user's name, role and allowed verbs in the run (the console greys the rest)."""
        if self.broker is not None:
            # Through the broker the scheduler decides who this is (the broker user), not this host.
            rep = self._ask_broker({"verb": "whoami", "jobs": [], "user": _user()})
            if rep is not None:
                return rep
        if self.is_live() or self._listening():
            try:
                return self._ask({"verb": "whoami", "jobs": []})
            except TransportError:
                if self.is_live():
                    raise
        me = ctlsock.this_process()
        role = self._local_role()
        # (Without a scheduler only the roles config's four eyes are known here: the plan's are not read.)
        return {"ok": True, "user": me.user, "uid": me.uid, "role": role.label,
                "verbs": access.allowed_verbs(role), "four_eyes": sorted(access.load_roles().four_eyes)}

    def _local_role(self) -> access.Role:
        """This user's role in the run without its scheduler: from the roles config and the plan's `roles:`, which
        add up as they do for the live scheduler."""
        me = ctlsock.this_process()
        owner = self.state_dir.stat().st_uid if self.state_dir.is_dir() else me.uid
        if me.uid in (0, owner):
            return access.Role.ADMIN  # (whatever the mapping says: its plan need not be read)
        try:
            plan = run_plan(self.store, self.run)
        except WloadError:
            plan = None  # (a journal with no readable plan: the roles config alone)
        roles = access.load_roles(plan.roles if plan else None, self.run.plan_path or "plan")
        return roles.role_of(me.uid, me.user, me.group_names, owner)

    def _ask_broker(self, req: dict[str, Any]) -> dict[str, Any] | None:
        """A verb by request/reply to the scheduler holding the lease; None when none answered."""
        from wloadctl.remote.operators import OperatorLink

        assert self.broker is not None
        if self._link is None:
            self._link = OperatorLink(self.broker)
        return self._link.ask(self.run.run_id, req, REPLY_TIMEOUT if self.leased() else 1.0)

    def _offline(self, req: dict[str, Any]) -> dict[str, Any]:
        from wloadctl.core.commands import Persist, Reply
        from wloadctl.core.events import OperatorEvent
        from wloadctl.core.explain import why as explain
        from wloadctl.core.fanout import expansion_rows
        from wloadctl.core.foureyes import (
            PendingBook,
            gated_jobs,
            pending_outcome,
            second_message,
            uncovered,
            uncovered_refusal,
        )
        from wloadctl.core.reach import reached
        from wloadctl.core.verbs import MUTATING_OFFLINE, resolve_jobs
        from wloadctl.ipc.cleanup import remove_run_objects, run_is_alive
        from wloadctl.offline_cancel import (
            OPEN,
            Settling,
            cancel_refusal,
            cancelled_message,
            live_executor_pids,
            settle_in_flight,
        )

        verb = req["verb"]
        if verb == "whoami":
            return {**self.whoami(), "live": False}
        role = self._local_role()
        if role < access.needed(verb):
            msg = access.refusal(verb, req["user"], role)
            try:
                with Store.open(self.state_dir, create=False) as st:
                    st.record_action(self.run.id, req["user"], verb, "; ".join(req["jobs"]) or "*", req["reason"],
                                     msg, False)
            except StoreError:
                pass  # a journal this user may not write keeps no row of the refusal, which is said all the same
            return {"ok": False, "error": msg, "refused": True, "live": False}
        if verb in ("approve", "reject", "pending"):
            settled = self._offline_settle(req)
            if settled is not None:
                return settled
        if verb == "why":
            read = self._why_read(req)
            if read is not None:
                return read
            # Read from the run's core rebuilt from the journal: it changes nothing, so it takes no lock (the
            # scheduler holding the directory's may be there, and not answer).
            core = journal_core(self.store, self.store.get_run(self.run.run_id) or self.run)
            idx, unknown = resolve_jobs(core, req["jobs"])
            if unknown:
                return {"ok": False, "error": unknown_text(unknown), "unknown": unknown, "live": False}
            return {"ok": True, "why": [explain(core, i, time.time(), self._undispatched()) for i in idx[:20]],
                    "live": False}
        if verb not in MUTATING_OFFLINE:
            place = run_place(self.state_dir)
            if self.run.status not in OPEN:
                # (a resume of it would be refused: nothing of an ended run runs, to be killed or otherwise)
                raise ControlError(f"{verb} needs a live scheduler and run {self.run.run_id} has ended "
                                   f"({self.run.status}): none of its jobs runs",
                                   hint=f"`wloadctl rerun JOB {place}`, then `wloadctl resume {place}`, runs a job "
                                        "again")
            raise ControlError(f"{verb} needs a live scheduler and run {self.run.run_id} has none",
                               hint=f"resume the run with `wloadctl resume {place}`")
        # The state directory's scheduler lock keeps a starting scheduler out; a run of another
        # host (server journal) has none here, and its journal's epoch guards its writes.
        try:
            lock = open(self.state_dir / "scheduler.lock" if self.state_dir.is_dir() else os.devnull, "a+")
        except OSError as e:
            raise ControlError(f"cannot {verb} in run {self.run.run_id}: {self.state_dir} cannot be written "
                               f"({e.strerror})", hint="a read-only copy of a run can be read, not changed") from None
        try:
            _lock_wait(lock, 5.0)
            with Store.open(self.state_dir, create=False) as st:
                run = st.get_run(self.run.run_id) or self.run
                core = journal_core(st, run)
                idx, unknown = resolve_jobs(core, req["jobs"])
                # Every job the verb would act on counts for four eyes, not only those named (core/reach.py).
                gated = gated_jobs(verb, (core.specs[i] for i in reached(core, verb, idx, bool(req["downstream"]))))
                settle = req.get("settle")
                if settle is not None:
                    # An approve applies what was asked, no more: refused (the request kept) when the verb would now
                    # act on a job whose four eyes the request did not name.
                    asked = settle["request"]
                    extra = uncovered(asked, gated)
                    if extra:
                        msg = uncovered_refusal(asked, extra)
                        st.record_action(run.id, settle["user"], "approve", asked.id, settle["reason"], msg, False)
                        return {"ok": False, "error": msg, "live": False, "unapproved": True}
                    st.record_action(run.id, settle["user"], "approve", asked.id, settle["reason"], settle["outcome"],
                                     True)
                if unknown:
                    msg = unknown_text(unknown)
                    st.record_action(run.id, req["user"], verb, "; ".join(unknown), req["reason"], msg, False)
                    return {"ok": False, "error": msg, "unknown": unknown, "live": False}
                if verb == "cancel":
                    refused = cancel_refusal(core, run, live_executor_pids(executor_health(run.run_id)),
                                             self._far_home())
                    if refused is not None:
                        st.record_action(run.id, req["user"], verb, "*", req["reason"], refused, False)
                        return {"ok": False, "error": refused, "live": False}
                second = frozenset(core.plan.four_eyes) | access.load_roles().four_eyes
                if not req.get("approved") and (verb in second or gated):
                    book = PendingBook.from_actions(st.actions(run.id))
                    p = book.open(verb, req["jobs"], req["user"], req["reason"], time.time(), bool(req["downstream"]),
                                  gated)
                    st.record_action(run.id, req["user"], verb, "; ".join(req["jobs"]) or "*", req["reason"],
                                     pending_outcome(p), False)
                    return {"ok": True, "verb": verb, "pending": p.as_dict(), "results": [], "live": False,
                            "message": second_message(p)}
                core.paused = True  # nothing is dispatched from here; a resume runs what becomes READY
                # A cancel first settles what the run had in flight, its executors gone, as a resume would.
                settling = settle_in_flight(st, run, core, self.state_dir) if verb == "cancel" else Settling()
                cmds = settling.commands + core.handle(OperatorEvent(
                    verb, tuple(idx), time.time(), user=req["user"], reason=req["reason"],
                    downstream=bool(req["downstream"]), cause_id="op-offline", offline=True))
                results: list[list[Any]] = []
                ok = True
                touched = sum(len(c.touched) for c in cmds if isinstance(c, Reply))
                rows: list[tuple] = []
                now = time.time()
                for c in cmds:
                    if isinstance(c, Reply):
                        for i, applied, msg in c.results:
                            job = core.ids[i] if i >= 0 else "*"
                            if verb == "cancel" and applied:
                                msg = cancelled_message(run, len(c.touched), settling)
                            rows.append((now, req["user"], verb, job, req["reason"], msg, applied))
                            results.append([job, applied, msg])
                            ok = ok and applied
                turns = [c for c in cmds if isinstance(c, Persist)]
                if turns:
                    # One turn (a cancel's settling of the jobs in flight and the cancel itself: both or neither),
                    # its audit rows in the same transaction, as a live scheduler journals a verb: a crash keeps
                    # both or neither, and a glob over thousands of jobs costs one commit, not one each.
                    # (a loop a rerun sends back to read its list again is journaled so)
                    st.write_turn(run.id, [t for c in turns for t in c.transitions],
                                  added=[e for c in turns for e in expansion_rows(c.added, core.ids)], actions=rows)
                else:
                    st.record_actions(run.id, rows)
                if verb == "cancel" and ok and core.is_finished():
                    st.set_status(run.id, "cancelled", time.time())
                    if not run_is_alive(run.run_id):
                        remove_run_objects(run.run_id)  # (left by its crash: nothing of the run will read them)
                elif not core.is_finished():
                    # Jobs can run again: the run is unfinished, and a resume runs them. A run that ended
                    # holding and holds nothing now is a stopped run like any other.
                    if run.status not in ("running", "interrupted", "held") or (
                            run.status == "held" and not core.counts[JobState.HELD]):
                        st.set_status(run.id, "interrupted", None)
                    if verb in ("retry", "rerun", "set-ok", "skip", "release") and ok:
                        results.append(["*", True, "the run has no live scheduler: `wloadctl resume "
                                        f"{run_place(self.state_dir)}` will run what is now due"])
                # (`touched` as a live scheduler's reply counts them: a script reads the same keys either way)
                return {"ok": ok, "verb": verb, "results": results, "touched": touched, "live": False}
        finally:
            lock.close()

    def _why_read(self, req: dict[str, Any]) -> dict[str, Any] | None:
        """`why` of jobs named by id, on a run with no live scheduler, without loading its plan: from the
        journal's rows of the jobs and their upstreams and what the run's scheduler kept of its plan
        (store/facts.py), through the explain a rebuilt core goes through (core/whyview.py).

        Returns None where that cannot be read so (globs, a run without kept facts or whose plan changed
        since, loops over output): the caller rebuilds the run's core then.
        """
        from wloadctl.whyread import why_of_stopped

        names: list[str] = req["jobs"]
        if not names or any(c in n for n in names for c in "*?["):
            return None
        st, run = self.store, self.run
        idx: list[int] = []
        unknown: list[str] = []
        for name in names:
            i = self.index_of(name)
            if i is None:
                i = st.job_index(run.id, name)
            if i is None:
                unknown.append(name)
            elif i not in idx:
                idx.append(i)
        if unknown:
            msg = f"unknown job(s): {', '.join(unknown)}"
            try:
                with Store.open(self.state_dir, create=False) as w:
                    w.record_action(run.id, req["user"], "why", "; ".join(unknown), req["reason"], msg, False)
            except StoreError:
                pass  # a journal this user cannot write (a read-only copy, a full disk) keeps no row of a read verb
            return {"ok": False, "error": msg, "unknown": unknown, "live": False}
        out = why_of_stopped(st, run, idx[:20], time.time(), self._undispatched())
        return None if out is None else {"ok": True, "why": out, "live": False}

    def _offline_settle(self, req: dict[str, Any]) -> dict[str, Any] | None:
        """pending, and approve/reject of a request id, on the journal of a run with no live scheduler.

        Returns None for `approve JOB` (a confirmation job): that is a verb like the others.
        """
        from wloadctl.core.foureyes import PendingBook, judge, settle_word, settled_outcome
        from wloadctl.core.verbs import MUTATING_OFFLINE

        verb, user = req["verb"], req["user"]
        if verb == "pending":
            return {"ok": True, "requests": self.pending_requests(), "live": False}
        with Store.open(self.state_dir, create=False) as st:
            book = PendingBook.from_actions(st.actions(self.run.id))
            p, err = judge(verb, req["jobs"], user, book, lambda n: self.index_of(n) is not None)
            if p is None and err is None:
                return None
            if p is not None and verb == "approve" and p.verb not in MUTATING_OFFLINE:
                raise ControlError(f"{p.verb} needs a live scheduler and run {self.run.run_id} has none",
                                   hint=f"resume the run, then `wloadctl approve {p.id}`")
            if p is None:
                st.record_action(self.run.id, user, verb, "; ".join(req["jobs"]) or "*", req["reason"], str(err),
                                 False)
                return {"ok": False, "error": err, "live": False}
            word = settle_word(verb, p, user)
            if verb == "reject":
                st.record_action(self.run.id, user, verb, p.id, req["reason"], settled_outcome(word, p, user), True)
                return {"ok": True, "verb": verb, "results": [], "live": False,
                        "message": f"{p.id} {word}: {p.describe()} will not be applied"}
        why_ = f"{p.reason}; " if p.reason else ""
        # (the approve is journaled there, once the run's core says the request covers what the verb would do)
        settle = {"request": p, "user": user, "reason": req["reason"], "outcome": settled_outcome(word, p, user)}
        rep = self._offline({**req, "verb": p.verb, "jobs": list(p.jobs), "downstream": p.downstream,
                             "approved": p.id, "reason": f"{why_}{p.id} asked by {p.user}, approved by {user}",
                             "settle": settle})
        if not rep.pop("unapproved", False):
            rep["approved"] = p.id
        return rep

    # -- reading ----------------------------------------------------------------------------

    def unknown_job(self, job: str) -> ControlError:
        """The error of a job id the run does not have, with the id it was likely meant to be."""
        meant = close_job(job, self.refresh_ids())
        return ControlError(f"unknown job '{job}' in run {self.run.run_id}",
                            hint=f"did you mean '{meant}'?" if meant else None)

    def why(self, job: str) -> dict[str, Any]:
        """Why a job is not running now (asks the live scheduler, else reads the journal)."""
        rep = self.control("why", [job])
        if not rep.get("ok") or not rep.get("why"):
            if rep.get("unknown") and not rep.get("error"):
                raise ControlError(unknown_text(rep["unknown"], self.refresh_ids()))
            raise ControlError(rep.get("error") or f"unknown job '{job}'")
        out = dict(rep["why"][0])
        if out.get("state") == "READY" and not (rep.get("live") is False and self._undispatched()):
            _behind_runs(out, self.run.run_id)
        if rep.get("unanswered"):
            out["reasons"] = [f"read from the journal, which may be behind: {rep['unanswered']}",
                              *out.get("reasons", [])]
        if out.get("state") == "RUNNING" and (silent := self._silent_agent(job)) is not None:
            out["reasons"] = [*out.get("reasons", []), silent]
        if out.get("state") == "RUNNING" and (lost := self.broker_lost()) is not None:
            row = self.job_row(job)  # (its executor: a node index when it runs on an agent)
            if row is not None and row[4] is not None and row[4] in self.agent_names():
                since = time.strftime("%H:%M:%S", time.localtime(lost["since"]))
                out["reasons"] = [*out.get("reasons", []),
                                  f"the broker {lost['broker']} does not answer since {since}: its agent is as last "
                                  "heard; the job's end (or a kill asked for meanwhile) goes through once it is back"]
        return out

    def _silent_agent(self, job: str) -> str | None:
        """What `why` adds of a running job whose agent the live scheduler judges SUSPECT (None: it has none)."""
        row = self.job_row(job)
        if row is None or row[4] is None:
            return None
        for a in self.agents():
            if a.get("index") == row[4] and a.get("state") == "SUSPECT":
                return (f"agent {a.get('agent')} is SUSPECT: not heard for {float(a.get('age') or 0):.1f}s; silent "
                        "for the run's agent timeout, it is LOST and this attempt goes back to the job's policy "
                        "(retried elsewhere, or held for an operator when it may not run twice)")
        return None

    def _undispatched(self) -> str | None:
        """What the journal's `why` says first of a job waiting to be dispatched when no scheduler holds the
        run, whatever the job would wait for under one (None: a scheduler holds it, or the run is over)."""
        if self.leased() or self.run.status not in ("running", "interrupted", "held"):
            return None
        status = "interrupted" if self.run.status == "running" else self.run.status
        return (f"the run is {status}: no scheduler dispatches its jobs now (`wloadctl resume "
                f"{run_place(self.state_dir)}` goes on)")

    def history(self, job: str) -> dict[str, Any]:
        """Every transition and operator action of one job."""
        story = self.store.job_story(self.run.id, job, self.index_of(job))
        if story is None:
            raise self.unknown_job(job)
        row, transitions = story
        names = [s.name for s in JobState]
        tx = [{"from": names[f], "to": names[t], "attempt": a, "ts": ts, "executor": ex, "exit_code": code,
               "reason": reason, "cause": cause}
              for f, t, a, ts, ex, code, reason, cause in transitions]
        acts = [{"ts": ts, "user": u, "verb": v, "reason": r, "outcome": o, "applied": bool(ap)}
                for ts, u, v, _j, r, o, ap in self.store.actions(self.run.id, job)]
        # `attempts` counts those that started: a dispatch handed back unstarted took an attempt number too.
        ran, unstarted = attempts_ran(transitions)
        return {"job": job, "state": names[row[2]], "attempts": ran, "attempt": row[3], "unstarted": unstarted,
                "transitions": tx, "actions": acts}

    def log_file(self, job: str, attempt: int | None = None) -> Path:
        """Path of a job attempt's log (the last attempt by default).

        The log of an attempt that ran on an agent is copied from that agent: again while the
        attempt runs, and once more after it ended if the copy there is was taken before.
        """
        row = self.job_row(job)
        if row is None:
            raise self.unknown_job(job)
        att = attempt or row[3]
        # (a loop over a list, as one over an upstream's output, has its instances' ids: a WAITING loop whose
        # instances run has no log of its own either)
        loop = att <= 0 and any(i.startswith(f"{job}@") for i in self.refresh_ids())
        if att <= 0 and (row[2] in TERMINAL or loop):
            raise ControlError(f"job '{job}' ran no process of its own (state {JobState(row[2]).name}), so it has "
                               "no log" + (f" (its for_each instances {job}@ITEM have theirs)" if loop else ""))
        if att <= 0:
            raise ControlError(f"job '{job}' has not run yet (state {JobState(row[2]).name})")
        if att > row[3]:
            raise ControlError(f"job '{job}' has {row[3]} attempt(s); there is no attempt {att}")
        path = log_path(self.state_dir, self.run.run_id, job, att)
        executor = row[4] if att == row[3] and row[4] >= 0 else self._attempt_executor(job, att)
        if executor < AGENT_BASE:
            host = None if path.parent.is_dir() else self._far_home()
            if host is not None:
                raise ControlError(f"the log of {job} attempt {att} is kept on {host}, the host of the run's "
                                   f"scheduler ({path}), not on this host", hint=f"read it there: `wloadctl logs "
                                   f"{job} --attempt {att} {run_place(self.state_dir)}` on {host}")
            return path
        partial = path.with_name(f".{path.name}.partial")
        running = att == row[3] and row[2] in (JobState.QUEUED, JobState.RUNNING)
        if running or not path.exists() or partial.exists():
            self._mirror_log(job, row[0], executor, att, path)
            # A copy taken while the attempt ran is fetched again once it has ended.
            if running:
                partial.touch()
            else:
                partial.unlink(missing_ok=True)
        return path

    def _far_home(self) -> str | None:
        """The host of the run's scheduler (the last to hold its lease, else the one that started it) when it is
        not this host; None otherwise."""
        host = self.store.holder_host(self.run.id) or json.loads(self.run.settings or "{}").get("host")
        return host if host and host != socket.gethostname() else None

    def _attempt_executor(self, job: str, attempt: int) -> int:
        """The executor (an agent's node index) an attempt of a job last ran on, from its history."""
        story = self.store.job_story(self.run.id, job, self.index_of(job))
        if story is None:
            return -1
        found = -1
        for _f, _t, a, _ts, ex, *_rest in story[1]:
            if a == attempt and ex is not None and ex >= 0:
                found = ex
        return found

    def _mirror_log(self, job: str, index: int, executor: int, attempt: int, path: Path) -> None:
        """Copy the log of a job attempt that ran on agent `executor` from it (through the broker) to `path`."""
        from wloadctl.remote.agents import fetch_log
        from wloadctl.remote.broker import ENV_BROKER, ENV_PASSWORD, BrokerOptions

        agent = self.agent_names().get(executor)
        options = self.log_broker
        if options is None:
            settings = json.loads(self.run.settings or "{}")
            url = os.environ.get(ENV_BROKER) or settings.get("broker")
            if url:
                options = BrokerOptions(url=url, prefix=str(settings.get("prefix", "wl")),
                                        password=os.environ.get(ENV_PASSWORD))
        if options is None:
            raise ControlError(f"{job} attempt {attempt} ran on an agent (node {executor}) and no broker is known",
                               hint="pass --broker URL")
        if agent is None:
            # A run numbered before the journal kept the agents' names: they are in the agents file of the
            # state directory of the scheduler that numbered them, which this host does not have.
            raise ControlError(f"{job} attempt {attempt} ran on agent node {executor}, whose name is not known here "
                               "(neither the run's journal nor this state directory's agents file names it)",
                               hint="read the log on the host of the scheduler that ran the attempt")
        fetch_log(options, agent, self.run.run_id, index, job, attempt, path)

    def plan(self) -> Plan:
        """The run's plan as loaded at its start (or as accepted on a resume)."""
        if self._plan is None:
            self._plan = run_plan(self.store, self.run)
        return self._plan

    def expected_history(self) -> dict[str, float]:
        """Median seconds of each job's successful attempts in the runs of the same plan before this one."""
        return self.store.expected_history(self.run.plan_name, self.run.id, self.ids(), self.run.plan_digest)

    def last_seq(self) -> int:
        """Sequence number of the latest journaled transition (follow a run from there with changes_since)."""
        return self.store.last_seq(self.run.id)

    def job_rows(self) -> list[tuple]:
        """(idx, job_id, state, attempt, executor, exit_code, started, ended, reason) of every job, from the journal."""
        return self.store.job_rows(self.run.id)

    def job_columns(self) -> JobColumns:
        """Every job's row as columns (flat arrays of states, attempts, executors; the rest by job),
        for readers of the whole run that would not build a million row tuples."""
        return self.store.columns(self.run.id)

    def flat_rows(self) -> FlatRows | None:
        """Every job's start, end, attempt and executor as flat arrays from the journal (no replay); None
        when it keeps none (a run journaled before them, until its next write)."""
        return self.store.flat_rows(self.run.id)

    def states(self) -> bytearray | None:
        """Every job's state by index from the journal's current states (no replay); None when it keeps none."""
        return self.store.current_states(self.run.id)

    def rows_of(self, idxs: list[int]) -> dict[int, tuple]:
        """(state, attempt, executor, exit_code, started, ended, reason) of some jobs by index, from the journal
        (a few jobs of a big run: read through its turn index, without replaying it)."""
        return self.store.rows_of(self.run.id, idxs)

    def shape(self) -> RunShape | None:
        """The run's shape as its scheduler wrote it (wloadctl.runshape); None when it has none."""
        return read_shape(self.state_dir, self.run.run_id)

    def id_bytes(self) -> bytes | None:
        """The run's id list file as it is (one id a line), or None when there is none."""
        try:
            return ids_path(self.state_dir, self.run.run_id).read_bytes()
        except OSError:
            return None

    def changes_since(self, seq: int, limit: int = 100_000) -> list[tuple]:
        """Journaled transitions after `seq`: (seq, idx, from, to, attempt, ts, executor, exit_code, reason)."""
        return self.store.transitions_since(self.run.id, seq, limit)

    def plan_dag(self) -> Dag:
        """The run's DAG (from the plan as loaded)."""
        from wloadctl.core.dag import Dag

        return Dag(self.plan())

    def definition(self, job: str) -> dict[str, Any]:
        """What the run's plan says job `job` is (wloadctl.jobdef.definition): read from the plan as the run has it.

        Raises:
            ControlError: no such job in the run.
        """
        from wloadctl.jobdef import definition

        d = definition(self.plan(), job)
        if d is None:
            raise self.unknown_job(job)
        return d

    def lineage(self, job: str) -> dict[str, Any]:
        """Upstream and downstream of a job."""
        dag = self.plan_dag()
        if job not in dag.index:
            raise self.unknown_job(job)
        return {"job": job, "upstream": sorted(dag.ancestors(job)), "downstream": sorted(dag.descendants(job))}

    def pipeline(self) -> dict[str, Any]:
        """The live scheduler's pipeline figures (wloadctl.pipeview.pipeline_view)."""
        from wloadctl.pipeview import pipeline_view

        return pipeline_view(self)

    def status_at(self, when: str | float) -> dict[str, Any]:
        """Every job as it stood at a moment (a float, or text for wloadctl.timetravel.parse_when)."""
        from wloadctl.timetravel import parse_when, status_at

        zone = self.plan_zone()
        t = when if isinstance(when, float | int) else parse_when(when, tz=zone)
        return status_at(self.store, self.run, float(t), self.refresh_ids(), zone)

    def plan_zone(self) -> str | None:
        """The time zone of the run's plan, its times of day are read in (None: the host's), from what its
        scheduler kept of the plan (`why` reads the same), else from the plan itself."""
        kept = self.store.facts_meta(self.run.id)
        return kept.timezone if kept is not None else self.plan().timezone

    def job_rows_at(self, when: float) -> list[tuple]:
        """Every job's row (as job_rows gives it) as it stood at `when`, rebuilt from the journal."""
        ids = self.refresh_ids()
        cols = self.store.columns_at(self.run.id, when)
        cols.grow(len(ids))
        return [cols.row(i, j) for i, j in enumerate(ids)]

    def timeline(self) -> list[float]:
        """The moments at which some job changed state, oldest first (the steps of the console's scrub)."""
        from wloadctl.timetravel import timeline

        return timeline(self.store, self.run)

    def verify_audit(self) -> dict[str, Any]:
        """Check the journal's audit hash chain (every run in it): the first broken link, if any."""
        rows = self.store.audit_rows()
        rep = self.store.verify_audit()
        out: dict[str, Any] = {"ok": rep.ok, "checked": rep.checked, "unchained": rep.unchained, "broken": None}
        if rep.broken is not None:
            run, seq, problem = rep.broken
            row = next((r for r in rows if r[0] == seq), None)
            names = {r.id: r.run_id for r in self.store.runs()}
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row[2])) if row else ""
            action = f"{when} {row[3]} {row[4]} {row[5]}" if row else "row missing"
            out["broken"] = {"run": names.get(run, str(run)), "seq": seq, "problem": problem, "action": action}
        return out

    def last_drill(self) -> dict[str, Any] | None:
        """The run's latest drill report ({"ts", "user", "ok", "summary"}), None when it had none."""
        from wloadctl.drillreport import last_drill

        return last_drill(self.store, self.run.id)

    def actions(self) -> list[dict[str, Any]]:
        """The run's audit trail."""
        return [{"ts": ts, "user": u, "verb": v, "job": j, "reason": r, "outcome": o, "applied": bool(ap)}
                for ts, u, v, j, r, o, ap in self.store.actions(self.run.id)]


def journal_core(store: Store, run: RunRow) -> SchedulerCore:
    """A core rebuilt from the journal (for verbs and `why` on a run with no live scheduler)."""
    from wloadctl.core.engine import SchedulerCore
    from wloadctl.core.replay import restore_journaled
    from wloadctl.core.sla import run_instants

    plan = run_plan(store, run)
    # Ranked as the run's scheduler ranked it: with what the runs before it taught.
    core = SchedulerCore(plan, 0, history=store.expected_history(plan.name, run.id, list(plan.jobs), run.plan_digest))
    # Restored as a resume restores it (a cancel is not replayed: nothing dispatches here, and a verb that lets
    # jobs start, given once a cancelled run has ended, is what takes its cancel back for the resume).
    restore_journaled(store, run.id, core, time.time())
    core.flush()  # the restore's own corrections are not the operator's doing
    # The instants the run's jobs may start at, as its scheduler read them (`why` says them; nothing dispatches here).
    core.set_times({}, run_instants(core.specs, run.business_date, run.started, plan.timezone, deadlines=False)[1])
    busy = (JobState.QUEUED, JobState.RUNNING)
    for i, _jid, st, _a, ex, _c, _st, _en, reason in store.job_rows(run.id):
        if reason and core.state[i] == st:  # (the restore ended it otherwise, and said why: core/replay.py)
            core.reasons[i] = reason
        if st in busy and ex is not None and ex >= 0:
            core.executor[i] = ex  # (`why` names it; a resume's core learns it from its executors instead)
    return core


LIVE_ROWS = 1000
"""Jobs of a live run whose journal rows `status` reads beside their states (more: states alone, as listed)."""


def executor_health(run_id: str) -> list[dict[str, Any]]:
    """Health of each executor of run `run_id` from its heartbeat board on this host (empty: none here)."""
    try:
        eb = ExecutorBoard.open(object_name(run_id, ROLE_EXECUTORS))
    except WloadError:
        return []
    try:
        slots = eb.read_all()
    finally:
        eb.close()
    now = time.time()
    out = []
    for s in slots:
        if not s.pid:
            continue
        age = now - s.beat if s.beat else float("inf")
        alive = pid_alive(s.pid)
        health = "dead" if not alive else ("alive" if age < 1.0 else ("suspect" if age < 5.0 else "dead"))
        out.append({"executor": s.executor, "pid": s.pid, "health": health, "beat_age": round(age, 3),
                    "running": s.running, "slots": s.slots, "load1": round(s.load1, 2), "rss_kb": s.rss_kb,
                    "jobs_done": s.jobs_done, "epoch": s.seen_epoch})
    return out


def board_status(state_dir: Path) -> dict[str, Any] | None:
    """What the live scheduler of a state directory's run shows on its boards on this host (counts, executors),
    read without the journal: for `status` while a server journal is unreachable (None: no live scheduler of
    the directory's run here)."""
    from wloadctl.procs.pipeline import read_pipeline

    published = read_pipeline(state_dir)
    run_id = published.get("run") if published else None
    h = live_header(run_id) if isinstance(run_id, str) and run_id else None
    if h is None:
        return None
    names = [st.name for st in JobState]
    return {"run": h.run_id, "live": True, "scheduler_pid": h.scheduler_pid, "epoch": h.epoch,
            "scheduler_beat_age": round(max(0.0, time.time() - h.beat), 3), "total": h.n_jobs,
            "counts": {names[k]: c for k, c in enumerate(h.counts[: len(names)]) if c},
            "executors": executor_health(h.run_id)}


def live_header(run_id: str) -> P.BoardHeader | None:
    """The board header of run `run_id`'s scheduler when its board is on this host and it is live, else None."""
    h = StateBoard.header_at(object_name(run_id, ROLE_BOARD))
    return h if h is not None and pid_alive(h.scheduler_pid) and not h.done else None


def lease_held(store: Store, run: RunRow, state_dir: Path | None = None) -> bool:
    """Whether a scheduler (of any host) holds the run's lease now, by the journal's record `run`.

    A lease whose holder is on this host and gone (a scheduler killed -9 moments ago: its lease runs
    out a few seconds later) holds nothing. With a SQLite journal its pid tells. A server journal's
    holder named by this host's name may be a process of another pid namespace (a container of the
    same host name), whose pid is not seen here: it is gone only when the run's state directory
    `state_dir` is here and its scheduler lock, which the holder kept while it lived, names it and is
    free.
    """
    pid = run.scheduler_pid
    if run.status != "running" or run.lease_until <= time.time():
        return False
    if not pid or pid_alive(pid):
        return True
    host = store.holder_host(run.id)
    if host is None:
        return False
    return not (host == socket.gethostname() and state_dir is not None and _lock_left_by(state_dir, pid))


def _lock_left_by(state_dir: Path, pid: int) -> bool:
    """Whether `state_dir`'s scheduler lock names scheduler `pid` and no process holds it (that scheduler is
    dead: the kernel drops a process's flock when it dies, whatever pid namespace it ran in)."""
    try:
        with open(state_dir / "scheduler.lock") as f:
            if f.read().strip() != str(pid):
                return False
            try:
                # Shared and at once: a scheduler starting meanwhile is kept out only for this instant.
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(f, fcntl.LOCK_UN)
            return True
    except (OSError, UnicodeDecodeError):
        return False


def _dirs_held(pid: int) -> list[Path]:
    """The directories of the files and the listening control socket process `pid` holds open (empty: none
    seen, or not a process this user may look into)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    found: list[Path] = []
    inodes: set[str] = set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
        elif target.startswith("/"):
            found.append(Path(target).parent)
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as f:
            for line in f:
                cols = line.split()
                if len(cols) >= 8 and cols[6] in inodes and cols[7].endswith("/" + ctlsock.SOCKET_NAME):
                    found.insert(0, Path(cols[7]).parent)
    except OSError:
        pass
    return list(dict.fromkeys(found))


def _driven_run(store: Store, state_dir: Path, run: RunRow | None = None) -> RunRow | None:
    """The run of `store` that the scheduler listening in `state_dir` drives now, as its answer to a ping says
    (its id and epoch checked against the journal); `run` when given, else the one it names. None: none
    listens there, or it drives another run (or no longer holds it)."""
    if not ctlsock.socket_path(state_dir).exists():
        return None
    try:
        rep = ctlsock.request(state_dir, {"verb": "ping", "jobs": [], "id": secrets.token_hex(4)}, 2.0)
    except WloadError:
        return None
    row = store.get_run(str(rep.get("run") or "")) if rep.get("ok") else None
    if row is None or (run is not None and row.run_id != run.run_id) or row.epoch != rep.get("epoch"):
        return None
    return row


def _no_run_error(given: Path | None, where: str) -> UsageError:
    """The refusal of a journal that holds no run of the state directory `given` (of any, when None): with a
    server journal holding runs of other state directories, it names the latest and how to read it."""
    from wloadctl.store import journal_url, without_password

    url = journal_url()
    if given is None or url is None:
        there = f" --state-dir {given}" if given is not None else ""
        return UsageError(f"no run recorded in {given or where}", hint=f"start one with `wloadctl run PLAN{there}`")
    with Store.open(None, create=False, readonly=True) as st:
        other = st.latest_run()
    if other is None:
        return UsageError(f"no run recorded in {where}", hint="start one with `wloadctl run PLAN`")
    settings = json.loads(other.settings or "{}")
    home = ":".join(str(settings[k]) for k in ("host", "state_dir") if settings.get(k)) or "another state directory"
    return UsageError(f"no run of {given} in {where}: its latest run {other.run_id} is of {home}",
                      hint="leave out --state-dir (and $WLOADCTL_STATE_DIR) to read the journal's latest run; "
                           f"`wloadctl runs --journal {without_password(url)}` lists its runs")


def journal_in_force() -> str | None:
    """The server journal's URL in force (--journal or $WLOADCTL_JOURNAL), None for SQLite in a state directory."""
    from wloadctl.store import journal_url

    return journal_url()


def broker_from_args(ns: Any) -> BrokerOptions:
    """The broker options of a command line's broker arguments (see remote.broker.add_broker_args)."""
    from wloadctl.remote.broker import BrokerOptions

    return BrokerOptions.from_args(ns)


def state_dir_for_plan(plan_path: str) -> Path:
    """The default state directory of a plan file (loading it also reports every problem it has).

    Raises:
        PlanError: the plan is invalid.
    """
    from wloadctl.core.planfile import load_plan

    return default_state_dir(load_plan(plan_path).name)


def silent(h: P.BoardHeader | None, beat_age: float) -> bool:
    """Whether a live scheduler has stopped beating its board (stopped with SIGSTOP, hung): its counts are
    as of its last beat. It is silent past its lease and past SILENT_AFTER seconds, whichever is later."""
    lease = max(0.0, h.lease_until - h.beat) if h is not None else 0.0
    return beat_age > max(SILENT_AFTER, lease)


def resolve_state_dir(given: str | None) -> Path:
    """The state directory to use: given, $WLOADCTL_STATE_DIR, or the most recently used one.

    Raises:
        UsageError: none given and no run found.
    """
    named = named_state_dir(given)
    if named:
        return Path(named)
    base = default_state_dir("x").parent
    journals = sorted(base.glob(f"*/{DB_NAME}"), key=lambda p: p.stat().st_mtime) if base.exists() else []
    if not journals:
        raise UsageError("no run found", hint="give --state-dir DIR, or start a run with `wloadctl run PLAN`")
    return journals[-1].parent


def _behind_runs(why: dict[str, Any], run_id: str) -> None:
    """Name the other runs holding the host's shared slots, or the cpu or memory a ready job waits for, in its
    `why`."""
    from wloadctl.hostshare import HostCapacity, behind, claims_text
    from wloadctl.paths import state_root

    kinds = why.get("host_wait", [])
    if kinds:
        cap = HostCapacity.read(state_root())
        limits = cap.claims() if cap is not None else {}
        over = {k: n for k, n in why.get("host_need", {}).items() if k in limits and n > limits[k]}
        if over:
            why["reasons"] = [*why.get("reasons", []), f"it claims {claims_text(over)}, more than the host has "
                              f"({claims_text(limits)}): it starts only once `wloadctl host` offers more"]
            return
        others = behind(state_root(), run_id, kinds=kinds)
        if others:
            why["behind_runs"] = [{"run": r.run, "plan": r.plan, "holds": {k: r.held.get(k, 0) for k in kinds}}
                                  for r in others]
            names = ", ".join(f"{r.plan} (run {r.run}, holds {claims_text(r.held)})" for r in others[:8])
            verb = "are" if len(kinds) > 1 else "is"
            why["reasons"] = [*why.get("reasons", []),
                              f"the host's {' and '.join(kinds)} {verb} shared with other runs; waiting behind {names}"]
        return
    others = behind(state_root(), run_id)
    if others:
        why["behind_runs"] = [{"run": r.run, "plan": r.plan, "running": r.busy} for r in others]
        why["reasons"] = [*why.get("reasons", []), "the host's slots are shared with other runs; waiting behind "
                          + ", ".join(f"{r.plan} (run {r.run}, {r.busy} running)" for r in others[:8])]


def _user() -> str:
    # The process's uid, never $USER or $LOGNAME (which anyone can set).
    return ctlsock.user_name(os.getuid())


def _lock_wait(f: Any, timeout: float) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.time() > deadline:
                raise ControlError("the run's journal is busy (another operator or a starting scheduler)",
                                   hint="try again") from None
            time.sleep(0.05)
