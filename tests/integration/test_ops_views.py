"""The pipeline view (`wloadctl top`) of a live run, and `status --at` of a finished one, through the real CLI."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from tests.integration.helpers import cli, reap_orphans, start, status, stop_proc, wait_for

pytestmark = pytest.mark.ipc


def _top(sd: Path) -> dict:
    if not (sd / "journal.db").exists():
        return {"live": False}
    r = cli("top", "--state-dir", str(sd), "--json", timeout=30, check=True)
    return json.loads(r.stdout)


def test_top_shows_the_live_pipeline_per_executor_and_goes_stale_when_the_run_ends(tmp_path: Path) -> None:
    # Given a live run of six jobs whose last one waits for a file
    gate = tmp_path / "go"
    plan = tmp_path / "p.yaml"
    jobs = {f"j{k}": {"command": "true", "depends_on": [f"j{k - 1}"] if k else []} for k in range(5)}
    jobs["wait"] = {"command": f"while [ ! -f {gate} ]; do sleep 0.05; done", "depends_on": ["j4"]}
    plan.write_text(yaml.safe_dump({"name": "top", "jobs": jobs}))
    sd = tmp_path / "sd"
    p = start("run", str(plan), "--state-dir", str(sd), "--quiet", "--executors", "2")
    run_id = ""
    try:
        # When the operator looks at the pipeline once the chain has run
        view = wait_for(lambda: (lambda v: v if v["live"] and v["loop"].get("turns", 0) > 0 and v["executors"] and
                                 v["latency"]["finish_to_dependent_start"]["n"] >= 5 else None)(_top(sd)),
                        timeout=60, what="figures of the chain")
        run_id = view["run"]
        # Then it has the queues, the arena, the latencies, the journal, the loop and each executor
        req, rsp = view["queues"]["request"], view["queues"]["response"]
        assert req["max"] >= 1 and 0 <= req["depth"] <= req["max"] and req["batches"] >= 2  # a chain goes out at once
        # (a chain's reports go in few messages: its next jobs wait at the executor, which holds them a moment)
        assert rsp["batches"] >= 1 and 0 <= rsp["depth"] <= rsp["max"]
        assert view["arena"]["capacity"] > 0
        lat = view["latency"]
        assert lat["ready_to_dispatch"]["n"] >= 1 and lat["ready_to_dispatch"]["p50"] is not None
        assert lat["finish_to_dependent_start"]["p99"] >= lat["finish_to_dependent_start"]["p50"] >= 0
        # (the chain's ends come together: a commit each for few of them)
        assert view["journal"]["commits"] >= 2 and view["journal"]["rows_per_commit"] >= 1
        assert view["loop"]["turn"]["n"] >= 1 and not view["stale"]
        assert len(view["executors"]) == 2
        assert sum(e["started"] for e in view["executors"]) == 6  # the five and the waiting one
        assert all(e["health"] == "alive" and e["pid"] > 0 for e in view["executors"])
        # And the text form shows the same figures
        text = cli("top", "--state-dir", str(sd), "--once", timeout=30, check=True).stdout
        assert "request queue" in text and "journal commit" in text and "finish->dep. start" in text
        assert text.count("\n0   ") + text.count("\n1   ") == 2  # one line per executor
        assert max(map(len, text.splitlines())) <= 80, text  # a terminal's width
        gate.touch()
        assert p.wait(timeout=60) == 0
        # Once the run is over the last figures stay, marked stale
        after = _top(sd)
        assert not after["live"] and after["stale"] and after["journal"]["commits"] >= view["journal"]["commits"]
        # as they stood at its end: nothing waiting (the backlog of its first second stayed)
        assert after["queues"]["request"]["backlog"] == 0 and after["queues"]["request"]["depth"] == 0
        assert "not live" in cli("top", "--state-dir", str(sd), timeout=30, check=True).stdout
    finally:
        gate.touch()
        stop_proc(p, run_id=run_id)


def test_status_at_rebuilds_every_job_as_it_was_from_the_journal(tmp_path: Path) -> None:
    # Given a finished run: a then b then c, each taking a moment, and d failing after a
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "tt", "jobs": {
        "a": {"command": "sleep 0.4"},
        "b": {"command": "sleep 0.6", "depends_on": ["a"]},
        "c": {"command": "sleep 0.2", "depends_on": ["b"]},
        "d": {"command": "exit 4", "depends_on": ["a"]},
    }}))
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd), "--quiet").returncode == 1
    final = status(sd)
    rows = {j["job"]: j for j in cli_status_all(sd)}
    mid = rows["b"]["started"] + 0.3
    try:
        # When the operator asks how the run stood while b ran (as an ISO timestamp)
        when = dt.datetime.fromtimestamp(mid).astimezone().isoformat()
        at = cli("status", "--state-dir", str(sd), "--at", when, "--json")
        # (its exit code says the run's outcome, as status does: d failed)
        assert at.returncode == 1, at.stderr
        st = json.loads(at.stdout)
        # Then each job is as it was then
        got = {j["job"]: j["state"] for j in st["jobs"]}
        assert got == {"a": "SUCCEEDED", "b": "RUNNING", "c": "WAITING", "d": "FAILED"}
        assert st["counts"] == {"SUCCEEDED": 1, "RUNNING": 1, "WAITING": 1, "FAILED": 1}
        assert {j["job"]: j["exit_code"] for j in st["jobs"]}["d"] == 4 and st["note"] == ""
        # Before the start nothing had happened; long after, the journal's final states
        before = json.loads(cli("status", "--state-dir", str(sd), "--at", "-1h", "--json").stdout)
        assert before["counts"] == {"WAITING": 4} and before["note"] == "before the run started"
        now = json.loads(cli("status", "--state-dir", str(sd), "--at", "-0s", "--json").stdout)
        assert now["counts"] == final["counts"] and now["note"] == "after the run ended"
        # A clock time (to the second) works too, and the text form lists the unfinished
        # (once that second is past: a clock time still to come is yesterday's)
        time.sleep(max(0.0, rows["c"]["ended"] + 1.0 - time.time()))
        clock = dt.datetime.fromtimestamp(rows["c"]["ended"] + 1.0).strftime("%H:%M:%S")
        text = cli("status", "--state-dir", str(sd), "--at", clock).stdout
        assert "as of" in text and "FAILED          d" in text
        # A bad moment is bad input, in one line
        bad = cli("status", "--state-dir", str(sd), "--at", "yesterday-ish")
        assert bad.returncode == 2 and "expected a clock time" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        reap_orphans(final["run"])


def test_status_at_a_clock_time_is_the_latest_such_moment_in_the_plans_zone(tmp_path: Path) -> None:
    # Given a run of a plan whose zone is not the host's, finished a moment ago
    zone = "Pacific/Pago_Pago"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "pago", "timezone": zone, "jobs": {"a": {"command": "true"}}}))
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd), "--quiet").returncode == 0
    final = status(sd)
    try:
        # When the operator asks how it stood a few seconds before it started, as the plan's clock read then
        before = dt.datetime.fromtimestamp(final["started"] - 5, ZoneInfo(zone))
        at = cli("status", "--state-dir", str(sd), "--at", before.strftime("%H:%M:%S"))
        # Then that is the moment shown, today's (not tomorrow's) in the plan's zone, and nothing had run yet
        assert at.returncode == 0, at.stderr
        head = at.stdout.splitlines()[0]
        assert head.endswith(f"as of {before.replace(microsecond=0).isoformat()} ({zone})  "
                             "(before the run started)"), head
        # And a moment to come is refused in one line
        later = dt.datetime.now(ZoneInfo(zone)) + dt.timedelta(hours=1)
        bad = cli("status", "--state-dir", str(sd), "--at", later.strftime("%Y-%m-%dT%H:%M:%S"))
        assert bad.returncode == 2 and bad.stdout == "", bad.stderr
        assert bad.stderr.startswith("wloadctl: --at '") and "that is in the future" in bad.stderr
        assert bad.stderr.count("\n") == 1, bad.stderr
    finally:
        reap_orphans(final["run"])


def cli_status_all(sd: Path) -> list[dict]:
    return json.loads(cli("status", "--state-dir", str(sd), "--all", "--json").stdout)["jobs"]


def _status_once_there(sd: Path) -> dict:
    """`status --json`, or {} while the run has no journal yet."""
    p = cli("status", "--state-dir", str(sd), "--json", timeout=30)
    return json.loads(p.stdout) if p.returncode in (0, 1) else {}  # (1: the run ended with a job failed)


def test_status_says_when_a_live_scheduler_stops_responding_and_when_it_is_back(tmp_path: Path,
                                                                               no_ipc_leaks: None) -> None:
    # Given a live run whose last job waits for a file
    gate = tmp_path / "go"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "frozen", "jobs": {
        "a": {"command": "true"}, "wait": {"command": f"while [ ! -f {gate} ]; do sleep 0.05; done"}}}))
    sd = tmp_path / "sd"
    p = start("run", str(plan), "--state-dir", str(sd), "--quiet")
    run_id = ""
    try:
        first = wait_for(lambda: (lambda s: s if s.get("live") and s["counts"].get("SUCCEEDED") else None)(
            _status_once_there(sd)), timeout=60, what="a live run")
        run_id = first["run"]
        assert first["responding"] is True and first["scheduler_beat_age"] is not None
        # When its scheduler is stopped (SIGSTOP)
        os.kill(p.pid, signal.SIGSTOP)
        frozen = wait_for(lambda: (lambda s: s if s["responding"] is False else None)(status(sd)),
                          timeout=60, what="status to say the scheduler does not respond")
        # Then status says so, with the age of its last beat, past its lease, in JSON and in text
        assert frozen["live"] and frozen["scheduler_beat_age"] >= 3.0
        assert frozen["lease_until"] < time.time()
        said = cli("status", "--state-dir", str(sd), timeout=30)
        text = said.stdout.splitlines()[0]
        assert f"NOT RESPONDING: scheduler pid {p.pid}, epoch 1, last beat " in text, text
        assert said.returncode == 3, said  # (as a status that cannot read the journal exits)
        assert "s ago (stopped or hung; counts are as of then)" in text and "(live" not in text, text
        # And once it goes on, it is live and responding again
        os.kill(p.pid, signal.SIGCONT)
        back = wait_for(lambda: (lambda s: s if s["responding"] else None)(status(sd)), timeout=60,
                        what="the scheduler to beat again")
        assert back["live"] and back["scheduler_beat_age"] < 3.0
        assert ", beat " in cli("status", "--state-dir", str(sd), timeout=30).stdout.splitlines()[0]
        gate.touch()
        assert p.wait(timeout=60) == 0
        assert status(sd)["responding"] is None  # a finished run has no scheduler to judge
    finally:
        gate.touch()
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.terminate()  # a scheduler stopped so unlinks its run's queues and segments
            p.wait(timeout=60)
        if run_id:
            reap_orphans(run_id)


def test_status_of_a_live_run_says_why_each_job_listed_stands_where_it_does(tmp_path: Path,
                                                                             no_ipc_leaks: None) -> None:
    """A live run's status listed bare states (its board holds no more); a stopped one's gave the reasons."""
    gate = tmp_path / "go"
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"name": "why", "jobs": {
        "bad": {"command": "echo oops; exit 3"},
        "slow": {"command": f"while [ ! -f {gate} ]; do sleep 0.05; done"},
        "after": {"command": "true", "depends_on": ["slow"]}}}))
    sd = tmp_path / "sd"
    p = start("run", str(plan), "--state-dir", str(sd), "--quiet")
    run_id = ""
    try:
        first = wait_for(lambda: (lambda s: s if s.get("live") and s["counts"].get("FAILED") else None)(
            _status_once_there(sd)), timeout=60, what="bad to fail in a live run")
        run_id = first["run"]
        assert cli("hold", "after", "--state-dir", str(sd), "--reason", "wait for ops").returncode == 0
        live = wait_for(lambda: (lambda s: s if s["counts"].get("HELD") else None)(status(sd)), timeout=30,
                        what="after held")
        by_job = {j["job"]: j for j in live["jobs"]}
        assert by_job["bad"]["reason"] == "exit status 3" and by_job["bad"]["exit_code"] == 3
        assert by_job["after"]["reason"] == "held by root: wait for ops" if os.geteuid() == 0 else \
            by_job["after"]["reason"].endswith(": wait for ops")
        text = cli("status", "--state-dir", str(sd), timeout=30).stdout
        assert "  FAILED          bad  exit status 3" in text.splitlines(), text
    finally:
        gate.touch()
        cli("release", "after", "--state-dir", str(sd))
        p.wait(timeout=60)
        if run_id:
            reap_orphans(run_id)
