"""Critical-path ranks: how much work remains after each job, weighted by how long jobs are expected to take.

A job's remaining path is the longest chain of dependents from it to the end of the plan, each
job on it counting its expected duration (its `expected:` key, else the median of its recent
successful attempts, else 1 second), the job's own included. Within an SLA tier and priority
the ready queue starts the job with the longest remaining path first: the work that would
otherwise finish last starts early, as HEFT-style list schedulers do. Ranks quantize the paths
into codes.RANK_BITS so the ready key stays one 64-bit int.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from operator import attrgetter

from wloadctl.core.codes import JOB_BITS, RANK_MAX

_EXPECTED = attrgetter("expected")
DEFAULT_EXPECTED = 1.0
"""Expected seconds of a job with neither an `expected:` key nor a history."""


def expected_durations(specs: Sequence, history: Mapping[str, float] | None) -> array:
    """Each job's expected seconds: its `expected:` key, else its history's median, else DEFAULT_EXPECTED."""
    hist = history or {}
    given = list(map(_EXPECTED, specs))
    if not hist and given.count(None) == len(given):
        return array("d", [DEFAULT_EXPECTED]) * len(given)  # a plan without `expected:` keys, run first
    return array("d", (DEFAULT_EXPECTED if (e := g if g is not None else hist.get(j.id)) is None
                       else max(e, 0.0) for j, g in zip(specs, given, strict=True)))


def guessed_durations(specs: Sequence, history: Mapping[str, float] | None) -> bytearray:
    """1 for each job expected_durations gave DEFAULT_EXPECTED for want of an `expected:` key and a history."""
    hist = history or {}
    return bytearray(_EXPECTED(j) is None and hist.get(j.id) is None for j in specs)


def remaining_paths(downs: Sequence[tuple[int, ...]], weight: Sequence[float]) -> list[float]:
    """The remaining path of every job (see the module), over the dependents of each job.

    One pass from the last job to the first when every dependent comes after its upstream in plan
    order (the usual case); otherwise in reverse topological order.
    """
    n = len(downs)
    path = [0.0] * n
    at = path.__getitem__  # max over a C-level map: a third quicker than over a list built for it
    order: Sequence[int] = range(n - 1, -1, -1)
    for i in order:
        ds = downs[i]
        if not ds:
            path[i] = weight[i]
        elif ds[0] > i:
            path[i] = weight[i] + max(map(at, ds))
        else:
            break
    else:
        return path
    for i in _reverse_topological(downs):
        ds = downs[i]
        path[i] = weight[i] + (max(map(at, ds)) if ds else 0.0)
    return path


def _reverse_topological(downs: Sequence[tuple[int, ...]]) -> list[int]:
    """Jobs ordered so that every job comes after all its dependents (the plan has no cycle)."""
    n = len(downs)
    indeg = [0] * n
    for ds in downs:
        for d in ds:
            indeg[d] += 1
    order = [i for i in range(n) if not indeg[i]]
    k = 0
    while k < len(order):
        for d in downs[order[k]]:
            indeg[d] -= 1
            if not indeg[d]:
                order.append(d)
        k += 1
    order.reverse()
    return order


def rank_bits(path: Sequence[float]) -> array:
    """Each job's rank shifted into its ready key's place (0 on the longest path, RANK_MAX for none)."""
    longest = max(path, default=0.0)
    if longest <= 0.0:
        return array("q", bytes(8 * len(path)))
    scale = RANK_MAX / longest
    return array("q", [(RANK_MAX - int(p * scale)) << JOB_BITS for p in path])


def rank_of(key: int) -> int:
    """The critical-path rank in a ready key."""
    return (key >> JOB_BITS) & RANK_MAX


def rank_table(specs: Sequence, downs: Sequence[tuple[int, ...]], key_base: array,
               history: Mapping[str, float] | None) -> tuple[array, array, array]:
    """Each job's expected seconds, remaining path and ready-key base with its rank.

    Args:
        specs: job specs by index.
        downs: dependents of each job.
        key_base: ready-key bases without ranks (see codes.ready_key).
        history: median seconds of recent successful attempts by job id.

    Returns:
        (expected seconds, remaining paths, key bases with ranks), arrays by job index.
    """
    from operator import or_

    weights = expected_durations(specs, history)
    path = remaining_paths(downs, weights)
    keys = array("q", map(or_, key_base, rank_bits(path)))
    return weights, array("d", path), keys
