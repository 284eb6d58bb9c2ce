"""The pool seam: what a pool reads of its tasks, what the scheduler loop asks of a pool, and the loop's pools as one.

Each job goes to the pool that serves it, and every pool is asked alike: the loop never
touches an executor, an agent, a queue of theirs or a job's process itself.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from wloadctl.core.commands import Kill

if TYPE_CHECKING:
    from wloadctl.core.events import Event
    from wloadctl.procs.control import ControlDesk

Feed = Callable[["Event"], None]
"""Where a pool's events go (the core's feed)."""


class Book(Protocol):
    """What a pool reads of the tasks it runs, indexed by task id: the engine's arrays on a
    scheduler, an agent's book of the tasks it took on a node. A pool never writes them."""

    n: int
    """Task ids are below this."""
    state: Any
    """JobState value per task."""
    attempt: Any
    """Current attempt per task."""
    executor: Any
    """Executor holding each task (-1: none known)."""
    tier: Any
    """SLA tier per task (an executor starts the most urgent first)."""
    slots: int
    """Slots offered in all."""
    held_lost: dict[int, int]
    """Tasks held when their node was lost, with that attempt: the node's late report of its end is taken."""

    def unaccepted(self) -> tuple[tuple[int, int], ...]:
        """QUEUED tasks no executor has accepted yet: (task, attempt) pairs."""
        ...

    def feed(self, event: Event) -> None:
        """Take one event."""
        ...


class Pool(Protocol):
    """What the scheduler loop asks of a pool of nodes (LocalPool, AgentPool; StubPool in tests).

    The loop keeps its pools in a `Pools` router (below) and never asks which kind a pool is:
    each job belongs to the first pool that serves it.
    """

    health_due: bool
    """A node's state changed: the loop judges health at once."""
    keeps_jobs: ClassVar[bool]
    """Its jobs go on when this scheduler stops (their results wait for the next one): the stop
    neither stops nor waits for them."""

    def serves(self, job: int) -> bool:
        """Whether a job runs on this pool's nodes."""
        ...

    def attach(self, poller: select.poll) -> None:
        """Register the descriptors the pool waits on."""
        ...

    def join_desk(self, desk: ControlDesk) -> None:
        """Carry operator verbs that reach the pool's own channel to the control desk."""
        ...

    def on_ready(self, fd: int, cause: str) -> bool:
        """Handle a ready descriptor if it is the pool's."""
        ...

    def drain(self, feed: Feed, cause: str) -> None:
        """Feed the engine every report waiting."""
        ...

    def submit(self, tasks: list[tuple[int, int]], follow: frozenset[int] = frozenset()) -> None:
        """Take dispatched (job, attempt) pairs; those in `follow` follow the task before them (Dispatch.follow:
        only a pool whose engine turned `follow` on gets any)."""
        ...

    def pump(self) -> None:
        """Send what waits, as far as there is room."""
        ...

    def after_commit(self) -> None:
        """The turn's transitions are journaled: reports applied in it may be let go."""
        ...

    def take_ahead(self) -> bool:
        """Take what waits on the pool's channel now, for the next drain (its room freed meanwhile); return
        whether anything taken so waits."""
        ...

    def flush(self, timeout: float) -> None:
        """Wait, at most `timeout` seconds, until what the pool's channel carries has left this host."""
        ...

    def pending(self) -> bool:
        """Dispatches not yet handed to a node."""
        ...

    def backlog(self) -> int:
        """Dispatched tasks waiting for room to be sent."""
        ...

    def starved(self) -> bool:
        """Sending waits for memory the host lacks (the payload arena found none in /dev/shm)."""
        ...

    def traffic(self) -> tuple[int, int]:
        """Messages sent to and received from the pool's nodes over this host's queues."""
        ...

    def next_due(self) -> float:
        """When the pool next needs the loop."""
        ...

    def fire_kills(self, now: float) -> None:
        """Send the kills that are due."""
        ...

    def kill(self, c: Kill) -> None:
        """Stop a job's attempt."""
        ...

    def check(self, now: float, feed: Feed, cause: str, replace: bool = True) -> None:
        """Judge the nodes; a lost one loses its jobs."""
        ...

    def health(self, now: float) -> list[dict[str, object]]:
        """One row per node, for `status`, the console and the pipeline figures."""
        ...

    def inventory(self) -> dict[int, set[tuple[int, int]]]:
        """What each node (by executor index) still holds: the (job, attempt) pairs it took and has
        not reported ended."""
        ...

    def alive(self) -> int:
        """Nodes alive now."""
        ...

    def stop_all(self) -> None:
        """Ask every node to stop its jobs."""
        ...



