"""Takeover drill across hosts: kill -9 the active scheduler's host, time until the standby starts a job.

Run `python tests/remote/drill_takeover.py [--rounds N] [--interval S] [--timeout S]`. Every part is
real and on a "host" of its own (IPC, mount, pid and UTS namespaces): the active (`wloadctl run`),
the standby (`wloadctl scheduler --standby`), two agents; they share a private nats-server and a
scratch database on the PostgreSQL server of $WLOADCTL_TEST_PG (default 127.0.0.1:5432).

The plan is a chain of short jobs on the agents' pool, beside one long job. The drill waits for
a chain job to start, kills the active's host at once, and reads from the jobs' own output the
first start of a later chain job: nothing else could have dispatched it but the new active.
Takeover time = that start - the kill. Each round also checks that every job ran exactly once
(the long job, running on an agent across the takeover, is kept, not started again).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.remote.conftest import NatsServer, free_port, nats_server_binary
from tests.remote.nodes import Node, SchedulerHost
from wloadctl.store import Store
from wloadctl.store.base import pg_server
from wloadctl.store.postgres import scratch_database

CHAIN = 60
"""Jobs in the chain."""


def write_plan(path: Path, out: Path, step: float) -> Path:
    """A chain c00 -> c01 -> ... of `step`-second jobs and one long job, all on pool etl."""
    lines = ["name: drill", "jobs:"]
    for k in range(CHAIN):
        cmd = (f'echo "c{k:02d} start $(date +%s.%N)" >> {out}; sleep {step}; '
               f'echo "c{k:02d} end $(date +%s.%N)" >> {out}')
        lines += [f"  c{k:02d}:", "    pool: etl", f"    command: '{cmd}'"]
        if k:
            lines.append(f"    depends_on: [c{k - 1:02d}]")
    cmd = f'echo "long start $(date +%s.%N)" >> {out}; sleep 6; echo "long end $(date +%s.%N)" >> {out}'
    lines += ["  long:", "    pool: etl", f"    command: '{cmd}'"]
    path.write_text("\n".join(lines) + "\n")
    return path


def marks(out: Path) -> list[tuple[str, str, float]]:
    """(job, start|end, time) lines the jobs wrote."""
    got = []
    for line in out.read_text().splitlines() if out.exists() else []:
        parts = line.split()
        if len(parts) == 3:
            got.append((parts[0], parts[1], float(parts[2])))
    return got


def wait_for(what: str, cond: object, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.01)
    raise SystemExit(f"drill: timed out waiting for {what}")


def one_round(work: Path, server: NatsServer, journal: str, interval: float, timeout: float,
              step: float) -> float:
    """One takeover; returns its seconds."""
    out = work / "evidence"
    plan = write_plan(work / "drill.yaml", out, step)
    beat = ["--heartbeat-interval", str(interval), "--heartbeat-timeout", str(timeout)]
    agents = [Node(n, server.url, work / n, ["etl"]).start() for n in ("n1", "n2")]
    active = SchedulerHost("hosta", server.url, work / "a" / "sd",
                           ["run", str(plan), "--broker", server.url, "--journal", journal, "--executors", "1",
                            "--quiet", *beat])
    standby = SchedulerHost("hostb", server.url, work / "b" / "sd",
                            ["scheduler", "--standby", "--broker", server.url, "--journal", journal, *beat])
    try:
        time.sleep(1.0)  # the agents beat before the run starts
        active.start()
        standby.start()
        wait_for("the standby watching", lambda: "standing by" in standby.output(), 60)
        wait_for("the long job and five chain jobs", lambda: sum(
            1 for j, k, _t in marks(out) if k == "end" and j.startswith("c")) >= 5 and any(
            j == "long" for j, _k, _t in marks(out)), 60)
        seen = len(marks(out))
        # A chain job starts: the next one can only be dispatched once its result is read.
        wait_for("a chain job starting", lambda: any(
            k == "start" and j.startswith("c") for j, k, _t in marks(out)[seen:]), 30)
        started = next(j for j, k, _t in marks(out)[seen:] if k == "start" and j.startswith("c"))
        active.kill_node()
        killed = time.time()
        nxt = f"c{int(started[1:]) + 1:02d}"
        wait_for(f"{nxt} started by the standby", lambda: any(j == nxt and k == "start" for j, k, _t in marks(out)),
                 60)
        first = next(t for j, k, t in marks(out) if j == nxt and k == "start")
        assert standby.wait(120) == 0, standby.output()
        runs: dict[str, int] = {}
        for j, k, _t in marks(out):
            if k == "start":
                runs[j] = runs.get(j, 0) + 1
        assert len(runs) == CHAIN + 1 and set(runs.values()) == {1}, ("a job ran twice or never", runs)
        with Store.open(None, journal=journal, readonly=True) as st:
            run = st.latest_run()
            assert run is not None and run.status == "succeeded", run
        return first - killed
    except BaseException:
        for h in (active, standby, *agents):
            print(f"--- {h.name}:\n{h.output()[-3000:]}", file=sys.stderr)
        raise
    finally:
        for h in (active, standby, *agents):
            h.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=0.1, help="--heartbeat-interval of both schedulers")
    ap.add_argument("--timeout", type=float, default=0.5, help="--heartbeat-timeout (lease) of both schedulers")
    ap.add_argument("--step", type=float, default=0.05, help="seconds each chain job sleeps")
    a = ap.parse_args()
    binary = nats_server_binary()
    if binary is None:
        raise SystemExit("drill: no nats-server binary")
    times = []
    tmp = tempfile.mkdtemp(prefix="wl-drill-")
    try:
        for r in range(a.rounds):
            work = Path(tmp) / f"r{r}"
            (work / "js").mkdir(parents=True)
            server = NatsServer(binary, work / "js", free_port())
            server.start()
            try:
                with scratch_database(pg_server(), "wl_drill") as journal:
                    t = one_round(work, server, journal, a.interval, a.timeout, a.step)
            finally:
                server.stop()
            times.append(t)
            print(f"round {r + 1}: kill -9 of the active's host -> first job started by the new active: {t:.3f}s",
                  flush=True)
    finally:
        if not os.environ.get("DRILL_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"takeover over {len(times)} round(s), heartbeat interval {a.interval}s, lease {a.timeout}s: "
          f"median {statistics.median(times):.3f}s, min {min(times):.3f}s, max {max(times):.3f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
