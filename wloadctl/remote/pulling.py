"""Messages handed to synchronous callers, and the background pull loop of a durable consumer."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from wloadctl.errors import TransportError

if TYPE_CHECKING:
    from wloadctl.remote.link import BrokerLink

FETCH_WAIT = 1.0
"""Seconds one pull request waits for messages (the loop then checks whether to stop)."""


class Msg:
    """One message delivered to the inbox: from a subscription, or pulled from a stream."""

    __slots__ = ("_done", "_puller", "_raw", "data", "headers", "reply", "source", "subject")

    def __init__(self, subject: str, data: bytes, reply: str, headers: dict[str, str] | None, source: str,
                 raw: Any = None, puller: Puller | None = None) -> None:  # fmt: skip
        self.subject = subject
        """Subject it was published on."""
        self.data = data
        """Its body."""
        self.reply = reply
        """Where to answer (requests; empty otherwise)."""
        self.headers = headers
        """NATS headers, if any."""
        self.source = source
        """Label of the subscription or puller that delivered it."""
        self._raw = raw
        self._puller = puller
        self._done = False

    @property
    def jetstream(self) -> bool:
        """Whether it was pulled from a stream (and must be acked, nak'ed or terminated)."""
        return self._puller is not None

    @property
    def delivered(self) -> int:
        """How many times the stream has delivered it (1 the first time; 0 for core messages).

        Informative only: nats-server 2.9 at times reports 1 for a redelivery that meets a
        waiting pull request (2.15 counts right). Fencing and deduplication go by (job,
        attempt, epoch), never by this count.
        """
        return int(self._raw.metadata.num_delivered) if self._puller is not None else 0

    def ack(self) -> None:
        """Done with it: the stream removes it (work queue) or marks it consumed."""
        self._settle("ack")

    def nak(self, delay: float | None = None) -> None:
        """Give it back: the stream delivers it again, after `delay` seconds when given."""
        self._settle("nak", delay)

    def term(self) -> None:
        """Refuse it for good: the stream never delivers it again."""
        self._settle("term")

    def in_progress(self) -> None:
        """Still working on it: restart its ack_wait clock (it stays outstanding)."""
        if self._puller is None or self._done:
            return
        self._puller.link._fire(self._raw.in_progress())

    def _settle(self, how: str, delay: float | None = None) -> None:
        coro = self.settling(how, delay)
        if coro is not None and self._puller is not None:
            self._puller.link._fire(coro)

    def settling(self, how: str, delay: float | None = None) -> Coroutine[Any, Any, None] | None:
        """The coroutine that acks, naks or terminates it on the link's loop (None: settled already).

        Raises:
            TransportError: If it is not from a stream.
        """
        if self._puller is None:
            raise TransportError(f"message on {self.subject} is not from a stream: nothing to {how}")
        if self._done:
            return None
        self._done = True
        return self._puller.settle(self._raw, how, delay)


class Puller:
    """Fetches from one durable pull consumer into the link's inbox, keeping at most `window` outstanding."""

    def __init__(self, link: BrokerLink, stream: str, durable: str, subject_filter: str, window: int,
                 ack_wait: float, max_deliver: int, source: str) -> None:  # fmt: skip
        self.link = link
        """The link it delivers through."""
        self.stream = stream
        """Stream name."""
        self.durable = durable
        """Durable consumer name."""
        self.subject_filter = subject_filter
        """Subject the consumer takes."""
        self.window = window
        """Most messages outstanding at once."""
        self.ack_wait = ack_wait
        """Seconds before an unacked message is delivered again."""
        self.max_deliver = max_deliver
        """Most deliveries of one message (-1: no limit)."""
        self.source = source
        """Label put on each delivered Msg."""
        self._held: set[int] = set()
        self._credit: asyncio.Event | None = None
        self._task: asyncio.Task[Any] | None = None

    @property
    def outstanding(self) -> int:
        """Messages delivered and not yet settled. Counted by stream sequence, so a message
        redelivered (ack_wait passed) while its first copy is still held counts once."""
        return len(self._held)

    def set_window(self, window: int) -> None:
        """Change how many messages may be outstanding (0 pauses fetching)."""
        self.link._loop.call_soon_threadsafe(self._set_window, max(0, window))

    def stop(self) -> None:
        """Stop fetching (messages already delivered may still be settled)."""
        self.link._loop.call_soon_threadsafe(self.cancel)

    def cancel(self) -> None:
        """Cancel the fetch loop (on the link's loop thread)."""
        if self._task is not None:
            self._task.cancel()

    def _set_window(self, window: int) -> None:
        self.window = window
        if self._credit is not None:
            self._credit.set()

    async def settle(self, raw: Any, how: str, delay: float | None) -> None:
        """Ack, nak or terminate `raw`, then free its place in the window."""
        try:
            if how == "ack":
                await raw.ack()
            elif how == "nak":
                await raw.nak(delay=delay)
            else:
                await raw.term()
        finally:
            # An ack lost with the connection is redelivered after ack_wait; either way
            # the caller is done with it, so its place in the window is free.
            self._held.discard(raw.metadata.sequence.stream)
            if self._credit is not None:
                self._credit.set()

    async def run(self) -> None:
        """Fetch until cancelled, retrying with a bounded backoff while the broker is away."""
        import nats.errors
        from nats.js import api

        self._task = asyncio.current_task()
        self._credit = asyncio.Event()
        link = self.link
        psub = None
        backoff, last_error = 0.05, ""
        config = api.ConsumerConfig(
            durable_name=self.durable,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            filter_subject=self.subject_filter,
        )
        try:
            while True:
                if self.window - self.outstanding <= 0:
                    self._credit.clear()
                    await self._credit.wait()  # set when a message is settled or the window grows
                    continue
                try:
                    if psub is None:
                        _, js = link._client()
                        psub = await js.pull_subscribe(
                            self.subject_filter, durable=self.durable, stream=self.stream, config=config
                        )
                    msgs = await psub.fetch(self.window - self.outstanding, timeout=FETCH_WAIT)
                except nats.errors.TimeoutError:
                    backoff = 0.05
                    continue
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    text = f"pull {self.durable}: {type(exc).__name__}: {exc}"
                    if text != last_error:  # a broker that stays away fails the same way each try
                        link._note(text)
                        last_error = text
                    if psub is not None:  # bind again (the consumer is made anew if it was lost)
                        await link._quietly(psub.unsubscribe())
                        psub = None
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                    continue
                backoff, last_error = 0.05, ""
                self._held.update(m.metadata.sequence.stream for m in msgs)
                link._deliver(
                    [Msg(m.subject, m.data, m.reply, m.headers, self.source, raw=m, puller=self) for m in msgs]
                )
        finally:
            if psub is not None:
                await link._quietly(psub.unsubscribe())