@dataclass
class Pools:
    """The pools of a run, in order: a job belongs to the first that serves it.

    The loop holds one of these and never asks which kind of pool it talks to; adding a kind
    of node is a new Pool, not an edit of the loop.
    """

    members: list[Pool]
    """This host's pool first, then any others (agents on other hosts)."""

    def route(self, job: int) -> Pool:
        """The pool a job runs on (the first that serves it; this host's when none says so)."""
        for p in self.members:
            if p.serves(job):
                return p
        return self.members[0]

    def stopping(self) -> list[Pool]:
        """The pools whose jobs end with this scheduler's stop (see Pool.keeps_jobs)."""
        return [p for p in self.members if not p.keeps_jobs]

    def stops_with_scheduler(self, job: int) -> bool:
        """Whether a job's pool stops it when this scheduler stops."""
        return not self.route(job).keeps_jobs

    # -- the loop's side -----------------------------------------------------------------

    def attach(self, poller: select.poll) -> None:
        """Register every pool's descriptors."""
        for p in self.members:
            p.attach(poller)

    def join_desk(self, desk: ControlDesk) -> None:
        """Let each pool's channel carry operator verbs to the desk."""
        for p in self.members:
            p.join_desk(desk)

    def on_ready(self, fd: int, cause: str) -> bool:
        """Hand a ready descriptor to the pool it belongs to; return whether one took it."""
        return any(p.on_ready(fd, cause) for p in self.members)

    @property
    def health_due(self) -> bool:
        """Some pool saw a node's state change."""
        return any(p.health_due for p in self.members)

    def submit(self, tasks: list[tuple[int, int]], follow: frozenset[int] = frozenset()) -> None:
        """Hand each dispatched (job, attempt) to its pool, in order."""
        if len(self.members) == 1:
            self.members[0].submit(tasks, follow)  # the common case: no split per task
            return
        by_pool: dict[int, list[tuple[int, int]]] = {}
        for t in tasks:
            by_pool.setdefault(id(self.route(t[0])), []).append(t)
        for p in self.members:
            if id(p) in by_pool:
                p.submit(by_pool[id(p)])

    def kill(self, c: Kill) -> None:
        """Ask the job's pool to stop its attempt."""
        self.route(c.job).kill(c)

    def pump(self) -> None:
        """Let every pool send what waits."""
        for p in self.members:
            p.pump()

    def after_commit(self) -> None:
        """The turn is journaled: every pool may let go of the reports it applied."""
        for p in self.members:
            p.after_commit()

    def take_ahead(self) -> bool:
        """Let every pool take what waits on its channel for the next turn; return whether any took some."""
        return any([p.take_ahead() for p in self.members])

    def drain_taken(self, feed: Feed, cause: str) -> None:
        """Feed the engine what the pools took ahead (those whose descriptor was not ready too)."""
        for p in self.members:
            if p.take_ahead():
                p.drain(feed, cause)

    def flush(self, timeout: float) -> None:
        """Wait until what every pool's channel carries (an answer to an operator) has left this host."""
        for p in self.members:
            p.flush(timeout)

    def pending(self) -> bool:
        """Dispatches some pool has not handed to a node yet."""
        return any(p.pending() for p in self.members)

    def backlog(self) -> int:
        """Dispatched tasks waiting for room to be sent, in all pools."""
        return sum(p.backlog() for p in self.members)

    def starved(self) -> bool:
        """Some pool's sending waits for memory the host lacks."""
        return any(p.starved() for p in self.members)

    def traffic(self) -> tuple[int, int]:
        """Messages sent and received over this host's queues, all pools together."""
        sent = received = 0
        for p in self.members:
            s, r = p.traffic()
            sent, received = sent + s, received + r
        return sent, received

    def next_due(self) -> float:
        """When some pool next needs the loop."""
        return min(p.next_due() for p in self.members)

    def fire_kills(self, now: float) -> None:
        """Send the kills that are due, in every pool."""
        for p in self.members:
            p.fire_kills(now)

    def check(self, now: float, feed: Feed, cause: str, replace: bool = True) -> None:
        """Judge every pool's nodes."""
        for p in self.members:
            p.check(now, feed, cause, replace)

    def health(self, now: float) -> list[dict[str, object]]:
        """Every pool's node rows."""
        return [row for p in self.members for row in p.health(now)]

    def inventory(self) -> dict[int, set[tuple[int, int]]]:
        """What every node of every pool still holds, by executor index."""
        out: dict[int, set[tuple[int, int]]] = {}
        for p in self.members:
            out.update(p.inventory())
        return out
