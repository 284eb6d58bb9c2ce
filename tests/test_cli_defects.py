"""The command line's edges: triggers when the clocks go back, a reader that goes away, the business date of a plan's
time zone, SLA flags and exit codes in a run's summary, counts of 0, the label of a run released after holding, and a
trigger stopped by SIGTERM or looking years ahead."""

from __future__ import annotations

import calendar
import datetime as dt
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

from tests.integration.helpers import ENV, cli, job_states, read_evidence, status, stop_proc, wait_for
from wloadctl.cli_show import NOT_RESPONDING_EXIT, status_exit
from wloadctl.core.calendar import HORIZON, business_date_of, next_triggers
from wloadctl.core.plan import Schedule
from wloadctl.pipeview import WIDTH, render

NY = "America/New_York"
EVERY_DAY = (0, 1, 2, 3, 4, 5, 6)


def _write(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _gated(name: str, go: Path, out: Path) -> str:
    """A command that says it started, then waits until the test lets it end (a minute at most)."""
    return (f'echo "{name} start $(date +%s.%N)" >> {out}; n=0; '
            f'while [ ! -e {go} ] && [ $n -lt 600 ]; do n=$((n+1)); sleep 0.05; done')


# -- 1. the clocks going back -----------------------------------------------------------------------------


def test_a_cron_fires_once_in_the_hour_the_clocks_go_back_and_not_again_after_its_run() -> None:
    sched = Schedule(cron="30 1 * * *", business_days=EVERY_DAY)
    # Given a schedule at 01:30 New York time, a wall time 2027-11-07 has twice (EDT, then EST)
    times = next_triggers(sched, dt.datetime(2027, 11, 5, 12, tzinfo=ZoneInfo(NY)), 4, NY)
    # Then it fires once on that date, at the first 01:30
    assert [t.isoformat() for t in times] == ["2027-11-06T01:30:00-04:00", "2027-11-07T01:30:00-04:00",
                                              "2027-11-08T01:30:00-05:00", "2027-11-09T01:30:00-05:00"]
    # And after its run (the trigger loop looks again at 01:31 EDT) the next one is the next day's
    after_run = dt.datetime(2027, 11, 7, 1, 31, tzinfo=ZoneInfo(NY))
    assert next_triggers(sched, after_run, 1, NY)[0].isoformat() == "2027-11-08T01:30:00-05:00"
    # And a cron of every half hour fires at each wall time of the night once
    half = Schedule(cron="*/30 * * * *", business_days=EVERY_DAY)
    night = next_triggers(half, dt.datetime(2027, 11, 7, 0, 0, tzinfo=ZoneInfo(NY)), 5, NY)
    assert [t.strftime("%H:%M%z") for t in night] == ["00:30-0400", "01:00-0400", "01:30-0400", "02:00-0500",
                                                     "02:30-0500"]


def test_the_clocks_going_forward_still_fire_at_the_hour_after_the_skipped_time() -> None:
    sched = Schedule(cron="30 2 * * *", business_days=EVERY_DAY)
    times = next_triggers(sched, dt.datetime(2027, 3, 12, 12, tzinfo=ZoneInfo(NY)), 3, NY)
    assert [t.isoformat() for t in times] == ["2027-03-13T02:30:00-05:00", "2027-03-14T03:00:00-04:00",
                                              "2027-03-15T02:30:00-04:00"]


def test_trigger_next_names_each_business_date_once_over_a_year(tmp_path: Path) -> None:
    # Given a daily plan in a zone whose clocks go back once a year (400 days from any today holds that day)
    plan = _write(tmp_path / "sch.yaml", {"name": "sch", "timezone": NY, "schedule": {
        "cron": "30 1 * * *", "business_days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]},
        "jobs": {"a": {"command": "true"}}})
    p = cli("trigger", str(plan), "--next", "400", "--json", timeout=60)
    assert p.returncode == 0, p.stderr
    dates = [r["business_date"] for r in json.loads(p.stdout)]
    # Then no business date is triggered twice
    assert len(dates) == 400 and len(set(dates)) == 400


# -- 2. a reader that goes away ------------------------------------------------------------------------------


def _closed_pipe() -> int:
    """The write end of a pipe whose reader is gone: every write to it fails with a broken pipe."""
    r, w = os.pipe()
    os.close(r)
    return w


@pytest.mark.ipc
def test_a_failed_run_whose_reader_goes_away_mid_run_runs_to_its_end_and_exits_1(tmp_path: Path) -> None:
    out, go, sd = tmp_path / "ev", tmp_path / "go", tmp_path / "sd"
    plan = _write(tmp_path / "p.yaml", {"name": "pipe", "jobs": {
        "first": {"command": "true"},
        "gate": {"command": _gated("gate", go, out), "depends_on": ["first"]},
        "last": {"command": f'echo "last start $(date +%s.%N)" >> {out}; exit 3', "depends_on": ["gate"]}}})
    # Given a run whose output is read by `head -1`
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)
    try:
        assert proc.stdout is not None
        assert b"first" in proc.stdout.readline()
        wait_for(lambda: "gate" in read_evidence(out), what="gate started")
        # When the reader goes away while a job still runs
        proc.stdout.close()
        go.touch()
        code = proc.wait(timeout=60)
    finally:
        stop_proc(proc, group=True)
    # Then the run goes on to its end (its last job ran and failed) and exits as the failed run it is
    assert "last" in read_evidence(out)
    assert job_states(sd) == {"first": "SUCCEEDED", "gate": "SUCCEEDED", "last": "FAILED"}
    assert code == 1


@pytest.mark.ipc
def test_status_and_run_json_with_no_reader_exit_with_their_own_codes(tmp_path: Path) -> None:
    sd = tmp_path / "sd"
    plan = _write(tmp_path / "p.yaml", {"name": "fails", "jobs": {"a": {"command": "exit 3"}}})
    w = _closed_pipe()
    try:
        run = subprocess.run([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd), "--json"],
                             stdout=w, stderr=subprocess.PIPE, text=True, env=ENV, timeout=60)
        st = subprocess.run([sys.executable, "-m", "wloadctl", "status", "--state-dir", str(sd)],
                            stdout=w, stderr=subprocess.PIPE, text=True, env=ENV, timeout=60)
    finally:
        os.close(w)
    assert (run.returncode, run.stderr) == (1, "")
    assert (st.returncode, st.stderr) == (1, "")
    assert status(sd)["status"] == "failed"


