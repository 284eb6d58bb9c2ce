"""The agent pool: jobs of other hosts through the broker, as the scheduler loop sees them through the pool seam.

Dispatches go to work-queue streams (a pool's subject, or one agent's); results come back on
the run's results stream, read through a durable consumer and acknowledged only after the
turn that applied them is journaled; heartbeats tell which agents live and what they offer.
Each agent is one node of the engine (executor index AGENT_BASE and up, numbered in the run's journal,
so every scheduler of the run, on any host, gives an agent the same one): a node silent past the
agent timeout is LOST and its jobs go back to the engine's policy; what it reports later about
those attempts is ignored, and what it still runs of them is killed once it is heard again.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from wloadctl.core.commands import Kill
from wloadctl.core.events import (
    ExecutorLostEvent,
    JobAcceptedEvent,
    JobExitedEvent,
    PlaceCapacityEvent,
    TasksLostEvent,
)
from wloadctl.core.holding import LOCAL_PLACE, place_of
from wloadctl.core.states import JobState
from wloadctl.errors import Fenced, WloadError
from wloadctl.ipc import protocol as P
from wloadctl.procs.pools import Book, Feed
from wloadctl.procs.reports import ReportReader
from wloadctl.procs.runctx import result_of_bytes
from wloadctl.remote import messages as M
from wloadctl.remote import wire
from wloadctl.remote.agents import (
    AGENT_BASE,
    NODES_FILE,
    AgentState,
    agent_state,
    agents_elsewhere,
    elsewhere_text,
)
from wloadctl.remote.broker import Subjects, ensure_streams
from wloadctl.remote.holdings import Holdings, sender_of
from wloadctl.remote.link import BrokerLink, LinkWatch
from wloadctl.remote.pulling import Msg, Puller
from wloadctl.remote.witness import take_lead
from wloadctl.store.base import StaleEpoch

if TYPE_CHECKING:
    from wloadctl.procs.control import ControlDesk
    from wloadctl.store.base import Store

TAKEOVER_INVENTORY_WAIT = 3.0
"""Longest wait of a takeover for the inventories of the agents it knows to be about (each one's answer ends it
sooner): one that has not answered by then has its in-flight jobs judged lost and sent again."""

_GONE = (AgentState.LOST, AgentState.STOPPED)
"""An agent no longer there to run what was placed on it: silent past its timeout, or stopped cleanly."""

BEAT = 1.0
"""Seconds between the scheduler's beats to the agents."""

LOOK_ELSEWHERE = 3.0
"""Seconds after its start a scheduler looks under other prefixes for the agents of a place it has none for."""

ORPHAN_SETTLE = 1.0
"""Seconds after an agent was lost before the tasks it may have taken unreported are settled."""
ORPHAN_CHECK = 1.0
"""Seconds between looks at those tasks (each asks the broker and the agents)."""
MAX_BATCH = 512
"""Most tasks in one dispatch message."""
RESULTS_READ_CAP = 300.0
"""Longest a recovering scheduler reads the results its run's stream holds before judging its in-flight jobs
(it stops sooner once the consumer has not moved for its wait)."""


@dataclass
class Node:
    """One agent as the scheduler knows it."""

    name: str
    """Its name."""
    index: int
    """Its executor index in the engine."""
    pools: list[str] = field(default_factory=list)
    """Pools it serves."""
    slots: int = 0
    """Tasks it runs at once."""
    prefetch: int = 0
    """Tasks per slot it takes ahead (so it holds up to slots * (1 + prefetch))."""
    heard: float = 0.0
    """When its last heartbeat arrived (this host's clock)."""
    state: AgentState = AgentState.LOST
    """As last judged."""
    beat: M.Heartbeat | None = None
    """Its last heartbeat."""
    stale: set[tuple[int, int]] = field(default_factory=set)
    """(job, attempt) it held when it was declared LOST, or its beats stopped listing: not its to finish any more."""
    holdings: Holdings | None = None
    """What its beats list against what this scheduler placed on it, and whether two agents share its name."""


