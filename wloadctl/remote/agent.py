"""The agent process: takes work of its pools from the broker and runs it on this node's executors (MQ+SHM).

Inside the node the seeds' design holds unchanged: the agent is its executors' scheduler (a
LocalPool over the node's own queues and segments); the broker carries work and results
between hosts. Per task, in order: journal it as taken, acknowledge the dispatch, run it;
journal its end, publish it, mark it stored once the broker acknowledged. So a task is
never lost (a dispatch not acknowledged is delivered again) and never run twice by this
node (a redelivered task it holds is recognised), and results survive an agent restart.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import secrets
import select
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from wloadctl.core.commands import Kill
from wloadctl.errors import WloadError
from wloadctl.ipc import protocol as P
from wloadctl.ipc.quota import LARGEST_RUN
from wloadctl.ipc.shm import remove_run_objects, run_is_alive
from wloadctl.paths import log_name, result_name, run_dirs
from wloadctl.procs.health import pid_alive, process_rss_kb
from wloadctl.procs.jobtree import remove_run_groups
from wloadctl.procs.localpool import LocalPool, read_results, result_journals
from wloadctl.procs.reports import ReportReader
from wloadctl.procs.runctx import RESULT_LIMIT, read_small
from wloadctl.procs.supervisor import RunObjects
from wloadctl.procs.userfiles import read_regular, remove_job_dirs
from wloadctl.remote import messages as M
from wloadctl.remote import wire
from wloadctl.remote.broker import BrokerOptions, Subjects, ensure_streams
from wloadctl.remote.failpoints import AgentFailpoint
from wloadctl.remote.link import BrokerLink, LinkWatch
from wloadctl.remote.node import Held, NodeBook, NodeJournal, ran_to_an_exit, remember_ran
from wloadctl.remote.nodelock import host_identity, refuse_live_twin
from wloadctl.remote.pulling import Msg, Puller

BEAT = 1.0
"""Seconds between heartbeats."""
HEALTH = 0.25
"""Seconds between looks at the node's executors, and between the agent's beats on the node's board."""
AGENT_SILENT_START = 1.0
"""Seconds without the agent's beat on the node's board after which its executors start no task they hold (their
`--silent-start`). A dead agent's run gives the tasks placed on it to other agents once it has been silent for the
run's agent timeout (agents.MIN_AGENT_TIMEOUT at least): an executor must stop starting them well before, counting
the beats it reads late (every executor.BEAT_INTERVAL, and its turns of starting jobs, executor.START_SLICE)."""
MAX_LOG_SLICE = 512 * 1024
"""Most bytes of a log one reply carries (it must fit a broker message)."""
FOREIGN_DELAY = 1.0
"""Seconds before a dispatch of another release an agent gave back is delivered again (to any agent of the place:
one of that release takes it)."""


def node_run_id(name: str) -> str:
    """The id the node's queues and segments carry (an agent is its executors' "run")."""
    return f"agent-{name}"[:64]


@dataclass
class AgentOptions:
    """How an agent serves: its name, pools, capacity and where it keeps its files."""

    broker: BrokerOptions
    """Where the broker is."""
    name: str
    """This node's agent name."""
    pools: list[str]
    """Pools it serves."""
    state_dir: Path
    """Where its journal, logs and results live."""
    slots: int = 4
    """Tasks it runs at once."""
    executors: int = 2
    """Executor processes on this node."""
    cpus: float = 0.0
    """CPUs it offers jobs that claim some (0: no limit)."""
    memory: int = 0
    """MiB it offers jobs that claim some (0: no limit)."""
    prefetch: int = 1
    """Tasks per slot it takes ahead from the broker, so its executors never wait for it. They wait in the node's
    request queue, not in an executor: each executor takes a task only into a free slot of its own, so a task
    starts on whichever executor is idle, never behind a busy one's job."""


