"""The benchmark at small sizes: it runs, its figures are positive and consistent."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from array import array
from pathlib import Path
from typing import Any

import pytest

from wloadctl.bench import buildtools, compare, daskcmp, firstjob
from wloadctl.bench.baselines import (
    Graph,
    counter_run,
    rescan_run,
    rescan_total_checks,
)
from wloadctl.bench.context import (
    OWNER_FILE,
    QUICK,
    SCRATCH_PREFIX,
    Context,
    Settings,
    clean_stale_scratch,
)
from wloadctl.bench.figures import SECTIONS, combine, field_of, ratio
from wloadctl.bench.measure import file_create_micros
from wloadctl.bench.remote import agent_names
from wloadctl.bench.runs import chain_latencies, run_processes
from wloadctl.bench.suite import build_parser, main, settings_from
from wloadctl.bench.workflows import Workflow, ninja_ran
from wloadctl.ipc import protocol as P
from wloadctl.ipc.shm import remove_run_objects
from wloadctl.remote.agent import node_run_id


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory, pg_server_url: str) -> dict[str, Any]:
    """One `wloadctl bench --quick` for the whole module (it is the slow part)."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    code = main(["--quick", "--quiet", "--out", str(out), "--pg", pg_server_url])
    data: dict[str, Any] = json.loads(out.read_text())
    data["exit_code"] = code
    return data


def _figures(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["key"]: f for f in data["figures"]}


# -- the quick run --------------------------------------------------------------------


@pytest.mark.ipc
def test_quick_run_succeeds_and_measures_every_section(quick: dict[str, Any]) -> None:
    assert quick["exit_code"] == 0
    assert quick["mode"] == "quick"
    measured = {f["section"] for f in quick["figures"]}
    assert {"engine", "firstjob", "e2e", "postgres", "shell", "latency", "memory", "remote"} <= measured
    pg = [f for f in quick["figures"] if f["section"] == "postgres"]
    assert pg and all(f["jobs_per_s"] for f in pg), pg
    assert any("PostgreSQL journal jobs/s / SQLite journal jobs/s" in r["name"] for r in quick["ratios"])
    if daskcmp.available():
        assert "dask" in measured
    else:
        assert daskcmp.MISSING in quick["notes"]


@pytest.mark.ipc
def test_report_describes_the_machine(quick: dict[str, Any]) -> None:
    m = quick["machine"]
    assert m["cores"] >= 1
    assert m["python"].count(".") == 2
    assert m["platform"]
    assert len(m["load_average_start"]) == 3
    # How jobs are contained, which the shell and workflow figures depend on
    assert m["job_tree"].startswith(("cgroup per job; ", "subreaper (")), m["job_tree"]


@pytest.mark.ipc
def test_figures_are_positive_and_jobs_per_second_follow_from_seconds(
    quick: dict[str, Any],
) -> None:
    for f in quick["figures"]:
        assert f["jobs"] > 0, f["key"]
        assert f["seconds"] is not None and f["seconds"] > 0, f["key"]
        assert f["seconds"] == pytest.approx(statistics.median(f["samples"])), f["key"]
        assert f["jobs_per_s"] == pytest.approx(f["jobs"] / f["seconds"], rel=1e-9), f[
            "key"
        ]
        for k, v in f["extra"].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                assert v >= 0, (f["key"], k)


@pytest.mark.ipc
def test_ratios_come_from_figures_of_the_same_run(quick: dict[str, Any]) -> None:
    figs = _figures(quick)
    assert quick["ratios"]
    for r in quick["ratios"]:
        num, den = figs[r["numerator"]], figs[r["denominator"]]

        def value(f: dict[str, Any], of: str) -> float:
            return float(f[of] if of in ("seconds", "jobs_per_s") else f["extra"][of])

        assert r["value"] == pytest.approx(
            value(num, r["of"]) / value(den, r["den_of"]), rel=1e-9
        )


