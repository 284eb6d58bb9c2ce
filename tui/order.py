"""Filtering and sorting a large run's jobs over its flat columns, at C speed where it can.

A million jobs filtered or sorted one Python call per job takes about a second; here states and
tiers are picked with `bytes.translate` and `itertools.compress`, a sort by state or tier is a
pass per value, and sorts by start, duration, attempt or executor sort only the jobs that have
one (the others keep plan order after them, as the one-key sort leaves them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import compress
from typing import Any

from tui.idlist import IdList

FAST_FROM = 20_000
"""From this many jobs on, view_order takes this module's path (below, the plain one is as fast)."""


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
    idx: Sequence[int] = range(n) if mask is None else list(compress(range(n), mask))
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


def _by_value(idx: Sequence[int], column: Sequence[int], order: Sequence[int]) -> list[int]:
    """`idx` grouped by the value each job has in a byte column, values in `order` (stable)."""
    if isinstance(idx, range) and idx == range(len(column)):
        sub = bytes(column)
    else:
        sub = bytes(map(column.__getitem__, idx))
    out: list[int] = []
    for v in order:
        if sub.find(v) >= 0:
            out.extend(compress(idx, sub.translate(_table((v,)))))
    return out


def _sparse(idx: Sequence[int], has: Iterable[Any], key: Callable[[int], Any], reverse: bool,
            keep: Callable[[int], bool] | None = None) -> list[int]:
    """Sort `idx` by key where `has` is true (and `keep`, asked of those only); the others, whose key
    is the largest, keep their order."""
    flags = bytearray(map(bool, has))
    if keep is not None:
        k = flags.find(1)
        while k >= 0:
            flags[k] = keep(idx[k])
            k = flags.find(1, k + 1)
    head = list(compress(idx, flags))
    head.sort(key=key, reverse=reverse)
    rest = list(compress(idx, flags.translate(_table((0,)))))
    return rest + head if reverse else head + rest


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
    if sort_key == "start":
        started = model.started
        return _sparse(idx, map(started.__contains__, idx), started.__getitem__, reverse)
    if sort_key == "duration":
        started = model.started

        def dur(i: int) -> float:
            return -(model.duration(i, now) or -1.0)

        # No duration and a duration of 0 both sort with the jobs never started.
        return _sparse(idx, map(started.__contains__, idx), dur, reverse, lambda i: bool(model.duration(i, now)))
    if sort_key == "attempt":
        att = model.attempt
        return _sparse(idx, map(att.__getitem__, idx), lambda i: -att[i], reverse)
    if sort_key == "executor":
        ex = model.executor
        return _sparse(idx, map((-1).__lt__, map(ex.__getitem__, idx)), ex.__getitem__, reverse)
    # By id: every id is read (about a second at a million jobs).
    ids = model.ids
    out = list(idx)
    out.sort(key=ids.__getitem__, reverse=reverse)
    return out