# -- 3. the business date of the plan's time zone ----------------------------------------------------------


def _zone_off_the_host_date() -> str:
    """A zone whose today is not the host's (UTC+14 and UTC-12 are 26 hours apart: one of them always is)."""
    today = dt.date.today()
    for zone in ("Pacific/Kiritimati", "Etc/GMT+12"):
        if dt.datetime.now(ZoneInfo(zone)).date() != today:
            return zone
    raise AssertionError("no zone found whose date differs from the host's")


def test_the_business_date_of_an_instant_is_its_day_in_the_plan_zone() -> None:
    from wloadctl.core.sla import business_date_at

    at = dt.datetime(2026, 12, 6, 14, 0, tzinfo=dt.UTC).timestamp()
    assert business_date_at(at, "Pacific/Kiritimati") == "2026-12-07"
    assert business_date_at(at, "Etc/GMT+12") == "2026-12-06"
    assert business_date_at(at, None) == dt.datetime.fromtimestamp(at).date().isoformat()
    assert business_date_of(dt.datetime(2026, 12, 7, 1, 30, tzinfo=ZoneInfo("Pacific/Kiritimati"))) == "2026-12-07"


@pytest.mark.ipc
def test_run_takes_today_in_the_plan_zone_for_its_business_date(tmp_path: Path) -> None:
    zone, sd, seen = _zone_off_the_host_date(), tmp_path / "sd", tmp_path / "bd"
    plan = _write(tmp_path / "p.yaml", {"name": "zoned", "timezone": zone, "jobs": {
        "a": {"command": f"echo $WLOADCTL_BUSINESS_DATE > {seen}"}}})
    before = dt.datetime.now(ZoneInfo(zone)).date().isoformat()
    p = cli("run", str(plan), "--state-dir", str(sd), "--json", timeout=60)
    after = dt.datetime.now(ZoneInfo(zone)).date().isoformat()
    assert p.returncode == 0, p.stderr
    bdate = json.loads(p.stdout)["business_date"]
    # Then the run, its job and status all have the plan zone's today (not the host's)
    assert bdate in (before, after) and bdate != dt.date.today().isoformat()
    assert seen.read_text().strip() == bdate
    assert status(sd)["business_date"] == bdate