@pytest.mark.ipc
def test_engine_and_reference_loops_complete_the_same_dag(
    quick: dict[str, Any],
) -> None:
    figs = _figures(quick)
    for jobs in QUICK.engine:
        eng = figs[f"engine/simulated run/wloadctl/bank/{jobs}"]
        counter = figs[f"engine/simulated run/counter loop/bank/{jobs}"]
        assert eng["extra"]["completed"] == counter["extra"]["completed"] == jobs
        # The engine has a slot per job here: it runs in the loops' rounds.
        assert eng["extra"]["rounds"] == counter["extra"]["rounds"]
        assert eng["extra"]["bytes_per_job"] > 0


@pytest.mark.ipc
def test_shell_comparison_ran_every_tool_on_every_shape(quick: dict[str, Any]) -> None:
    figs = _figures(quick)
    tools = ["wloadctl"] + [
        f"{t} -j2" for t in buildtools.TOOLS if buildtools.available(t)
    ]
    ratios = {r["name"]: r for r in quick["ratios"]}
    for shape in ("bank", "wide", "chain"):
        for tool in tools:
            assert f"shell/shell jobs (true)/{tool}/{shape}/{QUICK.shell}" in figs
        # CPU per job beside ninja's: every process of each command, over the same jobs
        if buildtools.available("ninja"):
            cpu = ratios[f"shell {shape} {QUICK.shell}: wloadctl / ninja -j2 CPU per job"]
            mine = figs[f"shell/shell jobs (true)/wloadctl/{shape}/{QUICK.shell}"]["extra"]["cpu_seconds"]
            theirs = figs[f"shell/shell jobs (true)/ninja -j2/{shape}/{QUICK.shell}"]["extra"]["cpu_seconds"]
            assert cpu["value"] == pytest.approx(mine / theirs) and cpu["of"] == "cpu_seconds"


@pytest.mark.ipc
def test_latency_and_memory_figures_are_there(quick: dict[str, Any]) -> None:
    lat = _figures(quick)[
        f"latency/completion-to-dependent-start/wloadctl/chain/{QUICK.latency}"
    ]
    assert lat["extra"]["gaps"] == QUICK.latency - 1
    assert 0 < lat["extra"]["p50_ms"] <= lat["extra"]["p99_ms"]
    mem = _figures(quick)[f"memory/scheduler memory per job/wloadctl/bank/{QUICK.big}"]
    assert mem["extra"]["peak_rss_mib"] > 0


@pytest.mark.ipc
def test_remote_section_runs_through_agents_beside_local_and_dask_distributed(quick: dict[str, Any]) -> None:
    figs = _figures(quick)
    jobs = QUICK.remote
    remote = figs[f"remote/no-op throughput/wloadctl 2 agents/bank/{jobs}"]
    local = figs[f"e2e/no-op throughput/wloadctl/bank/{jobs}"]
    assert remote["jobs_per_s"] and local["jobs_per_s"] and remote["extra"]["agents"] == 2
    ratios = {r["name"]: r for r in quick["ratios"]}
    by_local = ratios[f"remote {jobs}: 2 agents jobs/s / local jobs/s"]
    assert (by_local["numerator"], by_local["denominator"]) == (remote["key"], local["key"])
    if daskcmp.available("distributed"):
        dist = figs[f"remote/no-op DAG/dask distributed 2 workers/bank/{QUICK.remote_dask}"]
        assert dist["extra"]["workers"] == 2 and dist["extra"]["start_seconds"] > 0
        by_dask = ratios[f"remote {jobs}: 2 agents jobs/s / Dask distributed jobs/s"]
        assert by_dask["denominator"] == dist["key"]
    else:
        assert daskcmp.MISSING_DISTRIBUTED in quick["notes"]
    # The agents (named after this process, which ran the benchmark) are gone with their
    # executors, queues and segments.
    for name in agent_names():
        assert run_processes(name) == []
        assert remove_run_objects(node_run_id(name)) == []


