"""The host's slot ledger: tiers first across runs, fair share by weight, crash-safe release."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from wloadctl.hostshare import HostCapacity, HostShare, Ledger, Row, allocate, behind


def row(run: str, weight: float = 1.0, demand: tuple[int, ...] = (0, 0, 10, 0)) -> Row:
    return Row(run, run, os.getpid(), weight, list(demand))


def test_slots_split_by_weight_and_never_beyond_what_a_run_can_use() -> None:
    assert allocate(9, [row("a", 2), row("b", 1)]) == {"a": 6, "b": 3}
    # b can use only one slot: what it leaves goes to a
    assert allocate(9, [row("a", 2), row("b", 1, (0, 0, 1, 0))]) == {"a": 8, "b": 1}
    assert allocate(9, [row("a"), row("b", demand=(0, 0, 0, 0))]) == {"a": 9, "b": 0}
    # fewer slots than runs: one each, heaviest first
    assert allocate(1, [row("a", 1), row("b", 3)]) == {"a": 0, "b": 1}


def test_sla_tiers_come_first_across_runs() -> None:
    urgent = row("urgent", 1, (3, 0, 0, 0))
    bulk = row("bulk", 10, (0, 0, 0, 50))
    assert allocate(5, [urgent, bulk]) == {"urgent": 3, "bulk": 2}
    assert allocate(2, [urgent, bulk]) == {"urgent": 2, "bulk": 0}


def test_two_schedulers_share_the_host_and_a_dead_ones_slots_come_back(tmp_path: Path) -> None:
    HostCapacity(4).write(tmp_path)
    a = HostShare(tmp_path, "run-a", "ledger", 1.0, own_slots=8)
    # Given run a alone: it may fill the whole host, not its own eight slots
    assert a.beat([0, 0, 20, 0], busy=0, now=100.0) == 4
    assert a.beat([0, 0, 20, 0], busy=4, now=101.0) == 4
    # When run b (another live process) joins, it waits for what a still holds
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        b = HostShare(tmp_path, "run-b", "statements", 1.0, own_slots=8)
        b.row.pid = sleeper.pid
        assert b.beat([0, 0, 20, 0], busy=0, now=101.5) == 0
        # Then a's share halves at its next beat, and b gets its half as a's jobs end
        assert a.beat([0, 0, 20, 0], busy=4, now=102.0) == 2
        assert b.beat([0, 0, 20, 0], busy=0, now=102.5) == 0  # a still runs four
        assert a.beat([0, 0, 18, 0], busy=2, now=103.0) == 2
        assert b.beat([0, 0, 20, 0], busy=0, now=103.5) == 2
        assert [r.plan for r in behind(tmp_path, "run-b", now=104.0)] == ["ledger"]
    finally:
        sleeper.kill()
        sleeper.wait()
    # When b's scheduler is gone (a crash: its row stays), then a gets the whole host back
    assert "run-b" in Ledger(tmp_path).rows()
    assert a.beat([0, 0, 20, 0], busy=2, now=104.0) == 4
    assert "run-b" not in Ledger(tmp_path).rows()
    a.leave()
    assert Ledger(tmp_path).rows() == {}


def test_without_a_host_capacity_a_run_keeps_its_own_slots(tmp_path: Path) -> None:
    assert HostShare(tmp_path, "run-a", "p", 1.0, own_slots=8).beat([0, 0, 50, 0], busy=0) == 8
    assert behind(tmp_path, "run-a") == []