# -- 4. SLA flags and 5. exit codes in the run's summary -----------------------------------------------------


@pytest.mark.ipc
def test_a_run_that_went_late_says_so_in_its_summary_and_json(tmp_path: Path) -> None:
    sd, go, out = tmp_path / "sd", tmp_path / "go", tmp_path / "ev"
    plan = _write(tmp_path / "p.yaml", {"name": "late", "jobs": {
        "a": {"command": _gated("a", go, out), "deadline": "+100ms", "sla": "critical"},
        "b": {"command": "true"}}})
    for form in ([], ["--json"]):
        go.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd), *form],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                                start_new_session=True)
        try:
            # Given a job still running past its deadline (flagged LATE, as status shows)
            wait_for(lambda: status(sd)["live"] and status(sd)["flags"].get("a") == "LATE", what="a LATE")
            go.touch()
            text, err = proc.communicate(timeout=60)
        finally:
            stop_proc(proc, group=True)
        # Then the run succeeds (exit 0) and its summary says the job went late
        assert proc.returncode == 0, err
        if form:
            assert json.loads(text)["flags"] == {"a": "LATE"}
        else:
            summary = [line for line in text.splitlines() if line.startswith("run ")]
            assert len(summary) == 1 and " succeeded, 1 LATE: " in summary[0], text
            assert "LATE (1): a" in text.splitlines()


@pytest.mark.ipc
def test_an_interrupted_run_json_has_the_exit_code_the_process_exits_with(tmp_path: Path) -> None:
    sd, go, out = tmp_path / "sd", tmp_path / "go", tmp_path / "ev"
    plan = _write(tmp_path / "p.yaml", {"name": "stop", "jobs": {"a": {"command": _gated("a", go, out)}}})
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    try:
        wait_for(lambda: job_states(sd).get("a") == "RUNNING", what="a RUNNING")
        proc.send_signal(signal.SIGTERM)
        text, err = proc.communicate(timeout=60)
    finally:
        go.touch()
        stop_proc(proc, group=True)
    assert proc.returncode == 130, err
    assert json.loads(text)["exit_code"] == 130 and json.loads(text)["status"] == "interrupted"


# -- 6. counts of 0, and a held run released ---------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--executors", "--slots"])
@pytest.mark.parametrize("cmd", ["run", "trigger"])
def test_zero_executors_or_slots_is_refused_in_one_line(tmp_path: Path, flag: str, cmd: str) -> None:
    plan = _write(tmp_path / "p.yaml", {"name": "z", "schedule": {"cron": "0 0 * * *"},
                                        "jobs": {"a": {"command": "true"}}})
    more = ["--next", "1"] if cmd == "trigger" else []  # (accepted, a trigger would wait for midnight)
    p = cli(cmd, str(plan), "--state-dir", str(tmp_path / "sd"), *more, flag, "0", timeout=60)
    assert p.returncode == 2
    assert len(p.stderr.splitlines()) == 1 and f"{flag}: '0': give 1 or more" in p.stderr
    assert not (tmp_path / "sd").exists()


@pytest.mark.ipc
def test_a_held_run_whose_held_jobs_are_all_approved_is_no_longer_labelled_held(tmp_path: Path) -> None:
    sd = tmp_path / "sd"
    plan = _write(tmp_path / "p.yaml", {"name": "cf", "jobs": {
        "a": {"command": "true", "confirm": True}, "b": {"command": "true", "depends_on": ["a"]}}})
    # Given a run that ended holding a job waiting for confirmation
    assert cli("run", str(plan), "--state-dir", str(sd), "--exit-on-hold", timeout=60).returncode == 1
    assert status(sd)["status"] == "held"
    # When the job is approved (no scheduler live)
    assert cli("approve", "a", "--state-dir", str(sd), timeout=60).returncode == 0
    # Then the run holds nothing and says it is stopped, not held; a resume finishes it
    st = status(sd)
    assert st["status"] == "interrupted" and not st["counts"].get("HELD")
    assert "(interrupted)" in cli("status", "--state-dir", str(sd), timeout=60).stdout.splitlines()[0]
    assert cli("resume", "--state-dir", str(sd), timeout=60).returncode == 0
    assert status(sd)["status"] == "succeeded"


