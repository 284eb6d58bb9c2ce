"""The outbox of a link: JetStream publishes kept until their stream acknowledges them."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, NamedTuple

from wloadctl.errors import TransportError

if TYPE_CHECKING:
    from wloadctl.remote.link import BrokerLink

CHUNK = 64
"""JetStream publishes in flight at once."""
ACK_TIMEOUT = 5.0
"""Seconds one publish waits for its ack before it is tried again."""
BACKOFF_MAX = 2.0
"""Longest pause, seconds, between two tries of a failed publish."""


class PubAck(NamedTuple):
    """The stream's acknowledgement of a stored message."""

    stream: str
    """Stream that stored it."""
    seq: int
    """Its sequence number in the stream."""
    duplicate: bool
    """The stream had it already (a retry of a stored message)."""


class Outgoing(NamedTuple):
    """One message waiting for its ack."""

    subject: str
    """Subject (a stream's)."""
    data: bytes
    """Body."""
    msg_id: str
    """`Nats-Msg-Id`: the stream stores a retried message once within its duplicate window."""
    future: concurrent.futures.Future[PubAck]
    """Completed with the ack, or with TransportError when refused for good or closed."""


class Outbox:
    """Messages in order, published in chunks and retried until acknowledged (runs on the link's loop)."""

    def __init__(self, link: BrokerLink) -> None:
        self.link = link
        """The link whose connection publishes."""
        self.queue: deque[Outgoing] = deque()
        """Messages not yet acknowledged (those in flight first), oldest first; changed on the loop thread only."""
        self.kick = asyncio.Event()
        """Set when a message is added or the connection returns."""

    def add(self, item: Outgoing) -> None:
        """Queue a message (on the loop thread)."""
        self.queue.append(item)
        self.kick.set()

    def add_all(self, items: list[Outgoing]) -> None:
        """Queue messages in order (on the loop thread)."""
        self.queue.extend(items)
        self.kick.set()

    def fail_all(self, why: str) -> None:
        """Fail every queued message (the link is closing)."""
        while self.queue:
            settle(self.queue.popleft().future, TransportError(why))

    async def run(self) -> None:
        """Publish until cancelled; a failed publish goes back to the front and is tried again."""
        import nats.errors
        import nats.js.errors as jse

        _, js = self.link._client()
        backoff = 0.05
        while True:
            if not self.queue or not self.link.connected:
                # Woken by `add` and by the reconnect; a plain wait, so cancelling it at
                # close is immediate.
                self.kick.clear()
                await self.kick.wait()
                continue
            # The chunk stays at the head of the queue while in flight: a cancelled publish
            # (the link closing) leaves it there to be failed, never dropped unanswered.
            chunk = list(islice(self.queue, CHUNK))
            got = await asyncio.gather(
                *(js.publish(o.subject, o.data, timeout=ACK_TIMEOUT, headers={"Nats-Msg-Id": o.msg_id}) for o in chunk),
                return_exceptions=True,
            )
            for _ in chunk:
                self.queue.popleft()
            retry = []
            for o, r in zip(chunk, got, strict=True):
                if isinstance(r, nats.errors.MaxPayloadError | nats.errors.BadSubjectError) or (
                    isinstance(r, jse.APIError) and not isinstance(r, jse.ServiceUnavailableError)
                ):
                    settle(o.future, TransportError(f"the stream refused a message on {o.subject}: {r}"))
                elif isinstance(r, BaseException):
                    # No ack in time, no stream answering yet (JetStream recovering after a
                    # restart), or the connection dropped: all pass, so try again.
                    retry.append(o)
                else:
                    settle(o.future, PubAck(r.stream, r.seq, bool(r.duplicate)))
            if retry:
                self.queue.extendleft(reversed(retry))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            else:
                backoff = 0.05


def settle(fut: concurrent.futures.Future[PubAck], outcome: PubAck | BaseException) -> None:
    """Complete `fut` unless it already is (a caller may have cancelled it)."""
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)
