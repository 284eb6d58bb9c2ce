"""The scheduler loop through the pool seam, with a stub pool over the in-memory transport: no processes."""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import RunStartedEvent
from wloadctl.core.planfile import load_plan
from wloadctl.core.states import JobState
from wloadctl.ipc.arena import PayloadArena
from wloadctl.ipc.boards import StateBoard
from wloadctl.ipc.memory import MemoryQueue, MemorySegment
from wloadctl.procs.pools import Pools
from wloadctl.procs.reports import ReportReader
from wloadctl.procs.runctx import EventLog, RunContext
from wloadctl.procs.scheduler import SchedulerLoop
from wloadctl.procs.stubpool import Outcome, StubPool
from wloadctl.procs.supervisor import RunObjects
from wloadctl.store import Store

S = JobState


class Harness:
    """A real journal (SQLite file), the real loop and engine, stub pools; boards and queues in memory.

    With `away`, a second stub pool serves the jobs it names (as agents on other hosts would)."""

    def __init__(self, tmp_path: Path, jobs: dict[str, dict[str, Any]], outcome: Outcome,
                 away: frozenset[str] = frozenset()) -> None:
        plan_path = tmp_path / "plan.yaml"
        plan_path.write_text(yaml.safe_dump({"name": "stub", "jobs": jobs}, sort_keys=False))
        self.plan = load_plan(str(plan_path))
        self.store = Store.open(tmp_path / "sd")
        rid = f"stub-{secrets.token_hex(3)}"
        run = self.store.create_run(rid, self.plan.name, str(plan_path), self.plan.digest, plan_path.read_text(),
                                    self.plan.jobs.keys(), "2026-12-01", 0.0)
        epoch = self.store.begin_epoch(run.id, os.getpid(), 1e12)
        self.core = SchedulerCore(self.plan, 4, seed=epoch)
        tag = f"/stub.{rid}"
        self.board = StateBoard.create(tag + ".board", self.core.n, backend=MemorySegment)
        self.req = MemoryQueue.create(tag + ".req", 8, 8192)
        self.rsp = MemoryQueue.create(tag + ".rsp", 64, 8192)
        self.away_rsp = MemoryQueue.create(tag + ".rsp2", 64, 8192)
        self.arena = PayloadArena.create(tag + ".arena", 1 << 16, backend=MemorySegment)
        # The pipeline figures read the run's queues and arena: in memory here, and empty.
        objs = RunObjects(rid, cast(Any, self.req), cast(Any, self.rsp), self.arena, self.board, cast(Any, None),
                          cast(Any, None))
        self.events = EventLog(tmp_path / "sd" / "events.jsonl", rid)
        self.ctx = RunContext(run, self.plan, tmp_path / "sd", epoch, self.events)
        reader = ReportReader(self.core.want, lambda _r: "", lambda _i, _a: None)
        far = {self.core.ids.index(j) for j in away}
        self.pool = StubPool(self.core, reader, outcome, self.rsp, takes=lambda i: i not in far)
        self.away = StubPool(self.core, reader, outcome, self.away_rsp, first=100, takes=far.__contains__)
        self.pools = Pools([self.pool, self.away] if away else [self.pool])
        self.loop = SchedulerLoop(self.ctx, self.core, self.store, objs, self.pools, beat_interval=0.05)
        self.run = run

    def go(self, timeout: float = 20.0) -> None:
        self.core.set_times(*self.ctx.times(self.core))
        self.core.feed(RunStartedEvent(0.0))
        stopper = threading.Timer(timeout, self.loop.request_stop)
        stopper.start()
        try:
            self.loop.run()
        finally:
            stopper.cancel()

    def states(self) -> dict[str, str]:
        return {self.core.ids[i]: S(self.core.state[i]).name for i in range(self.core.n)}

    def journaled(self) -> dict[str, str]:
        return {r[1]: S(r[2]).name for r in self.store.job_rows(self.run.id)}

    def close(self) -> None:
        for q in (self.req, self.rsp, self.away_rsp):
            q.close()
            q.unlink()
        self.arena.close()
        self.arena.unlink()
        self.board.close()
        self.store.close()
        self.events.close()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[list[Harness]]:
    made: list[Harness] = []
    yield made
    for h in made:
        h.close()


def test_a_plan_runs_to_its_end_through_the_seam_and_the_journal_has_it(tmp_path: Path,
                                                                        harness: list[Harness]) -> None:
    jobs = {"a": {"command": "x"}, "b": {"command": "x", "depends_on": ["a"]}, "c": {"command": "x",
            "depends_on": ["a"]}, "d": {"command": "x", "depends_on": ["b", "c"]}}
    h = Harness(tmp_path, jobs, lambda _i, _a: 0)
    harness.append(h)
    h.go()
    assert h.loop.finished is not None and h.loop.finished.ok
    assert set(h.states().values()) == {"SUCCEEDED"}
    assert h.journaled() == h.states()
    order = [h.core.ids[i] for i, _a in h.pool.sent]
    assert order[0] == "a" and order[-1] == "d"
    h.core.validate()


