"""The host's ledger: slots, cpu and memory split with tiers first across runs, fair share by weight, crash-safe
release."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from wloadctl.cli import main
from wloadctl.client import _behind_runs
from wloadctl.hostshare import HostCapacity, HostShare, Ledger, Row, allocate, behind, grant


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


def claimer(run: str, weight: float = 1.0, held: int = 0, waiting: tuple[tuple[int, int, int], ...] = ()) -> Row:
    return Row(run, run, os.getpid(), weight, held={"cpu": held}, waiting=[list(w) for w in waiting])


def test_cpu_is_granted_job_by_job_by_weight_and_never_in_halves() -> None:
    two = ((2, 2000, 0),) * 3
    # Two runs of equal weight, jobs of two CPUs each, four CPUs: one job each, not 2+2 of one
    assert grant({"cpu": 4000}, [claimer("a", waiting=two), claimer("b", waiting=two)]) == {
        "a": {"cpu": 2000},
        "b": {"cpu": 2000},
    }
    # Two CPUs for both: one of them runs its job whole (never one CPU each, which would start nothing)
    assert grant({"cpu": 2000}, [claimer("a", waiting=two), claimer("b", waiting=two)]) == {
        "a": {"cpu": 2000},
        "b": {"cpu": 0},
    }
    # Equally far below their share, the run that has used the host less goes first
    used = claimer("a", waiting=two)
    used.used = 5.0
    assert grant({"cpu": 2000}, [used, claimer("b", waiting=two)]) == {"a": {"cpu": 0}, "b": {"cpu": 2000}}
    # By weight: the run of weight 3 gets three jobs to the other's one
    one = ((2, 1000, 0),) * 8
    got = grant({"cpu": 4000}, [claimer("a", 3, waiting=one), claimer("b", 1, waiting=one)])
    assert got == {"a": {"cpu": 3000}, "b": {"cpu": 1000}}


def test_claims_keep_what_runs_hold_and_tiers_go_first_across_runs() -> None:
    # A run's running jobs keep what they hold; the critical job of another run comes before the rest
    rows = [claimer("bulk", 10, held=1000, waiting=((3, 1000, 0),) * 4), claimer("urgent", 1, waiting=((0, 2000, 0),))]
    assert grant({"cpu": 3000}, rows) == {"bulk": {"cpu": 1000}, "urgent": {"cpu": 2000}}
    # When the critical job does not fit yet, nothing smaller overtakes it
    assert grant({"cpu": 2500}, rows) == {"bulk": {"cpu": 1000}, "urgent": {"cpu": 0}}
    # A job claiming more than the host has is passed over
    rows = [claimer("a", waiting=((2, 9000, 0), (2, 1000, 0)))]
    assert grant({"cpu": 2000}, rows) == {"a": {"cpu": 1000}}


def test_cpu_and_memory_are_granted_together_by_dominant_share() -> None:
    mem_heavy = Row("m", "m", os.getpid(), 1.0, waiting=[[2, 100, 4000]] * 4)
    cpu_heavy = Row("c", "c", os.getpid(), 1.0, waiting=[[2, 1000, 64]] * 4)
    got = grant({"cpu": 4000, "memory": 8192}, [mem_heavy, cpu_heavy])
    # Each job goes to the run whose larger part (memory for m, cpu for c) is the smaller: m ends with most
    # of the memory, c with most of the CPUs, and neither is starved by the other's kind of job
    assert got == {"m": {"cpu": 200, "memory": 8000}, "c": {"cpu": 3000, "memory": 192}}


def test_two_runs_share_the_hosts_cpus_and_a_crashed_runs_claims_come_back_when_its_executors_end(
    tmp_path: Path,
) -> None:
    HostCapacity(0, cpus=2).write(tmp_path)
    sleeper = subprocess.Popen(["sleep", "60"])
    executor = subprocess.Popen(["sleep", "60"])
    try:
        # Given run a holding both CPUs, with an executor of its own
        a = HostShare(tmp_path, "run-a", "ledger", 1.0, own_slots=8)
        a.row.pid = sleeper.pid
        assert a.beat([0] * 4, busy=1, now=100.0, held={"cpu": 2000}, holders=[executor.pid]) == 8
        assert a.claims == {"cpu": 2000}
        # When run b waits for two CPUs, it gets none: a holds them, and `why` names a
        b = HostShare(tmp_path, "run-b", "stmts", 1.0, own_slots=8)
        assert b.beat([0] * 4, busy=0, now=100.5, held={"cpu": 0}, waiting=[[2, 2000, 0]]) == 8
        assert b.claims == {"cpu": 0}
        assert [r.plan for r in behind(tmp_path, "run-b", now=101.0, kinds=["cpu"])] == ["ledger"]
        assert behind(tmp_path, "run-b", now=101.0) == []  # slots are not shared
        # When a's scheduler dies, its executor still runs its job: the claim stays
        sleeper.kill()
        sleeper.wait()
        assert b.beat([0] * 4, busy=0, now=101.5, held={"cpu": 0}, waiting=[[2, 2000, 0]]) == 8
        assert b.claims == {"cpu": 0}
        assert [r.plan for r in behind(tmp_path, "run-b", now=102.0, kinds=["cpu"])] == ["ledger"]
    finally:
        for p in (sleeper, executor):
            p.kill()
            p.wait()
    # Then once its executor is gone too, the CPUs come back to b
    assert b.beat([0] * 4, busy=0, now=102.5, held={"cpu": 0}, waiting=[[2, 2000, 0]]) == 8
    assert b.claims == {"cpu": 2000}
    assert list(Ledger(tmp_path).rows()) == ["run-b"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--memory", "lots"], "--memory must be MiB or a size like 4G, not 'lots'"),
        (["--cpus", "-1"], "--cpus -1: the host's capacity cannot be negative"),
        (["--cpus", "0"], "needs slots, cpus or memory above 0"),
        # (taken once, NaN or infinity broke every later run of the user on the host)
        (["--cpus", "nan"], "--cpus nan: the host's capacity must be a number"),
        (["--cpus", "inf"], "--cpus inf: the host's capacity must be a number"),
        (["--cpus", "1e999"], "--cpus inf: the host's capacity must be a number"),
        (["--slots", "99999999999999999999"], "--slots 99999999999999999999: more than a host has (at most 1,000,000)"),
    ],
)
def test_a_bad_host_capacity_is_one_line_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["host", "--root", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert HostCapacity.read(tmp_path) is None


def test_a_capacity_file_holding_no_number_is_no_capacity(tmp_path: Path) -> None:
    HostCapacity.path(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    HostCapacity.path(tmp_path).write_text('{"slots": 0, "cpus": NaN, "memory": 0}\n')
    assert HostCapacity.read(tmp_path) is None


def test_each_host_option_changes_only_its_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["host", "--root", str(tmp_path), "--cpus", "1.5", "--memory", "2G"]) == 0
    assert main(["host", "--root", str(tmp_path), "--slots", "3"]) == 0
    assert HostCapacity.read(tmp_path) == HostCapacity(3, 1.5, 2048)
    assert main(["host", "--root", str(tmp_path), "--cpus", "0"]) == 0
    assert HostCapacity.read(tmp_path) == HostCapacity(3, 0.0, 2048)
    assert "3 slots, 2048 MiB" in capsys.readouterr().out


def test_why_of_a_job_claiming_more_than_the_host_has_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WLOADCTL_HOME", str(tmp_path))
    HostCapacity(0, cpus=2).write(tmp_path)
    why = {"state": "READY", "reasons": [], "host_wait": ["cpu"], "host_need": {"cpu": 4000}}
    _behind_runs(why, "run-a")
    assert "it claims cpu 4, more than the host has (cpu 2)" in why["reasons"][-1]