# -- 7. a trigger stopped by SIGTERM, and how far ahead it looks ------------------------------------------------


def _trigger(plan: Path, sd: Path, *more: str) -> subprocess.Popen[str]:
    """`wloadctl trigger PLAN` in a session of its own, its stderr piped."""
    return subprocess.Popen([sys.executable, "-m", "wloadctl", "trigger", str(plan), "--state-dir", str(sd), *more],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)


@pytest.mark.parametrize("form", [[], ["--json"]], ids=["text", "json"])
def test_a_trigger_stopped_by_sigterm_while_it_waits_says_so_and_exits_130(tmp_path: Path, form: list[str]) -> None:
    sd = tmp_path / "sd"
    plan = _write(tmp_path / "p.yaml", {"name": "newyear", "schedule": {
        "cron": "0 0 1 1 *", "business_days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]},
        "jobs": {"a": {"command": "true"}}})
    # Given a trigger waiting for its next run (months away)
    proc = _trigger(plan, sd, "--once", *form)
    try:
        assert proc.stderr is not None
        waiting = proc.stderr.readline()
        assert waiting.startswith("wloadctl: next run of 'newyear' at "), waiting
        # When it is stopped as systemd stops a service
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        stop_proc(proc, group=True)
    # Then it says so in one line and exits 130, as a run stopped so does: a stop is not a success
    assert proc.returncode == 130, err
    assert err.startswith("wloadctl: stopped by SIGTERM while waiting for the run of 'newyear' at "), err
    assert err.endswith(", which was not started\n") and err.count("\n") == 1, err
    assert out == "" and not (sd / "journal.db").exists()


@pytest.mark.ipc
def test_triggers_at_their_fire_a_run_stopped_by_sigterm_a_sigterm_as_the_run_starts_a_plan_made_invalid(
        tmp_path: Path) -> None:
    """Three triggers of a cron of every minute, side by side so that they wait for the same minute."""
    import time

    every_day = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    for name in "abc":
        (tmp_path / name).mkdir()
    # Given a trigger (not --once) whose run, started at the next minute, will be running its job
    a_sd, go, ev = tmp_path / "a" / "sd", tmp_path / "a" / "go", tmp_path / "a" / "ev"
    a_plan = _write(tmp_path / "a" / "p.yaml", {"name": "minute", "schedule": {"cron": "* * * * *",
                                                                             "business_days": every_day},
                                                "jobs": {"a": {"command": _gated("a", go, ev)}}})
    # And a trigger --once of a plan of thousands of jobs (its run takes a moment to start, as a night's plan does)
    b_sd = tmp_path / "b" / "sd"
    b_plan = _write(tmp_path / "b" / "p.yaml", {"name": "startwin", "schedule": {
        "cron": "* * * * *", "business_days": every_day},
        "jobs": {"a": {"command": "sleep 20"},
                 **{f"j{k}": {"command": "true", "depends_on": ["a"]} for k in range(5000)}}})
    # And a trigger --once whose plan is edited into an invalid one before the fire
    c_sd = tmp_path / "c" / "sd"
    c_spec = {"name": "edited", "schedule": {"cron": "* * * * *", "business_days": every_day},
              "jobs": {"a": {"command": "true"}}}
    c_plan = _write(tmp_path / "c" / "p.yaml", c_spec)
    procs = [_trigger(a_plan, a_sd), _trigger(b_plan, b_sd, "--once"), _trigger(c_plan, c_sd, "--once")]
    pa, pb, pc = procs
    try:
        assert pb.stderr is not None and pc.stderr is not None
        b_waiting, c_waiting = pb.stderr.readline(), pc.stderr.readline()
        assert c_waiting.startswith("wloadctl: next run of 'edited' at "), c_waiting
        _write(c_plan, {**c_spec, "jobs": {"a": {"command": "true", "depends_on": ["nosuch"]}}})
        # When SIGTERM comes just as the fire starts b's run (before the run's own handler is in place)
        at = dt.datetime.fromisoformat(b_waiting.split(" at ")[1].split(" (")[0])
        time.sleep(max(0.0, at.timestamp() - time.time()) + 0.03)
        pb.send_signal(signal.SIGTERM)
        # And a's trigger is stopped by SIGTERM while its run runs its job
        wait_for(lambda: "a" in read_evidence(ev), timeout=90, what="a started")
        pa.send_signal(signal.SIGTERM)
        a_out, a_err = pa.communicate(timeout=60)
        b_out, b_err = pb.communicate(timeout=60)
        c_out, c_err = pc.communicate(timeout=90)
    finally:
        go.touch()
        for proc in procs:
            stop_proc(proc, group=True)
    # Then a's run stops (resumable) and its trigger with it, exiting 130, rather than waiting for the next minute
    assert pa.returncode == 130, a_err
    assert a_out.startswith("run ") and a_out.endswith(": interrupted\n"), a_out
    assert a_err.splitlines()[-1].endswith("goes on; no more runs of 'minute' are triggered"), a_err
    assert status(a_sd)["status"] == "interrupted"
    # And b's run stops (resumable) and the trigger with it, exiting 130: it is not run to its end
    assert pb.returncode == 130, (b_out, b_err)
    assert b_out.startswith("run ") and b_out.endswith(": interrupted\n"), b_out
    assert status(b_sd)["status"] == "interrupted"
    # And c's trigger says at the fire what is wrong, and that the run was not started and no more will be
    assert pc.returncode == 2, c_err
    assert "depends on unknown job 'nosuch'" in c_err, c_err
    assert "(business date " in c_err and "was not started; no more runs are triggered" in c_err, c_err
    assert c_out == "" and not (c_sd / "journal.db").exists()


@pytest.mark.ipc
def test_a_run_of_another_business_date_is_refused_while_an_earlier_one_is_unfinished(tmp_path: Path) -> None:
    sd, go, out = tmp_path / "sd", tmp_path / "go", tmp_path / "ev"
    plan = _write(tmp_path / "p.yaml", {"name": "eod", "jobs": {"a": {"command": _gated("a", go, out)}}})
    # Given the run of 2026-12-01 stopped while it ran
    first = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd),
                              "--business-date", "2026-12-01"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env=ENV, start_new_session=True)
    try:
        wait_for(lambda: "a" in read_evidence(out), timeout=60, what="a started")
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    finally:
        stop_proc(first, group=True)
    # When the run of 2026-12-04 is asked for in the same directory
    p = cli("run", str(plan), "--state-dir", str(sd), "--business-date", "2026-12-04", timeout=60)
    # Then it is refused in one line naming the unfinished run's date: 12-01's batch is not run as 12-04's
    assert p.returncode == 2, p.stderr
    assert "holds unfinished run" in p.stderr and "of business date 2026-12-01: no run of 2026-12-04 starts" \
        in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    # and the resume finishes 12-01's
    go.touch()
    again = cli("resume", "--state-dir", str(sd), timeout=120)
    assert again.returncode == 0, again.stderr
    assert status(sd)["business_date"] == "2026-12-01"


