"""Rates of the broker batch codecs; run `python tests/remote/bench_wire.py`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from wloadctl.ipc.protocol import (
    RES_EXITED,
    TASK_NOOP,
    TASK_SHELL,
    Payload,
    ResultRecord,
    TaskRecord,
    encode_payload,
)
from wloadctl.remote import wire as W

N = 10_000
"""Tasks (or results) per batch, as one agent's share of a bank's wide level."""


def best(fn: Callable[[], object], reps: int = 9) -> float:
    """Fastest of `reps` timed calls, in seconds."""
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def report(name: str, n: int, encode: Callable[[], list[bytes]], decode: Callable[[list[bytes]], object]) -> None:
    """Print encode, decode and round-trip rates of one kind of batch."""
    messages = encode()
    e = best(encode)
    d = best(lambda: decode(messages))
    size = sum(map(len, messages))
    print(
        f"{name:<28} {len(messages):>3} msg {size / 1024:>8.0f} KiB  encode {e * 1e3:6.2f} ms  "
        f"decode {d * 1e3:6.2f} ms  round trip {n / (e + d):>12,.0f} /s"
    )


def main() -> None:
    """Measure no-op and shell dispatch batches and result batches of N entries."""
    noop = [TaskRecord(i, 1, TASK_NOOP, 0, 3, 0, 0) for i in range(N)]
    empty = [b""] * N
    shell = [TaskRecord(i, 1, TASK_SHELL, 0, 3, 0, 0) for i in range(N)]
    payloads = [
        encode_payload(Payload(f"job{i:06d}", "true", {"WLOADCTL_JOB": f"job{i:06d}"}, None, 60.0, f"/s/l/job{i}.1"))
        for i in range(N)
    ]
    results = [
        W.ResultEntry(ResultRecord(RES_EXITED, 0, 0, i, 1, 0, 0, 3, 1000 + i, 1.0, 2.0, 0, 0)) for i in range(N)
    ]
    tailed = [W.ResultEntry(r.record, b"x" * 200, b'{"rows": 12}') for r in results]

    def decode_dispatch(ms: list[bytes]) -> object:
        return [W.decode_dispatch(m) for m in ms]

    def decode_results(ms: list[bytes]) -> object:
        return [W.decode_results(m) for m in ms]

    print(f"{N} entries per batch, split at {W.MAX_MESSAGE // 1024} KiB")
    report("dispatch, no-op", N, lambda: W.split_dispatch(3, "s1", "run", noop, empty), decode_dispatch)
    report("dispatch, shell payloads", N, lambda: W.split_dispatch(3, "s1", "run", shell, payloads), decode_dispatch)
    report("results, bare", N, lambda: W.split_results("a1", "run", results), decode_results)
    report("results, tail + job result", N, lambda: W.split_results("a1", "run", tailed), decode_results)


if __name__ == "__main__":
    main()