@pytest.mark.ipc
def test_reads_of_a_finished_run_are_measured_beside_a_replay(quick: dict[str, Any]) -> None:
    figs = _figures(quick)
    for name in ("replay of every turn", "status", "history of one job", "why of one job", "status (command)"):
        assert figs[f"reads/{name}/wloadctl/bank/{QUICK.big}"]["seconds"] > 0
    names = {r["name"] for r in quick["ratios"]}
    assert f"reads {QUICK.big}: status / replay of every turn" in names


@pytest.mark.ipc
def test_targets_are_listed_but_not_judged_at_quick_sizes(
    quick: dict[str, Any],
) -> None:
    labels = [t["label"] for t in quick["targets"]]
    assert labels == ["a1", "a2", "a3", "a4", "b1", "b3", "b2", "c1", "c2", "c3", "c4", "c5", "c6", "d", "e",
                      "f1", "f2", "r1", "r2", "r3", "s1", "k1", "k2", "k3", "k4", "s2",
                      "w1", "w2", "w3", "w4", "w5", "w6"]
    assert all(t["met"] is None for t in quick["targets"])


@pytest.mark.ipc
def test_nothing_is_left_behind(quick: dict[str, Any]) -> None:
    c = quick["cleanup"]
    assert c["scratch_removed"] and not Path(c["scratch_dir"]).exists()
    assert c["leftovers"] == []
    assert c["run_ids"]
    names: list[str] = []
    for d in ("/dev/mqueue", "/dev/shm"):
        if os.path.isdir(d):
            names += os.listdir(d)
    for rid in c["run_ids"]:
        assert not [n for n in names if f".{rid}." in n]
        assert run_processes(rid) == []


# -- the parts, without processes -----------------------------------------------------


def _graph(upstreams: list[list[int]]) -> Graph:
    """A Graph from each job's upstream list."""
    n = len(upstreams)
    up_start = array("i", [0])
    up = array("i")
    for ups in upstreams:
        up.extend(ups)
        up_start.append(len(up))
    down_lists: list[list[int]] = [[] for _ in range(n)]
    for d, ups in enumerate(upstreams):
        for u in ups:
            down_lists[u].append(d)
    down_start = array("i", [0])
    down = array("i")
    for ds in down_lists:
        down.extend(ds)
        down_start.append(len(down))
    indegree = array("i", (len(u) for u in upstreams))
    return Graph(n, indegree, up_start, up, down_start, down)


def test_counter_and_rescan_loops_agree_on_rounds() -> None:
    # a -> b -> d, a -> c -> d, e alone
    g = _graph([[], [0], [0], [1, 2], []])
    sizes = counter_run(g)
    assert sizes == [2, 2, 1]
    r = rescan_run(g, cap_seconds=60)
    assert (r.rounds, r.completed, r.capped) == (3, 5, False)
    assert r.checks == rescan_total_checks(5, sizes) == 5 + 3 + 1


def test_rescan_stops_at_its_cap_on_a_chain() -> None:
    g = _graph([[]] + [[i] for i in range(999)])
    r = rescan_run(g, cap_seconds=0.0)
    assert r.capped and r.completed < 1000
    assert rescan_total_checks(1000, counter_run(g)) == 1000 * 1001 // 2


def test_combine_takes_medians_and_ratio_divides_the_named_fields() -> None:
    a = combine(
        "e2e",
        "x",
        "wloadctl",
        "bank",
        100,
        [
            {"seconds": 2.0, "cpu": 1},
            {"seconds": 4.0, "cpu": 3},
            {"seconds": 1.0, "cpu": 2},
        ],
        "wall",
    )
    assert a.seconds == 2.0 and a.samples == [2.0, 4.0, 1.0] and a.jobs_per_s == 50.0
    assert a.extra["cpu"] == 2
    b = combine("dask", "y", "dask", "bank", 100, [{"seconds": 4.0}], "wall")
    r = ratio("a/b", a, b)
    assert r is not None and r.value == pytest.approx(2.0)
    assert field_of(a, "cpu") == 2.0
    assert ratio("missing", a, None) is None


