"""A job's log as `wloadctl logs` shows it: read a block at a time, its last lines found from the end, and on a
terminal its control characters made visible.

A log holds whatever the job printed. Written to an operator's terminal as is, an escape sequence in it sets the
window's title, clears the screen, or makes the terminal type a reply into the shell's input. So on a terminal
each control character but tab and newline (and the return of a CRLF line end) is shown in caret notation, as
`cat -v` shows it (ESC as `^[`, BEL as `^G`, a C1 control such as CSI U+009B as `^[[`), and the text around it is
left as written. The log is read as UTF-8: accented letters, CJK and emoji show as themselves, and a byte that is
not part of valid UTF-8 shows as the replacement character U+FFFD (a terminal given the byte itself may draw
anything, or in an 8-bit mode obey a lone 0x9B as CSI). A pipe or a file gets the bytes unchanged, as does `--raw`.
The console's log view shows the same text (`Shown.text`).
"""

from __future__ import annotations

import codecs
import os
import re
from typing import BinaryIO

BLOCK = 1 << 20
"""Bytes read at a time: a log of gigabytes is shown without being held whole."""

_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")
"""A control character to show: C0 but tab and newline, DEL, a C1 control, a return but a CRLF's."""


def _caret(m: re.Match[str]) -> str:
    c = ord(m.group())
    if c >= 0x80:  # a C1 control: the 7-bit form of it is ESC and the character 64 below it
        return "^[" + chr(c - 0x40)
    return "^?" if c == 0x7F else "^" + chr(c + 0x40)


class Shown:
    """Turns a log's blocks into what is written: unchanged (raw), or read as UTF-8 with control characters made
    visible and bytes that are not UTF-8 replaced by U+FFFD.

    A character whose bytes a block cuts in two, or a return at the end of a block (a CRLF's is told by the byte
    after it), waits for the next block; `end` gives what still waits.
    """

    def __init__(self, raw: bool) -> None:
        self.raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""

    def feed(self, block: bytes) -> bytes:
        """What to write of the log's next block."""
        return block if self.raw else self.text(block).encode()

    def end(self) -> bytes:
        """What is left to write at the end of the log (or of what was written of it so far)."""
        return b"" if self.raw else self.end_text().encode()

    def text(self, block: bytes) -> str:
        """The text to show of the log's next block (what `feed` writes, before it is encoded)."""
        data = self._held + self._decoder.decode(block)
        self._held = ""
        if data.endswith("\r"):
            data, self._held = data[:-1], "\r"
        return _CONTROL.sub(_caret, data)

    def end_text(self) -> str:
        """The text left to show at the end of the log: a held return, and an unfinished character as U+FFFD."""
        data = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return _CONTROL.sub(_caret, data)


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