def test_trigger_finds_a_fire_as_far_ahead_as_validate_looks(tmp_path: Path) -> None:
    # Given the 29th of February on Saturdays: validate accepts it (2048 is the next from now until 2047)
    sat = _write(tmp_path / "sat.yaml", {"name": "leap", "schedule": {"cron": "0 0 29 2 *",
                                                                      "business_days": ["sat"]},
                                         "jobs": {"a": {"command": "true"}}})
    assert cli("validate", str(sat), timeout=60).returncode == 0
    # Then trigger --next lists it, where it said the schedule never fires
    p = cli("trigger", str(sat), "--next", "2", "--json", timeout=60)
    assert p.returncode == 0, p.stderr
    assert [r["at"][5:10] for r in json.loads(p.stdout)] == ["02-29"]
    # And on weekdays it lists every such 29th of February of the next 28 years, in order, not the first 10 only
    week = _write(tmp_path / "week.yaml", {"name": "leapw", "schedule": {"cron": "0 0 29 2 *"},
                                           "jobs": {"a": {"command": "true"}}})
    p = cli("trigger", str(week), "--next", "50", "--json", timeout=60)
    today = dt.date.today()
    leap_weekdays = [y for y in range(today.year, today.year + 29) if calendar.isleap(y)
                     and today < dt.date(y, 2, 29) <= today + HORIZON and dt.date(y, 2, 29).weekday() < 5]
    assert [int(r["at"][:4]) for r in json.loads(p.stdout)] == leap_weekdays


