"""`max_output`: a job whose output passes its cap is stopped as a timeout stops it, its log cut back to the cap
with a line that says so, and it fails saying why; the cap read from every plan style, refused when wrong."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

import pytest
import yaml

from tests.conftest import make_plan
from tests.integration.helpers import cli, job_states, start, status, stop_proc, wait_for
from wloadctl.client import journal_core
from wloadctl.core.engine import SchedulerCore
from wloadctl.core.events import JobExitedEvent, JobStartedEvent, RunStartedEvent
from wloadctl.core.outputcap import cut_note, format_size, parse_size
from wloadctl.core.plan import DEFAULT_MAX_OUTPUT, Plan
from wloadctl.core.planfile import load_plan_text
from wloadctl.core.states import JobState
from wloadctl.ipc import protocol as P
from wloadctl.ipc.cleanup import remove_run_objects
from wloadctl.procs.executor import KILL_GRACE
from wloadctl.procs.spawning import LOG_FLAGS, LogFile, cut_log
from wloadctl.store import Store

BAD = Path(__file__).resolve().parent / "data" / "plans" / "bad"
KIB = 1024
ENDLESS = "i=0; while [ $i -lt 50000 ]; do echo 'a line of a runaway job, printing'; i=$((i+1)); done; sleep 30"
"""A runaway job: 1.7 MB of output (26 times a 64 KiB cap) as fast as a shell prints, then it lingers, so that a
beat finds it running past its cap however slow the machine is. (Printing for ever, it would fill the disk were
the cap broken; this way a broken cap fails the test after 30 s, having written its 1.7 MB.)"""


def _log(sd: Path, run_id: str, job: str, attempt: int = 1) -> Path:
    """Where an attempt's log is (a run on this host)."""
    return sd / "logs" / run_id / f"{job}.{attempt}.log"


def note_line(cap: int) -> bytes:
    """The line the executor ends a log cut at `cap` with, when it stopped the job."""
    return (cut_note(cap, stopped=True) + "\n").encode()


def _assert_cut(path: Path, cap: int) -> None:
    """The log holds its first `cap` bytes, then the note on a line of its own, and nothing more."""
    data = path.read_bytes()
    note = note_line(cap)
    assert data.endswith(note), data[-200:]
    assert len(data) - len(note) in (cap, cap + 1)  # (+1: the line break before the note, when the cut was mid-line)


