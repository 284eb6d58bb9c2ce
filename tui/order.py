"""Filtering and sorting a large run's jobs over its flat columns, at C speed where it can.

A million jobs filtered or sorted one Python call per job takes about a second; here states and
tiers are picked with `bytes.translate` and `itertools.compress`, a sort by state or tier is a
pass per value, and sorts by start, duration, attempt or executor sort only the jobs that have
one, ascending or descending (the others keep plan order after them either way, as
view_model.view_order leaves them). Once the journal's
flat rows are read (`_flat_order`), attempts and executors are grouped a pass per value too, and
starts and durations are sorted over their arrays of doubles.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate, compress
from operator import sub
from typing import Any, overload

from tui.columns import Times
from tui.idlist import IdList

FAST_FROM = 20_000
"""From this many jobs on, view_order takes this module's path (below, the plain one is as fast)."""


BLOCK = 512
"""Jobs per block of a Picked's counts: finding its k-th job lists one block at most."""


class Picked(Sequence[int]):
    """The jobs where a byte mask holds 1, in plan order, found when asked rather than listed.

    A filter keeping most of a million jobs would list them all for a table showing fifty; this
    keeps the mask and a count per block, so a row is found in one block and a job's row by a count.
    """

    def __init__(self, mask: bytes) -> None:
        self.mask = mask
        """1 for each job picked."""
        self._before = list(accumulate((mask.count(1, s, s + BLOCK) for s in range(0, len(mask), BLOCK)),
                                       initial=0))
        self._n = self._before[-1]

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, k: int) -> int: ...
    @overload
    def __getitem__(self, k: slice) -> list[int]: ...
    def __getitem__(self, k: int | slice) -> int | list[int]:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(self._n))]
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError(k)
        b = bisect_right(self._before, k) - 1
        start = b * BLOCK
        block = list(compress(range(start, start + BLOCK), self.mask[start:start + BLOCK]))
        return block[k - self._before[b]]

    def __contains__(self, i: object) -> bool:
        return isinstance(i, int) and 0 <= i < len(self.mask) and self.mask[i] == 1

    def index(self, i: Any, start: int = 0, stop: int | None = None) -> int:
        """Where job i is (ValueError: not picked)."""
        if i not in self:
            raise ValueError(i)
        b = i // BLOCK
        k = self._before[b] + self.mask.count(1, b * BLOCK, i)
        if k < start or (stop is not None and k >= stop):
            raise ValueError(i)
        return k

    def __iter__(self) -> Iterator[int]:
        return compress(range(len(self.mask)), self.mask)