def test_trigger_next_of_more_than_it_lists_is_refused_in_one_line_at_once(tmp_path: Path) -> None:
    plan = _write(tmp_path / "p.yaml", {"name": "every", "schedule": {"cron": "* * * * *"},
                                        "jobs": {"a": {"command": "true"}}})
    p = cli("trigger", str(plan), "--next", "99999999", timeout=15)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == ("wloadctl trigger: error: argument --next: '99999999': give at most 10000 "
                        "(see `wloadctl trigger --help`)\n"), p.stderr
    # The most it lists, of a cron of every minute, come in seconds
    p = cli("trigger", str(plan), "--next", "10000", timeout=60)
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 10_000, p.stderr


@pytest.mark.parametrize("argv", [["hold", ""], ["rerun", "a", " "], ["approve", ""], ["why", ""], ["show", " "]])
def test_an_empty_job_id_is_refused_in_one_line_before_any_run_is_read(tmp_path: Path, argv: list[str]) -> None:
    got = cli(*argv, "--state-dir", str(tmp_path / "none"))
    assert got.returncode == 2, got.stderr
    assert got.stderr.count("\n") == 1 and "an empty job id names no job" in got.stderr, got.stderr
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize(("argv", "said"), [
    (["hold", "ok", "ab\udce9"], "argument JOB: the job id is not UTF-8 text (byte 0xe9 at character 3)"),
    (["why", "\udcff"], "argument JOB: the job id is not UTF-8 text (byte 0xff at character 1)"),
    (["logs", "\udcff"], "argument JOB: the job id is not UTF-8 text (byte 0xff at character 1)"),
    (["kill", "ok", "--reason", "caf\udce9"], "argument --reason: the reason is not UTF-8 text (byte 0xe9 at"),
    (["reject", "R\udcff"], "argument ID: the request id is not UTF-8 text (byte 0xff at character 2)"),
    (["hold", "x" * 300], "(300 characters) is longer than any job id (at most 200 characters)"),
])
def test_a_job_id_or_reason_no_request_can_carry_is_refused_as_bad_input(
        tmp_path: Path, argv: list[str], said: str) -> None:
    # (bytes of a Latin-1 shell ended in "internal error: UnicodeEncodeError ... surrogates not allowed", exit 3,
    # on a run that had a scheduler or a journal; an id of megabytes in the control socket's size limit, exit 3)
    got = cli(*argv, "--state-dir", str(tmp_path / "none"))
    assert got.returncode == 2, got.stderr
    assert got.stderr.count("\n") == 1 and said in got.stderr, got.stderr


