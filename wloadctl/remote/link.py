"""BrokerLink: a NATS client on its own asyncio thread, bridged to synchronous poll loops.

The scheduler and agent loops are synchronous select/poll loops. A link runs the
nats-py client on an event loop in one background thread and gives them:

* a wake-up file descriptor (`fileno()`, an eventfd) that is readable while messages
  wait in the inbox, so a loop polls it beside its queues and drains with `drain()`;
* thread-safe calls: `publish`, `js_publish`, `request`, `gather`, `subscribe`,
  `pull`, KV get/put/create/update, `ensure_stream`/`ensure_bucket`, `close`. Each
  blocking call has a timeout and raises TransportError when the broker does not
  answer in time.

Guarantees across a broker restart or a network cut (the client reconnects forever,
waiting `reconnect_wait` seconds plus jitter between attempts, a bounded backoff):

* `js_publish`: at least once into the stream while the link is open. A message is
  kept in the link's outbox until the stream acknowledges it, and sent again after a
  reconnect; every message carries a `Nats-Msg-Id`, so the stream stores a retried
  message once (within its duplicate window). The outbox is memory: a process that
  dies loses what was not yet acknowledged, which is why callers journal first.
* Pulled messages: at least once. A message not acked within the consumer's ack_wait
  (an ack lost with the connection, a process that died) is delivered again.
* `publish` (core NATS): at most once. Messages published while disconnected wait in
  the client's buffer (`pending_size` bytes) and go out after the reconnect; the broker
  stores nothing. Meant for heartbeats and replies.
* Subscriptions and pull consumers are restored by the client after a reconnect.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import secrets
import ssl
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

from wloadctl.errors import TransportError, Unanswered, WloadError
from wloadctl.remote.broker import BrokerOptions
from wloadctl.remote.buckets import Buckets
from wloadctl.remote.outbox import Outbox, Outgoing, PubAck
from wloadctl.remote.pulling import Msg, Puller, settle_all

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext
    from nats.js.api import StreamConfig

T = TypeVar("T")
CLOSED_UNACKED = "the link closed before the stream acknowledged the message"


class BrokerLink:
    """A connection to the broker, usable from synchronous code in any thread."""

    def __init__(self, options: BrokerOptions, *, name: str = "wloadctl", reconnect_wait: float = 1.0) -> None:
        """Make a link; nothing is connected until `open`.

        Args:
            options: Where the broker is and how to authenticate.
            name: Connection name shown by the broker's monitoring.
            reconnect_wait: Seconds between reconnect attempts (jitter is added).
        """
        self.options = options
        """Where the broker is."""
        self.name = name
        """Connection name."""
        self._reconnect_wait = reconnect_wait
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"broker-{name}", daemon=True)
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self.kv = Buckets(self)
        """Key-value bucket calls: get, put, create, update (compare-and-set), entries, ensure."""
        self._subs: dict[int, Any] = {}
        self._pullers: list[Puller] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._outbox = Outbox(self)
        self._lock = threading.Lock()
        self._inbox: deque[Msg] = deque()
        self._signalled = False
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._log: deque[str] = deque(maxlen=500)
        self._last_error = ""
        self._closed = False
        self.reconnects = 0
        """Times the client connected again after losing the broker (a watcher compares it with its last look)."""
        self.down_since: float | None = None
        """When the connection was lost (wall clock), while it is down; None while connected."""
        self.last_outage = 0.0
        """Seconds the last loss of the broker lasted (set when it is back)."""

    # Opening and closing.

    @classmethod
    def open(cls, options: BrokerOptions, *, name: str = "wloadctl", connect_timeout: float | None = None,
             reconnect_wait: float = 1.0) -> BrokerLink:  # fmt: skip
        """Connect, or fail within `connect_timeout` seconds (None: the options' `--broker-timeout`, 5 s by default).

        Raises:
            TransportError: If the broker cannot be reached or refuses the credentials.
        """
        if connect_timeout is None:
            connect_timeout = options.connect_timeout
        link = cls(options, name=name, reconnect_wait=reconnect_wait)
        link._thread.start()
        try:
            link._call(link._connect(connect_timeout), connect_timeout + 1.0, "connect")
        except BaseException:
            link.close(timeout=2.0)
            raise
        return link

    def close(self, timeout: float = 5.0) -> None:
        """Flush the outbox (up to `timeout`), disconnect, stop the thread, close the wake fd.

        JetStream publishes still unacknowledged then fail with TransportError. Safe to
        call twice; after it returns no thread of the link is left running.
        """
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(timeout), self._loop)
            try:
                fut.result(timeout + 3.0)
            except Exception:  # the loop is stopped below whatever happened here
                fut.cancel()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout + 3.0)
        if not self._thread.is_alive():
            # As asyncio.run does: tasks still pending (a reconnect attempt that began during
            # the shutdown) are cancelled and run to their end here, so none dies with the loop.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.wait(pending, timeout=2.0))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._outbox.fail_all(CLOSED_UNACKED)  # if the shutdown above did not get that far
            # Only once the thread is gone: it may still signal the descriptor until then.
            self._loop.close()
            with self._lock:
                fd, self._wake_fd = self._wake_fd, -1
            os.close(fd)

    def __enter__(self) -> BrokerLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _connect(self, timeout: float) -> None:
        import nats

        o = self.options
        nc = nats.NATS()
        try:
            connecting = asyncio.ensure_future(
                nc.connect(
                    servers=o.servers, name=self.name, connect_timeout=max(1, int(timeout)),
                    allow_reconnect=True, max_reconnect_attempts=-1,
                    reconnect_time_wait=self._reconnect_wait,  # type: ignore[arg-type]
                    user=o.user, password=o.password, token=o.token, nkeys_seed=o.nkey_seed_file,
                    user_credentials=o.creds_file, tls=self._tls() if o.uses_tls else None,
                    pending_size=16 * 1024 * 1024, error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected, reconnected_cb=self._on_reconnected,
                    closed_cb=self._on_closed,
                ))
            # A server that refuses the credentials refuses them again at every try: that is said at once, not
            # after the whole wait (a server that is down may still come up within it, and is waited for).
            deadline = time.monotonic() + timeout
            while not connecting.done():
                left = deadline - time.monotonic()
                if left <= 0 or "authorization violation" in self._last_error.lower():
                    connecting.cancel()
                    try:
                        await connecting
                    except (asyncio.CancelledError, Exception):  # the try given up: its end is not the matter
                        pass
                    raise TimeoutError
                await asyncio.wait({connecting}, timeout=min(0.05, left))
            connecting.result()
        except Exception as exc:  # refused, timed out, bad credentials or TLS files: all one line
            info = getattr(nc, "_server_info", None)
            await self._quietly(nc.close())
            why = self._last_error or f"{type(exc).__name__}: {exc}".rstrip(": ")
            # The server closes the connection of a client it does not let in, with an
            # "Authorization Violation" error or, when it closes first, a reset.
            if "authorization violation" in why.lower() or (isinstance(info, dict) and info.get("auth_required")):
                raise self._refused() from None
            raise TransportError(
                f"cannot reach the broker at {o.shown()} within {timeout:g}s ({why})",
                hint="check --broker / WLOADCTL_BROKER, the credentials, and that nats-server -js runs; "
                "--broker-timeout S waits longer for one that is starting",
            ) from None
        self._nc, self._js = nc, nc.jetstream()
        self._spawn(self._outbox.run())
        self._note(f"connected to {nc.connected_url.geturl() if nc.connected_url else o.shown()}")

    def _refused(self) -> TransportError:
        """The one line of a broker that did not let this client in: what it was given, and what to check."""
        o = self.options
        where = f"the broker at {o.shown()}"
        if not o.user:
            # Credentials in the URL (nats://USER:PASSWORD@HOST) are credentials given as the options are.
            user, password = _url_credentials(o.servers)
            if user and password:
                o = dataclasses.replace(o, user=user, password=password)
            elif user and not o.token:
                o = dataclasses.replace(o, token=user)  # nats://TOKEN@HOST: a token, never shown
        if o.user and not o.password:
            return TransportError(f"{where} refused user {o.user!r}: no password was given",
                                  hint="pass --broker-password or set WLOADCTL_BROKER_PASSWORD")
        given = [what for what, value in (
            (f"user {o.user!r} and its password", o.user), ("the token", o.token),
            ("the nkey seed", o.nkey_seed_file), ("the credentials file", o.creds_file)) if value]
        if not given:
            return TransportError(f"{where} wants credentials and none were given",
                                  hint="pass --broker-user with --broker-password (or WLOADCTL_BROKER_PASSWORD), "
                                  "--broker-token, --broker-nkey or --broker-creds")
        return TransportError(f"{where} refused the credentials ({', '.join(given)})",
                              hint="check the user and password, token, nkey or credentials file")

    def _tls(self) -> ssl.SSLContext:
        o = self.options
        ctx = ssl.create_default_context(cafile=o.tls_ca)
        if o.tls_cert and o.tls_key:
            ctx.load_cert_chain(o.tls_cert, o.tls_key)
        return ctx

    async def _shutdown(self, flush: float) -> None:
        deadline = time.monotonic() + flush
        while self._outbox.queue and self.connected and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for p in self._pullers:
            p.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        self._outbox.fail_all(CLOSED_UNACKED)
        if self._nc is not None:
            await self._quietly(asyncio.wait_for(self._nc.close(), max(flush, 0.5)))
        # The client's own tasks (subscription readers, pings) when its close did not end
        # them all, as with a broker that is down: a task left pending dies with the loop.
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        if rest:
            await asyncio.wait(rest, timeout=1.0)

    # Connection state and the wake-up descriptor.

    @property
    def connected(self) -> bool:
        """Whether the client is connected now (False while it reconnects)."""
        nc = self._nc
        return nc is not None and nc.is_connected

    @property
    def auth_required(self) -> bool:
        """Whether the server connected to authenticates every client (its INFO says `auth_required`)."""
        nc = self._nc
        info = getattr(nc, "_server_info", None) if nc is not None else None
        return bool(isinstance(info, dict) and info.get("auth_required"))

    def fileno(self) -> int:
        """The wake-up descriptor: readable while `drain()` has messages (for select/poll)."""
        return self._wake_fd

    def take_log(self) -> list[str]:
        """Connect, disconnect and error lines since the last call, oldest first."""
        with self._lock:
            lines = list(self._log)
            self._log.clear()
        return lines

    def drain(self) -> list[Msg]:
        """Every message delivered since the last call (subscriptions and pulls), in order.

        Also resets the wake descriptor, which fires too for log lines and completed
        `js_publish_async` futures: an empty list is a normal answer.
        """
        try:
            os.eventfd_read(self._wake_fd)
        except (BlockingIOError, OSError):  # nothing signalled, or the link is closed
            pass
        # The descriptor is reset before the swap: a delivery racing with us either lands
        # in this swap or finds the flag cleared and signals again, never neither.
        with self._lock:
            msgs = list(self._inbox)
            self._inbox.clear()
            self._signalled = False
        return msgs

    def _deliver(self, msgs: list[Msg]) -> None:
        with self._lock:
            self._inbox.extend(msgs)
            self._signal()

    def _note(self, line: str) -> None:
        with self._lock:
            self._log.append(f"{time.strftime('%H:%M:%S')} broker: {line}")
            self._signal()

    def _signal(self) -> None:
        """Make the descriptor readable unless it already is (call with the lock held)."""
        if not self._signalled and self._wake_fd >= 0:
            self._signalled = True
            os.eventfd_write(self._wake_fd, 1)

    async def _on_error(self, exc: Exception) -> None:
        text = f"{type(exc).__name__}: {exc}".rstrip(": ")
        if text != self._last_error:  # a server that stays down repeats the same error each attempt
            self._last_error = text
            self._note(f"error {text}")

    async def _on_disconnected(self) -> None:
        if self.down_since is None:
            self.down_since = time.time()
        if not self._closed:
            self._note("disconnected; reconnecting")

    async def _on_reconnected(self) -> None:
        self._last_error = ""
        if self.down_since is not None:
            self.last_outage = max(0.0, time.time() - self.down_since)
        self.down_since = None
        self.reconnects += 1
        nc = self._nc
        self._note(f"reconnected to {nc.connected_url.geturl() if nc and nc.connected_url else self.options.shown()}")
        self._outbox.kick.set()

    async def _on_closed(self) -> None:
        self._note("connection closed")

    # Bridging calls.

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float, what: str) -> T:
        if self._closed and what != "connect":
            coro.close()
            raise TransportError(f"broker link is closed ({what})")
        fut = asyncio.run_coroutine_threadsafe(self._translate(coro, what), self._loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            state = "" if self.connected else ", disconnected"
            raise TransportError(
                f"broker {self.options.shown()}: no answer to {what} within {timeout:g}s{state}"
            ) from None

    async def _translate(self, coro: Awaitable[T], what: str) -> T:
        """Await `coro`, turning the client's errors into TransportError."""
        try:
            return await coro
        except (TransportError, asyncio.CancelledError):
            raise
        except Exception as exc:
            if self._without_jetstream(exc):
                raise TransportError(f"broker {self.options.shown()}: JetStream is not enabled on that server "
                                     f"({what})", hint="start the server with -js (nats-server -js -sd DIR)") from None
            raise TransportError(f"broker {self.options.shown()}: {what} failed: {type(exc).__name__}: {exc}") from None

    def _without_jetstream(self, exc: Exception) -> bool:
        """Whether `exc` is the client's answer of a server that runs without JetStream (its INFO says so)."""
        import nats.js.errors as jse

        nc = self._nc
        info = getattr(nc, "_server_info", None) if nc is not None else None
        return isinstance(exc, jse.ServiceUnavailableError) and isinstance(info, dict) and not info.get("jetstream")

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Start a task on the loop (call on the loop thread); keep it referenced until it ends."""
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._note(f"error {task.get_name()}: {task.exception()}")

    def _fire(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run `coro` on the loop without waiting for it (from any thread)."""
        if self._closed:
            coro.close()
            raise TransportError("broker link is closed")
        self._loop.call_soon_threadsafe(self._spawn, coro)

    def ack_all(self, msgs: list[Msg]) -> None:
        """Acknowledge many pulled messages with one hand-over to the loop (see `pulling.settle_all`)."""
        if self._closed:  # checked before the acks' coroutines exist, so none is left unawaited
            raise TransportError("broker link is closed")
        coro = settle_all(msgs, self._note)
        if coro is not None:
            self._fire(coro)

    @staticmethod
    async def _quietly(aw: Awaitable[Any]) -> None:
        try:
            await aw
        except Exception:  # closing: nothing useful to do with a failure here
            pass

    def _client(self) -> tuple[Client, JetStreamContext]:
        if self._nc is None or self._js is None:
            raise TransportError("broker link is not connected")
        return self._nc, self._js

    # Core NATS.

    def publish(self, subject: str, data: bytes, headers: dict[str, str] | None = None) -> None:
        """Send a core NATS message, without waiting (at most once, see the module doc)."""
        nc, _ = self._client()
        self._fire(nc.publish(subject, data, headers=headers))

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until the server has every core message published so far (False: it did not answer in time).

        For the last words of a process about to end abruptly: `publish` only queues them.
        """
        if not self.connected:
            return False
        nc, _ = self._client()
        try:
            # nats-py annotates the timeout as int; it is handed to asyncio.wait_for, which takes fractions.
            self._call(nc.flush(timeout), timeout + 1.0, "flush")  # type: ignore[arg-type]
        except TransportError:
            return False
        return True

    def respond(self, msg: Msg, data: bytes) -> None:
        """Answer a request received through `subscribe`."""
        if msg.reply:
            self.publish(msg.reply, data)

    def request(self, subject: str, data: bytes, timeout: float = 2.0, heard: bool = False) -> bytes | None:
        """Send a request and wait for the first reply; None if none came within `timeout`.

        With `heard`, a request some listener took and did not answer in time is told apart from one nobody
        listens for (None): it raises Unanswered, as what it asked may have been done.
        """
        import nats.errors

        nc, _ = self._client()

        async def ask() -> bytes | None:
            try:
                return (await nc.request(subject, data, timeout=timeout)).data
            except nats.errors.NoRespondersError:
                return None
            except nats.errors.TimeoutError:
                if heard:
                    raise Unanswered(f"no answer on {subject} within {timeout:g}s from the listener that took the "
                                     "request") from None
                return None

        return self._call(ask(), timeout + 2.0, f"request on {subject}")

    def gather(self, subject: str, data: bytes, wait: float = 1.0, max_replies: int = 0,
               sender: Callable[[bytes], str | None] | None = None) -> list[bytes]:
        """Send a request to every listener and collect replies for `wait` seconds.

        Args:
            subject: Where to ask (e.g. Subjects.ask).
            data: The request body.
            wait: Seconds to collect replies.
            max_replies: Stop early after this many (0: no limit).
            sender: Who sent a reply (None: nobody to count); with it, `max_replies` counts distinct senders,
                so two listeners answering as one (two agents sharing a name) do not stand for another.
        """
        nc, _ = self._client()

        async def ask() -> list[bytes]:
            inbox = nc.new_inbox()
            q: asyncio.Queue[bytes] = asyncio.Queue()

            async def got(m: Any) -> None:
                q.put_nowait(m.data)

            sub = await nc.subscribe(inbox, cb=got)
            try:
                await nc.publish(subject, data, reply=inbox)
                replies: list[bytes] = []
                senders: set[str] = set()
                deadline = time.monotonic() + wait
                while not max_replies or (len(senders) if sender else len(replies)) < max_replies:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        replies.append(await asyncio.wait_for(q.get(), left))
                    except TimeoutError:
                        break
                    if sender is not None and (who := sender(replies[-1])) is not None:
                        senders.add(who)
                return replies
            finally:
                await sub.unsubscribe()

        return self._call(ask(), wait + 2.0, f"gather on {subject}")

    def subscribe(self, subject: str, queue: str | None = None, source: str | None = None) -> int:
        """Deliver messages of `subject` into the inbox (see `drain`).

        Args:
            subject: Subject, wildcards allowed.
            queue: Queue group: each message goes to one member of the group.
            source: Label put on each delivered Msg (default: the subject).

        Returns:
            An id for `unsubscribe`.
        """
        nc, _ = self._client()
        label = source or subject

        async def cb(m: Any) -> None:
            self._deliver([Msg(m.subject, m.data, m.reply, m.headers, label)])

        async def sub() -> int:
            s = await nc.subscribe(subject, queue=queue or "", cb=cb)
            self._subs[s._id] = s
            return int(s._id)

        return self._call(sub(), 5.0, f"subscribe to {subject}")

    def unsubscribe(self, sid: int) -> None:
        """Stop a subscription made by `subscribe`."""
        s = self._subs.pop(sid, None)
        if s is not None:
            self._call(s.unsubscribe(), 5.0, "unsubscribe")

    # JetStream.

    def js_publish_async(
        self, subject: str, data: bytes, *, msg_id: str | None = None
    ) -> concurrent.futures.Future[PubAck]:
        """Queue a message for a stream; the future completes with the stream's ack.

        The message stays in the outbox until acknowledged, across reconnects (see the
        module doc); the wake descriptor fires when the future completes. Give `msg_id`
        to make a retry from a later process deduplicate too (e.g. the journal's id).
        """
        fut: concurrent.futures.Future[PubAck] = concurrent.futures.Future()
        fut.add_done_callback(lambda _f: self._deliver([]))
        item = Outgoing(subject, data, msg_id or secrets.token_hex(12), fut)
        if self._closed:
            raise TransportError("broker link is closed")
        self._loop.call_soon_threadsafe(self._outbox.add, item)
        return fut

    def js_publish_many(self, messages: list[tuple[str, bytes, str]]) -> list[concurrent.futures.Future[PubAck]]:
        """Queue (subject, data, msg_id) messages for streams, in order, with one hand-over to the loop.

        As `js_publish_async` each; a scheduler dispatching a turn's batches wakes the loop once.
        """
        if self._closed:
            raise TransportError("broker link is closed")
        items = []
        for subject, data, msg_id in messages:
            fut: concurrent.futures.Future[PubAck] = concurrent.futures.Future()
            fut.add_done_callback(lambda _f: self._deliver([]))
            items.append(Outgoing(subject, data, msg_id, fut))
        if items:
            self._loop.call_soon_threadsafe(self._outbox.add_all, items)
        return [o.future for o in items]

    def js_publish(
        self, subject: str, data: bytes, *, msg_id: str | None = None, timeout: float = 5.0
    ) -> PubAck | None:
        """Store a message in a stream and wait up to `timeout` for the ack.

        Returns:
            The ack, or None if it did not come in time: the message then stays queued and
            is published as soon as the broker answers (`outbox_size` counts them).

        Raises:
            TransportError: If the stream refused the message for good (too large, ...).
        """
        fut = self.js_publish_async(subject, data, msg_id=msg_id)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            return None

    @property
    def outbox_size(self) -> int:
        """JetStream publishes not yet acknowledged."""
        return len(self._outbox.queue)

    def pull(self, stream: str, durable: str, subject_filter: str, *, window: int = 8, ack_wait: float = 30.0,
             max_deliver: int = -1, source: str | None = None) -> Puller:  # fmt: skip
        """Pull from a durable consumer in the background, into the inbox.

        At most `window` pulled messages are outstanding (delivered, not yet acked, nak'ed
        or terminated); the puller fetches more as the caller settles them, so a busy
        caller takes nothing it cannot handle. The consumer (explicit ack) is created if
        missing, and shared by every puller with the same durable name.

        Args:
            stream: Stream name.
            durable: Durable consumer name.
            subject_filter: Subject the consumer takes.
            window: Most messages outstanding at once (`Puller.set_window` changes it).
            ack_wait: Seconds before an unacked message is delivered again.
            max_deliver: Most deliveries of a message (-1: no limit).
            source: Label put on each delivered Msg (default: the durable name).
        """
        self._client()
        p = Puller(self, stream, durable, subject_filter, window, ack_wait, max_deliver, source or durable)
        self._pullers.append(p)
        self._fire(p.run())
        return p

    def ensure_stream(self, config: StreamConfig, timeout: float = 10.0) -> None:
        """Create a stream unless one of that name exists (see broker.ensure_streams)."""
        import nats.js.errors as jse

        _, js = self._client()

        async def go() -> None:
            try:
                await js.stream_info(str(config.name))
                return
            except jse.NotFoundError:
                pass
            try:
                await js.add_stream(config)
            except jse.BadRequestError:
                await js.stream_info(str(config.name))  # made by a racing process: fine if it exists

        self._call(go(), timeout, f"create stream {config.name}")

    def stream_messages(self, stream: str, timeout: float = 5.0) -> int:
        """How many messages `stream` holds now (for a work queue: work not yet acked)."""
        _, js = self._client()

        async def go() -> int:
            return int((await js.stream_info(stream)).state.messages)

        return self._call(go(), timeout, f"info of stream {stream}")

    def stream_names(self, timeout: float = 5.0) -> list[str]:
        """The names of the broker's streams (a KV bucket B is stream KV_B)."""
        _, js = self._client()

        async def go() -> list[str]:
            return [str(info.config.name) for info in await js.streams_info()]

        return self._call(go(), timeout, "stream names")

    def consumer_backlog(self, stream: str, durable: str, timeout: float = 5.0) -> tuple[int, int]:
        """(messages not yet delivered, messages delivered and not yet acked) of a durable consumer."""
        _, js = self._client()

        async def go() -> tuple[int, int]:
            info = await js.consumer_info(stream, durable)
            return int(info.num_pending or 0), int(info.num_ack_pending or 0)

        return self._call(go(), timeout, f"info of consumer {durable}")

    def delete_consumer(self, stream: str, durable: str, timeout: float = 5.0) -> bool:
        """Remove a durable consumer; False when there was none (or the broker did not answer)."""
        import nats.js.errors as jse

        _, js = self._client()

        async def go() -> bool:
            try:
                return bool(await js.delete_consumer(stream, durable))
            except jse.NotFoundError:
                return False

        try:
            return self._call(go(), timeout, f"delete consumer {durable}")
        except WloadError:
            return False


class LinkWatch:
    """Tells a poll loop once when its link lost the broker and once when it has it back.

    The loop looks at each beat; an outage shorter than a beat shows as "back" alone.
    """

    def __init__(self, link: BrokerLink) -> None:
        self.link = link
        """The link watched."""
        self.up = True
        """Whether the broker was there at the last look."""
        self._seen = link.reconnects

    def look(self) -> tuple[str, float] | None:
        """("lost", seconds down so far) or ("back", seconds the outage lasted) on a change since the last
        look, else None."""
        link = self.link
        again, self._seen = link.reconnects != self._seen, link.reconnects
        if link.connected:
            if not self.up or again:
                self.up = True
                return "back", link.last_outage
            return None
        if self.up:
            self.up = False
            since = link.down_since
            return "lost", 0.0 if since is None else max(0.0, time.time() - since)
        return None

    def line(self, change: tuple[str, float]) -> str:
        """The operator's line of a change `look` returned."""
        kind, seconds = change
        url = self.link.options.shown()
        if kind == "lost":
            return f"broker lost: {url} does not answer; reconnecting (nothing is lost meanwhile)"
        return f"broker back: {url} answers again after {seconds:.1f}s"


def _url_credentials(servers: list[str]) -> tuple[str | None, str | None]:
    """(user, password) given in the first of the broker URLs that names a user (nats://USER[:PASSWORD]@HOST)."""
    for url in servers:
        head, at, _ = url.partition("://")[2].rpartition("@")
        if at and head:
            user, _, password = head.partition(":")
            return unquote(user) or None, unquote(password) or None
    return None, None