@pytest.mark.ipc
def test_a_job_past_its_max_output_is_stopped_its_log_cut_and_it_fails_saying_why(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given a plan whose defaults cap output at 64 KiB, and jobs under that cap, over it, and with caps of their own
    sd = tmp_path / "sd"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "maxout", "defaults": {"max_output": "64KiB"}, "jobs": {
        "runaway": {"command": ENDLESS},
        # (SIGTERM ignored: it is killed as soon as it has written twice its cap, not after the grace period)
        "stubborn": {"command": f"trap '' TERM; {ENDLESS}", "max_output": "32KiB"},
        "retried": {"command": ENDLESS, "retries": {"count": 1, "delay": "0s"}},
        "not_retried": {"command": ENDLESS, "retries": {"count": 1, "delay": "0s", "on_max_output": False}},
        "small": {"command": "yes small | head -c 10240"},
        "own_cap": {"command": "yes own | head -c 204800", "max_output": "1MiB"},
        "unlimited": {"command": "yes free | head -c 204800", "max_output": "none"},
    }}, sort_keys=False))
    # When it runs
    p = cli("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "8", "--json")
    # Then the jobs past their cap failed, saying why, and the others succeeded with their whole output
    assert p.returncode == 1, p.stderr
    summary = json.loads(p.stdout)
    run_id = summary["run"]
    assert summary["jobs"] == {"runaway": "FAILED", "stubborn": "FAILED", "retried": "FAILED",
                               "not_retried": "FAILED", "small": "SUCCEEDED", "own_cap": "SUCCEEDED",
                               "unlimited": "SUCCEEDED"}
    jobs = {j["job"]: j for j in status(sd)["jobs"]}
    assert jobs["runaway"]["reason"] == "output passed max_output 64.0 KiB: stopped"
    # (killed at the beat that found it past twice its cap after its SIGTERM, not after the grace period: it
    # writes that much within a beat, so it ends well before KILL_GRACE)
    assert jobs["stubborn"]["reason"] == ("output passed max_output 32.0 KiB: stopped; it went on after SIGTERM and "
                                          "was killed (SIGKILL)")
    assert jobs["stubborn"]["ended"] - jobs["stubborn"]["started"] < KILL_GRACE - 0.5
    assert jobs["not_retried"]["reason"] == "output passed max_output 64.0 KiB: stopped"
    assert jobs["retried"]["reason"] == "output passed max_output 64.0 KiB: stopped"
    assert (jobs["retried"]["attempt"], jobs["not_retried"]["attempt"]) == (2, 1)
    # And each log past its cap holds the cap and the note, whatever the job went on writing
    for job, cap, attempt in (("runaway", 64, 1), ("stubborn", 32, 1), ("retried", 64, 1), ("retried", 64, 2),
                              ("not_retried", 64, 1)):
        _assert_cut(_log(sd, run_id, job, attempt), cap * KIB)
    assert _log(sd, run_id, "small").stat().st_size == 10240
    assert _log(sd, run_id, "own_cap").stat().st_size == 204800  # over the defaults' 64 KiB, under its own 1 MiB
    assert _log(sd, run_id, "unlimited").stat().st_size == 204800
    # And `why` says it, as does a core rebuilt from the journal (what a resume and the console read)
    why = cli("why", "runaway", "--state-dir", str(sd)).stdout
    assert "failed: output passed max_output 64.0 KiB: stopped" in why, why
    with Store.open(sd, create=False) as st:
        run = st.latest_run()
        assert run is not None
        core = journal_core(st, run)
    i = core.index["stubborn"]
    assert JobState(core.state[i]) is JobState.FAILED and core.reasons[i] == jobs["stubborn"]["reason"]


@pytest.mark.ipc
def test_a_job_cut_while_its_scheduler_was_down_fails_the_same_on_resume(tmp_path: Path, no_ipc_leaks: None) -> None:
    sd, go = tmp_path / "sd", tmp_path / "go"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "maxcrash", "jobs": {"gated": {
        "command": f"while [ ! -e {go} ]; do sleep 0.05; done; {ENDLESS}", "max_output": "16KiB"}}}))
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    run_id = ""
    try:
        # Given a running job whose scheduler is killed -9
        wait_for(lambda: job_states(sd).get("gated") == "RUNNING", what="the job running")
        run_id = str(status(sd)["run"])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # When the job passes its cap while no scheduler runs (its executor stops it and cuts its log)
        go.touch()
        log = _log(sd, run_id, "gated")
        wait_for(lambda: log.exists() and log.read_bytes().endswith(note_line(16 * KIB)), what="the log cut")
        # Then the resume ends it as the scheduler would have, for the same reason
        p = cli("resume", "--state-dir", str(sd))
        assert p.returncode == 1, p.stderr
        (job,) = status(sd)["jobs"]
        assert (job["state"], job["reason"]) == ("FAILED", "output passed max_output 16.0 KiB: stopped")
        _assert_cut(log, 16 * KIB)
    finally:
        go.touch()
        stop_proc(proc, run_id=run_id)
        if run_id:
            remove_run_objects(run_id)  # (those of the scheduler killed -9, when the test failed before the resume)


def test_max_output_reads_the_same_in_every_plan_style() -> None:
    # Given one plan written one job a line, one key a line, and in shapes only the YAML parser reads (an anchor)
    flow = ("name: p\ndefaults: {max_output: 100MB}\njobs:\n"
            "  a: {command: x, max_output: 64KiB}\n  b: {command: x}\n  c: {command: x, max_output: none}\n"
            "  d: {command: x, max_output: 500k}\n  e: {command: x, max_output: 4096}\n"
            "  f: {command: x, max_output: UNLIMITED}\n  g: {command: x, max_output: 1.5GiB}\n")
    block = ("name: p\ndefaults:\n  max_output: 100MB\njobs:\n"
             "  a:\n    command: x\n    max_output: 64KiB\n  b:\n    command: x\n"
             "  c:\n    command: x\n    max_output: none\n  d:\n    command: x\n    max_output: 500k\n"
             "  e:\n    command: x\n    max_output: 4096\n  f:\n    command: x\n    max_output: UNLIMITED\n"
             "  g:\n    command: x\n    max_output: 1.5GiB\n")
    parsed = block.replace("  a:\n    command: x\n", "  a:\n    command: &x x\n").replace(
        "  b:\n    command: x\n", "  b:\n    command: *x\n")
    want = {"a": 64 * KIB, "b": 100 << 20, "c": None, "d": 500 * KIB, "e": 4096, "f": None, "g": 3 << 29}
    # When each is loaded, Then each job has the same cap, the defaults' where it gives none
    for text, by_lines in ((flow, True), (block, True), (parsed, False)):
        plan = load_plan_text(text, "p.yaml")
        assert plan.read_by_lines is by_lines
        assert {j: s.max_output for j, s in plan.jobs.items()} == want
    # And a plan that says nothing caps each attempt at 4 GiB
    plain = load_plan_text("name: p\njobs:\n  a: {command: x}\n", "p.yaml")
    assert plain.jobs["a"].max_output == DEFAULT_MAX_OUTPUT == 4 << 30