@pytest.mark.parametrize(("argv", "said"), [
    (["status", "--jsn"], "wloadctl status: error: unrecognized arguments: --jsn; did you mean --json?"),
    (["rerun", "a", "--downstrem"], "unrecognized arguments: --downstrem; did you mean --downstream?"),
    (["hold", "a", "--reasn=late"], "unrecognized arguments: --reasn=late; did you mean --reason?"),
    (["status", "--frobnicate"], "wloadctl status: error: unrecognized arguments: --frobnicate (see"),
])
def test_a_misspelt_option_is_refused_with_the_close_one(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    # (`status --jsn` was told only "unrecognized arguments", where a misspelt command gets its `did you mean`)
    from wloadctl.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and said in err, err


def test_the_command_line_knows_the_longest_job_id_the_plan_allows() -> None:
    from wloadctl.cli import JOB_ID_LIMIT
    from wloadctl.core.plan import JOB_ID_MAX

    assert JOB_ID_LIMIT == JOB_ID_MAX


def test_status_text_says_why_a_succeeded_job_succeeded_as_json_and_why_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # (`status --all` showed a job an operator set ok as a bare SUCCEEDED, as if it had run; --json and `why` said
    # "set ok by ann", and a SKIPPED job's reason was shown)
    from tests.conftest import make_plan
    from tests.test_why_read import Journaled
    from wloadctl.cli import main
    from wloadctl.core.events import OperatorEvent

    r = Journaled(tmp_path, make_plan({"a": {}, "b": {"deps": ["a"]}, "c": {"deps": ["a"]}}))
    r.end("a", 1)
    r.feed(OperatorEvent("set-ok", (r.core.index["b"],), 4.0, user="ann", cause_id="op-1"))
    r.feed(OperatorEvent("skip", (r.core.index["c"],), 4.0, user="ann", cause_id="op-2"))
    r.stop("failed")
    for form in ([], ["--at", "-0s"]):
        assert main(["status", "--all", "--state-dir", str(tmp_path), *form]) == 1
        lines = capsys.readouterr().out.splitlines()
        assert "  SUCCEEDED       b  set ok by ann" in lines and "  SKIPPED         c  skipped by ann" in lines, lines


def test_history_says_which_of_a_jobs_actions_were_refused_as_audit_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # (a refused `release` of a job waiting for confirmation read "root release (no reason): job 'gate' waits for
    # confirmation: ..." in history, as if applied; only audit and --json said it was refused)
    from tests.conftest import make_plan
    from tests.test_why_read import Journaled
    from wloadctl.cli import main

    r = Journaled(tmp_path, make_plan({"a": {}, "b": {"deps": ["a"]}}))
    r.stop("interrupted")
    assert main(["hold", "b", "--state-dir", str(tmp_path)]) == 0
    assert main(["hold", "b", "--state-dir", str(tmp_path)]) == 1
    capsys.readouterr()
    assert main(["history", "b", "--state-dir", str(tmp_path)]) == 0
    acts = [line.split(" hold ", 1)[1] for line in capsys.readouterr().out.splitlines() if " hold (" in line]
    assert acts == ["(no reason): job 'b' held",
                    "(no reason): refused: job 'b' is HELD: hold does not apply; release, set-ok, skip would apply"]


def test_a_holding_run_that_is_cancelled_says_so_not_that_it_was_released(tmp_path: Path) -> None:
    # (`run` printed "released: the run goes on" as a cancel ended its holding, then the held job CANCELLED)
    from types import SimpleNamespace

    from tests.conftest import make_plan
    from wloadctl.cli_run import HoldNotice
    from wloadctl.core.engine import SchedulerCore
    from wloadctl.core.events import OperatorEvent, RunStartedEvent

    said: list[str] = []
    core = SchedulerCore(make_plan({"a": {}}), slots=1)
    core.handle(OperatorEvent("hold", (0,), 0.0, user="ann"))
    core.handle(RunStartedEvent(0.0))
    notice, loop = HoldNotice(said.append, tmp_path), SimpleNamespace(core=core)
    notice(loop)  # type: ignore[arg-type]
    core.handle(OperatorEvent("cancel", (), 1.0, user="ann"))
    notice(loop)  # type: ignore[arg-type]
    assert said[0].startswith("holding: 1 held job(s) wait for release: a") and said[1:] == [
        "cancelled: the held jobs will not run"], said


def test_an_agent_no_longer_beating_shows_its_figures_as_last_heard_in_status() -> None:
    # (a LOST agent's "running 2/2, holds 2" read as jobs still there, though they had been run elsewhere since)
    from wloadctl.cli_show import agent_line

    row = {"agent": "n1", "pools": ["eu"], "slots_used": 2, "slots": 2, "load1": 0.5, "jobs_held": 2, "age": 31.0}
    assert agent_line({**row, "state": "ALIVE"}) == (
        "  agent n1: ALIVE, pools eu, running 2/2, load 0.50, holds 2, beat 31.0s ago")
    for state in ("SUSPECT", "LOST", "STOPPED"):
        assert agent_line({**row, "state": state}) == (
            f"  agent n1: {state}, pools eu, as last heard: running 2/2, load 0.50, holds 2, beat 31.0s ago")


@pytest.mark.parametrize("at", ["", " "])
def test_status_at_a_blank_moment_is_refused_not_read_as_the_live_status(tmp_path: Path, at: str) -> None:
    # `--at "$WHEN"` with WHEN unset printed the run as it stands now, exit 0, as if that were the answer
    got = cli("status", "--state-dir", str(tmp_path / "none"), "--at", at)
    assert got.returncode == 2 and got.stdout == "", got.stdout
    assert got.stderr.count("\n") == 1 and f"argument --at: {at!r} names no moment" in got.stderr, got.stderr


def test_every_line_of_top_fits_76_columns_with_large_figures_and_keeps_them() -> None:
    # Given a busy run's pipeline figures: slow percentiles, millions of samples, thousands per second
    slow = {"p50": 0.9999, "p99": 99.99, "n": 12_345_678}
    started = {"started": 12_345_678, "started_per_s": 12_345.6, "dispatch_to_start": {"p50": 0.0002, "p99": 99.99}}
    view = {"run": "20261208-012538-8cc55a", "live": True, "scheduler_pid": 4_194_304, "epoch": 12, "age": 12.3,
            "stale": True, "scheduler_host": None,
            "queues": {"request": {"depth": 999, "max": 999, "batches_per_s": 12_345.6, "backlog": 1_234_567},
                       "response": {"depth": 999, "max": 999, "batches_per_s": 12_345.6}},
            "arena": {"used": 1023 << 20, "capacity": 1 << 30, "live": 1_234_567},
            "latency": {"ready_to_dispatch": slow, "finish_to_dependent_start": slow},
            "journal": {"commit": slow, "commits_per_s": 98_765.4, "rows_per_commit": 4096.0},
            "loop": {"turn": slow, "turns_per_s": 12_345.6},
            "executors": [{"executor": 15, "pid": 4_194_304, "health": "stalled", "running": 1024, "slots": 1024,
                           **started}],
            "agents": [{"agent": "build-host-7", "state": "SUSPECT", "slots_used": 1024, "slots": 1024,
                        "jobs_held": 12_345, "load1": 12.34, **started}]}
    # When they are rendered for `top` and the console's pipeline pane
    lines = render(view)
    # Then every line fits the pane's 76 columns
    assert all(len(line) <= WIDTH for line in lines), [(len(line), line) for line in lines if len(line) > WIDTH]
    # and the journal's line still says its percentiles, samples, commits per second and rows per commit
    journal = next(line for line in lines if line.startswith("journal commit"))
    assert journal.split()[2:] == ["p50", "999.9ms", "p99", "99.99s", "n", "12.3M", "99k/s,", "4096", "rows/commit"]
    assert lines[1] == "  (live, pid 4194304, epoch 12; figures 12.3s old, STALE)", lines
    assert lines[-1].split() == ["build-host-7", "SUSPECT", "1024/1024", "12345", "12.34", "12.3M", "12k",
                                 "0.2ms/99.99s"], lines


def test_status_of_a_live_run_whose_scheduler_does_not_respond_exits_3_in_every_form() -> None:
    # (the status --json a SIGSTOPped scheduler's run gives: live, its beat past its lease)
    live = {"live": True, "status": "running", "counts": {"RUNNING": 1, "FAILED": 1}, "responding": True}
    assert status_exit(live) == 0
    assert status_exit({**live, "responding": False}) == NOT_RESPONDING_EXIT == 3
    # a run not going on has no scheduler to judge: its outcome says, as before
    ended = {"live": False, "status": "finished", "counts": {"FAILED": 1}, "responding": None}
    assert status_exit(ended) == 1 and status_exit({**ended, "counts": {"SUCCEEDED": 1}}) == 0
