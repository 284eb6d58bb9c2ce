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

SEEN_MAX = 1 << 16
"""Ids whose index IdList remembers (those decoded last; the table shows and the graph walks a few hundred)."""


class IdList(MutableSequence[str]):
    """Job ids by index: the first ones in a file's bytes, those added since as strings."""

    def __init__(self, data: bytes, starts: array) -> None:
        """Args: the id list file's bytes (one id a line); the offset of each line, and where the last ends + 1."""
        self._data = data
        self._starts = starts
        self._n = len(starts) - 1
        self._more: list[str] = []
        self._search: dict[bool, bytes] = {}
        self._sorted: array | None = None
        self.seen: dict[str, int] = {}
        """Index of the ids decoded lately (looking one up again costs nothing)."""

    def __len__(self) -> int:
        return self._n + len(self._more)

    def copy(self) -> IdList:
        """Another list of the same ids, sharing the file's bytes (ids added to either stay its own)."""
        other = IdList(self._data, self._starts)
        other._more = list(self._more)
        other.seen = self.seen
        other._search = self._search
        return other

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
            job = self._data[s[i]:s[i + 1] - 1].decode()
            seen = self.seen
            if len(seen) >= SEEN_MAX:
                seen.clear()
            seen[job] = i
            return job
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
        k = self.seen.get(job)
        if k is not None:
            return k
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

    def sorted_order(self) -> array:
        """Every index in the order of the ids (as `sorted` orders strings), made once; later
        ids (jobs the run made) are placed in it too."""
        if self._sorted is None or len(self._sorted) != len(self):
            end = self._starts[self._n] if self._n else 0
            # UTF-8 bytes sort as their strings do; splitting once is cheaper than a million decodes.
            keys = self._data[: max(0, end - 1)].split(b"\n") if self._n else []
            keys.extend(j.encode() for j in self._more)
            self._sorted = array("i", sorted(range(len(keys)), key=keys.__getitem__))
        return self._sorted

    def _search_bytes(self, fold: bool) -> bytes:
        """The file's bytes after a newline, lowered when `fold` (case is folded by searching them lowered:
        a case-blind regex is several times slower); made once."""
        data = self._search.get(fold)
        if data is None:
            data = self._search[fold] = b"\n" + (self._data.lower() if fold else self._data)
        return data

    def matching(self, pattern: str, *, fold: bool = True) -> list[int]:
        """Indices of the ids matching a glob (`*?[`) or containing a text, in order (case folded).

        The file's part is searched in its bytes at once, the way a grep would.
        """
        glob = any(c in pattern for c in "*?[")
        if glob:
            # A glob is a regex that starts with a literal: the newline before a line (for a
            # glob not starting with `*`) or its first text. Regexes starting with a literal
            # are searched at C speed; an anchor would be tried at every byte.
            lead = pattern.lstrip("*")
            expr = (b"" if lead != pattern else b"\n") + _glob_bytes(lead) + b"$"
        else:
            expr = re.escape(pattern.encode())
        data = self._search_bytes(fold)
        regex = re.compile(expr.lower() if fold else expr, re.MULTILINE)
        starts, n = self._starts, self._n
        end = starts[n] if n else 0
        # A match ends at its line's end (a glob) or on its last character (a text); the
        # searched bytes start with one newline more than the file.
        back = 1 if glob else 2
        out: list[int] = []
        last = -1
        for m in regex.finditer(data, 0, end + 1):
            at = m.end() - back
            k = bisect_right(starts, at) - 1
            # (One line may hold a text twice; an empty match after the last line is no id.)
            if k != last and at < end:
                out.append(k)
                last = k
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
