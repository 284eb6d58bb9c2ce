"""The cap on an attempt's output (`max_output`): sizes as plans write them, and what is said once a job's
output has passed its cap (the line the executor leaves at the end of the cut log, the job's reason)."""

from __future__ import annotations

import re
import signal

SIZE_FORMS = "write a size such as 64KiB, 100MB, 1GiB or 500k, or none for no cap"
"""What a size may be, for hints."""
NO_CAP = ("none", "unlimited")
"""The words that lift the cap (any case)."""

_SIZE = re.compile(r"(\d+(?:\.\d+)?) *(?:([KMGT])(?:i?B)?|B)?", re.ASCII | re.IGNORECASE)
_UNIT = {None: 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SHOWN = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def parse_size(text: str) -> int:
    """Bytes of a size written as a number with an optional unit: `64KiB`, `100MB`, `1GiB`, `500k`, `4096`.

    K, M, G and T are powers of 1024 with or without `i` and `B` (as `memory:` reads them), case aside; a
    bare number, or one with `B`, is bytes. A fraction of a byte is dropped (`1.5K` is 1536).

    Raises:
        ValueError: the text is not a size.
    """
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"'{text}' is not a size")
    unit = m.group(2).upper() if m.group(2) else None
    return int(float(m.group(1)) * _UNIT[unit])


def format_size(n: int) -> str:
    """A byte count as an operator reads it: `512 B`, `64.0 KiB`, `1.0 GiB`."""
    for name, size in _SHOWN:
        if n >= size:
            return f"{n / size:.1f} {name}"
    return f"{n} B"


def cut_note(cap: int, stopped: bool) -> str:
    """The line the executor appends to a log it cut back to `cap` (without its line end).

    Args:
        cap: the attempt's max_output in bytes.
        stopped: the executor stopped the job for it (else the job had ended before it was seen).
    """
    how = "the job was stopped" if stopped else "the job had ended before it could be stopped"
    return f"[wloadctl: output cut at max_output {format_size(cap)}; {how}]"


def cut_reason(cap: int | None, sig: int, exit_code: int) -> str:
    """Why a job whose output passed its cap failed (its state's reason, `why`, `status`).

    Args:
        cap: the job's max_output as its plan says now (None: lifted since the attempt ran).
        sig: the signal that ended the attempt (0: it exited).
        exit_code: its exit status when `sig` is 0.
    """
    what = f"output passed max_output {format_size(cap)}" if cap is not None else "output passed its max_output"
    if not sig:
        return f"{what} (the job exited with status {exit_code} before it could be stopped)"
    if sig == signal.SIGKILL:
        # (its grace period over, or sooner once it had written twice its cap: told, so the SIGKILL reads as meant)
        return f"{what}: stopped; it went on after SIGTERM and was killed (SIGKILL)"
    if sig != signal.SIGTERM:
        return f"{what}; the job ended by signal {sig}"
    return f"{what}: stopped"
