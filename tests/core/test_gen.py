"""Synthetic plans: shapes validate, seeds repeat, writing streams, twins run."""

from __future__ import annotations

import collections
import itertools
import re
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from wloadctl.core.dag import Dag
from wloadctl.core.planfile import load_plan
from wloadctl.core.states import SlaTier
from wloadctl.gen import (
    BANK_STAGES,
    Shape,
    iter_jobs,
    write_makefile,
    write_ninja,
    write_plan,
)


def edges(path: Path) -> tuple[int, int]:
    plan = load_plan(path)
    return len(plan.jobs), sum(len(job.depends_on) for job in plan.jobs.values())


@pytest.mark.parametrize(
    ("shape", "low", "high"), [("bank", 1.5, 2.3), ("wide", 0, 0), ("chain", 0.99, 1)]
)
def test_each_shape_validates_with_sensible_edges(
    shape: str, low: float, high: float, tmp_path: Path
) -> None:
    path = tmp_path / f"{shape}.yaml"
    write_plan(path, 2000, shape, seed=7)  # type: ignore[arg-type]
    jobs, edge_count = edges(path)
    assert jobs == 2000
    assert low <= edge_count / jobs <= high


def test_bank_is_layered_by_stage_with_realistic_names(tmp_path: Path) -> None:
    path = tmp_path / "bank.yaml"
    write_plan(path, 5000, "bank", seed=3)
    plan = load_plan(path)
    stage = {job: int(job[1:3]) for job in plan.jobs}
    names = re.compile(r"s\d\d_[a-z_]+_\d{6}")
    assert all(names.fullmatch(job) for job in plan.jobs)
    assert 20 <= len(set(stage.values())) <= 60
    assert next(iter(plan.jobs)).startswith("s00_open_day_")
    assert list(plan.jobs)[-1].startswith(f"s{max(stage.values()):02d}_close_day_")
    previous = total = 0
    for job in plan.jobs.values():
        assert 0 < len(job.depends_on) <= 3 or stage[job.id] == 0
        for up in job.depends_on:
            assert stage[up] < stage[job.id]
            previous += stage[up] == stage[job.id] - 1
            total += 1
    assert previous / total > 0.7
    tiers = collections.Counter(job.sla for job in plan.jobs.values())
    assert 0.03 < tiers[SlaTier.CRITICAL] / 5000 < 0.08
    assert 0.11 < tiers[SlaTier.HIGH] / 5000 < 0.19
    assert 0.55 < tiers[SlaTier.STANDARD] / 5000 < 0.65
    assert 0.16 < tiers[SlaTier.LOW] / 5000 < 0.24
    assert Dag(plan).find_cycle() is None