class Chained(Sequence[int]):
    """Parts one after the other (a sort by state or tier: one Picked per value)."""

    def __init__(self, parts: Sequence[Sequence[int]]) -> None:
        self.parts = [p for p in parts if len(p)]
        self._starts = list(accumulate((len(p) for p in self.parts), initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        p = bisect_right(self._starts, k) - 1
        return self.parts[p][k - self._starts[p]]

    def __contains__(self, i: object) -> bool:
        return any(i in p for p in self.parts)

    def index(self, i: Any, start: int = 0, stop: int | None = None) -> int:
        """Where job i is (ValueError: not shown)."""
        for p, part in enumerate(self.parts):
            if i in part:
                k = self._starts[p] + part.index(i)
                if k < start or (stop is not None and k >= stop):
                    break
                return k
        raise ValueError(i)

    def __iter__(self) -> Iterator[int]:
        for p in self.parts:
            yield from p


class Backwards(Sequence[int]):
    """A Picked or Chained order read from its end (a reversed sort in plan order)."""

    def __init__(self, order: Sequence[int]) -> None:
        self.order = order

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        return self.order[len(self.order) - 1 - k]

    def __contains__(self, i: object) -> bool:
        return i in self.order

    def index(self, i: Any, start: int = 0, stop: int | None = None) -> int:
        """Where job i is (ValueError: not shown)."""
        k = len(self.order) - 1 - self.order.index(i)
        if k < start or (stop is not None and k >= stop):
            raise ValueError(i)
        return k

    def __iter__(self) -> Iterator[int]:
        return reversed(list(self.order))


def backwards(order: Sequence[int]) -> Sequence[int]:
    """`order` reversed (a range or a list as such, others read from the end)."""
    if isinstance(order, range | list):
        return order[::-1]
    return Backwards(order)


def _table(values: Iterable[int]) -> bytes:
    t = bytearray(256)
    for v in values:
        t[int(v)] = 1
    return bytes(t)


def _and(a: bytes, b: bytes) -> bytes:
    n = len(a)
    return (int.from_bytes(a, "little") & int.from_bytes(b, "little")).to_bytes(n, "little")


def pick(model: Any, states: Iterable[int], tiers: Iterable[int], pattern: str) -> Sequence[int]:
    """Indices of the jobs in one of `states` and `tiers` (empty: any) whose id matches `pattern`."""
    n = len(model)
    states, tiers = frozenset(states), frozenset(tiers)
    mask: bytes | None = None
    if states:
        mask = bytes(model.state).translate(_table(states))
    if tiers:
        m = bytes(model.tier).translate(_table(tiers))
        mask = m if mask is None else _and(mask, m)
    idx: Sequence[int] = range(n) if mask is None else Picked(mask)
    if pattern:
        ids = model.ids
        if isinstance(ids, IdList):
            hits = ids.matching(pattern)
            if mask is None:
                return hits
            return [i for i in hits if mask[i]]
        from tui.filters import JobFilter

        match = JobFilter(pattern).matcher()
        idx = [i for i in idx if match(ids[i])]
    return idx


def _by_value(idx: Sequence[int], column: Sequence[int], order: Sequence[int]) -> Sequence[int]:
    """`idx` grouped by the value each job has in a byte column, values in `order` (stable)."""
    whole = isinstance(idx, range) and idx == range(len(column))
    if whole or isinstance(idx, Picked):
        col = bytes(column)
        parts = []
        for v in order:
            if col.find(v) >= 0:
                m = col.translate(_table((v,)))
                parts.append(Picked(m if whole else _and(m, idx.mask)))  # type: ignore[attr-defined]
        return Chained(parts)
    sub = bytes(map(column.__getitem__, idx))
    out: list[int] = []
    for v in order:
        if sub.find(v) >= 0:
            out.extend(compress(idx, sub.translate(_table((v,)))))
    return out


def _keep_mask(idx: Sequence[int], n: int) -> bytes:
    """1 for each job in `idx`."""
    if isinstance(idx, Picked):
        return idx.mask
    keep = bytearray(n)
    for i in idx:
        keep[i] = 1
    return bytes(keep)


def _sparse(idx: Sequence[int], has: Iterable[Any], key: Callable[[int], Any], reverse: bool,
            keep: Callable[[int], bool] | None = None) -> Sequence[int]:
    """Sort `idx` by key where `has` is true (and `keep`, asked of those only), descending when `reverse`;
    the others follow in their order. `has` may be the jobs that have a key (a dict), when `idx` is every job."""
    if isinstance(has, dict):
        flags = bytearray(len(idx))
        for i in has:
            if i < len(flags):
                flags[i] = 1
    else:
        flags = bytearray(map(bool, has))
    if keep is not None:
        k = flags.find(1)
        while k >= 0:
            flags[k] = keep(idx[k])
            k = flags.find(1, k + 1)
    head = list(compress(idx, flags))
    head.sort(key=key, reverse=reverse)
    others = flags.translate(_table((0,)))
    if isinstance(idx, range) and idx == range(len(flags)):
        rest: Sequence[int] = Picked(bytes(others))  # most of a large run: not listed (a mask is not changed)
        return Chained([head, rest])
    return head + list(compress(idx, others))


def sort_order(model: Any, idx: Sequence[int], sort_key: str, reverse: bool, now: float,
               state_rank: Sequence[int]) -> Sequence[int]:
    """`idx` sorted as view_model.view_order sorts it (see there), for a large model."""
    if sort_key == "state":
        order = sorted(range(len(state_rank)), key=state_rank.__getitem__)
        out = _by_value(idx, model.state, order[::-1] if reverse else order)
        return out
    if sort_key == "tier":
        present = sorted(set(bytes(model.tier)), reverse=reverse)
        return _by_value(idx, model.tier, present)
    if isinstance(model.started, Times):
        flat = _flat_order(model, idx, sort_key, reverse, now)
        if flat is not None:
            return flat
    whole = isinstance(idx, range) and idx == range(len(model))
    if sort_key == "start":
        started = model.started
        has = started if whole else map(started.__contains__, idx)
        return _sparse(idx, has, started.__getitem__, reverse)
    if sort_key == "duration":
        started = model.started

        def dur(i: int) -> float:
            return model.duration(i, now) or 0.0

        # No duration and a duration of 0 both sort with the jobs never started.
        has = started if whole else map(started.__contains__, idx)
        return _sparse(idx, has, dur, reverse, lambda i: bool(model.duration(i, now)))
    if sort_key == "attempt":
        att = model.attempt
        return _sparse(idx, att if whole else map(att.__getitem__, idx), att.__getitem__, reverse)
    if sort_key == "executor":
        ex = model.executor
        return _sparse(idx, map((-1).__lt__, ex if whole else map(ex.__getitem__, idx)), ex.__getitem__, reverse)
    ids = model.ids
    if isinstance(ids, IdList):
        # By id: the ids' order is made once (a second or two at a million jobs), then filtered.
        by_id = ids.sorted_order()
        if isinstance(idx, range) and idx == range(len(ids)):
            return Backwards(by_id) if reverse else by_id
        keep = _keep_mask(idx, len(ids))
        out = list(compress(by_id, map(keep.__getitem__, by_id)))
        return out[::-1] if reverse else out
    out = list(idx)
    out.sort(key=ids.__getitem__, reverse=reverse)
    return out


_LITTLE = sys.byteorder == "little"
_SOME_TIME = _table(range(0x00, 0x7F))
"""By a double's most significant byte: 1 for times (not NaN, not negative, not of an absurd size)."""
_POSITIVE = _table(range(0x01, 0x7F))
"""By a double's most significant byte: 1 for durations (more than about 1e-292 s, not NaN)."""


def _top_bytes(values: Any) -> bytes:
    """The most significant byte of each double of an array (its sign and the top of its exponent)."""
    return values.tobytes()[7::8] if _LITTLE else values.tobytes()[0::8]


def _where(idx: Sequence[int], has: bytes, key: Callable[[int], Any], reverse: bool) -> Sequence[int]:
    """`idx` sorted by key (descending when `reverse`) where `has` (a byte per job) holds 1; the others keep
    plan order after them."""
    n = len(has)
    whole = isinstance(idx, range) and idx == range(n)
    if whole or isinstance(idx, Picked):
        flags = has if whole else _and(has, idx.mask)  # type: ignore[attr-defined]
        head = list(compress(range(n), flags))
        head.sort(key=key, reverse=reverse)
        others = has.translate(_table((0,)))
        rest = Picked(others if whole else _and(others, idx.mask))  # type: ignore[attr-defined]
        return Chained([head, rest])
    sub_has = bytes(map(has.__getitem__, idx))
    head = list(compress(idx, sub_has))
    head.sort(key=key, reverse=reverse)
    return head + list(compress(idx, sub_has.translate(_table((0,)))))


def _value_groups(column: Any) -> list[tuple[int, bytes]] | None:
    """(value, byte mask) of each value an array of 32-bit ints holds, by value; None when a value is
    outside -1..65535 (found a pass of C per value rather than a Python call per job)."""
    raw = column.tobytes()
    planes = [raw[k::4] for k in range(4)]
    if not _LITTLE:
        planes.reverse()
    b0, b1, b2, b3 = planes
    n = len(b3)
    minus = b3.translate(_table((0xFF,)))
    neg = minus.count(1)
    # Only -1 below zero (all four bytes 0xff) and nothing above 65535 (upper bytes 0).
    if b2 != b3 or b3.count(0) + neg != n or (neg and (_and(b1, b3).count(0xFF) != neg
                                                        or _and(b0, b3).count(0xFF) != neg)):
        return None
    out: list[tuple[int, bytes]] = [(-1, minus)] if neg else []
    keep = minus.translate(_table((0,)))
    for hi in _present(b1, keep):
        in_hi = _and(b1.translate(_table((hi,))), keep)
        for lo in _present(b0, in_hi):
            out.append((hi * 256 + lo, _and(b0.translate(_table((lo,))), in_hi)))
    return out


_ALL = bytes(range(256))
_FULL = _table(range(1, 256)).replace(b"\x01", b"\xff")
"""Byte translation of a 0/1 mask to 0x00/0xff."""


def _present(column: bytes, mask: bytes) -> list[int]:
    """The byte values `column` holds where `mask` holds 1, in order (a search of C per value)."""
    if mask.find(0) < 0:
        return [v for v in _ALL if v in column]
    picked = _and(column, mask.translate(_FULL))  # 0 where not picked
    out = [v for v in _ALL[1:] if v in picked]
    if picked.count(0) > mask.count(0):
        out.insert(0, 0)
    return out


def _grouped(idx: Sequence[int], groups: list[tuple[int, bytes]], values: Sequence[int]) -> Sequence[int]:
    """`idx` as the groups of these values, in this order (each group in plan order)."""
    masks = dict(groups)
    whole = isinstance(idx, range) and idx == range(len(groups[0][1]) if groups else 0)
    parts: list[Sequence[int]] = []
    for v in values:
        m = masks.get(v)
        if m is not None:
            parts.append(Picked(m if whole else _and(m, idx.mask)))  # type: ignore[attr-defined]
    return Chained(parts)


def _flat_order(model: Any, idx: Sequence[int], sort_key: str, reverse: bool, now: float) -> Sequence[int] | None:
    """`idx` sorted by start, duration, attempt or executor over the flat arrays read from the journal's
    flat rows (None: another key, or values this way cannot group)."""
    n = len(model)
    if sort_key == "start":
        starts = model.started.values_array
        return _where(idx, _top_bytes(starts).translate(_SOME_TIME), starts.__getitem__, reverse)
    if sort_key == "duration":
        starts = model.started.values_array
        started = _top_bytes(starts).translate(_SOME_TIME)
        if started.find(1) < 0:  # no job started (no-op jobs end without running): no duration
            return _where(idx, started, starts.__getitem__, reverse)
        ends = model.ended.values_array
        took = array("d", map(sub, ends, starts))
        for i, end in model.stopped.items():
            if i < len(took) and ends[i] == ends[i]:  # (an ended job only: NaN is not equal to itself)
                took[i] = end - starts[i]
        for i in _active(model):
            start = model.started[i]
            if start is not None:
                took[i] = max(0.0, now - start)
        # No duration and a duration of 0 both sort with the jobs never started.
        return _where(idx, _top_bytes(took).translate(_POSITIVE), took.__getitem__, reverse)
    if sort_key not in ("attempt", "executor") or not (isinstance(idx, range) or isinstance(idx, Picked)):
        return None
    column = model.attempt if sort_key == "attempt" else model.executor
    groups = _value_groups(column[:n])
    if groups is None:
        return None
    # Values in order (descending when `reverse`); jobs without one (no attempt, no executor) last.
    least = 1 if sort_key == "attempt" else 0
    some = [v for v, _m in groups if v >= least]
    return _grouped(idx, groups, (some[::-1] if reverse else some) + [v for v, _m in groups if v < least])


def positions(buf: bytes | bytearray, value: int) -> list[int]:
    """Indices where `buf` holds `value` (few of them: found by byte search)."""
    out: list[int] = []
    k = buf.find(value)
    while k >= 0:
        out.append(k)
        k = buf.find(value, k + 1)
    return out


def _active(model: Any) -> list[int]:
    """Jobs queued or running (their durations grow with the clock)."""
    return sorted(model.running) + positions(model.state, _QUEUED)


_QUEUED = 2
"""JobState.QUEUED's value (tui.order stays free of the engine's imports)."""
