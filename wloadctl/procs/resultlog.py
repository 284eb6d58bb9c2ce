"""An executor's journal of result records: appended before each record is sent, and never torn by a full disk."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from pathlib import Path

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
"""Errors of a write refused for want of space (the write may be retried when space returns)."""


class ResultLog:
    """Appends encoded result records to an executor's results journal.

    A full disk does not stop the executor: what cannot be written waits, in order, and is
    written first at the next write; a write cut short is undone (the file is cut back), so a
    reader never meets a torn record followed by whole ones. The records go out on the
    response queue either way: the scheduler journals them; this file only lets a scheduler
    that crashes before that find them again.
    """

    def __init__(self, path: Path, who: str = "executor") -> None:
        self.path = path
        """The journal file."""
        self.who = who
        """Names the writer in the one warning line a full disk causes."""
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        """The file, opened for appending."""
        self.end = os.fstat(self.fd).st_size
        """Where the file ends: this process alone appends to it, so it is counted here rather than asked (a
        write cut short is cut back to it)."""
        self.waiting: list[bytes] = []
        """Encoded records not yet written, oldest first."""
        self.warned = False
        """Whether the full disk was reported (once per episode)."""

    def write(self, data: bytes) -> bool:
        """Append `data` after whatever waits; return False if the disk refused it (it waits for the next write).

        Raises:
            OSError: a failure other than a full disk.
        """
        self.waiting.append(data)
        return self.flush()

    def flush(self) -> bool:
        """Write what waits; return False if the disk still refuses it (an executor tries at each beat, so the
        records of jobs that ended while the disk was full are in the file soon after space returns, for a
        scheduler that resumes the run to find, though no new result comes to write them first).

        Raises:
            OSError: a failure other than a full disk.
        """
        while self.waiting:
            chunk = self.waiting[0]
            end = self.end
            try:
                n = os.write(self.fd, chunk)
            except OSError as e:
                if e.errno not in NO_SPACE:
                    raise
                n = -1
            if n != len(chunk):
                self._undo(end)
                return False
            self.end = end + n
            self.waiting.pop(0)
        if self.warned:
            self.warned = False
            say(f"{self.who}: results journal {self.path} written again")
        return True

    def _undo(self, end: int) -> None:
        """Cut a short write back off the file and say once that results wait."""
        try:
            os.ftruncate(self.fd, end)
        except OSError:
            pass  # a torn last record is ignored by readers; the next write retries from `end`
        if not self.warned:
            self.warned = True
            say(f"{self.who}: cannot write results journal {self.path}: no space left on device; "
                 "results are still reported and written once there is space")

    def close(self) -> None:
        """Write what waits (as far as the disk allows) and close."""
        if self.fd < 0:
            return
        if self.waiting:
            data, self.waiting = b"".join(self.waiting), []
            self.write(data)
        os.close(self.fd)
        self.fd = -1


def say(line: str) -> None:
    """One line on stderr, which may be a log on the very disk that is full: a line it refuses is dropped, and
    never fails the write it tells of (nor the start of the job whose record waits)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()  # what the full disk refused is dropped, not tried again with the next line
