"""Rates of the queue record codecs; run `python tests/ipc/bench_protocol.py`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from wloadctl.ipc import protocol as p

N = 200_000
"""Records per measured pass."""


def best(fn: Callable[[], object], reps: int = 7) -> float:
    """Fastest of `reps` timed calls, in seconds."""
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(
    name: str,
    records: Sequence[Any],
    per: int,
    encode: Callable[[Sequence[Any]], bytes],
    decode: Callable[[bytes], list[Any]],
) -> None:
    """Print the rates for full 8 KiB messages, as the scheduler sends them."""
    batches = [records[i : i + per] for i in range(0, len(records), per)]
    messages = [encode(b) for b in batches]
    assert [r for m in messages for r in decode(m)] == list(records)

    def encode_all() -> None:
        for batch in batches:
            encode(batch)

    def decode_all() -> None:
        # Decoded records are used and dropped, as in the scheduler's loop.
        for message in messages:
            decode(message)

    enc, dec = best(encode_all), best(decode_all)
    print(
        f"{name:8s} encode {N / enc / 1e6:5.2f} M rec/s   decode {N / dec / 1e6:5.2f} "
        f"M rec/s   encode+decode {N / (enc + dec) / 1e6:5.2f} M rec/s   "
        f"({len(batches)} messages of up to {per})"
    )


def main() -> None:
    """Run both codecs."""
    tasks = [p.TaskRecord(i, 1, p.TASK_SHELL, 0, 7, i * 64, 200) for i in range(N)]
    results = [
        p.ResultRecord(
            p.RES_EXITED, 0, 3, i, 1, 0, 0, 7, 12345 + i, 1.7e9 + i, 1.7e9 + i + 1, 0, 0
        )
        for i in range(N)
    ]
    measure("tasks", tasks, p.tasks_per_message(8192), p.encode_tasks, p.decode_tasks)
    measure(
        "results",
        results,
        p.results_per_message(8192),
        p.encode_results,
        p.decode_results,
    )


if __name__ == "__main__":
    main()
