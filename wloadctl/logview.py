"""A job's log as `wloadctl logs` shows it: read a block at a time, its last lines found from the end, and on a
terminal its control characters made visible.

A log holds whatever the job printed. Written to an operator's terminal as is, an escape sequence in it sets the
window's title, clears the screen, or makes the terminal type a reply into the shell's input. So on a terminal
each control character but tab and newline (and the return of a CRLF line end) is shown in caret notation, as
`cat -v` shows it (ESC as `^[`, BEL as `^G`, a C1 control such as CSI U+009B as `^[[`), and the text around it is
left as written. A pipe or a file gets the bytes unchanged, as does `--raw`.
"""

from __future__ import annotations

import os
import re
from typing import BinaryIO

BLOCK = 1 << 20
"""Bytes read at a time: a log of gigabytes is shown without being held whole."""

_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|\xc2[\x80-\x9f]")
"""A control character to show: C0 but tab and newline, DEL, a return but a CRLF's, a C1 control in UTF-8."""


def _caret(m: re.Match[bytes]) -> bytes:
    raw = m.group()
    if len(raw) == 2:  # a C1 control: the 7-bit form of it is ESC and the character 64 below it
        return b"^[" + bytes([raw[1] - 0x40])
    return b"^?" if raw == b"\x7f" else b"^" + bytes([raw[0] + 0x40])


class Shown:
    """Turns a log's blocks into what is written: unchanged (raw), or with control characters made visible.

    A return or a C1 control's first byte at the end of a block waits for the next block (a CRLF, or a control
    cut in two, is told by the byte after it); `end` gives it.
    """

    def __init__(self, raw: bool) -> None:
        self.raw = raw
        self.held = b""

    def feed(self, block: bytes) -> bytes:
        """What to write of the log's next block."""
        if self.raw:
            return block
        data = self.held + block
        self.held = b""
        if data[-1:] in (b"\r", b"\xc2"):
            data, self.held = data[:-1], data[-1:]
        return _CONTROL.sub(_caret, data)

    def end(self) -> bytes:
        """What is left to write at the end of the log (or of what was written of it so far)."""
        held, self.held = self.held, b""
        return held if self.raw else _CONTROL.sub(_caret, held)


def tail_start(f: BinaryIO, lines: int) -> int:
    """The offset of the last `lines` lines of an open file (a last line without its newline counts)."""
    end = f.seek(0, os.SEEK_END)
    if end == 0:
        return 0
    f.seek(end - 1)
    # A newline that ends the file ends its last line: it does not start another.
    need = lines + (1 if f.read(1) == b"\n" else 0)
    pos = end
    while pos > 0:
        start = max(0, pos - BLOCK)
        f.seek(start)
        block = f.read(pos - start)
        k = len(block)
        while k > 0:
            k = block.rfind(b"\n", 0, k)
            if k < 0:
                break
            need -= 1
            if need == 0:
                return start + k + 1
        pos = start
    return 0