def test_every_goal_of_the_issue_is_judged_from_its_figure_at_full_sizes() -> None:
    from wloadctl.bench.report import judge

    def wf(label: str, tool: str, seconds: float) -> Any:
        return combine("workflows", "Montage makespan", tool, "workflow", 1696, [{"seconds": seconds}], label)

    ninja, first, second = wf("n", "ninja -j16", 50.0), wf("f", "wloadctl first run", 49.0), \
        wf("s", "wloadctl second run (history)", 47.0)
    ratios = [r for r in (ratio("workflow Montage: wloadctl first run / ninja -j16 makespan", first, ninja, "seconds"),
                          ratio("workflow Montage: wloadctl second run (history) / ninja -j16 makespan", second,
                                ninja, "seconds")) if r is not None]
    engine = combine("engine", "simulated run", "wloadctl", "bank", 10_000_000,
                     [{"seconds": 31.0, "bytes_per_job": 1000.0}], "phase")
    e2e = combine("e2e", "no-op throughput", "wloadctl", "bank", 1_000_000, [{"seconds": 20.0}], "wall")
    full = {t.label: t for t in judge([engine, e2e], ratios)}
    # 0.98 x ninja meets the first run's 1.0; 0.94 x misses the second run's 0.9.
    assert (full["w1"].value, full["w1"].met) == (pytest.approx(0.98), True)
    assert (full["w4"].value, full["w4"].met) == (pytest.approx(0.94), False)
    assert full["w2"].met is None  # Epigenomics was not measured
    assert (full["a3"].met, full["a4"].met) == (False, True)  # 31 s of 30; 1,000 B of 1,024
    assert (full["b2"].value, full["b2"].met) == (50_000.0, False)  # 1M jobs in 20 s, of 60,000/s
    quick = {t.label: t for t in judge([engine, e2e], ratios, quick=True)}
    assert quick["w1"].met is None and quick["w1"].value is None
    assert quick["a3"].met is False  # a figure named by its size is judged at any size


def test_a_failed_repeat_leaves_the_figure_without_seconds() -> None:
    f = combine(
        "e2e",
        "x",
        "wloadctl",
        "bank",
        10,
        [{"seconds": 1.0}, {"seconds": None, "note": "boom"}],
        "w",
    )
    assert f.seconds is None and f.jobs_per_s is None and f.note == "boom"


def test_chain_latency_runs_from_one_end_to_the_next_start() -> None:
    def rec(kind: int, task: int, started: float, ended: float) -> P.ResultRecord:
        return P.ResultRecord(kind, 0, 0, task, 1, 0, 0, 1, 0, started, ended, 0, 0)

    records = [
        rec(P.RES_EXITED, 0, 10.0, 10.0),
        rec(P.RES_EXITED, 1, 10.002, 10.002),
        rec(P.RES_EXITED, 2, 10.005, 10.005),
    ]
    assert chain_latencies(records, 3) == pytest.approx([0.002, 0.003])


def test_build_files_hold_one_edge_or_target_per_job(tmp_path: Path) -> None:
    buildtools.write_ninja_file(tmp_path / "build.ninja", 50, "bank", 1, "true")
    buildtools.write_makefile(tmp_path / "Makefile", 50, "bank", 1, "true")
    ninja = (tmp_path / "build.ninja").read_text()
    make = (tmp_path / "Makefile").read_text()
    assert ninja.count("\nbuild ") == 50
    assert make.count("\nall: ") == 50
    assert "touch" not in ninja and "touch" not in make


def test_list_schedule_starts_the_longest_remaining_path_first() -> None:
    # y1, y2 come first in plan order, but x1 -> x2 is the longer path: started first, it ends with them
    wf = Workflow("w", ["y1", "y2", "x1", "x2"], {"y1": [], "y2": [], "x1": [], "x2": ["x1"]},
                  {"y1": 2.0, "y2": 2.0, "x1": 1.0, "x2": 3.0})
    assert wf.lower_bound(2) == 4.0
    assert wf.list_schedule(2) == 4.0  # plan order would start x1 at 2 and end at 6
    assert wf.list_schedule(1) == 8.0


@pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja is not installed")
def test_ninja_runs_every_command_once(tmp_path: Path) -> None:
    log = tmp_path / "ran"
    buildtools.write_ninja_file(
        tmp_path / "build.ninja", 40, "bank", 1, f"echo x >> {log}"
    )
    r = buildtools.run_tool("ninja", tmp_path, 2, timeout=60)
    assert r.ok and len(log.read_text().splitlines()) == 40


def test_missing_dask_is_said_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daskcmp, "available", lambda: False)
    settings = Settings(QUICK, True, 1, ("dask",), 1, "normal", 2, 8, 2)
    ctx = Context(settings)
    try:
        compare.dask(ctx)
    finally:
        ctx.cleanup()
    assert ctx.notes == [daskcmp.MISSING]
    assert ctx.figures == []


def test_first_job_section_measures_both_styles_beside_a_bare_parse(tmp_path: Path) -> None:
    # Given: a context of the quick sizes with a first-job plan of 300 jobs
    sizes = dataclasses.replace(QUICK, first_job=300)
    ctx = Context(Settings(sizes=sizes, quick=True, repeat=1, sections=("firstjob",), seed=1,
                           journal_sync="auto", executors=1, slots=1, shell_parallel=1))
    # When: the section runs
    try:
        firstjob.firstjob(ctx)
    finally:
        ctx.cleanup()
    # Then: for each style a load read by lines, a first job started, and ratios against the bare parse
    figs = {f.key: f for f in ctx.figures}
    for style in ("flow", "block"):
        load = figs[f"firstjob/load+validate/wloadctl/bank, {style}/300"]
        assert load.extra["read_by_lines"] is True
        assert load.extra["seconds_per_million_jobs"] == pytest.approx(load.seconds * 1_000_000 / 300)
        first = figs[f"firstjob/time to first job started/wloadctl/bank, {style}/300"]
        assert first.seconds is not None and first.seconds > 0, first.note
        assert figs[f"firstjob/bare YAML event parse/wloadctl/bank, {style}/300"].seconds
    names = {r.name for r in ctx.ratios}
    assert "first job 300 block: time to first job started / bare YAML event parse" in names
    assert "first job 300: load+validate, one key a line / one job a line" in names
    assert ctx.leftovers == [] and len(ctx.run_ids) == 2


def test_command_line_defaults_and_sections() -> None:
    s = settings_from(
        build_parser().parse_args(["--quick", "--only", "engine", "dask"])
    )
    assert s.quick and s.repeat == 1 and s.sections == ("engine", "dask")
    full = settings_from(build_parser().parse_args([]))
    assert (
        full.repeat == 3
        and full.sections == SECTIONS
        and full.sizes.engine[-1] == 1_000_000
        and full.sizes.first_job == 1_000_000
    )
    sized = settings_from(build_parser().parse_args(["--quick", "--first-job-jobs", "5000"]))
    assert sized.sizes.first_job == 5000 and sized.sizes.engine == QUICK.engine
    big = settings_from(build_parser().parse_args(["--only", "engine", "--engine-jobs", "1000000", "10000000"]))
    assert big.sizes.engine == (1_000_000, 10_000_000) and big.sizes.first_job == 1_000_000
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--engine-jobs", "0"])


def test_scratch_of_a_killed_benchmark_is_removed_on_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a scratch directory whose owner is gone, one whose owner lives, and one
    # without an owner file
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale, live, unknown = (tmp_path / f"{SCRATCH_PREFIX}{n}" for n in ("a", "b", "c"))
    for d in (stale, live, unknown):
        d.mkdir()
    (stale / OWNER_FILE).write_text(str(dead.pid))
    (live / OWNER_FILE).write_text(str(os.getpid()))
    # When a benchmark starts
    gone = clean_stale_scratch()
    # Then only the dead owner's directory goes
    assert gone == [str(stale)]
    assert not stale.exists() and live.exists() and unknown.exists()