class AgentPool:
    """Agents on other hosts, reached through the broker."""

    keeps_jobs: ClassVar[bool] = True
    """Agents keep their jobs when this scheduler stops: the results wait in the broker for the next one."""

    def __init__(self, core: Book, link: BrokerLink, subjects: Subjects, run_id: str, epoch: int,
                 reader: ReportReader, payload_of: Callable[[int, int], bytes | None], state_dir: Path,
                 specs: list, *, timeout: float = 10.0, say: Callable[[str, dict[str, object]], None],
                 beat: float = BEAT, note: Callable[[str], None] | None = None, store: Store, run_row: int,
                 legacy: dict[int, str] | None = None) -> None:
        self.core = core
        """The engine (read only)."""
        self.link = link
        """The broker connection."""
        self.subjects = subjects
        """Names on the broker."""
        self.run_id = run_id
        """The run."""
        self.epoch = epoch
        """This scheduler's epoch, carried by every dispatch and kill."""
        self.reader = reader
        """Records to events."""
        self.payload_of = payload_of
        """Encoded payload of (job, attempt); None for a no-op job."""
        self.state_dir = state_dir
        """Where the agents as last judged are written for the operator (NODES_FILE)."""
        self.store = store
        """The run's journal, where its agents are numbered (used from the loop's thread, which owns it)."""
        self.run_row = run_row
        """The run's row id in the journal."""
        self.specs = specs
        """Job specs by index (their place)."""
        self.timeout = timeout
        """Seconds of silence before an agent is LOST."""
        self.say = say
        """Event log line for the operator."""
        self.note = note or (lambda _line: None)
        """A line for the scheduler's own log (the broker lost and back)."""
        self.watch = LinkWatch(link)
        """Whether the broker is there: agents' beats cannot reach this scheduler while it is not."""
        self.nodes: dict[str, Node] = {}
        """Agents heard of, by name."""
        self.by_index: dict[int, Node] = {}
        """The same, by executor index."""
        self.waiting: dict[str, list[tuple[int, int]]] = {}
        """Dispatches not yet published, by place."""
        self.to_ack: list[Msg] = []
        """Result messages applied this turn: acknowledged once the turn is journaled."""
        self.pending_kill: dict[int, Kill] = {}
        """Kills of jobs no agent had accepted yet."""
        self.unsent_kills: dict[tuple[str, int, int], int] = {}
        """Kills asked for while the broker was away, sent once it is back: (agent, job, attempt) -> signal."""
        self.capacity: dict[str, int] = {}
        """Slots each remote place was last said to offer."""
        self.started_at = time.time()
        """When this pool began (a place without agents is looked for under other prefixes a while later)."""
        self.looked_elsewhere: set[str] = set()
        """Places without agents already looked for under other prefixes (once each)."""
        self.foreign: set[str] = set()
        """Agents heard beating in another release's messages (said once each)."""
        self.places = {place_of(s) for s in specs} - {LOCAL_PLACE}
        """The remote places this plan uses."""
        self.beat = beat
        """Seconds between the scheduler's beats to the agents (a standby judges hearing by them)."""
        self.on_op: Callable[[bytes, Callable[[bytes], None], float, str], None] | None = None
        """Where operator verbs sent through the broker go (the loop's control desk)."""
        self.results: Puller | None = None
        """The puller of this run's results."""
        self.next_beat = 0.0
        self.orphans: tuple[float, set[tuple[int, int]]] | None = None
        """After an agent was lost: since when, and the unaccepted tasks it may have taken."""
        self.refused: set[tuple[int, int]] = set()
        """Tasks an agent refused a copy of from an older epoch: that copy never ran (see `recover`)."""
        self.unstarted: set[tuple[int, int]] = set()
        """Orphans an agent reported lost before any executor of its node accepted them (see `_give_up`): settled
        lost, they are requeued as a task lost before its start is, even one that may not run twice."""
        self.next_orphan_check = 0.0
        self.next_held_check = 0.0
        self.seq = 0
        self.health_due = False
        self._load_numbering(legacy or {})

    # -- setup ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Create what the broker needs, read this run's results, hear the agents."""
        ensure_streams(self.link, self.subjects)
        # The broker's leader entry first, then a beat at once: agents refuse an older epoch
        # from the moment they hear this one, before anything of the run is read or sent.
        take_lead(self.link, self.subjects, self.run_id, self.epoch, os.getpid())
        self._send_beat(time.time())
        # A consumer of this epoch's own reads every result of the run from the stream's start: what a
        # predecessor took and never acknowledged comes at once, not after the ack wait, and what
        # the journal has already is ignored by the engine (same job, attempt and end).
        self.results = self.link.pull(self.subjects.results_stream, self._consumer(self.epoch),
                                      self.subjects.results(self.run_id), window=256, source="results")
        for old in (self._consumer(self.epoch - 1), self.subjects.results_consumer(self.run_id)):
            self.link.delete_consumer(self.subjects.results_stream, old)
        self.link.subscribe(self.subjects.hb_all, source="hb")
        self.link.subscribe(self.subjects.op(self.run_id), source="op")
        self.link.subscribe(self.subjects.op_users(self.run_id), source="op")
        self._hear_last_beats()

    def _hear_last_beats(self) -> None:
        """Agents whose last beat in the agents bucket is recent count as heard now, so a run starts
        dispatching at once instead of a beat later (one that is gone is LOST after the agent timeout)."""
        now = time.time()
        try:
            entries = self.link.kv.entries(self.subjects.agents_bucket, missing_ok=True)
        except WloadError:
            return  # the live beats tell the same a second later
        for entry in entries.values():
            try:
                hb = M.Heartbeat.decode(entry.value)
            except WloadError:
                continue
            if not hb.stopped and agent_state(now - hb.sent, self.timeout) == AgentState.ALIVE:
                self._hear(hb, min(now, hb.sent))

    def _consumer(self, epoch: int) -> str:
        """The results consumer of this run's scheduler of `epoch`."""
        return self.subjects.results_consumer(f"{self.run_id}-e{epoch}")

    def release(self) -> None:
        """A fenced scheduler leaves: results it took but did not journal go back to the stream at once."""
        for m in self.to_ack:
            m.nak()
        self.to_ack.clear()
        for m in self.link.drain():
            if m.jetstream:
                m.nak()

    def _load_numbering(self, legacy: dict[int, str]) -> None:
        """Know the agents the run's schedulers numbered, by the journal's numbers.

        A run numbered before the journal kept the numbers (`legacy`: its state directory's agents file)
        has them journaled now, the same where the journal has none of them yet.
        """
        names = self.store.agent_names(self.run_row)
        if not names:
            for index, name in sorted(legacy.items()):
                names[self._number(name, index)] = name
        for index, name in names.items():
            self._add(name, index)

    def _number(self, name: str, first: int) -> int:
        """The agent's executor index as the run's journal has it (given there now if it has none).

        Raises:
            Fenced: a newer scheduler holds the run (this one may not number anything).
        """
        try:
            return self.store.agent_index(self.run_row, name, first)
        except StaleEpoch as e:
            raise Fenced(e.message) from None

    def _add(self, name: str, index: int | None = None) -> Node:
        """Know of an agent (heard of just now: it has the agent timeout to beat, or it is LOST)."""
        if index is None:
            index = self._number(name, AGENT_BASE)
        node = Node(name, index, heard=time.time(), state=AgentState.ALIVE)
        self.nodes[name] = node
        self.by_index[index] = node
        return node

    def recover(self, feed: Feed, wait: float = 1.0, expect: int = 0,
                renew: Callable[[], None] | None = None) -> list[str]:
        """After a restart: ask the agents what they hold of this run; in-flight jobs nobody holds are lost.

        Results already stored for this run come through the results consumer first (read here),
        so a job that ended while no scheduler ran is applied, not lost.

        Args:
            feed: Where the events go.
            wait: Longest wait for the agents' inventories, and again for the stored results.
            expect: Agents known to be about, by name (a takeover asked them just before): the inventory
                stops waiting once that many names answered.
            renew: keeps this scheduler's lease while the stored results are read (raises Fenced).
        """
        core = self.core
        if expect:
            # A takeover: the run goes on at once, on the agents' slots as their last beats say (a
            # fresh start hears them beat instead, so its first work spreads as their slots appear).
            self._known_agents()
            # The inventory stops waiting once every agent known to be about has answered: a longer wait costs
            # nothing then, and spares a slow agent (a loaded host) its running jobs judged lost and run twice.
            wait = max(wait, TAKEOVER_INVENTORY_WAIT)
        inflight = [i for i in range(core.n) if core.state[i] in (JobState.QUEUED, JobState.RUNNING)
                    and place_of(self.specs[i]) != LOCAL_PLACE]
        if not inflight:
            return []
        held: dict[tuple[int, int], str] = {}
        # (The epoch asked with: an agent that answers refuses from then on the older copies still in the stream.)
        ask = M.InventoryRequest(self.run_id, epoch=self.epoch)
        for raw in self.link.gather(self.subjects.ask, ask.encode(), wait=wait, max_replies=expect,
                                    sender=M.reply_agent):
            try:
                rep = M.Reply.decode(raw)
                for t in rep.tasks():
                    held[(t.job, t.attempt)] = rep.agent
            except WloadError:
                continue
        # Every result the stream holds is read before any job is judged lost or sent again: a run of
        # thousands of jobs has thousands of them, read from the stream's start. The wait goes on while
        # the consumer gets through them, and ends `wait` seconds after it last moved (broker away).
        now = time.time()
        deadline, cap, moved = now + wait, now + RESULTS_READ_CAP, None
        while now < min(deadline, cap):
            select.select([self.link.fileno()], [], [], 0.02)
            self.drain(feed, "recovery")
            if self.to_ack:
                # Acknowledged as read, not journaled yet: the consumer hands out no more than its window
                # unacknowledged. The stream keeps them (limits, not work queue): a scheduler that dies
                # before its first commit leaves them to its successor's consumer, which reads the
                # stream from its start.
                self.link.ack_all(self.to_ack)
                self.to_ack.clear()
            if renew is not None:
                renew()
            left = self._results_left()
            if left == 0:
                break
            now = time.time()
            if left is not None and left != moved:
                moved, deadline = left, now + wait
        kept = lost = 0
        unsure: set[tuple[int, int]] = set()
        for i in inflight:
            if core.state[i] not in (JobState.QUEUED, JobState.RUNNING):
                continue  # its result came through the consumer
            who = held.get((i, core.attempt[i]))
            if who is not None:
                node = self.nodes.get(who) or self._add(who)
                feed(JobAcceptedEvent(i, core.attempt[i], node.index, time.time(), cause_id="recovery"))
                kept += 1
            elif core.state[i] == JobState.RUNNING:
                ran_on = self.by_index.get(core.executor[i])
                if ran_on is not None:
                    # Its agent did not answer in time (frozen, slow): if it is alive after all, its beats list
                    # this attempt, and the copy is killed, as a lost agent's are when it comes back, rather
                    # than run on beside the copy the job's policy starts now.
                    ran_on.stale.add((i, core.attempt[i]))
                feed(JobExitedEvent(i, core.attempt[i], -1, -1, time.time(), lost=True, cause_id="recovery"))
                lost += 1
            elif self.specs[i].idempotent:
                # QUEUED and held by nobody: sent again under this epoch (agents refuse the older copy,
                # if one still waits in the stream, once they have heard this scheduler's epoch).
                self.submit([(i, core.attempt[i])])
            else:
                # One that may not run twice may have been taken by an agent that is gone since, and started:
                # it is settled as a lost agent's tasks are, once the broker has handed out every dispatch
                # (`_settle_orphans`). A copy refused for its older epoch never ran: that one is sent again.
                unsure.add((i, core.attempt[i]))
        if unsure:
            since, before = self.orphans or (time.time(), set())
            self.orphans = (since, before | unsure)
        said = [f"agents hold {kept} of {len(inflight)} in-flight remote job(s); {lost} lost (retried under policy)"]
        if unsure:
            said.append(f"{len(unsure)} queued job(s) that may not run twice (idempotent: false) and no agent holds: "
                        "sent again if their dispatch is still unread, held if an agent that is gone took it")
        return said

    def _results_left(self) -> int | None:
        """Result messages stored for this run not yet drained here (None: not known now)."""
        if self.results is None:
            return None
        try:
            pending, unacked = self.link.consumer_backlog(self.subjects.results_stream, self._consumer(self.epoch))
        except WloadError:
            return None
        # The consumer is this scheduler's alone: every message it delivered is drained once
        # none is unsettled beyond those waiting for the turn's commit.
        return pending + max(0, unacked - len(self.to_ack))

    # -- the loop's side -----------------------------------------------------------------------

    def serves(self, job: int) -> bool:
        """Whether the job runs on an agent (its plan names a pool or an agent)."""
        return self.remote_of(job)

    def attach(self, poller: select.poll) -> None:
        """Wait on the broker link's wake descriptor."""
        poller.register(self.link.fileno(), select.POLLIN)

    def join_desk(self, desk: ControlDesk) -> None:
        """Verbs of operators on other hosts reach the desk through the broker, vouched for by its gate."""
        from wloadctl.remote.operators import OperatorGate

        self.on_op = desk.take
        desk.gate = OperatorGate.of(self.link, self.subjects, self.run_id)

    def on_ready(self, fd: int, cause: str) -> bool:
        """Handle the link's descriptor."""
        if fd != self.link.fileno():
            return False
        self.drain(self.core.feed, cause)
        return True

    def submit(self, tasks: list[tuple[int, int]], follow: frozenset[int] = frozenset()) -> None:
        """Take dispatched (job, attempt) pairs; pump() publishes them (the engine sends agents no followers)."""
        for i, att in tasks:
            self.waiting.setdefault(place_of(self.specs[i]), []).append((i, att))

    def pump(self) -> None:
        """Publish waiting dispatches, many tasks a message (the broker keeps them until an agent pulls)."""
        if not self.waiting:
            return
        core = self.core
        out: list[tuple[str, bytes, str]] = []
        for place, tasks in self.waiting.items():
            kind, _, name = place.partition(":")
            subject = self.subjects.dispatch_pool(name) if kind == "pool" else self.subjects.dispatch_agent(name)
            live = [t for t in tasks if core.state[t[0]] == JobState.QUEUED and core.attempt[t[0]] == t[1]]
            per = self._batch_size(place)
            for k in range(0, len(live), per):
                chunk = live[k : k + per]
                recs, payloads = [], []
                for i, att in chunk:
                    data = self.payload_of(i, att)
                    recs.append(P.TaskRecord(i, att, P.TASK_NOOP if data is None else P.TASK_SHELL, core.tier[i],
                                             self.epoch, 0, 0))
                    payloads.append(data or b"")
                for msg in wire.split_dispatch(self.epoch, self.run_id, self.run_id, recs, payloads):
                    self.seq += 1
                    out.append((subject, msg, f"{self.run_id}.{self.epoch}.{self.seq}"))
        # One hand-over to the link's loop for the turn's batches, in order.
        self.link.js_publish_many(out)
        self.waiting.clear()

    def _batch_size(self, place: str) -> int:
        """Tasks per message: no more than one agent of the place takes at once, so work spreads."""
        kind, _, name = place.partition(":")
        sizes = [n.slots for n in self.nodes.values() if n.state == AgentState.ALIVE and
                 (name in n.pools if kind == "pool" else n.name == name)]
        return max(1, min(MAX_BATCH, min(sizes) if sizes else 1))

    def pending(self) -> bool:
        """Dispatches not yet published."""
        return bool(self.waiting)

    def backlog(self) -> int:
        """Dispatches not yet published (the broker holds the rest until an agent pulls)."""
        return sum(len(t) for t in self.waiting.values())

    def starved(self) -> bool:
        """Never: payloads travel in the dispatch messages, not this host's arena."""
        return False

    def traffic(self) -> tuple[int, int]:
        """None over this host's queues: the agents' messages travel on the broker."""
        return 0, 0

    def next_due(self) -> float:
        """Nothing timed between beats: a kill is the agent's to follow through."""
        return float("inf")

    def fire_kills(self, now: float) -> None:
        """Nothing to fire: an agent sends its SIGKILL after the grace itself."""

    def alive(self) -> int:
        """Agents heard within the timeout."""
        return sum(1 for n in self.nodes.values() if n.state == AgentState.ALIVE)

    def stop_all(self) -> None:
        """Nothing to stop: agents keep their jobs (see keeps_jobs)."""

    def take_ahead(self) -> bool:
        """Nothing is taken ahead: the link's client buffers what the broker sends."""
        return False

    def after_commit(self) -> None:
        """The turn is journaled: the results it applied may leave the stream."""
        if self.to_ack:
            self.link.ack_all(self.to_ack)
            self.to_ack.clear()

    def flush(self, timeout: float) -> None:
        """Wait until the broker has what the link sent (an answer to an operator of another host)."""
        self.link.flush(timeout)

    # -- results and heartbeats ----------------------------------------------------------------

    def drain(self, feed: Feed, cause: str) -> None:
        """Apply every result batch and heartbeat the link has delivered."""
        for m in self.link.drain():
            if m.source == "hb":
                self._heartbeat(m.data)
            elif m.source == "op":
                if self.on_op is not None:
                    self.on_op(m.data, functools.partial(self.link.respond, m), time.time(), m.subject)
            elif m.source == "results":
                try:
                    self._results(m, feed, cause)
                except WloadError as e:
                    if isinstance(e, Fenced):
                        raise
                    self.say("bad_result_message", {"error": e.one_line()})
                    m.term()
                    continue
                self.to_ack.append(m)

    def _results(self, m: Msg, feed: Feed, cause: str) -> None:
        batch = wire.decode_results(m.data)
        node = self.nodes.get(batch.agent) or self._add(batch.agent)
        reader, n = self.reader, self.core.n
        plain: list[P.ResultRecord] = []
        for e in batch.entries:
            r = e.record
            i = r.task
            if i >= n:
                continue
            if r.kind == P.RES_REJECTED:
                if r.epoch == self.epoch:
                    raise Fenced(f"fenced: agent {batch.agent} refused this scheduler's epoch {r.epoch}: "
                                 "another scheduler took over")
                self.refused.add((i, r.attempt))
                continue
            if (i, r.attempt) in node.stale:
                if r.kind == P.RES_EXITED:
                    node.stale.discard((i, r.attempt))
                    if self.core.held_lost.get(i) == r.attempt and not r.flags & P.FLAG_LOST:
                        # Held when the node was lost (idempotent: false): how the attempt really ended,
                        # heard now (the job was held until now, whenever it had ended).
                        late = reader.exited(r, cause, node=node.index, tail=e.tail.decode("utf-8", "replace"),
                                             result=result_of_bytes(e.result) if e.result is not None else {})
                        feed(dataclasses.replace(late, now=time.time(), ended=late.now))
                continue  # the node was declared lost with it: the engine has moved on
            if 0 <= self.core.executor[i] != node.index:
                continue  # another node holds this attempt now: this node's copy is a late, stale one
            if r.kind == P.RES_EXITED and r.flags & P.FLAG_LOST and self._give_up(i, r.attempt):
                continue
            if r.kind == P.RES_EXITED and (e.tail or e.result is not None or r.flags):
                result = result_of_bytes(e.result) if e.result is not None else None
                feed(reader.exited(r, cause, node=node.index, tail=e.tail.decode("utf-8", "replace"),
                                   result=result if result is not None else {}))
                continue
            if r.kind != P.RES_EXITED:
                k = self.pending_kill.pop(i, None)
                if k is not None:
                    self._send_kill(node, i, k.attempt, signal.SIGTERM if k.graceful else signal.SIGKILL)
                # Heard now, in the batch's order: a job that printed and ended at once comes with its start
                # in one batch, and its end (with its tail, fed above) must not reach the engine first.
                heard = reader.event(r, cause, node=node.index)
                if heard is not None:
                    feed(heard)
                continue
            plain.append(r)
        for ev in reader.batch(plain, cause, time.time(), node=node.index):
            feed(ev)

    def _known_agents(self) -> None:
        """The agents' last beats kept in the broker: a (new) scheduler knows their slots before they beat again."""
        self._hear_last_beats()

    def _heartbeat(self, data: bytes, heard: float | None = None) -> None:
        try:
            hb = M.Heartbeat.decode(data)
        except WloadError:
            self._foreign_beat(data)
            return
        self._hear(hb, time.time() if heard is None else heard)

    def _foreign_beat(self, data: bytes) -> None:
        """A beat of an agent of another wloadctl release: it takes none of this run's work (nor this run any of
        its), which its jobs' waiting would not tell; said once an agent."""
        body = M.foreign_body(data)
        if body is None or not isinstance(name := body.get("agent"), str) or name in self.foreign:
            return
        self.foreign.add(name)
        pools = body.get("pools")
        serves = f" (pools {', '.join(map(str, pools))})" if isinstance(pools, list) and pools else ""
        reason = (f"agent {name}{serves} beats in broker messages of version {body['v']!r} (this scheduler reads "
                  f"{M.VERSION}): it takes none of this run's jobs (schedulers and agents must come from the same "
                  "wloadctl release)")
        self.say("agent_foreign", {"agent": name, "reason": reason})
        self.note(reason)

    def _hear(self, hb: M.Heartbeat, heard: float) -> None:
        node = self.nodes.get(hb.agent) or self._add(hb.agent)
        was = node.state
        if node.beat is not None and was not in _GONE and (node.holdings is None
                                                                 or sender_of(hb) not in node.holdings.heard):
            # A new agent process beats under the name (started again, or a second one): the one before may have
            # taken dispatches and gone with them unreported, as a lost agent may (see check).
            self._may_have_taken(node, heard)
        node.heard, node.beat, node.pools, node.slots = heard, hb, list(hb.pools), hb.slots_total
        node.prefetch = max(0, hb.prefetch)
        if node.holdings is None:
            node.holdings = Holdings(self.run_id, self.timeout)
        if node.holdings.hear(hb, heard):
            others = node.holdings.others()
            self.say("agent_duplicate", {"agent": node.name, "agents": others, "reason": (
                f"{len(others)} live agents beat under the name {node.name} ({'; '.join(others)}): their jobs "
                "and kills are shared; give each its own --name")})
        if hb.stopped:
            self.health_due = True  # (check settles what it held)
            return
        if was != AgentState.ALIVE:
            node.state = AgentState.ALIVE
            self.health_due = True
            if was in _GONE and node.stale:
                self.say("agent_back", {"agent": node.name, "stale": len(node.stale)})
        if node.stale or was in _GONE:
            # Heard again after being declared lost: what it still holds of this run is not its to run
            # any more (its jobs went back to their policy; what it took unreported was sent again).
            core = self.core
            for run, job, att in hb.held:
                if run == self.run_id and ((job, att) in node.stale or (was in _GONE and
                                                                        core.executor[int(job)] != node.index)):
                    node.stale.add((int(job), int(att)))
                    if core.held_lost.get(int(job)) != int(att):
                        # (a job held for an operator when the node was lost, one that may not run twice, goes on
                        # to its end: how it ends is the job's outcome, see SchedulerCore._late_exit)
                        self._send_kill(node, int(job), int(att), signal.SIGKILL)

    # -- health --------------------------------------------------------------------------------

    def check(self, now: float, feed: Feed, cause: str, replace: bool = True) -> None:
        """Judge every agent, give the engine each place's slots, beat to the agents (an agent is never
        replaced from here: `replace` is the local pool's)."""
        self.health_due = False
        core = self.core
        self._watch_broker(now)
        for node in self.nodes.values() if self.watch.up else ():
            # (an agent's last beat says it stopped cleanly: it is gone now, not once its timeout is out)
            st = AgentState.STOPPED if node.beat is not None and node.beat.stopped else \
                agent_state(now - node.heard, self.timeout)
            if st == node.state:
                continue
            if st in _GONE:
                # It reported the jobs it stopped as lost; any other placed on it went with it unreported.
                node.stale = {(i, core.attempt[i]) for i in range(core.n) if core.executor[i] == node.index
                              and core.state[i] in (JobState.QUEUED, JobState.RUNNING)}
                why = f"agent {node.name} stopped" if st == AgentState.STOPPED else \
                    f"agent {node.name} silent for {now - node.heard:.1f}s"
                self.say("agent_stopped" if st == AgentState.STOPPED else "agent_lost",
                         {"agent": node.name, "jobs": len(node.stale), "reason": why})
                if st == AgentState.LOST or node.stale:
                    # Told on the operator's terminal too, as a local executor lost is.
                    self.note(f"{why}: {'LOST' if st == AgentState.LOST else 'STOPPED'}, "
                              f"{len(node.stale)} of this run's job(s) were on it: they run again, or are held "
                              "when they may not run twice")
                feed(ExecutorLostEvent(node.index, now, why, cause_id=cause, unheard=True))
                self._may_have_taken(node, now)
            node.state = st
        if self.watch.up and now >= self.next_held_check:
            self.next_held_check = now + self.beat
            self._check_held(now, feed, cause)
        if self.orphans is not None and now >= self.next_orphan_check:
            self.next_orphan_check = now + ORPHAN_CHECK
            self._settle_orphans(now, feed, cause)
        for place in self.places:
            kind, _, name = place.partition(":")
            # What the agents take ahead counts: the tasks in flight to an agent keep its slots busy
            # while its results travel back (as a local executor's prefetch does).
            slots = sum(n.slots * (1 + n.prefetch) for n in self.nodes.values() if n.state == AgentState.ALIVE and
                        (name in n.pools if kind == "pool" else n.name == name))
            if self.capacity.get(place) != slots:
                self.capacity[place] = slots
                feed(PlaceCapacityEvent(place, slots, now, cause_id=cause))
            if not slots and place not in self.looked_elsewhere and now - self.started_at >= LOOK_ELSEWHERE \
                    and self.link.connected:
                self._look_elsewhere(place, now)
        if now >= self.next_beat:
            self._write_rows(now)
            self._send_beat(now)

    def _look_elsewhere(self, place: str, now: float) -> None:
        """A place no live agent serves a while after the start: say so if agents serving it beat under another
        prefix of the broker (an agent and a run given different `--prefix` never meet; the jobs wait)."""
        self.looked_elsewhere.add(place)
        kind, _, name = place.partition(":")
        found = agents_elsewhere(self.link, self.subjects.prefix, now, self.timeout,
                                 pool=name if kind == "pool" else None)
        if kind != "pool":
            found = {p: [a for a in agents if a == name] for p, agents in found.items()}
            found = {p: agents for p, agents in found.items() if agents}
        if found:
            self.say("agents_elsewhere", {"place": place, "prefixes": sorted(found)})
            self.note(f"no live agent serves {place} under prefix '{self.subjects.prefix}', but agents beat "
                      f"{elsewhere_text(found)}: a run and its agents share one --prefix (its jobs wait)")

    def _may_have_taken(self, node: Node, now: float) -> None:
        """An agent process of the node's name is gone (lost, or another beats under the name): it may have taken
        dispatches it never reported. Settled once the broker has handed out every dispatch and the live agents
        have said what they hold (`_settle_orphans`)."""
        core = self.core
        taken = {(i, core.attempt[i]) for i in range(core.n) if core.state[i] == JobState.QUEUED
                 and core.executor[i] < 0 and self.remote_of(i)}
        if taken:
            since, before = self.orphans or (now, set())
            self.orphans = (since, before | taken)
            self.unstarted -= taken  # (an agent that took one again may have started it, and went with it)

    def _give_up(self, i: int, attempt: int) -> bool:
        """An agent reports job i's attempt lost: whether it waits with the orphans (True) rather than being
        requeued now.

        One no executor was heard to accept may have come to the agent in a dispatch it never
        acknowledged (it died between journaling the task and acknowledging it, or the ack went
        with the connection): the broker delivers that dispatch again, to it or to another agent
        of the place, and a copy requeued now would run beside that one. It is settled as a lost
        agent's tasks are, once the broker has handed out every dispatch (`_settle_orphans`).
        """
        core = self.core
        if core.state[i] != JobState.QUEUED or core.attempt[i] != attempt or core.executor[i] >= 0:
            return False
        since, before = self.orphans or (time.time(), set())
        self.orphans = (since, before | {(i, attempt)})
        self.unstarted.add((i, attempt))
        return True

    def _watch_broker(self, now: float) -> None:
        """Say when the broker goes and comes back; an agent's silence while it was away is not held against it."""
        change = self.watch.look()
        if change is None:
            return
        kind, seconds = change
        self.say(f"broker_{kind}", {"seconds": round(seconds, 1)})
        if kind == "lost":
            self.note(f"{self.watch.line(change)}; agents' silence is not counted until it is back")
            return
        self.note(f"{self.watch.line(change)}; agents have {self.timeout:g}s to be heard again")
        if self.unsent_kills:
            self.note(f"{len(self.unsent_kills)} kill(s) asked for while it was away sent now")
            self._resend_kills()
        # Their beats could not reach this scheduler: each agent not already lost gets a fresh timeout,
        # and the tasks its beats did not list a fresh grace.
        for node in self.nodes.values():
            if node.state not in _GONE:
                node.heard = max(node.heard, now)
            if node.holdings is not None:
                node.holdings.forget()

    def _check_held(self, now: float, feed: Feed, cause: str) -> None:
        """Jobs placed on a live agent that its beats have stopped listing are lost (see remote/holdings.py).

        The grace is the agent timeout: as long as a silent agent is given, and ample for a report of
        the job's end to arrive (which settles it first).
        """
        core = self.core
        placed: dict[int, set[tuple[int, int]]] = {}
        state, attempt = core.state, core.attempt
        for i, ex in enumerate(core.executor):
            if ex >= AGENT_BASE and state[i] in (JobState.QUEUED, JobState.RUNNING):
                placed.setdefault(ex, set()).add((i, attempt[i]))
        for node in self.nodes.values():
            if node.holdings is None or node.state in _GONE:
                continue
            gone = node.holdings.missing(placed.get(node.index, set()), now, self.timeout)
            if not gone:
                continue
            node.stale.update(gone)
            self.say("jobs_not_held", {"agent": node.name, "jobs": len(gone), "reason": (
                f"agent {node.name} is heard but has not held {len(gone)} of its job(s) for {self.timeout:g}s "
                "(started again without its state, or another agent of its name)")})
            for i, att in gone:
                feed(JobExitedEvent(i, att, node.index, -1, now, lost=True, unheard=True, cause_id=cause))

    def _settle_orphans(self, now: float, feed: Feed, cause: str) -> None:
        """Send again what a lost agent took and never reported (exactly, not by guess).

        A dispatch stays in its work queue until an agent acknowledges it, and an agent writes
        a task in its journal before acknowledging it. So once every consumer of the places
        involved has nothing pending or unacknowledged, each task still unaccepted is either
        held by a live agent (its inventory says so: its report is on its way) or went with
        the lost one.
        """
        assert self.orphans is not None
        since, keys = self.orphans
        core = self.core
        keys = {(i, a) for i, a in keys
                if core.state[i] == JobState.QUEUED and core.attempt[i] == a and core.executor[i] < 0}
        self.unstarted &= keys
        if not keys:
            self.orphans = None
            return
        self.orphans = (since, keys)
        if now - since < ORPHAN_SETTLE or not self.link.connected:
            return
        for place in {place_of(self.specs[i]) for i, _a in keys}:
            kind, _, name = place.partition(":")
            durable = self.subjects.pool_consumer(name) if kind == "pool" else self.subjects.agent_consumer(name)
            try:
                pending, unacked = self.link.consumer_backlog(self.subjects.dispatch_stream, durable, timeout=2.0)
            except WloadError:
                return  # the broker cannot say now: the next check asks again
            if pending or unacked:
                return  # some dispatch is still on its way to an agent
        held = {(t.job, t.attempt) for tasks in self._held().values() for t in tasks}
        lost = tuple(sorted(k for k in keys if k not in held and k not in self.refused and k not in self.unstarted))
        unstarted = tuple(sorted(k for k in keys if k not in held and k not in self.refused and k in self.unstarted))
        again = sorted(k for k in keys if k not in held and k in self.refused)
        self.orphans = None
        self.refused.clear()
        self.unstarted.clear()
        if again:
            self.submit(again)  # their copies of an older epoch were refused unrun: this epoch's go now
        if lost:
            self.say("tasks_lost", {"jobs": len(lost), "reason": "taken by a lost agent and never reported"})
            feed(TasksLostEvent(lost, now, cause_id=cause, unheard=True))
        if unstarted:
            # Their agent said no executor of its node accepted them, and no copy of their dispatch is left.
            feed(TasksLostEvent(unstarted, now, cause_id=cause))

    def _send_beat(self, now: float) -> None:
        """Tell the agents this scheduler is alive (they note it; a standby asks them)."""
        self.next_beat = now + self.beat
        if self.link.connected:
            self.link.publish(self.subjects.beat(self.run_id), M.SchedulerBeat(
                self.run_id, self.epoch, os.getpid(), socket.gethostname(), now).encode())

    def stood_down(self) -> None:
        """Say on the broker that this fenced scheduler leaves the run (a drill of another host waits for it)."""
        now = time.time()
        try:
            self.link.publish(self.subjects.pair(self.run_id), M.PairBeat(
                self.run_id, "active", "stood-down", socket.gethostname(), os.getpid(), self.epoch, now, 0.0,
                now).encode())
            self.link.flush(1.0)
        except WloadError:
            pass  # the broker is away: the journal's epoch says the same to whoever asks

    def _write_rows(self, now: float) -> None:
        """The agents as this scheduler judges them, for `status` and the console (read from the state dir)."""
        tmp = self.state_dir / f".{NODES_FILE}.tmp"
        try:
            tmp.write_text(json.dumps({"written": now, "broker_connected": self.link.connected,
                                       "broker": self.link.options.shown(), "broker_lost_since": self.link.down_since,
                                       "agents": self.rows(now)}))
            os.replace(tmp, self.state_dir / NODES_FILE)
        except OSError:
            pass  # a full disk: the next beat tries again; nothing depends on this file

    # -- kills ---------------------------------------------------------------------------------

    def kill(self, c: Kill) -> None:
        """Ask the agent that holds the job to stop it (or remember it until one accepts it)."""
        node = self.by_index.get(self.core.executor[c.job])
        if node is None:
            self.pending_kill[c.job] = c
            return
        self._send_kill(node, c.job, c.attempt, signal.SIGTERM if c.graceful else signal.SIGKILL)

    def _send_kill(self, node: Node, job: int, attempt: int, sig: int) -> None:
        """Publish a kill to the agent; while the broker is away, keep it for when it is back (see _resend_kills)."""
        if self.link.connected:
            try:
                self.link.publish(self.subjects.ctl(node.name),
                                  M.KillRequest(self.run_id, job, attempt, int(sig), self.epoch).encode())
                return
            except WloadError:
                pass  # it went meanwhile
        key = (node.name, job, attempt)
        # A SIGKILL asked for later outranks a SIGTERM kept.
        self.unsent_kills[key] = int(sig) if sig == signal.SIGKILL else self.unsent_kills.get(key, int(sig))

    def _resend_kills(self) -> None:
        """The broker is back: the kills asked for meanwhile go to their agents, for attempts still under way."""
        kept, self.unsent_kills = self.unsent_kills, {}
        state, attempt = self.core.state, self.core.attempt
        for (name, job, att), sig in kept.items():
            node = self.nodes.get(name)
            if node is not None and attempt[job] == att and state[job] in (JobState.QUEUED, JobState.RUNNING,
                                                                             JobState.HELD):
                self._send_kill(node, job, att, sig)

    # -- views ---------------------------------------------------------------------------------

    def rows(self, now: float) -> list[dict[str, object]]:
        """One row per agent, for status and the console."""
        out = []
        for n in sorted(self.nodes.values(), key=lambda n: n.index):
            b = n.beat
            out.append({"agent": n.name, "index": n.index, "state": n.state.name, "pools": n.pools,
                        "slots_used": b.slots_used if b else 0, "slots": n.slots,
                        "load1": b.load1 if b else 0.0, "jobs_held": b.jobs_held if b else 0,
                        "age": round(now - n.heard, 1) if n.heard else None,
                        "duplicates": n.holdings.others() if n.holdings is not None else []})
        return out

    def health(self, now: float) -> list[dict[str, object]]:
        """One row per agent (see rows)."""
        return self.rows(now)

    def inventory(self) -> dict[int, set[tuple[int, int]]]:
        """What each agent that answers still holds of this run (asked over the broker), by node index."""
        out: dict[int, set[tuple[int, int]]] = {}
        for name, tasks in self._held().items():
            node = self.nodes.get(name)
            if node is not None:
                out[node.index] = {(t.job, t.attempt) for t in tasks if t.state != "exited"}
        return out

    def _held(self, wait: float = 0.5) -> dict[str, list[M.HeldTask]]:
        """Each answering agent's inventory of this run, by agent name (exited tasks included: their
        reports may be on their way)."""
        out: dict[str, list[M.HeldTask]] = {}
        for raw in self.link.gather(self.subjects.ask, M.InventoryRequest(self.run_id).encode(), wait=wait):
            try:
                reply = M.Reply.decode(raw)
                out.setdefault(reply.agent, []).extend(reply.tasks())
            except WloadError:
                continue
        return out

    def remote_of(self, i: int) -> bool:
        """Whether job i runs on an agent."""
        return place_of(self.specs[i]) != LOCAL_PLACE