@dataclass
class Agent:
    """One node's agent."""

    opts: AgentOptions
    """How it serves."""
    link: BrokerLink
    """Its broker connection."""
    stop: bool = False
    """Set by SIGTERM/SIGINT: stop taking work, stop the jobs, report them, exit."""
    stopping: bool = False
    """Its jobs are being stopped (shutdown): one that ends killed or failing is reported lost, not failed."""
    heard_active: float = 0.0
    """When a scheduler's dispatch, kill or beat last reached it."""
    heard_runs: dict[str, float] = field(default_factory=dict)
    """The same per run (a standby asks about the scheduler of its run)."""
    notes: list[str] = field(default_factory=list)
    """Lines for its log."""
    boot: str = field(default_factory=lambda: secrets.token_hex(8))
    """Drawn as it starts, said in every beat: its scheduler tells two agents of one name apart by it."""
    foreign: set[int] = field(default_factory=set)
    """Versions of the broker messages of another release it was sent (said once each)."""

    def open(self) -> None:
        """Make or reattach the node's queues, segments and executors, read the journal, start pulling."""
        o = self.opts
        self.subjects = Subjects(o.broker.prefix)
        ensure_streams(self.link, self.subjects)
        refuse_live_twin(self.link, self.subjects.agents_bucket, o.name)
        o.state_dir.mkdir(parents=True, exist_ok=True)
        self.node = node_run_id(o.name)
        self.failpoint = AgentFailpoint.read(o.state_dir)
        self.journal = NodeJournal(o.state_dir / f"agent-{o.name}.journal")
        self.journal.load()
        self.epoch = self._bump_local_epoch()
        adopt = run_is_alive(self.node)
        if adopt:
            objs = RunObjects.open(self.node)
        else:
            remove_run_objects(self.node)
            remove_job_dirs(self.node)  # of run_as jobs that went with executors no longer alive
            remove_run_groups(self.node)  # the empty job groups (cgroup mode) of those executors
            objs = RunObjects.create(self.node, 1, queue_jobs=LARGEST_RUN)
        self.objs = objs
        per = max(1, -(-o.slots // o.executors))
        self.book = NodeBook(per * o.executors)
        self.payloads: dict[int, bytes | None] = {}
        # (fence_ahead: a task an earlier agent of the node took ahead, held unstarted by an executor, is handed
        # back, never started: its run may have given it to another agent while none here was heard)
        self.pool = LocalPool.start(self.book, objs, ReportReader((), lambda _r: "", lambda _i, _a: None),
                                    self._payload, lambda: None, self.epoch, o.state_dir, executors=o.executors,
                                    slots=per, say=lambda e, f: self.note(_pool_words(e, f)), cpus=o.cpus,
                                    memory=o.memory, prefetch=0, hand_back=0.0, fence_ahead=True,
                                    silent_start=AGENT_SILENT_START)
        self.pending: list[tuple[concurrent.futures.Future[object], list[int]]] = []
        """Result batches published and not yet acknowledged, with the ends they carry."""
        self._beat_board()
        self._restore(adopt)
        self._drop_dead_journals()
        if self.failpoint is not None:
            self.failpoint.strike("after-open")
        self.pool.spawn_missing(o.executors)
        self.pullers: list[Puller] = []
        for pool in o.pools:
            self.pullers.append(self.link.pull(self.subjects.dispatch_stream, self.subjects.pool_consumer(pool),
                                               self.subjects.dispatch_pool(pool), window=1,
                                               source=f"pool:{pool}"))
        self.pullers.append(self.link.pull(self.subjects.dispatch_stream, self.subjects.agent_consumer(o.name),
                                           self.subjects.dispatch_agent(o.name), window=1, source="agent"))
        self.link.subscribe(self.subjects.ctl(o.name), source="ctl")
        self.link.subscribe(self.subjects.ask, source="ctl")
        self.link.subscribe(self.subjects.beat_all, source="beat")

    def _bump_local_epoch(self) -> int:
        """This start's epoch on the node's own board: higher than any before, so a predecessor's
        task records left in the node's queue are refused by the executors, and those an executor
        took ahead and has not started are handed back unstarted."""
        path = self.opts.state_dir / f"agent-{self.opts.name}.epoch"
        try:
            epoch = int(path.read_text().strip() or 0) + 1
        except (OSError, ValueError):
            epoch = 1
        path.write_text(f"{epoch}\n")
        return epoch

    def capacity(self) -> int:
        """Tasks this node holds at most: its slots, and as many again taken ahead."""
        return self.book.slots * (1 + self.opts.prefetch)

    def note(self, line: str) -> None:
        """One line for the agent's log (stderr)."""
        print(f"{time.strftime('%H:%M:%S')} agent {self.opts.name}: {line}", flush=True)

    # -- restart ---------------------------------------------------------------------------

    def _restore(self, adopt: bool) -> None:
        """Rebuild the book from the journal: reattach to live executors, report what ended meanwhile."""
        j = self.journal
        self.book.next_id = j.next_id
        self.epochs = dict(j.epochs)
        if j.unsent:
            self.note(f"publishing {len(j.unsent)} result(s) journaled before a restart")
            self._publish_entries([(int(loc), e) for loc, e in j.unsent.items()])
        if not j.held:
            if adopt:
                # Live executors of the node are its own even with no task: left, they would run beside the new
                # ones on the same queues, each seen stuck by the supervisor and killed over and over.
                found = self.pool.sup.adopt()
                if found:
                    self.note(f"reattached to {len(found)} executor(s) still running, holding no task")
            return
        for h in j.held.values():
            self.book.take(h, 0)
        # Every report the executors journaled for held tasks is applied, as if it had just come.
        recs = [r for _ex, _pid, path in result_journals(self.opts.state_dir, self.node)
                for r in read_results(path) if r.task in self.book.held]
        if not adopt:
            # The executors went with the node, but a job that ended before it went, ended: its
            # executor journaled the exit. Only the rest are lost (and run again).
            ended = [r for r in recs if r.kind == P.RES_EXITED]
            if ended:
                self.note(f"{len(ended)} task(s) held before a restart had ended meanwhile: reported ended")
                self._reports(ended)
            if self.book.held:
                self.note(f"{len(self.book.held)} task(s) held before a restart had no live executor: "
                          "reported lost")
                self.book.lost.extend(self.book.held)
            return
        found = self.pool.sup.adopt()
        self.note(f"reattached to {len(found)} executor(s) still running; {len(j.held)} task(s) were held")
        self._reports(recs)
        # What no live executor holds went with a dead one.
        alive = {w.index for w in self.pool.sup.workers.values()}
        for loc, ex in list(self.book.executor.items()):
            if ex < 0 or ex not in alive:
                self.book.lost.append(loc)

    def _drop_dead_journals(self) -> None:
        """Remove the journals of the node's executors that are gone: what they said is applied (`_restore`
        journaled it in the node's own journal), and an agent restarted often would otherwise read them all
        again at every start, and keep them for ever."""
        for _ex, pid, path in result_journals(self.opts.state_dir, self.node):
            if not pid_alive(pid):
                try:
                    path.unlink()
                except OSError:
                    pass

    # -- the loop --------------------------------------------------------------------------

    def serve(self) -> None:
        """Serve until asked to stop."""
        poller = select.poll()
        poller.register(self.link.fileno(), select.POLLIN)
        self.pool.attach(poller)
        watch = LinkWatch(self.link)
        next_beat = next_health = 0.0
        while not self.stop:
            now = time.time()
            due = min(next_beat, next_health, self.pool.next_due())
            ready = poller.poll(max(0, int((due - now) * 1000) + 1))
            for fd, _ev in ready:
                if fd == self.link.fileno():
                    self._inbox()
                elif fd == self.objs.rsp.fd:
                    self._reports(self.pool.take_reports())
                else:
                    self.pool.on_ready(fd, "node")
            now = time.time()
            if now >= next_health or self.pool.health_due:
                next_health = now + HEALTH
                # (often, not only at the broker's beat: the executors' silent start is short, AGENT_SILENT_START)
                self._beat_board()
                self.pool.check(now, self.book.feed, "node", replace=not self.stop)
            self.pool.fire_kills(now)
            self.pool.pump()
            self._report_lost()
            self._settle_published()
            self._throttle()
            if now >= next_beat:
                next_beat = now + BEAT
                change = watch.look()
                if change is not None:
                    # Jobs go on meanwhile: their ends are journaled here and published once it is back.
                    self.note(watch.line(change))
                self._beat(now)

    def shutdown(self) -> None:
        """Stop pulling, stop the jobs (each is reported lost, so its scheduler runs it elsewhere), exit clean."""
        for p in self.pullers:
            p.stop()
        self.stopping = True
        self.pool.stop_all()
        deadline = time.time() + 10.0
        while self.book.held and self.pool.alive() and time.time() < deadline:
            select.select([self.objs.rsp.fd], [], [], 0.1)
            self._reports(self.pool.take_reports())
            self.pool.check(time.time(), self.book.feed, "node", replace=False)
        self._reports(self.pool.take_reports())
        self.book.lost.extend(self.book.held)
        self._report_lost()
        deadline = time.time() + 5.0
        while self.pending and time.time() < deadline:
            time.sleep(0.05)
            self._settle_published()
        self.pool.wait_all(5.0)
        # Its last beat in the agents bucket says it stopped: `wloadctl agents` lists it STOPPED, not LOST.
        last = self._beat(time.time(), stopped=True)
        if last is not None:
            try:
                last.result(2.0)
            except Exception:  # the broker is away: it is listed LOST, as a crashed agent is
                pass
        remove_job_dirs(self.node)
        remove_run_groups(self.node)
        self.journal.close()
        self.objs.remove()

    # -- work in -----------------------------------------------------------------------------

    def _inbox(self) -> None:
        for msg in self.link.drain():
            try:
                if msg.source == "ctl":
                    self._request(msg)
                elif msg.source == "beat":
                    self._scheduler_beat(msg)
                elif msg.jetstream:
                    self._dispatch(msg)
            except WloadError as e:
                if msg.jetstream and (version := wire.foreign_version(msg.data)) is not None:
                    self._leave_foreign(msg, version)
                    continue
                self.note(f"bad message on {msg.subject}: {e.one_line()}")
                if msg.jetstream:
                    msg.term()  # never delivered again: it can never be read

    def _leave_foreign(self, msg: Msg, version: int) -> None:
        """A dispatch of another wloadctl release: given back for an agent of that release, never refused for
        good (a run would wait for ever on a job that no agent will ever be sent again); said once a version."""
        msg.nak(FOREIGN_DELAY)
        if version not in self.foreign:
            self.foreign.add(version)
            self.note(f"dispatches on {msg.subject} come in broker message version {version} (this agent reads "
                      f"{wire.VERSION}): left to agents of the release that sent them (schedulers and agents must "
                      "come from the same wloadctl release)")

    def _dispatch(self, msg: Msg) -> None:
        batch = wire.decode_dispatch(msg.data)
        run, epoch, now = batch.run, batch.epoch, time.time()
        seen = self.epochs.get(run, 0)
        if epoch < seen:
            # A scheduler older than one already heard from: refused, and told so.
            self.note(f"refused {len(batch.tasks)} task(s) of run {run} from epoch {epoch} (seen {seen})")
            self._publish_rejections(run, batch.tasks, now)
            msg.ack()
            return
        if epoch > seen:
            self.epochs[run] = epoch
            self.journal.epoch(run, epoch)
        self.heard_active = self.heard_runs[run] = now
        pool = msg.source[5:] if msg.source.startswith("pool:") else ""
        took: list[tuple[Held, int, bytes | None]] = []
        unreadable: list[tuple[Held, str]] = []
        again = 0
        for t, payload in zip(batch.tasks, batch.payloads, strict=True):
            if (run, t.task, t.attempt) in self.book.by_key:
                continue  # delivered again: this node holds it already
            if (run, t.task, t.attempt) in self.journal.ran:
                # Delivered again after it ran here (its acknowledgement lost with the connection): its end is
                # published already, and it must not run twice.
                again += 1
                continue
            local = self.book.next_id
            self.book.next_id += 1
            h = Held(local, run, t.task, t.attempt, t.epoch, str(t.task), pool)
            try:
                data = self._localize(h, payload) if t.kind == P.TASK_SHELL else None
            except WloadError as e:
                unreadable.append((h, f"cannot read the task's payload: {e.message}"))
                continue
            took.append((h, t.flags, data))
        if again:
            self.note(f"{again} task(s) of run {run} delivered again after they ran here: not run again")
        # Taken before acknowledged: a crash between the two delivers the batch again, and
        # the journal tells this node it holds those tasks already.
        self.journal.take([h for h, _t, _d in took] + [h for h, _w in unreadable])
        if self.failpoint is not None:
            for h, _t, _d in took:
                self.failpoint.strike("after-take", h.job_id)
        msg.ack()
        for h, tier, data in took:
            self.book.take(h, tier)
            self.payloads[h.local] = data
        self.pool.submit([(h.local, 1) for h, _t, _d in took])
        for h, why in unreadable:
            # Never run a task whose payload cannot be read: it ends as a failed start.
            self.book.take(h, 0)
            self.book.drop(h.local)
            entry: dict[str, object] = {"run": h.run, "kind": P.RES_EXITED, "flags": P.FLAG_SPAWN_FAILED,
                                        "job": h.job, "attempt": h.attempt, "signal": 0, "code": 127,
                                        "epoch": h.epoch, "pid": 0, "started": now, "ended": now, "tail": why,
                                        "result": None}
            self.journal.end(h.local, entry)
            self._publish_entries([(h.local, entry)])

    def _localize(self, h: Held, payload: bytes) -> bytes:
        """The task's payload with its files on this node and the node's name in its environment."""
        p = P.decode_payload(payload)
        h.job_id = p.job
        logs, checkpoints, results = run_dirs(self.opts.state_dir, h.run)
        for d in (logs, checkpoints, results):
            os.makedirs(d, exist_ok=True)
        h.log = log_name(logs, p.job, h.attempt)
        h.result = result_name(results, p.job, h.attempt)
        ckpt = f"{checkpoints}/{p.job}"
        env = dict(p.env, WLOADCTL_AGENT=self.opts.name,
                   # A job pinned with `agent:` alone came through no pool: it sees no WLOADCTL_POOL.
                   **({"WLOADCTL_POOL": h.pool} if h.pool else {}),
                   WLOADCTL_STATE_DIR=str(self.opts.state_dir.absolute()), WLOADCTL_RESULT_FILE=h.result,
                   WLOADCTL_CHECKPOINT_FILE=ckpt,
                   # The job's checkpoint file is this node's: a retry here gets its last token back.
                   WLOADCTL_CHECKPOINT=read_small(ckpt) or p.env.get("WLOADCTL_CHECKPOINT", ""))
        return P.encode_payload(dataclasses.replace(p, env=env, log_path=h.log))

    def _payload(self, local: int, _attempt: int) -> bytes | None:
        return self.payloads.pop(local, None)

    def _throttle(self) -> None:
        """Pull only while there is room: a busy node leaves the pool's work to the others.

        A pull window counts messages, and a dispatch message carries up to a slot count of
        tasks: one message at a time, taken again as soon as it is journaled and acked, so
        the pull requests of the pool's other agents, waiting at the broker already, get
        the next messages and the work spreads instead of going to whoever pulled first.
        """
        window = 1 if len(self.book.held) < self.capacity() else 0
        for p in self.pullers:
            if p.window != window:
                p.set_window(window)

    # -- results out -------------------------------------------------------------------------

    def _reports(self, recs: list[P.ResultRecord]) -> None:
        """Turn the executors' reports into result entries of the runs, journal ends, publish."""
        out: list[tuple[int, dict[str, object]]] = []
        for r in recs:
            h = self.book.held.get(r.task)
            if h is None:
                continue
            if r.kind == P.RES_REJECTED:
                # The node's own fencing: a record of an earlier start of this agent (an older epoch on the node's
                # board), refused unread. It says nothing about the run's scheduler, whose epoch the run's entry
                # would carry (that scheduler would take itself for fenced). The task, never accepted, is
                # reported lost with the others no executor holds (_restore).
                continue
            if r.kind == P.RES_ACCEPTED:
                self.book.executor[r.task] = r.executor
            elif r.kind == P.RES_STARTED:
                self.book.executor[r.task] = r.executor
                self.book.started(r.task)
            if r.kind == P.RES_EXITED and self.stopping and (r.signal or r.exit_code):
                # Stopped with the agent (SIGTERM to its jobs): not the job's failure, lost with the node.
                self.book.lost.append(h.local)
                continue
            entry = self._entry(h, r)
            if r.kind == P.RES_EXITED:
                self.journal.end(h.local, entry)
                if ran_to_an_exit(r.kind, r.flags):
                    remember_ran(self.journal.ran, (h.run, h.job, h.attempt))
                self.book.drop(h.local)
                self.payloads.pop(h.local, None)
            out.append((h.local, entry))
        if out:
            self.journal.flush()
            self._publish_entries(out)

    def _entry(self, h: Held, r: P.ResultRecord) -> dict[str, object]:
        """A report as it is journaled: the run's view of it, its output tail and result file."""
        tail = b""
        result: bytes | None = None
        if r.kind == P.RES_EXITED:
            if r.flags & P.FLAG_TAIL:
                try:
                    tail = self.objs.tails.read(r.tail_offset, r.tail_length, r.task, r.attempt) or b""
                except WloadError:
                    tail = b""
            if h.result:
                result = read_regular(h.result, RESULT_LIMIT + 1)  # one more: the scheduler tells a bigger one
        return {"run": h.run, "kind": r.kind, "flags": r.flags & ~P.FLAG_TAIL, "job": h.job, "attempt": h.attempt,
                "signal": r.signal, "code": r.exit_code, "epoch": h.epoch, "pid": r.pid, "started": r.started,
                "ended": r.ended, "tail": tail.decode("utf-8", "replace"),
                "result": None if result is None else result.decode("utf-8", "replace")}

    def _report_lost(self) -> None:
        """Tasks that went with a dead executor (or a restart that found none): reported lost."""
        if not self.book.lost:
            return
        now = time.time()
        out = []
        for loc in dict.fromkeys(self.book.lost):
            h = self.book.drop(loc)
            if h is None:
                continue
            entry: dict[str, object] = {"run": h.run, "kind": P.RES_EXITED, "flags": P.FLAG_LOST, "job": h.job,
                                        "attempt": h.attempt, "signal": 0, "code": -1, "epoch": h.epoch, "pid": 0,
                                        "started": 0.0, "ended": now, "tail": "", "result": None}
            self.journal.end(loc, entry)
            out.append((loc, entry))
        self.book.lost.clear()
        if out:
            self.journal.flush()
            self._publish_entries(out)

    def _publish_entries(self, items: list[tuple[int, dict[str, object]]]) -> None:
        """Publish journaled entries, one batch per run; ends are marked stored when the broker acks."""
        by_run: dict[str, list[tuple[int, dict[str, object]]]] = {}
        for loc, e in items:
            by_run.setdefault(str(e["run"]), []).append((loc, e))
        for run, group in by_run.items():
            entries = [wire.ResultEntry(_record(e), str(e["tail"]).encode(),
                                        None if e["result"] is None else str(e["result"]).encode())
                       for _loc, e in group]
            ends = [loc for loc, e in group if e["kind"] == P.RES_EXITED]
            for data in wire.split_results(self.opts.name, run, entries):
                fut = self.link.js_publish_async(self.subjects.results(run), data)
                self.pending.append((fut, ends))  # type: ignore[arg-type]
                ends = []

    def _publish_rejections(self, run: str, tasks: list[P.TaskRecord], now: float) -> None:
        entries = [wire.ResultEntry(P.ResultRecord(P.RES_REJECTED, 0, 0, t.task, t.attempt, 0, 0, t.epoch, 0,
                                                   now, now, 0, 0)) for t in tasks]
        for data in wire.split_results(self.opts.name, run, entries):
            self.link.js_publish_async(self.subjects.results(run), data)

    def _settle_published(self) -> None:
        """Mark stored the ends whose batch the broker acknowledged."""
        if not self.pending:
            return
        keep = []
        stored: list[int] = []
        for fut, ends in self.pending:
            if not fut.done():
                keep.append((fut, ends))
            elif fut.exception() is None:
                stored.extend(ends)
            else:
                self.note(f"a result batch was refused by the broker: {fut.exception()}")
        self.pending = keep
        if stored:
            self.journal.stored(stored)

    # -- requests ------------------------------------------------------------------------------

    def _request(self, msg: Msg) -> None:
        req = M.decode_request(msg.data)
        seen = max(self.epochs.values(), default=0)
        if isinstance(req, M.KillRequest):
            self.link.respond(msg, self._kill(req).encode())
        elif isinstance(req, M.InventoryRequest):
            if req.epoch:
                self._hear_epoch(req.run, req.epoch)
            held = [{"job": h.job, "attempt": h.attempt, "epoch": h.epoch, "state": h.state}
                    for h in self.book.held.values() if h.run == req.run]
            self.link.respond(msg, M.Reply(self.opts.name, True, held=held, epoch_seen=seen).encode())
        elif isinstance(req, M.LogsRequest):
            self.link.respond(msg, self._logs(req))
        elif isinstance(req, M.HearRequest):
            heard = self.heard_runs.get(req.run, 0.0) if req.run else self.heard_active
            seen = self.epochs.get(req.run, 0) if req.run else seen
            self.link.respond(msg, M.Reply(self.opts.name, True, heard_active=heard or None,
                                           epoch_seen=seen).encode())

    def _kill(self, req: M.KillRequest) -> M.Reply:
        seen = self.epochs.get(req.run, 0)
        if req.epoch < seen:
            return M.Reply(self.opts.name, False, error=f"epoch {req.epoch} is older than {seen}: refused",
                           epoch_seen=seen)
        self.heard_active = self.heard_runs[req.run] = time.time()
        loc = self.book.by_key.get((req.run, req.job, req.attempt))
        if loc is None:
            return M.Reply(self.opts.name, False, error="not held here", epoch_seen=seen)
        self.pool.kill(Kill(loc, 1, graceful=req.signal == signal.SIGTERM))
        return M.Reply(self.opts.name, True, epoch_seen=seen)

    def _logs(self, req: M.LogsRequest) -> bytes:
        """A slice of a job attempt's output, from its log on this node."""
        path = log_name(run_dirs(self.opts.state_dir, req.run)[0], req.job_id or str(req.job), req.attempt)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                start = max(0, size + req.offset) if req.offset < 0 else min(req.offset, size)
                f.seek(start)
                data = f.read(max(0, min(req.max_bytes, MAX_LOG_SLICE)))
        except FileNotFoundError:
            # A log is made at a job's first output: none yet is an empty log.
            return M.Reply(self.opts.name, True, size=0).encode(b"")
        except OSError as e:
            return M.Reply(self.opts.name, False, error=f"no log for {req.job_id} attempt {req.attempt} on "
                                                        f"{self.opts.name}: {e.strerror}").encode()
        return M.Reply(self.opts.name, True, size=size).encode(data)

    # -- beats ---------------------------------------------------------------------------------

    def _scheduler_beat(self, msg: Msg) -> None:
        """A scheduler's beat: the active one of a run is heard (only the newest epoch's counts)."""
        try:
            beat = M.SchedulerBeat.decode(msg.data)
        except WloadError:
            return
        if beat.epoch >= self.epochs.get(beat.run, 0):
            self.heard_active = self.heard_runs[beat.run] = time.time()
        self._hear_epoch(beat.run, beat.epoch)

    def _hear_epoch(self, run: str, epoch: int) -> None:
        """A scheduler of `run` at `epoch` is heard: from now on, a dispatch of an older epoch still waiting in the
        stream is refused."""
        if epoch > self.epochs.get(run, 0):
            self.epochs[run] = epoch
            self.journal.epoch(run, epoch)

    def _beat_board(self) -> None:
        """The node's board beat: its executors' sign of a live "scheduler" (this agent)."""
        hdr = P.BoardHeader(run_id=self.node, epoch=self.epoch, scheduler_pid=os.getpid(), beat=time.time(),
                            n_executors=self.opts.executors, lease_until=time.time() + 3 * BEAT)
        self.objs.board.publish(hdr)

    def _beat(self, now: float, stopped: bool = False) -> concurrent.futures.Future[object] | None:
        """Beat on the node's board and on the broker; the future of the agents bucket's put (None: not sent)."""
        self._beat_board()
        held = [[h.run, h.job, h.attempt] for h in list(self.book.held.values())[:200]]
        hb = M.Heartbeat(agent=self.opts.name, pools=list(self.opts.pools), slots_used=self.book.running_count(),
                         slots_total=self.book.slots, cpus=self.opts.cpus, memory_mb=self.opts.memory,
                         load1=os.getloadavg()[0], rss_kb=process_rss_kb(), mem_free_mb=_mem_free_mb(),
                         jobs_held=len(self.book.held), held=held, epoch_seen=max(self.epochs.values(), default=0),
                         heard_active=self.heard_active, pid=os.getpid(), host=socket.gethostname(),
                         version=_version(), sent=now, prefetch=self.opts.prefetch, stopped=stopped,
                         boot=self.boot, host_id=host_identity())
        data = hb.encode()
        if not self.link.connected:
            return None
        # (the last one, `stopped`, tells the schedulers it is gone: they settle its jobs now, not at its timeout)
        self.link.publish(self.subjects.hb(self.opts.name), data)
        # The agents bucket keeps the last beat for `wloadctl agents`; a put is a stream publish.
        return self.link.js_publish_async(  # type: ignore[return-value]
            f"$KV.{self.subjects.agents_bucket}.{self.opts.name}", data)


def _record(e: dict[str, object]) -> P.ResultRecord:
    """The run's result record of a journaled entry (executor 0: the scheduler knows the node by its name)."""
    return P.ResultRecord(int(e["kind"]), int(e["flags"]), 0, int(e["job"]), int(e["attempt"]),  # type: ignore[call-overload]
                          int(e["signal"]), int(e["code"]), int(e["epoch"]), int(e["pid"]),  # type: ignore[call-overload]
                          float(e["started"]), float(e["ended"]), 0, 0)  # type: ignore[arg-type]


def _mem_free_mb() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("wloadctl")
    except PackageNotFoundError:
        return "0"


def _pool_words(event: str, fields: dict[str, object]) -> str:
    """A report of the agent's executor pool as a line of words (`executor 1 lost: no heartbeat for 12.0s`)."""
    if "text" in fields:
        return str(fields["text"])
    what = {"executor_lost": "lost", "executor_stopped": "stopped"}.get(event, event.replace("_", " "))
    who = f"executor {fields['executor']} " if "executor" in fields else ""
    why = f": {fields['reason']}" if "reason" in fields else ""
    rest = ", ".join(f"{k} {v}" for k, v in fields.items() if k not in ("executor", "reason"))
    return f"{who}{what}{why}" + (f" ({rest})" if rest else "")
