"""Columns of the console's model that most jobs have no value in, or that are computed when asked."""

from __future__ import annotations

from collections.abc import Callable
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


class Ranks:
    """Critical-path ranks computed when asked, from each job's remaining path (see wloadctl.core.critical)."""

    def __init__(self, rank_of: Callable[[int], int], n: int) -> None:
        self._rank_of = rank_of
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> int:
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._rank_of(i)