def test_a_failure_is_retried_under_its_policy_and_its_dependents_wait(tmp_path: Path,
                                                                       harness: list[Harness]) -> None:
    jobs = {"flaky": {"command": "x", "retries": {"count": 2, "delay": "0s"}}, "after": {"command": "x",
            "depends_on": ["flaky"]}}
    # the first attempt of `flaky` fails, the second succeeds
    h = Harness(tmp_path, jobs, lambda i, a: 1 if (i, a) == (0, 1) else 0)
    harness.append(h)
    h.go()
    assert h.states() == {"flaky": "SUCCEEDED", "after": "SUCCEEDED"}
    assert [(h.core.ids[i], a) for i, a in h.pool.sent] == [("flaky", 1), ("flaky", 2), ("after", 1)]


def test_a_lost_executor_puts_its_running_job_back_under_policy(tmp_path: Path, harness: list[Harness]) -> None:
    jobs = {"long": {"command": "x"}, "short": {"command": "x"}}
    state = {"lost": False}

    def outcome(i: int, a: int) -> int | None:
        if i == 0 and a == 1:
            return None  # `long`'s first attempt runs until its executor dies
        return 0

    h = Harness(tmp_path, jobs, outcome)
    harness.append(h)
    real_check = h.pool.check

    def check(now: float, feed: Any, cause: str, replace: bool = True) -> None:
        if not state["lost"] and 0 in h.pool.running:
            state["lost"] = True
            h.pool.lose(h.pool.running[0])
        real_check(now, feed, cause, replace)

    h.pool.check = check  # type: ignore[method-assign]
    h.go()
    assert h.states() == {"long": "SUCCEEDED", "short": "SUCCEEDED"}
    assert [a for i, a in h.pool.sent if i == 0] == [1, 2]
    # (from, to, attempt, ts, executor, exit_code, reason, cause) per transition of `long`
    reasons = [t[6] for t in h.store.transitions_of(h.run.id, 0) if t[0] == S.RUNNING and t[1] == S.READY]
    assert reasons == ["executor lost during attempt 1; running it again"]


def test_each_job_goes_to_the_pool_that_serves_it_and_the_run_ends_through_both(tmp_path: Path,
                                                                               harness: list[Harness]) -> None:
    jobs = {"a": {"command": "x"}, "far": {"command": "x", "depends_on": ["a"]},
            "z": {"command": "x", "depends_on": ["far"]}}
    h = Harness(tmp_path, jobs, lambda _i, _a: 0, away=frozenset({"far"}))
    harness.append(h)
    h.go()
    assert h.states() == {"a": "SUCCEEDED", "far": "SUCCEEDED", "z": "SUCCEEDED"}
    assert [h.core.ids[i] for i, _a in h.pool.sent] == ["a", "z"]
    assert [h.core.ids[i] for i, _a in h.away.sent] == ["far"]
    # (from, to, attempt, ts, executor, ...) per transition: `far` ran on the other pool's node
    assert [t[4] for t in h.store.transitions_of(h.run.id, 1) if t[1] == S.RUNNING] == [100]
    h.core.validate()


def test_a_running_attempt_is_in_its_nodes_inventory_and_every_node_has_a_health_row(
        tmp_path: Path, harness: list[Harness]) -> None:
    jobs = {"long": {"command": "x"}, "far": {"command": "x"}}
    h = Harness(tmp_path, jobs, lambda _i, _a: None, away=frozenset({"far"}))
    harness.append(h)
    seen: dict[str, Any] = {}

    def look(loop: SchedulerLoop) -> None:
        # Given both attempts running, when the loop's pools are asked what their nodes hold,
        held = loop.pools.inventory()
        if 0 in h.pool.running and 1 in h.away.running and not seen:
            seen["held"] = held
            seen["rows"] = loop.pools.health(0.0)
            # then each pool's node holds its attempt until it ends.
            h.pool.finish(0)
            h.away.finish(1)

    h.loop.on_turn = look
    h.go()
    assert h.states() == {"long": "SUCCEEDED", "far": "SUCCEEDED"}
    held = seen["held"]
    assert set(held) == {0, 1, 100, 101}
    assert set().union(*held.values()) == {(0, 1), (1, 1)}
    assert any((0, 1) in held[ex] for ex in (0, 1))
    assert any((1, 1) in held[ex] for ex in (100, 101))
    assert [r["executor"] for r in seen["rows"]] == [0, 1, 100, 101]
    assert {r["state"] for r in seen["rows"]} == {"ALIVE"}
    assert h.loop.pools.inventory() == {0: set(), 1: set(), 100: set(), 101: set()}
