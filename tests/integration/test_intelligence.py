"""Scheduling intelligence with real processes: resources, preemption, branches, loops, time, checkpoints."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import ENV, cli, read_evidence, stop_proc
from wloadctl.procs.localpool import KILL_GRACE

pytestmark = pytest.mark.ipc


def write(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def stamp(out: Path, jid: str, nap: float = 0.0) -> str:
    return f'echo "{jid} start $(date +%s.%N)" >> {out}; sleep {nap}; echo "{jid} end $(date +%s.%N)" >> {out}'


def intervals(out: Path) -> dict[str, tuple[float, float]]:
    ev = read_evidence(out)
    return {j: (v[0][1], v[-1][1]) for j, v in ev.items()}


def test_a_resource_of_2_is_never_held_by_3_jobs_at_once(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    jobs = {f"q{i}": {"command": stamp(out, f"q{i}", 0.3), "resources": {"db": 1}} for i in range(7)}
    plan = write(tmp_path / "p.yaml", {"name": "res", "resources": {"db": 2}, "jobs": jobs})
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--executors", "2", "--slots", "4")
    assert p.returncode == 0, p.stderr
    iv = intervals(out)
    assert len(iv) == 7
    points = sorted({t for a, b in iv.values() for t in (a, b)})
    peak = max(sum(1 for a, b in iv.values() if a <= t < b) for t in points)
    assert peak == 2


def test_branch_not_taken_never_runs_and_the_join_still_runs(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    plan = write(
        tmp_path / "p.yaml",
        {
            "name": "branch",
            "jobs": {
                "count": {"command": 'echo "rows=25" > $WLOADCTL_RESULT_FILE'},
                "bulk_path": {
                    "command": stamp(out, "bulk_path"),
                    "depends_on": ["count"],
                    "if": 'jobs["count"].result.rows > 1000',
                },
                "bulk_report": {"command": stamp(out, "bulk_report"), "depends_on": ["bulk_path"]},
                "small_path": {
                    "command": stamp(out, "small_path"),
                    "depends_on": ["count"],
                    "if": "jobs.count.result.rows <= 1000",
                },
                "join": {"command": stamp(out, "join"), "depends_on": {"bulk_report": "done", "small_path": "done"}},
            },
        },
    )
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == {
        "count": "SUCCEEDED",
        "bulk_path": "SKIPPED",
        "bulk_report": "SKIPPED",
        "small_path": "SUCCEEDED",
        "join": "SUCCEEDED",
    }
    assert sorted(read_evidence(out)) == ["join", "small_path"]


def test_until_repeats_a_job_until_its_result_says_done(tmp_path: Path, no_ipc_leaks: None) -> None:
    counter = tmp_path / "n"
    plan = write(
        tmp_path / "p.yaml",
        {
            "name": "until",
            "jobs": {
                "poll": {
                    "command": f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; "
                    f'if [ $n -ge 3 ]; then echo "ready=1"; else echo "ready=0"; fi > $WLOADCTL_RESULT_FILE',
                    "until": "result.ready == 1",
                    "max_iterations": 10,
                }
            },
        },
    )
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--json")
    assert p.returncode == 0, p.stderr
    assert counter.read_text().strip() == "3"


def test_a_condition_that_cannot_be_evaluated_fails_its_job_and_the_run(tmp_path: Path, no_ipc_leaks: None) -> None:
    """`"abc" < 5` is no answer: the job whose `if` or `until` it is fails, rather than being skipped, repeated
    or passed, and the run does not succeed."""
    plan = write(tmp_path / "p.yaml", {"name": "unjudged", "jobs": {
        "count": {"command": "echo n=abc > $WLOADCTL_RESULT_FILE"},
        "branch": {"command": "true", "depends_on": ["count"], "if": "jobs.count.result.n < 5"},
        "poll": {"command": "echo n=abc > $WLOADCTL_RESULT_FILE", "until": "result.n > 5", "max_iterations": 3}}})
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--json")
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"count": "SUCCEEDED", "branch": "FAILED", "poll": "FAILED"}
    said = {j: json.loads(cli("why", j, "--state-dir", str(sd), "--json").stdout)["reasons"][0]
            for j in ("branch", "poll")}
    assert said == {
        "branch": "failed: if: cannot evaluate 'jobs.count.result.n < 5': '<' not supported between instances of "
                  "'str' and 'int'",
        "poll": "failed: until: cannot evaluate 'result.n > 5': '>' not supported between instances of 'str' and "
                "'int'"}
    assert json.loads(cli("history", "poll", "--state-dir", str(sd), "--json").stdout)["attempts"] == 1


def test_a_misspelt_variable_in_a_condition_is_refused_before_the_run(tmp_path: Path) -> None:
    plan = write(tmp_path / "p.yaml", {"name": "typo", "variables": {"region": "emea"},
                                       "jobs": {"eu": {"command": "true", "if": 'vars.regoin == "emea"'}}})
    for args in (("validate",), ("run", "--state-dir", str(tmp_path / "sd"))):
        p = cli(args[0], str(plan), *args[1:])
        assert p.returncode == 2, p.stderr
        assert ("job 'eu': the condition reads undeclared variable 'regoin' (did you mean 'region'? declared: "
                "region)") in p.stderr
    assert not (tmp_path / "sd").exists()


def test_not_before_holds_a_ready_job_until_its_time(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    at = time.localtime(time.time() + 3)
    nb = time.strftime("%H:%M:%S", at)
    plan = write(
        tmp_path / "p.yaml",
        {
            "name": "nb",
            "jobs": {
                "early": {"command": stamp(out, "early")},
                "gated": {"command": stamp(out, "gated"), "not_before": nb},
            },
        },
    )
    t0 = time.time()
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--business-date", time.strftime("%Y-%m-%d", at))
    assert p.returncode == 0, p.stderr
    iv = intervals(out)
    assert iv["gated"][0] >= time.mktime(at) - 0.05
    assert iv["early"][0] < t0 + 2.5


def test_a_not_before_time_already_reached_at_the_start_holds_nothing(tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given a job not before 00:00 of the business date: already reached whatever the hour of the run's start
    out = tmp_path / "ev"
    job = {"command": stamp(out, "open_day"), "not_before": "00:00"}
    plan = write(tmp_path / "p.yaml", {"name": "nb", "timezone": "UTC", "jobs": {"open_day": job}})
    # When it runs, the job starts at once, not at the next midnight
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), timeout=60)
    assert p.returncode == 0, p.stderr
    assert "open_day" in intervals(out)


def test_business_date_reaches_the_commands(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "bd"
    plan = write(
        tmp_path / "p.yaml", {"name": "bd", "jobs": {"j": {"command": f"echo $WLOADCTL_BUSINESS_DATE > {out}"}}}
    )
    assert cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--business-date", "2026-12-31").returncode == 0
    assert out.read_text().strip() == "2026-12-31"


def test_a_retry_resumes_from_the_last_checkpoint(tmp_path: Path, no_ipc_leaks: None) -> None:
    seen = tmp_path / "seen"
    plan = write(
        tmp_path / "p.yaml",
        {
            "name": "ckpt",
            "jobs": {
                "long": {
                    "command": f'echo "got:$WLOADCTL_CHECKPOINT" >> {seen}; '
                    'if [ -z "$WLOADCTL_CHECKPOINT" ]; then echo "chunk-42" > $WLOADCTL_CHECKPOINT_FILE; exit 1; fi',
                    "retries": {"count": 1, "delay": "0s"},
                }
            },
        },
    )
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"))
    assert p.returncode == 0, p.stderr
    assert seen.read_text().split() == ["got:", "got:chunk-42"]


def test_a_critical_job_preempts_a_preemptible_low_job_which_completes_later(
    tmp_path: Path, no_ipc_leaks: None
) -> None:
    from tests.integration.helpers import start, wait_for

    out = tmp_path / "ev"
    sd = tmp_path / "sd"
    # urgent waits for an operator's confirmation, given once bulk holds the only slot; bulk's second run outlasts
    # the grace after which its first was to be killed (KILL_GRACE): that kill is not for the second
    plan = write(
        tmp_path / "p.yaml",
        {
            "name": "preempt",
            "jobs": {
                "bulk": {"command": stamp(out, "bulk", KILL_GRACE + 1.0), "sla": "low", "preemptible": True},
                "urgent": {"command": stamp(out, "urgent", 0.2), "sla": "critical", "confirm": True},
            },
        },
    )
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "1", "--slots", "1")
    try:
        wait_for(lambda: "bulk" in read_evidence(out), timeout=30, what="bulk's start")
        assert cli("approve", "urgent", "--state-dir", str(sd)).returncode == 0
        assert proc.wait(60) == 0
    finally:
        stop_proc(proc)
    ev = read_evidence(out)
    kinds = [k for k, _ in ev["bulk"]]
    assert kinds == ["start", "start", "end"]  # stopped once, then ran to the end
    assert ev["urgent"][0][1] < ev["bulk"][1][1]  # urgent started before bulk's second start
    h = json.loads(cli("history", "bulk", "--state-dir", str(sd), "--json").stdout)
    assert any("preempted for critical job urgent" in t["reason"] for t in h["transitions"])
    assert h["attempts"] == 1 or h["transitions"][-1]["to"] == "SUCCEEDED"


def test_executor_cpu_capacity_limits_jobs_that_claim_cpus(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    jobs = {f"heavy{i}": {"command": stamp(out, f"heavy{i}", 0.3), "cpu": 2} for i in range(4)}
    jobs["too_big"] = {"command": "true", "cpu": 16}
    jobs["light"] = {"command": stamp(out, "light", 0.3), "memory": "64M"}
    plan = write(tmp_path / "p.yaml", {"name": "cpu", "jobs": jobs})
    p = cli(
        "run",
        str(plan),
        "--state-dir",
        str(tmp_path / "sd"),
        "--executors",
        "1",
        "--slots",
        "4",
        "--executor-cpus",
        "3",
        "--executor-memory",
        "1024",
        "--json",
    )
    assert json.loads(p.stdout)["jobs"]["too_big"] == "FAILED"
    iv = intervals(out)
    heavy = [v for k, v in iv.items() if k.startswith("heavy")]
    points = sorted({t for a, b in heavy for t in (a, b)})
    # 3 CPUs and 2 per job: never two heavy jobs at once on the one executor
    assert max(sum(1 for a, b in heavy if a <= t < b) for t in points) == 1
    why = json.loads(cli("why", "too_big", "--state-dir", str(tmp_path / "sd"), "--json").stdout)
    assert "needs cpu 16" in " ".join(why["reasons"])


def loop_over_output_plan(tmp_path: Path, out: Path, files: str, nap: float = 0.0, gate: Path | None = None) -> Path:
    """A job listing files, a loop over its list, and a report after the loop (which waits for `gate` if given)."""
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done; " if gate is not None else ""
    return write(
        tmp_path / "p.yaml",
        {
            "name": "fanout",
            "jobs": {
                "list_files": {"command": f"echo '{{\"files\": {files}}}' > $WLOADCTL_RESULT_FILE"},
                "load": {
                    "command": stamp(out, "load@{item}", nap) + ' && echo "item=$WLOADCTL_ITEM" > /dev/null',
                    "depends_on": ["list_files"],
                    "for_each": {"items": "jobs.list_files.result.files", "max_items": 50},
                },
                "report": {"command": wait + stamp(out, "report"), "depends_on": ["load"]},
            },
        },
    )


def test_for_each_over_an_upstreams_output_runs_one_instance_per_item(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    plan = loop_over_output_plan(tmp_path, out, '["emea.csv", "amer.csv", "apac.csv"]', nap=0.2)
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "4", "--json")
    assert p.returncode == 0, p.stderr
    jobs = json.loads(p.stdout)["jobs"]
    assert jobs == {"list_files": "SUCCEEDED", "load": "SUCCEEDED", "report": "SUCCEEDED",
                    "load@emea.csv": "SUCCEEDED", "load@amer.csv": "SUCCEEDED", "load@apac.csv": "SUCCEEDED"}
    iv = intervals(out)
    loads = [iv[f"load@{r}.csv"] for r in ("emea", "amer", "apac")]
    # the report waits for every instance; the instances overlap (they run side by side)
    assert iv["report"][0] >= max(end for _s, end in loads)
    assert min(end for _s, end in loads) > max(start for start, _e in loads)
    # instances show in status, history and the id list like any job
    st = json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)
    assert {j["job"] for j in st["jobs"]} >= {"load@emea.csv", "load@apac.csv"}
    h = cli("history", "load@amer.csv", "--state-dir", str(sd), "--json")
    assert h.returncode == 0, h.stderr
    assert "SUCCEEDED" in h.stdout
    why = json.loads(cli("why", "load", "--state-dir", str(sd), "--json").stdout)
    assert "3 instance(s) finished" in " ".join(why["reasons"])


def test_a_file_name_from_an_upstreams_output_runs_nothing_in_the_shell(tmp_path: Path, no_ipc_leaks: None) -> None:
    """Items of a loop over output are data: `{item}` in a shell command is quoted, whatever the name holds."""
    names = ["ok.csv", f"x; touch {tmp_path}/PWNED", f"$(touch {tmp_path}/PWNED)"]
    plan = write(tmp_path / "p.yaml", {"name": "names", "jobs": {
        "list_files": {"command": f"echo '{json.dumps({'files': names})}' > $WLOADCTL_RESULT_FILE"},
        "load": {"command": 'echo loading {item}; echo "quoted {item}"', "depends_on": ["list_files"],
                 "for_each": "jobs.list_files.result.files"}}})
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--json")
    assert p.returncode == 0, p.stderr
    assert not (tmp_path / "PWNED").exists()
    instances = [j for j in json.loads(p.stdout)["jobs"] if j.startswith("load@")]
    assert len(instances) == 3
    said = sorted(cli("logs", j, "--state-dir", str(sd)).stdout for j in instances)
    assert said == sorted(f"loading {n}\nquoted {n}\n" for n in names)


def test_a_result_that_cannot_be_read_fails_the_job_whose_result_is_read_and_says_why(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    """A result a condition or loop reads that is too big, or not a result at all, is not taken as no values
    (a branch silently skipped, a loop over nothing): the job fails and says so; one nobody reads is no matter."""
    big = json.dumps({"files": [f"f{k:05}.csv" for k in range(9000)]})
    plan = write(tmp_path / "p.yaml", {"name": "results", "jobs": {
        "big": {"command": f"echo '{big}' > $WLOADCTL_RESULT_FILE"},
        "each": {"for_each": "jobs.big.result.files", "command": "true", "depends_on": ["big"]},
        "garbled": {"command": "echo 'rows: {{{' > $WLOADCTL_RESULT_FILE"},
        "branch": {"command": "true", "depends_on": ["garbled"], "if": "jobs.garbled.result.rows == 5"},
        "listed": {"command": "echo '[1, 2]' > $WLOADCTL_RESULT_FILE"},
        "after_list": {"command": "true", "depends_on": ["listed"], "if": "jobs.listed.exit_code == 0"},
        "unread": {"command": "echo nonsense > $WLOADCTL_RESULT_FILE"},
        "fine": {"command": "echo rows=5 > $WLOADCTL_RESULT_FILE"},
        "yes": {"command": "true", "depends_on": ["fine"], "if": "jobs.fine.result.rows == 5"}}})
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--json")
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["jobs"] == {
        "big": "FAILED", "each": "UPSTREAM_FAILED", "garbled": "FAILED", "branch": "UPSTREAM_FAILED",
        "listed": "FAILED", "after_list": "UPSTREAM_FAILED", "unread": "SUCCEEDED", "fine": "SUCCEEDED",
        "yes": "SUCCEEDED"}
    said = {j: json.loads(cli("why", j, "--state-dir", str(sd), "--json").stdout)["reasons"][0]
            for j in ("big", "garbled", "listed")}
    assert said == {
        "big": "failed: exited 0, but its result file is larger than 64 KiB, the most a result may hold",
        "garbled": "failed: exited 0, but its result file is neither a JSON object nor key=value lines: line 1 "
                   "has no '='",
        "listed": "failed: exited 0, but its result file holds a JSON list, not an object of named values"}


def test_a_result_nested_too_deep_or_with_too_long_a_number_fails_its_job_not_the_scheduler(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given results whose reading once stopped the scheduler for good (RecursionError, ValueError), read by an
    # `if` and by an `until`
    deep = tmp_path / "deep.json"
    deep.write_text('{"ok": 1, "x": ' + "[" * 5000 + "]" * 5000 + "}")
    long = tmp_path / "long.txt"
    long.write_text("ok=1\nn=" + "9" * 5000 + "\n")
    plan = write(tmp_path / "p.yaml", {"name": "results", "jobs": {
        "deep": {"command": f'cp {deep} "$WLOADCTL_RESULT_FILE"'},
        "branch": {"command": "true", "depends_on": ["deep"], "if": "jobs.deep.result.ok == 1"},
        "poll": {"command": f'cp {long} "$WLOADCTL_RESULT_FILE"', "until": "result.ok == 1"}}})
    sd = tmp_path / "sd"
    # When it runs
    p = cli("run", str(plan), "--state-dir", str(sd), "--json")
    # Then the run ends, and the jobs whose result is read fail saying why
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"deep": "FAILED", "branch": "UPSTREAM_FAILED", "poll": "FAILED"}
    said = {j: json.loads(cli("why", j, "--state-dir", str(sd), "--json").stdout)["reasons"][0]
            for j in ("deep", "poll")}
    assert said == {
        "deep": "failed: exited 0, but its result file nests values more than 100 deep",
        "poll": "failed: exited 0, but its result file's 'n' is a number of 5000 digits, more than the 4300 a "
                "number in a result may have"}


def test_a_result_file_with_a_line_that_is_not_key_value_fails_the_job_whose_result_is_read(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    """One line with an `=` once made a whole file key=value lines: the others were dropped, an empty key was
    taken, and the job SUCCEEDED with no values, its dependents SKIPPED on a condition never judged."""
    # Given results of key=value lines with a line that is not one (or has no key), read by `if`s and an
    # `until`, one with comments and blank lines, and a bad one nobody reads
    put = "printf '{}' > $WLOADCTL_RESULT_FILE".format
    plan = write(tmp_path / "p.yaml", {"name": "kv", "jobs": {
        "garbled": {"command": put("garbage\\n=oops\\n")},
        "branch": {"depends_on": ["garbled"], "if": "jobs.garbled.result.oops == 1", "command": "true"},
        "trailing": {"command": put("k=1\\ngarbage\\n")},
        "after": {"depends_on": ["trailing"], "if": "jobs.trailing.result.k == 1", "command": "true"},
        "poll": {"command": put("ready=1\\n =2\\n"), "until": "result.ready == 1", "max_iterations": 3},
        "commented": {"command": put("# counted at the close\\n\\nrows=5\\n")},
        "counted": {"depends_on": ["commented"], "if": "jobs.commented.result.rows == 5", "command": "true"},
        "unread": {"command": put("just output\\n")}}})
    sd = tmp_path / "sd"
    # When it runs
    p = cli("run", str(plan), "--state-dir", str(sd), "--json")
    # Then each job whose such result is read fails naming the first line that is not key=value
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert json.loads(p.stdout)["jobs"] == {
        "garbled": "FAILED", "branch": "UPSTREAM_FAILED", "trailing": "FAILED", "after": "UPSTREAM_FAILED",
        "poll": "FAILED", "commented": "SUCCEEDED", "counted": "SUCCEEDED", "unread": "SUCCEEDED"}
    said = {j: json.loads(cli("why", j, "--state-dir", str(sd), "--json").stdout)["reasons"][0]
            for j in ("garbled", "trailing", "poll")}
    neither = "failed: exited 0, but its result file is neither a JSON object nor key=value lines: line"
    assert said == {"garbled": f"{neither} 1 has no '='", "trailing": f"{neither} 2 has no '='",
                    "poll": f"{neither} 2 has no key before its '='"}


def test_nan_infinity_or_a_number_too_large_in_a_result_fails_the_job_whose_result_is_read(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    """NaN compares false with everything: read as a number it skipped both branches of an amount check and
    ran an `until` to its last iteration, in a run that succeeded."""
    # Given results with NaN and Infinity (which JSON has not), and numbers past a float's range, read by `if`s
    # and an `until`, and one such result nobody reads
    put = "printf '%s' {} > $WLOADCTL_RESULT_FILE".format
    plan = write(tmp_path / "p.yaml", {"name": "nan", "jobs": {
        "producer": {"command": put("'{\"amount\": NaN, \"limit\": Infinity}'")},
        "over_limit": {"depends_on": ["producer"], "if": "jobs.producer.result.amount > 1000", "command": "true"},
        "within_limit": {"depends_on": ["producer"], "if": "jobs.producer.result.amount <= 1000",
                         "command": "true"},
        "limits": {"command": put("'{\"caps\": {\"eu\": [5, -Infinity]}}'")},
        "capped": {"depends_on": ["limits"], "if": "jobs.limits.result.caps.eu[0] > 1", "command": "true"},
        "huge": {"command": put("'{\"total\": 1e999}'")},
        "big_line": {"command": put("'rows=5\nbig=1e999\n'")},
        "after_huge": {"depends_on": ["huge", "big_line"], "if": "jobs.huge.result.total > jobs.big_line.result.rows",
                       "command": "true"},
        "loop_nan": {"until": "result.v > 0 or result.v <= 0", "max_iterations": 3,
                     "command": put("'{\"v\": NaN}'")},
        "unread": {"command": put("'{\"v\": NaN}'")},
        "text": {"command": put("'n=NaN\n'")},
        "reads_text": {"depends_on": ["text"], "if": "jobs.text.result.n == 'NaN'", "command": "true"}}})
    sd = tmp_path / "sd"
    # When it runs
    p = cli("run", str(plan), "--state-dir", str(sd), "--json")
    # Then each job whose such result is read fails saying which value and why, and the run fails
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert json.loads(p.stdout)["jobs"] == {
        "producer": "FAILED", "over_limit": "UPSTREAM_FAILED", "within_limit": "UPSTREAM_FAILED",
        "limits": "FAILED", "capped": "UPSTREAM_FAILED", "huge": "FAILED", "big_line": "FAILED",
        "after_huge": "UPSTREAM_FAILED", "loop_nan": "FAILED", "unread": "SUCCEEDED", "text": "SUCCEEDED",
        "reads_text": "SUCCEEDED"}
    said = {j: json.loads(cli("why", j, "--state-dir", str(sd), "--json").stdout)["reasons"][0]
            for j in ("producer", "limits", "huge", "big_line", "loop_nan")}
    nan = 'not a number JSON can hold (write a number, or "{}" in quotes for text)'.format
    too_large = "past ±1.8e308, the largest a number in a result may be"
    assert said == {
        "producer": f"failed: exited 0, but its result file's 'amount' is NaN, {nan('NaN')}",
        "limits": f"failed: exited 0, but its result file's 'caps.eu[1]' is -Infinity, {nan('-Infinity')}",
        "huge": f"failed: exited 0, but its result file's 'total' is 1e999, {too_large}",
        "big_line": f"failed: exited 0, but its result file's 'big' is 1e999, {too_large}",
        "loop_nan": f"failed: exited 0, but its result file's 'v' is NaN, {nan('NaN')}"}
    # (the loop did not go round: its first iteration's result was refused)
    hist = cli("history", "loop_nan", "--state-dir", str(sd), "--json").stdout
    assert max(t["attempt"] for t in json.loads(hist)["transitions"]) == 1, hist


def test_for_each_over_a_bad_output_fails_the_loop_and_says_why(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    plan = loop_over_output_plan(tmp_path, out, '"not-a-list"')
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd), "--json")
    assert p.returncode == 1
    jobs = json.loads(p.stdout)["jobs"]
    assert jobs["load"] == "FAILED" and jobs["report"] == "UPSTREAM_FAILED"
    assert not out.exists(), "nothing of the loop ran"
    why = json.loads(cli("why", "load", "--state-dir", str(sd), "--json").stdout)
    assert "jobs.list_files.result.files gave a str, not a list" in " ".join(why["reasons"])


def test_loop_instances_survive_a_kill_9_of_the_scheduler(tmp_path: Path) -> None:
    from tests.integration.helpers import executor_pids, ipc_names, reap_orphans, start, status, wait_for

    out = tmp_path / "ev"
    items = json.dumps([f"f{k}" for k in range(8)])
    # (the report waits for a gate opened after the kill: the run cannot end before it)
    gate = tmp_path / "gate"
    plan = loop_over_output_plan(tmp_path, out, items, nap=0.4, gate=gate)
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd), "--executors", "2", "--slots", "2")

    def some_instances_done() -> bool:
        ev = read_evidence(out)
        return sum(1 for v in ev.values() if [k for k, _ in v] == ["start", "end"]) >= 2

    wait_for(some_instances_done, timeout=30, what="instances finishing")
    run_id = status(sd)["run"]
    import os
    import signal

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gate.touch()
    p = cli("resume", "--state-dir", str(sd), "--json")
    assert p.returncode == 0, p.stderr
    jobs = json.loads(p.stdout)["jobs"]
    assert len(jobs) == 11 and set(jobs.values()) == {"SUCCEEDED"}
    ev = read_evidence(out)
    assert sorted(ev) == sorted([f"load@f{k}" for k in range(8)] + ["report"])
    for jid, lines in ev.items():
        assert [k for k, _ in lines] == ["start", "end"], f"{jid} ran more than once: {lines}"
    reap_orphans(run_id)
    assert executor_pids(run_id) == []
    assert ipc_names(run_id) == []


def listing_plan(tmp_path: Path, out: Path, flag: Path, gate: Path | None = None) -> Path:
    """`lst` lists [m, n], or [n, p, q] once `flag` exists; the loop `per` over its list and `fin` after it
    (with `gate`, a job `keep` holds the run open until the gate exists)."""
    lists = f'if [ -e {flag} ]; then echo \'{{"i": ["n", "p", "q"]}}\'; else echo \'{{"i": ["m", "n"]}}\'; fi'
    jobs: dict = {
        "lst": {"command": f"{lists} > $WLOADCTL_RESULT_FILE"},
        "per": {"command": stamp(out, "per@{item}"), "for_each": "jobs.lst.result.i", "depends_on": ["lst"]},
        "fin": {"command": stamp(out, "fin"), "depends_on": ["per"]},
    }
    if gate is not None:
        jobs["keep"] = {"command": f"while [ ! -e {gate} ]; do sleep 0.05; done"}
    return write(tmp_path / "p.yaml", {"name": "relist", "jobs": jobs})


@pytest.mark.parametrize("live", [False, True], ids=["stopped", "live"])
def test_a_rerun_of_a_loops_source_with_its_downstream_runs_the_loop_on_its_new_list(
        tmp_path: Path, no_ipc_leaks: None, live: bool) -> None:
    from tests.integration.helpers import job_states, start, wait_for

    out, flag, gate, sd = tmp_path / "ev", tmp_path / "flag", tmp_path / "gate", tmp_path / "sd"
    plan = listing_plan(tmp_path, out, flag, gate if live else None)
    # Given a run whose loop ran over [m, n] and whose fin ran after it (stopped, or still up)
    proc = None
    if live:
        proc = start("run", str(plan), "--state-dir", str(sd))
    else:
        assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 0
    try:
        wait_for(lambda: job_states(sd).get("fin") == "SUCCEEDED", what="fin to succeed")
        # When its list will be [n, p, q] and lst is rerun with its downstream
        flag.touch()
        p = cli("rerun", "lst", "--downstream", "--state-dir", str(sd))
        assert p.returncode == 0, p.stderr
        assert ("job 'lst' will run again with 2 downstream job(s); loop 'per' makes its instances again from the "
                "list it reads then") in p.stdout
        if live:
            wait_for(lambda: [k for k, _ in read_evidence(out).get("fin", [])] == ["start", "end"] * 2,
                     what="fin to run again")
            gate.touch()
            assert proc is not None and proc.wait(timeout=60) == 0
        else:
            assert cli("resume", "--state-dir", str(sd)).returncode == 0
    finally:
        gate.touch()
        if proc is not None:
            stop_proc(proc, grace=60)  # (a stopped run takes its executors, queues and segments with it)
    # Then the loop made its instances from the new list and fin ran after them: n again, p and q new, m not again
    states = job_states(sd)
    assert {j: states[j] for j in ("lst", "per", "fin", "per@m", "per@n", "per@p", "per@q")} == dict.fromkeys(
        ("lst", "per", "fin", "per@m", "per@n", "per@p", "per@q"), "SUCCEEDED")
    ev = read_evidence(out)
    runs = {j: [k for k, _ in v].count("start") for j, v in ev.items()}
    assert runs == {"per@m": 1, "per@n": 2, "per@p": 1, "per@q": 1, "fin": 2}
    assert ev["fin"][2][1] >= max(ev[j][-1][1] for j in ("per@n", "per@p", "per@q"))


def test_groups_share_busy_slots_by_weight(tmp_path: Path, no_ipc_leaks: None) -> None:
    out = tmp_path / "ev"
    jobs = {f"{g}{k}": {"command": stamp(out, f"{g}{k}", 0.4), "group": g} for g in ("risk", "ops") for k in range(8)}
    plan = write(tmp_path / "p.yaml", {"name": "fair", "groups": {"risk": 3, "ops": 1}, "jobs": jobs})
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"), "--executors", "1", "--slots", "4")
    assert p.returncode == 0, p.stderr
    iv = intervals(out)
    assert len(iv) == 16
    # While both groups still had work waiting (the first two waves), the four slots went 3 to risk, 1 to ops.
    first_end = min(end for _s, end in iv.values())
    first_wave = [j for j, (start, _e) in iv.items() if start < first_end]
    assert sorted(j.rstrip("0123456789") for j in first_wave) == ["ops", "risk", "risk", "risk"]
    # A job stamps its start a little after it was sent: half a job's length of margin for that.
    risk_waiting_until = max(a for j, (a, _b) in iv.items() if j.startswith("risk")) - 0.2
    peak_ops = max(sum(1 for j, (a, b) in iv.items() if j.startswith("ops") and a <= t < b)
                   for t in sorted(a for a, _b in iv.values()) if t < risk_waiting_until)
    assert peak_ops == 1, "ops held more than its share while risk jobs were waiting"


def test_trigger_lists_runs_on_business_days_only(tmp_path: Path) -> None:
    import datetime as dt

    holiday = dt.date.today() + dt.timedelta(days=10)
    while holiday.weekday() >= 5:
        holiday += dt.timedelta(days=1)
    plan = write(tmp_path / "p.yaml", {
        "name": "cal", "timezone": "UTC",
        "schedule": {"cron": "30 18 * * *", "business_days": ["mon", "tue", "wed", "thu", "fri"],
                     "holidays": [holiday.isoformat()]},
        "jobs": {"a": {"command": "true"}},
    })
    p = cli("trigger", str(plan), "--next", "40", "--json", "--state-dir", str(tmp_path / "sd"))
    assert p.returncode == 0, p.stderr
    days = [dt.date.fromisoformat(t["business_date"]) for t in json.loads(p.stdout)]
    assert all(d.weekday() < 5 for d in days) and holiday not in days
    assert holiday - dt.timedelta(days=1) in days or holiday + dt.timedelta(days=1) in days
    assert len(set(days)) == len(days) and days == sorted(days)
    assert all(t["at"].endswith("T18:30:00+00:00") for t in json.loads(p.stdout))


def test_a_job_with_a_cwd_of_its_own_finds_its_files_under_a_relative_state_dir(tmp_path: Path,
                                                                                 no_ipc_leaks: None) -> None:
    """`--state-dir sd` is relative to where `run` was started; a job with `cwd: /tmp` is elsewhere: the paths it
    is given ($WLOADCTL_RESULT_FILE, _CHECKPOINT_FILE, _STATE_DIR) are absolute, so it writes its result where the
    scheduler reads it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plan = write(tmp_path / "p.yaml", {"name": "cwd", "jobs": {
        "count": {"command": 'echo "rows=25" > "$WLOADCTL_RESULT_FILE" && echo tok > "$WLOADCTL_CHECKPOINT_FILE" '
                             '&& test -d "$WLOADCTL_STATE_DIR/logs"',
                  "cwd": str(elsewhere)},
        "small": {"command": "true", "depends_on": ["count"], "if": "jobs.count.result.rows == 25"},
    }})
    p = subprocess.run([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", "sd", "--json"],
                       capture_output=True, text=True, timeout=120, env=ENV, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"count": "SUCCEEDED", "small": "SUCCEEDED"}
    assert not (elsewhere / "sd").exists()


def test_a_job_whose_cwd_is_missing_fails_saying_so(tmp_path: Path, no_ipc_leaks: None) -> None:
    gone = tmp_path / "gone"
    plan = write(tmp_path / "p.yaml", {"name": "nocwd", "jobs": {"a": {"command": "true", "cwd": str(gone)}}})
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"))
    assert p.returncode == 1
    why = json.loads(cli("why", "a", "--state-dir", str(tmp_path / "sd"), "--json").stdout)
    assert why["state"] == "FAILED"
    assert f"cannot start in its working directory {gone}: no such directory here" in " ".join(why["reasons"])