@pytest.mark.parametrize("jobs", [1, 2, 3, 25, 61])
def test_tiny_bank_plans_are_valid(jobs: int, tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    write_plan(path, jobs, "bank", seed=1)
    assert len(load_plan(path).jobs) == jobs


def test_stage_names_cover_an_end_of_day_run() -> None:
    assert len(BANK_STAGES) == 60
    assert BANK_STAGES[0] == "open_day"
    assert BANK_STAGES[-1] == "close_day"


@pytest.mark.parametrize("shape", ["bank", "wide", "chain"])
def test_same_seed_same_plan(shape: str, tmp_path: Path) -> None:
    one, two, other = tmp_path / "1.yaml", tmp_path / "2.yaml", tmp_path / "3.yaml"
    write_plan(one, 800, shape, seed=11)  # type: ignore[arg-type]
    write_plan(two, 800, shape, seed=11)  # type: ignore[arg-type]
    write_plan(other, 800, shape, seed=12)  # type: ignore[arg-type]
    assert one.read_bytes() == two.read_bytes()
    if shape != "chain":  # a chain's edges do not depend on the seed, only its tiers do
        assert one.read_bytes() != other.read_bytes()


def test_chain_links_each_job_to_the_previous(tmp_path: Path) -> None:
    path = tmp_path / "chain.yaml"
    write_plan(path, 100, "chain", seed=0)
    plan = load_plan(path)
    ids = list(plan.jobs)
    assert all(plan.jobs[b].depends_on == (a,) for a, b in itertools.pairwise(ids))


@pytest.mark.parametrize("style", ["flow", "block"])
def test_noop_plans_have_no_commands(tmp_path: Path, style: str) -> None:
    # (a noop job with a command is refused: the plan must load)
    path = tmp_path / "noop.yaml"
    write_plan(path, 300, "bank", seed=2, job_type="noop", style=style)
    plan = load_plan(path)
    assert {(job.type, job.command) for job in plan.jobs.values()} == {("noop", None)}


def test_command_template_names_each_job(tmp_path: Path) -> None:
    path = tmp_path / "cmd.yaml"
    write_plan(path, 20, "wide", seed=0, command='echo {job} >> "$OUT"')
    plan = load_plan(path)
    assert plan.jobs["w000003"].command == 'echo w000003 >> "$OUT"'


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one job"):
        list(iter_jobs(0, "bank", 1))
    with pytest.raises(ValueError, match="unknown shape 'star'"):
        list(iter_jobs(5, "star", 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown job type"):
        write_plan(tmp_path / "x.yaml", 5, "wide", 1, job_type="python")  # type: ignore[arg-type]


@pytest.mark.parametrize(("args", "said"), [
    (["-o", "{tmp}/missing/x.yaml"], "wloadctl: cannot write {tmp}/missing/x.yaml: No such file or directory "
                                     "(-o names the plan file to write, in a directory that exists)\n"),
    (["-o", "{tmp}"], "wloadctl: cannot write {tmp}: Is a directory "
                      "(-o names the plan file to write, in a directory that exists)\n"),
    (["--command", "", "-o", "{tmp}/x.yaml"],
     "wloadctl: --command '': the command is empty: a shell job needs one (or write --type noop jobs)\n"),
], ids=["missing-directory", "a-directory", "empty-command"])
def test_gen_refuses_what_it_cannot_write_in_one_line_and_writes_nothing(
    args: list[str], said: str, tmp_path: Path
) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    p = subprocess.run([sys.executable, "-m", "wloadctl", "gen", "--jobs", "10", *argv],
                       capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stderr) == (2, said.replace("{tmp}", str(tmp_path)))
    assert list(tmp_path.iterdir()) == []


def test_fifty_thousand_jobs_are_written(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    write_plan(path, 50_000, "bank", seed=5)
    with path.open() as lines:
        assert sum(1 for line in lines if line.startswith("  s")) == 50_000


def traced_peak(path: Path, jobs: int) -> int:
    tracemalloc.start()
    try:
        write_plan(path, jobs, "bank", seed=5)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_writing_streams_instead_of_building_the_plan(tmp_path: Path) -> None:
    small = traced_peak(tmp_path / "small.yaml", 1000)
    large = traced_peak(tmp_path / "large.yaml", 8000)
    # Eight times the jobs and the file, the same memory: nothing accumulates.
    assert (tmp_path / "large.yaml").stat().st_size > 7 * (
        tmp_path / "small.yaml"
    ).stat().st_size
    assert large < small + 200_000


def run_log(log: Path) -> list[str]:
    return log.read_text().split()


def assert_ran_once_in_order(ran: list[str], jobs: int, shape: str, seed: int) -> None:
    assert sorted(ran) == sorted(job for job, _, _ in iter_jobs(jobs, shape, seed))  # type: ignore[arg-type]
    place = {job: i for i, job in enumerate(ran)}
    for job, deps, _ in iter_jobs(jobs, shape, seed):  # type: ignore[arg-type]
        for up in deps:
            assert place[up] < place[job], f"{job} ran before its upstream {up}"


@pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja is not installed")
@pytest.mark.parametrize("shape", ["bank", "chain"])
def test_ninja_twin_runs_each_command_once_in_order(
    shape: Shape, tmp_path: Path
) -> None:
    write_ninja(
        tmp_path / "build.ninja", 120, shape, seed=4, command="echo {job} >> ran.log"
    )
    subprocess.run(["ninja", "-j", "4"], cwd=tmp_path, check=True, capture_output=True)
    assert_ran_once_in_order(run_log(tmp_path / "ran.log"), 120, shape, 4)
    again = subprocess.run(
        ["ninja", "-j", "4"], cwd=tmp_path, check=True, capture_output=True, text=True
    )
    assert "no work to do" in again.stdout
    assert len(run_log(tmp_path / "ran.log")) == 120


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("shape", ["bank", "chain"])
def test_make_twin_runs_each_command_once_in_order(
    shape: Shape, tmp_path: Path
) -> None:
    write_makefile(
        tmp_path / "Makefile", 120, shape, seed=4, command="echo {job} >> ran.log"
    )
    subprocess.run(["make", "-j", "4"], cwd=tmp_path, check=True, capture_output=True)
    assert_ran_once_in_order(run_log(tmp_path / "ran.log"), 120, shape, 4)
    subprocess.run(["make", "-j", "4"], cwd=tmp_path, check=True, capture_output=True)
    assert len(run_log(tmp_path / "ran.log")) == 120


def test_twins_share_the_plans_dag(tmp_path: Path) -> None:
    write_plan(tmp_path / "p.yaml", 200, "bank", seed=9)
    write_ninja(tmp_path / "build.ninja", 200, "bank", seed=9)
    plan = load_plan(tmp_path / "p.yaml")
    builds = [
        line
        for line in (tmp_path / "build.ninja").read_text().splitlines()
        if line.startswith("build ")
    ]
    assert len(builds) == 200
    for line, job in zip(builds, plan.jobs.values(), strict=True):
        assert line.startswith(f"build .stamps/{job.id}: job")
        assert [
            d.removeprefix(".stamps/") for d in line.partition(" | ")[2].split()
        ] == list(job.depends_on)


def test_gen_writes_plan_files_only_and_through_a_link(tmp_path: Path) -> None:
    import os

    fifo, folder, real = tmp_path / "fifo", tmp_path / "folder", tmp_path / "real.yaml"
    os.mkfifo(fifo)
    folder.mkdir()
    for target, said in ((fifo, "it is not a regular file"), (folder, "Is a directory")):
        # (a device or a pipe there was replaced by the plan file)
        p = subprocess.run([sys.executable, "-m", "wloadctl", "gen", "--jobs", "5", "-o", str(target)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stderr.startswith(f"wloadctl: cannot write {target}: {said}"), p.stderr
    assert fifo.is_fifo() and folder.is_dir() and list(folder.iterdir()) == []
    real.write_text("old\n")
    (tmp_path / "link.yaml").symlink_to(real)
    p = subprocess.run([sys.executable, "-m", "wloadctl", "gen", "--jobs", "5", "-o", str(tmp_path / "link.yaml")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "link.yaml").is_symlink() and len(load_plan(real).jobs) == 5
    assert sorted(x.name for x in tmp_path.iterdir()) == ["fifo", "folder", "link.yaml", "real.yaml"]