def test_file_creation_cost_is_measured_on_new_files_left_for_cleanup(tmp_path: Path) -> None:
    # When the cost of creating a file is measured in a new directory
    us = file_create_micros(tmp_path / "files", count=20)
    # Then it is a positive time per file, and the files stay for the scratch cleanup
    assert us > 0 and len(list((tmp_path / "files").iterdir())) == 20


def test_notes_and_details_print_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a note and a figure's note with square brackets (pip extras look like markup)
    from wloadctl.bench.figures import Figure
    from wloadctl.bench.report import print_report

    data = {"mode": "quick", "settings": {"repeat": 1}, "out": "x.json", "notes": [daskcmp.MISSING],
            "machine": {"load_average_start": [0.0], "load_average_end": [0.0], "cores": 2, "cpu": "cpu",
                        "python": "3.11", "platform": "linux"}}
    fig = Figure("dask", "no-op", "dask", "bank", 10, 1.0, 10.0, "run wall", note="needs 'wloadctl[bench]'")
    # When the report is printed
    print_report(data, [fig], [], [])
    # Then the brackets are printed, not eaten as markup
    out = capsys.readouterr().out
    assert "pip install 'wloadctl[bench]'" in out and "needs 'wloadctl[bench]'" in out


def test_slot_use_counts_idle_slots_while_a_job_was_ready(tmp_path: Path) -> None:
    # x waits for a (ends at 1.0) but starts at 1.5: half a second of a free slot while it was ready
    wf = Workflow("w", ["a", "b", "x"], {"a": [], "b": [], "x": ["a"]}, {"a": 1.0, "b": 2.0, "x": 0.4})
    use = wf.slot_use({0: (0.0, 1.0), 1: (0.0, 2.0), 2: (1.5, 2.0)}, 2)
    assert use["idle_with_ready_slot_seconds"] == pytest.approx(0.5)
    assert use["idle_slot_seconds"] == pytest.approx(0.5)
    assert use["slot_use"] == pytest.approx(3.5 / 4.0)
    assert use["held_over_recorded_ms"] == pytest.approx(1000 * 0.1 / 3)
    # ninja's log gives the same from its milliseconds
    (tmp_path / ".ninja_log").write_text("# ninja log v5\n0\t1000\t0\ta\t1\n0\t2000\t0\tb\t2\n1500\t2000\t0\tx\t3\n")
    assert ninja_ran(tmp_path, wf) == {0: (0.0, 1.0), 1: (0.0, 2.0), 2: (1.5, 2.0)}


def test_a_checkout_that_keeps_no_bytecode_is_compiled_before_it_is_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With PYTHONDONTWRITEBYTECODE set, every run would compile the package again: a second of each run that an
    installed scheduler never spends, counted as the scheduler's."""
    import wloadctl
    from wloadctl.bench.suite import compile_package

    pkg = tmp_path / "wloadctl"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text("X = 1\n")
    monkeypatch.setattr(wloadctl, "__file__", str(pkg / "__init__.py"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert compile_package() == "" and not (pkg / "__pycache__").exists()  # (its runs write their own)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert "compiled first" in compile_package()
    assert {p.name.split(".")[0] for p in (pkg / "__pycache__").iterdir()} == {"__init__", "engine"}


def test_a_report_path_that_cannot_be_written_is_refused_before_anything_is_measured(tmp_path: Path) -> None:
    missing = tmp_path / "none" / "r.json"
    for out, said in ((tmp_path, f"wloadctl: --out {tmp_path}: it is a directory"),
                      (missing, f"wloadctl: --out {missing}: cannot write in")):
        # (a folder was found only at the end of the whole benchmark, as a traceback)
        p = subprocess.run([sys.executable, "-m", "wloadctl", "bench", "--quick", "--out", str(out)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stderr.startswith(said) and p.stderr.count("\n") == 1, p.stderr
        assert "bench:" not in p.stderr  # nothing was measured
    p = subprocess.run([sys.executable, "-m", "wloadctl", "bench", "--engine-jobs", "999999999999"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "at most 100,000,000" in p.stderr
