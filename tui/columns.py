"""Columns of the console's model that most jobs have no value in, or that are computed when asked."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from math import isfinite
from typing import Any, TypeVar

_V = TypeVar("_V")


class Sparse(dict[int, _V]):
    """A column most jobs have no value in: job index -> value, `default` for the others.

    A million jobs of which a few thousand ran cost a few thousand entries, not a million.
    """

    def __init__(self, default: Any = None) -> None:
        super().__init__()
        self.default = default
        """What a job without a value has."""

    def __missing__(self, i: int) -> Any:
        return self.default

    def put(self, i: int, value: Any) -> None:
        """Set job i's value; the default removes it."""
        if value is None or value == self.default:
            self.pop(i, None)
        else:
            self[i] = value


class Ranks(Sequence[int]):
    """Critical-path ranks computed when asked, from each job's remaining path (see wloadctl.core.critical)."""

    def __init__(self, rank_of: Callable[[int], int], n: int) -> None:
        self._rank_of = rank_of
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._rank_of(i)


NOT_YET = float("nan")
"""A Times entry that is not there (the journal's flat rows hold NaN for it too)."""


class Times:
    """A column of times most jobs of a big run have, as one array of doubles (NaN: none), read like Sparse.

    A million times in a dict cost about 100 MB; here 8 MB, and a sort reads the array as it is.
    """

    def __init__(self, values: array[float]) -> None:
        self.values_array = values
        """The times by job index (NaN: none)."""

    def __getitem__(self, i: int) -> float | None:
        v = self.values_array[i] if 0 <= i < len(self.values_array) else NOT_YET
        return v if v == v else None

    def get(self, i: int, default: Any = None) -> Any:
        """Job i's time, or `default`."""
        v = self[i]
        return default if v is None else v

    def __setitem__(self, i: int, value: float) -> None:
        arr = self.values_array
        if i >= len(arr):
            arr.extend(array("d", [NOT_YET]) * (i + 1 - len(arr)))
        arr[i] = value

    def put(self, i: int, value: float | None) -> None:
        """Set job i's time; None removes it."""
        self[i] = NOT_YET if value is None else value

    def pop(self, i: int, default: Any = None) -> Any:
        """Remove job i's time; return it, or `default` when there was none."""
        v = self[i]
        if v is None:
            return default
        self.values_array[i] = NOT_YET
        return v

    def __contains__(self, i: object) -> bool:
        return isinstance(i, int) and self[i] is not None

    def items(self) -> Iterator[tuple[int, float]]:
        """(job, time) of the jobs that have one."""
        return ((i, v) for i, v in enumerate(self.values_array) if v == v)

    def keys(self) -> Iterator[int]:
        """The jobs that have a time."""
        return (i for i, v in enumerate(self.values_array) if v == v)

    __iter__ = keys

    def values(self) -> Iterator[float]:
        """The times there are."""
        return filter(isfinite, self.values_array)

    def __len__(self) -> int:
        return sum(1 for _ in self.values())
