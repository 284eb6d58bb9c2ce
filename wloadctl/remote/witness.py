"""The agents as witnesses of a run's active scheduler, and the run's leader entry in the broker.

A standby on another host cannot see the active scheduler's board or executors; what it can
reach is the journal (whose lease says when the active last renewed) and the agents (which
note when the active's beats, dispatches and kills last reached them). Before it takes a run
over it asks the agents, and it does so only if none of those answering still hears the
active. The epoch it then holds is written in the store (the authority) and in the KV bucket
`PFX-leader` under compare-and-set, where operators and tools find the holder of each run.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass

from wloadctl.errors import Fenced, WloadError
from wloadctl.remote import messages as M
from wloadctl.remote.broker import Subjects
from wloadctl.remote.link import BrokerLink

ASK_WAIT = 0.3
"""Longest wait for the agents' answers to "do you still hear the active?"."""
KNOWN_FOR = 10.0
"""Seconds an agent counts as known after its last heartbeat (the standby waits for its answer)."""


@dataclass(frozen=True, slots=True)
class Hearing:
    """What the agents answering said about a run's active scheduler."""

    asked: tuple[str, ...]
    """Agents that answered."""
    hearing: tuple[str, ...]
    """Those of them that heard the active scheduler within the timeout."""


class AgentWitness:
    """A standby's view of the agents: who is about, and whether they still hear the active."""

    def __init__(self, link: BrokerLink, subjects: Subjects) -> None:
        self.link = link
        """The standby's own broker connection."""
        self.subjects = subjects
        """Names on the broker."""
        self.known: dict[str, float] = {}
        """Agents heard beating, with when (this host's clock)."""
        self.beats: dict[str, tuple[int, float]] = {}
        """Each run's active scheduler as last heard on the broker: (its epoch, when; this host's clock)."""
        link.subscribe(subjects.hb_all, source="hb")
        link.subscribe(subjects.beat_all, source="beat")

    def listen(self) -> None:
        """Take the agents' and schedulers' beats delivered so far (who is about, and when it was last heard)."""
        now = time.time()
        for m in self.link.drain():
            try:
                if m.source == "hb":
                    self.known[M.Heartbeat.decode(m.data).agent] = now
                elif m.source == "beat":
                    beat = M.SchedulerBeat.decode(m.data)
                    if beat.epoch >= self.beats.get(beat.run, (0, 0.0))[0]:
                        self.beats[beat.run] = (beat.epoch, now)
            except WloadError:
                continue

    def last_beat(self, run_id: str, epoch: int) -> float:
        """When this standby last heard the active scheduler of `run_id` (epoch `epoch` or newer) on the
        broker; 0.0 if it has not."""
        seen, at = self.beats.get(run_id, (0, 0.0))
        return at if seen >= epoch else 0.0

    def expected(self) -> int:
        """How many agents beat lately, by name (the ask stops waiting once that many names answered)."""
        self.listen()
        now = time.time()
        return sum(1 for t in self.known.values() if now - t <= KNOWN_FOR)

    def ask(self, run_id: str, epoch: int, timeout: float, wait: float = ASK_WAIT) -> Hearing:
        """Ask every agent whether it heard the scheduler of `run_id` (epoch `epoch` or newer) lately.

        Args:
            run_id: The run.
            epoch: The epoch the journal shows.
            timeout: How recent a hearing must be to count.
            wait: Longest wait for answers.

        Returns:
            The agents that answered and those that still hear the active one. When the broker
            cannot be reached nobody answers: the caller decides on the journal's lease alone.
        """
        expect = self.expected()
        try:
            raws = self.link.gather(self.subjects.ask, M.HearRequest(epoch, run_id).encode(), wait=wait,
                                    max_replies=expect, sender=M.reply_agent)
        except WloadError:
            return Hearing((), ())
        now = time.time()
        asked: list[str] = []
        hearing: list[str] = []
        for raw in raws:
            try:
                rep = M.Reply.decode(raw)
            except WloadError:
                continue
            asked.append(rep.agent)
            if rep.heard_active is not None and now - rep.heard_active <= timeout and rep.epoch_seen >= epoch:
                hearing.append(rep.agent)
        return Hearing(tuple(sorted(asked)), tuple(sorted(hearing)))


def read_leader(link: BrokerLink, subjects: Subjects, run_id: str) -> dict[str, object] | None:
    """The leader entry of a run ({"epoch", "holder", "since"}), None when there is none."""
    entry = link.kv.get(subjects.leader_bucket, run_id)
    if entry is None:
        return None
    try:
        got = json.loads(entry.value)
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def take_lead(link: BrokerLink, subjects: Subjects, run_id: str, epoch: int, pid: int) -> int:
    """Write this scheduler's epoch as the run's leader, compare-and-set on the entry's revision.

    Args:
        link: An open link.
        subjects: Names on the broker.
        run_id: The run.
        epoch: The epoch the store granted.
        pid: This scheduler's process id.

    Returns:
        The entry's new revision.

    Raises:
        Fenced: the entry already holds a newer epoch (another scheduler took the run).
        TransportError: the broker does not answer.
    """
    bucket = subjects.leader_bucket
    value = json.dumps({"epoch": epoch, "holder": f"{socket.gethostname()}:{pid}", "since": time.time()}).encode()
    while True:
        cur = link.kv.get(bucket, run_id)
        if cur is None:
            rev = link.kv.create(bucket, run_id, value)
        else:
            try:
                seen = int(json.loads(cur.value).get("epoch", 0))
            except (ValueError, AttributeError, TypeError):
                seen = 0
            if seen > epoch:
                raise Fenced(f"fenced: the broker's leader entry of run {run_id} holds epoch {seen} "
                             f"(this scheduler holds epoch {epoch})", 0, seen)
            rev = link.kv.update(bucket, run_id, value, cur.revision)
        if rev is not None:
            return rev
        # Someone wrote the entry between the read and the update: read it again and compare.
