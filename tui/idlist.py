"""Job ids of a large run kept as the id list file's bytes: an id is decoded when it is shown.

A million ids as Python strings, with a dict from id to index, cost about 180 MB and seconds
to build; the file's bytes and the offsets of its lines cost about 30 MB and one read. `IdList`
reads like a list of ids and `IdIndex` like a dict from id to index, so the console's model,
graph and table use them as they would the list and the dict.
"""

from __future__ import annotations

import fnmatch
import re
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Mapping, MutableSequence
from typing import Any, overload


class IdList(MutableSequence[str]):
    """Job ids by index: the first ones in a file's bytes, those added since as strings."""

    def __init__(self, data: bytes, starts: array) -> None:
        """Args: the id list file's bytes (one id a line); the offset of each line, and where the last ends + 1."""
        self._data = data
        self._starts = starts
        self._n = len(starts) - 1
        self._more: list[str] = []

    def __len__(self) -> int:
        return self._n + len(self._more)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if 0 <= i < self._n:
            s = self._starts
            return self._data[s[i]:s[i + 1] - 1].decode()
        return self._more[i - self._n]

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self)):
            yield self[i]

    def __setitem__(self, i: Any, value: Any) -> None:
        raise TypeError("job ids do not change")

    def __delitem__(self, i: Any) -> None:
        raise TypeError("job ids are not removed")

    def insert(self, i: int, value: str) -> None:
        """Only at the end: a run adds jobs after the others."""
        if i < len(self):
            raise TypeError("job ids are added at the end only")
        self._more.append(value)

    def find(self, job: str) -> int | None:
        """Index of a job, or None."""
        key = job.encode()
        data, at = self._data, -1
        if data.startswith(key + b"\n"):
            at = 0
        else:
            hit = data.find(b"\n" + key + b"\n", 0, self._starts[self._n] if self._n else 0)
            if hit >= 0:
                at = hit + 1
        if at >= 0:
            k = bisect_right(self._starts, at) - 1
            if 0 <= k < self._n and self._starts[k] == at:
                return k
        try:
            return self._n + self._more.index(job)
        except ValueError:
            return None

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """Index of a job (ValueError when there is none)."""
        k = self.find(value) if isinstance(value, str) else None
        if k is None or k < start or (stop is not None and k >= stop):
            raise ValueError(f"{value!r} is not a job")
        return k

    def __contains__(self, job: object) -> bool:
        return isinstance(job, str) and self.find(job) is not None

    def matching(self, pattern: str, *, fold: bool = True) -> list[int]:
        """Indices of the ids matching a glob (`*?[`) or containing a text, in order (case folded).

        The file's part is searched in its bytes at once, the way a grep would.
        """
        glob = any(c in pattern for c in "*?[")
        if glob:
            expr = b"^" + _glob_bytes(pattern) + b"$"
        else:
            expr = b"^[^\\n]*" + re.escape(pattern.encode()) + b"[^\\n]*$"
        regex = re.compile(expr, re.MULTILINE | (re.IGNORECASE if fold else 0))
        starts, n = self._starts, self._n
        end = starts[n] if n else 0
        # (An empty match after the last line is no id.)
        out = [bisect_right(starts, m.start()) - 1 for m in regex.finditer(self._data, 0, end) if m.start() < end]
        want = pattern.lower() if fold else pattern
        for k, j in enumerate(self._more):
            jj = j.lower() if fold else j
            if (fnmatch.fnmatchcase(jj, want) if glob else want in jj):
                out.append(n + k)
        return out


class IdIndex(Mapping[str, int]):
    """Index by job id over an IdList (lookups search the list's bytes; jobs added later are kept here)."""

    def __init__(self, ids: IdList) -> None:
        self._ids = ids
        self._more: dict[str, int] = {}

    def __getitem__(self, job: str) -> int:
        k = self._more.get(job)
        if k is None:
            k = self._ids.find(job) if isinstance(job, str) else None
        if k is None:
            raise KeyError(job)
        return k

    def __setitem__(self, job: str, i: int) -> None:
        self._more[job] = i

    def __contains__(self, job: object) -> bool:
        return job in self._more or (isinstance(job, str) and self._ids.find(job) is not None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def _glob_bytes(pattern: str) -> bytes:
    """A glob as a regular expression over one line of bytes (fnmatch's syntax: * ? [seq] [!seq])."""
    out: list[bytes] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            out.append(b"[^\\n]*")
        elif c == "?":
            out.append(b"[^\\n]")
        elif c == "[":
            j = pattern.find("]", i + 1 if i < n and pattern[i] in "!]" else i)
            if j < 0:
                out.append(b"\\[")
                continue
            body = pattern[i:j]
            i = j + 1
            neg = body.startswith("!")
            body = body[1:] if neg else body
            esc = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
            out.append(b"[" + (b"^\\n" if neg else b"") + esc.encode() + b"]")
        else:
            out.append(re.escape(c.encode()))
    return b"".join(out)
