"""Key-value buckets of a link: get, put, create, compare-and-set, list, and creation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from wloadctl.errors import TransportError

if TYPE_CHECKING:
    from nats.js.kv import KeyValue

    from wloadctl.remote.link import BrokerLink

T = TypeVar("T")

KV_READS_AT_ONCE = 256
"""Values of a bucket's listing asked of the broker side by side."""


class KvEntry(NamedTuple):
    """One key's current value in a KV bucket."""

    key: str
    """The key."""
    value: bytes
    """The value."""
    revision: int
    """Revision to pass to `Buckets.update` for a compare-and-set."""


class Buckets:
    """The KV calls of a link (`link.kv`), synchronous and thread-safe like the link's own."""

    def __init__(self, link: BrokerLink) -> None:
        self.link = link
        """The link the calls go through."""
        self._kvs: dict[str, KeyValue] = {}

    def ensure(self, bucket: str, *, replicas: int = 1, timeout: float = 10.0) -> None:
        """Create a KV bucket (file storage, history 1) unless it exists."""
        import nats.js.errors as jse
        from nats.js import api

        _, js = self.link._client()

        async def go() -> None:
            try:
                self._kvs[bucket] = await js.key_value(bucket)
                return
            except jse.BucketNotFoundError:
                pass
            try:
                self._kvs[bucket] = await js.create_key_value(
                    bucket=bucket, history=1, storage=api.StorageType.FILE, replicas=replicas
                )
            except jse.BadRequestError:
                self._kvs[bucket] = await js.key_value(bucket)

        self.link._call(go(), timeout, f"create bucket {bucket}")

    async def _kv(self, bucket: str) -> KeyValue:
        import nats.js.errors as jse

        kv = self._kvs.get(bucket)
        if kv is None:
            _, js = self.link._client()
            try:
                kv = self._kvs[bucket] = await js.key_value(bucket)
            except jse.BucketNotFoundError:
                raise TransportError(
                    f"KV bucket {bucket} does not exist on the broker",
                    hint="ensure_streams makes it; is --prefix the installation's?",
                ) from None
        return kv

    def _kv_call(self, bucket: str, op: Callable[[KeyValue], Awaitable[T]], what: str, timeout: float) -> T:
        async def go() -> T:
            return await op(await self._kv(bucket))

        return self.link._call(go(), timeout, f"{what} in bucket {bucket}")

    def get(self, bucket: str, key: str, timeout: float = 5.0) -> KvEntry | None:
        """The current value of `key`, or None if it has none (missing or deleted)."""
        import nats.js.errors as jse

        async def op(kv: KeyValue) -> KvEntry | None:
            try:
                e = await kv.get(key)
            except (jse.KeyNotFoundError, jse.KeyDeletedError):
                return None
            return KvEntry(key, e.value or b"", int(e.revision or 0))

        return self._kv_call(bucket, op, f"get {key}", timeout)

    def put(self, bucket: str, key: str, value: bytes, timeout: float = 5.0) -> int:
        """Set `key` whatever it held; returns the new revision."""

        async def op(kv: KeyValue) -> int:
            return int(await kv.put(key, value))

        return self._kv_call(bucket, op, f"put {key}", timeout)

    def create(self, bucket: str, key: str, value: bytes, timeout: float = 5.0) -> int | None:
        """Set `key` only if it has no value; the new revision, or None if it has one."""
        import nats.js.errors as jse

        async def op(kv: KeyValue) -> int | None:
            try:
                return int(await kv.create(key, value))
            except jse.KeyWrongLastSequenceError:
                return None

        return self._kv_call(bucket, op, f"create {key}", timeout)

    def update(self, bucket: str, key: str, value: bytes, revision: int, timeout: float = 5.0) -> int | None:
        """Compare-and-set: set `key` only if its revision is still `revision`.

        Returns:
            The new revision, or None if someone changed the key since `revision` was read.
        """
        import nats.js.errors as jse

        async def op(kv: KeyValue) -> int | None:
            try:
                return int(await kv.update(key, value, last=revision))
            except jse.KeyWrongLastSequenceError:
                return None

        return self._kv_call(bucket, op, f"update {key}", timeout)

    def entries(self, bucket: str, timeout: float = 5.0, *, missing_ok: bool = False) -> dict[str, KvEntry]:
        """Every key's current value: the bucket's keys from its stream, then their values side by side.

        Args:
            bucket: Bucket name.
            timeout: Seconds to wait for the broker.
            missing_ok: Return {} when the bucket does not exist instead of raising.
        """
        import nats.js.errors as jse

        async def one(kv: KeyValue, key: str) -> KvEntry | None:
            try:
                e = await kv.get(key)
            except (jse.KeyNotFoundError, jse.KeyDeletedError):
                return None
            return KvEntry(key, e.value or b"", int(e.revision or 0))

        async def op(kv: KeyValue | None) -> dict[str, KvEntry]:
            # Every key the bucket holds a message for (a deleted one too: its delete marker), then each
            # one's value, asked side by side. Not a watch of the bucket: its "no more values" marker can
            # come before the values (nats-py sends it while they are still on their way), and a watch
            # ended by the servers' own counts still misses a key rewritten while it is read.
            out: dict[str, KvEntry] = {}
            if kv is None:
                return out
            _, js = self.link._client()
            pre = f"$KV.{bucket}."
            info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"{pre}>")
            keys = [subject[len(pre):] for subject in info.state.subjects or {}]
            for at in range(0, len(keys), KV_READS_AT_ONCE):
                for got in await asyncio.gather(*(one(kv, k) for k in keys[at:at + KV_READS_AT_ONCE])):
                    if got is not None:
                        out[got.key] = got
            return out

        async def go() -> dict[str, KvEntry]:
            try:
                kv = await self._kv(bucket)
            except TransportError:
                if not missing_ok:
                    raise
                kv = None
            return await op(kv)

        return self.link._call(go(), timeout + 2.0, f"list keys in bucket {bucket}")