def test_bad_max_output_values_are_refused_with_one_line_each_and_nothing_runs(tmp_path: Path) -> None:
    files = sorted(BAD.glob("max_output_*.yaml"))
    assert len(files) == 5
    p = cli("validate", *map(str, files))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.splitlines() == [
        f"{BAD}/max_output_defaults.yaml:3: defaults: max_output: '1 GB please' is not a size (write a size such "
        "as 64KiB, 100MB, 1GiB or 500k, or none for no cap)",
        f"{BAD}/max_output_list.yaml:5: job 'extract': max_output must be a size, not a list (write a size such as "
        "64KiB, 100MB, 1GiB or 500k, or none for no cap)",
        f"{BAD}/max_output_negative.yaml:3: job 'extract': max_output must be more than zero, not -1 (give a size "
        "such as 64KiB, or write none for no cap)",
        f"{BAD}/max_output_not_a_size.yaml:5: job 'extract': max_output: '12 parsecs' is not a size (write a size "
        "such as 64KiB, 100MB, 1GiB or 500k, or none for no cap)",
        f"{BAD}/max_output_zero.yaml:5: job 'extract': max_output must be more than zero, not 0 (give a size such "
        "as 64KiB, or write none for no cap)",
    ]
    # (a run of one is refused before it starts: nothing is made in its state directory)
    run = cli("run", str(BAD / "max_output_zero.yaml"), "--state-dir", str(tmp_path / "sd"))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().endswith("job 'extract': max_output must be more than zero, not 0 (give a size "
                                       "such as 64KiB, or write none for no cap)"), run.stderr
    assert not (tmp_path / "sd").exists()


def test_sizes_read_and_shown() -> None:
    assert [parse_size(t) for t in ("64KiB", "64kb", "64 K", "100MB", "1GiB", "500k", "2T", "512B", "7")] == [
        65536, 65536, 65536, 100 << 20, 1 << 30, 512000, 2 << 40, 512, 7]
    for bad in ("12 parsecs", "-1", "1e9", "K", "\u0661\u0662K", ""):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert [format_size(n) for n in (512, 65536, 100 << 20, 1 << 30, 3 << 39)] == [
        "512 B", "64.0 KiB", "100.0 MiB", "1.0 GiB", "1.5 TiB"]


def test_the_cap_travels_in_the_payload() -> None:
    p = P.Payload(job="a", command="yes", max_output=65536)
    assert P.decode_payload(P.encode_payload(p)).max_output == 65536
    assert P.decode_payload(P.encode_payload(P.Payload(job="a", command="yes"))).max_output is None
    for bad in ("64KiB", 0, -1, True):
        with pytest.raises(P.ProtocolError, match="max_output"):
            P.decode_payload(json.dumps({"v": P.VERSION, "j": "a", "c": "yes", "o": bad}).encode())


@pytest.mark.parametrize(("written", "cap", "line_break"), [(b"y\n" * 100, 100, ""), (b"abc" * 100, 100, "\n")])
def test_a_cut_log_keeps_its_cap_then_the_note_on_a_line_of_its_own(
        tmp_path: Path, written: bytes, cap: int, line_break: str) -> None:
    path = tmp_path / "j.1.log"
    fd = os.open(path, LOG_FLAGS, 0o644)
    try:
        os.write(fd, written)
        log = LogFile(fd, str(path), str(path), True)
        assert cut_log(log, cap, stopped=False)
        os.write(fd, b"late\n")  # (a straggler's write lands after the note, not over it)
        assert not cut_log(log, 1000, stopped=False)  # under its cap: left as it is
    finally:
        os.close(fd)
    note = cut_note(cap, stopped=False)
    assert note == "[wloadctl: output cut at max_output 100 B; the job had ended before it could be stopped]"
    assert path.read_bytes() == written[:cap] + f"{line_break}{note}\nlate\n".encode()


def _core(cap: int | None) -> SchedulerCore:
    plan = make_plan({"a": {}})
    plan = Plan(plan.name, {"a": dataclasses.replace(plan.jobs["a"], max_output=cap)})
    core = SchedulerCore(plan, slots=1)
    core.handle(RunStartedEvent(0.0))
    core.handle(JobStartedEvent(0, 1, 0, 100, 0.1))
    return core


def test_a_job_cut_fails_even_when_it_exited_0_before_it_could_be_stopped() -> None:
    # (the executor saw its log past the cap as it reaped it: the outcome does not hang on when the beat came)
    core = _core(64 * KIB)
    core.handle(JobExitedEvent(0, 1, 0, 0, 1.0, output_cut=True))
    assert JobState(core.state[0]) is JobState.FAILED
    assert core.reasons[0] == "output passed max_output 64.0 KiB (the job exited with status 0 before it could be " \
                              "stopped)"
    # A cap lifted in the plan since the attempt ran is told without its size
    core = _core(None)
    core.handle(JobExitedEvent(0, 1, 0, 143, 1.0, signal=15, output_cut=True))
    assert core.reasons[0] == "output passed its max_output: stopped"
