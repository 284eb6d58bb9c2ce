"""Standard output a closed reader cannot break: `wloadctl run plan | head -1` runs on and exits as the run ended.

A reader that goes away (`head`, a closed terminal pipe) makes every later write to stdout fail with a broken
pipe. Output is all a command loses then: the first such write sends stdout to /dev/null for the rest of the
process, and the command goes on to its end and exits with its own code (a failed run still exits 1).
"""

from __future__ import annotations

import os
from typing import Any, TextIO


class GuardedStdout:
    """sys.stdout whose writes a closed reader turns into nothing, in place of a BrokenPipeError.

    Everything but `write` and `flush` is the wrapped stream's (`isatty`, `fileno`, `buffer`; a byte write
    through `buffer` is not guarded: its BrokenPipeError still reaches the caller).
    """

    def __init__(self, real: TextIO) -> None:
        self.real = real
        self.reader_gone = False
        """Whether a write found the reader gone (stdout is /dev/null since)."""

    def write(self, text: str) -> int:
        """Write `text`, or drop it once the reader is gone."""
        if not self.reader_gone:
            try:
                return self.real.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        """Flush, or nothing once the reader is gone."""
        if not self.reader_gone:
            try:
                self.real.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.reader_gone = True
        to_devnull(self.real)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def to_devnull(stream: TextIO) -> None:
    """Point `stream`'s descriptor at /dev/null: what stays buffered in it (and the interpreter's flush at exit)
    goes nowhere instead of failing again on a reader that is gone."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)
    except (OSError, ValueError):
        pass  # a stream with no descriptor (a test's capture): dropping the writes is enough
