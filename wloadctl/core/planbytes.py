"""Plan bytes the YAML reader refused (not UTF-8, a control character), found again to name their line."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator
from typing import Any

import yaml


def unreadable(err: yaml.reader.ReaderError, source: Callable[[], Any]) -> tuple[int | None, str, str]:
    """(line, message, hint) for text the YAML reader refused: bytes that are not UTF-8, or a control character.

    The parser's own message names neither the line nor, for a byte that is not UTF-8, what is wrong with the
    file; its position is not a line. The plan is read again from `source` to find both.
    """
    data = source()
    try:
        found = _first_non_utf8(data)
    finally:
        if hasattr(data, "close"):
            data.close()
    if found is not None:
        line, offset, byte = found
        return (line, f"the file is not UTF-8 text (byte 0x{byte:02x} at byte offset {offset:,})",
                "save the file as UTF-8 (from Latin-1: iconv -f latin1 -t utf-8 PLAN > NEW)")
    char = getattr(err, "character", -1)
    at: int | None = None
    if isinstance(char, int) and 0 <= char <= 0x10FFFF:
        data = source()
        try:
            at = _line_of_char(data, chr(char).encode())
        finally:
            if hasattr(data, "close"):
                data.close()
    what = f"U+{char:04X}" if isinstance(char, int) and char >= 0 else "a character"
    return (at, f"the plan holds {what}, which YAML does not allow ({err.reason})",
            "remove it; write control characters as escapes in double quotes (\"\\t\")")


def _chunks(data: Any) -> Iterator[bytes]:
    """The bytes of a plan in blocks: `data` is bytes or a binary stream."""
    if isinstance(data, bytes):
        yield data
        return
    while block := data.read(1 << 20):
        yield block


def _first_non_utf8(data: Any) -> tuple[int, int, int] | None:
    """(1-based line, byte offset, byte) of the first byte of `data` that is not UTF-8, or None (also for
    UTF-16 text with its byte-order mark, which YAML reads too)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    fed = lines = 0
    for block in [*_chunks(data), b""]:
        if not fed and block[:2] in (b"\xff\xfe", b"\xfe\xff"):
            return None
        pending = decoder.getstate()[0]
        try:
            decoder.decode(block, final=not block)
        except UnicodeDecodeError as wrong:
            at, seen = wrong.start, pending + block
            return lines + seen.count(b"\n", 0, at) + 1, fed - len(pending) + at, seen[at]
        fed += len(block)
        lines += block.count(b"\n")
    return None


def _line_of_char(data: Any, char: bytes) -> int | None:
    """The 1-based line of the first `char` (its UTF-8 bytes) in `data`, or None."""
    lines = 0
    for block in _chunks(data):
        at = block.find(char)
        if at >= 0:
            return lines + block.count(b"\n", 0, at) + 1
        lines += block.count(b"\n")
    return None


def line_count(source: Callable[[], Any]) -> int:
    """How many lines the plan has (a last line without its newline counts), read again from `source`."""
    data = source()
    try:
        if isinstance(data, bytes):
            return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        n, last = 0, b""
        while chunk := data.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
        return n + (1 if last and last != b"\n" else 0)
    finally:
        if hasattr(data, "close"):
            data.close()
