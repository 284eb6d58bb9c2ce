"""Plan loading: each kind of bad plan (a file each), good plans, durations, samples."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from wloadctl.core.dag import Dag
from wloadctl.core.durations import (
    FINEST,
    DurationRangeError,
    closed_window,
    duration_guess,
    format_duration,
    parse_day_time,
    parse_deadline,
    parse_duration,
    parse_time_of_day,
)
from wloadctl.core.plan import NO_RETRY, JobSpec, Plan
from wloadctl.core.planfile import MAX_PROBLEMS, load_plan, load_plan_text
from wloadctl.core.planjobs import FIELDS, USUAL_FIELDS, spec_maker
from wloadctl.core.states import DepKind, SlaTier
from wloadctl.errors import CycleError, PlanError, WloadError

DATA = Path(__file__).resolve().parent.parent / "data" / "plans"
SAMPLES = Path(__file__).resolve().parents[2] / "samples"



def other_digits(text: str, zero: int = 0x660) -> str:
    """`text` with its digits written in another script: Arabic-Indic (U+0660...), or fullwidth for 0xFF10."""
    return text.translate({ord("0") + d: zero + d for d in range(10)})


# (file in tests/data/plans/bad, line of the problem or None, fragment of its report)
BAD_PLANS: list[tuple[str, int | None, str]] = [
    ("syntax_error.yaml", 5, "YAML syntax error"),
    ("syntax_unclosed_flow.yaml", 4, "YAML syntax error"),
    ("top_level_list.yaml", 1, "top level must be a mapping, not a list"),
    ("empty.yaml", None, "the plan is empty"),
    ("no_jobs.yaml", None, "the plan has no jobs"),
    ("empty_jobs.yaml", 2, "the plan has no jobs"),
    ("jobs_list.yaml", 2, "jobs must be a mapping of job id -> job"),
    ("duplicate_job.yaml", 7, "duplicate job id 'load' (first at line 3)"),
    ("duplicate_job_flow.yaml", 4, "duplicate job id 'load' (first at line 3)"),
    ("duplicate_key_in_job.yaml", 6, "duplicate key 'command' (first at line 4)"),
    ("duplicate_top_key.yaml", 4, "duplicate key 'name' (first at line 1)"),
    ("unknown_top_key.yaml", 2, "unknown top-level key 'job'"),
    ("unknown_job_key.yaml", 4, "unknown key 'comand'"),
    ("unknown_defaults_key.yaml", 3, "unknown key 'retry' in defaults"),
    ("defaults_command.yaml", 3, "'command' belongs to each job"),
    ("unknown_retry_key.yaml", 7, "unknown key 'dealy' in retries"),
    ("unknown_dependency.yaml", 6, "depends on unknown job 'lod'"),
    ("self_dependency.yaml", 5, "the job depends on itself"),
    ("cycle.yaml", 4, "dependency cycle: a -> c -> b -> a"),
    ("bad_duration.yaml", 5, "'20x' is not a duration"),
    ("bad_retry_delay.yaml", 5, "'soon' is not a duration"),
    ("zero_timeout.yaml", 3, "timeout must be more than zero"),
    ("unknown_sla.yaml", 5, "unknown SLA tier 'urgent'"),
    ("unknown_dep_kind.yaml", 7, "unknown dependency kind 'finished'"),
    ("dep_kind_mapping.yaml", 7, "job 'alert': depends_on 'load' must be success, failure or done, not a mapping"),
    ("dep_kind_list.yaml", 4, "job 'alert': depends_on 'load' must be success, failure or done, not a list"),
    ("dep_kind_null.yaml", 7, "job 'alert': depends_on 'load' must be success, failure or done, not nothing (null)"),
    ("undeclared_resource.yaml", 7, "resource 'mainframe_link' is not declared"),
    (
        "resource_over_capacity.yaml",
        8,
        "asks for 5 of resource 'db_conn', which has only 4",
    ),
    (
        "bad_resource_capacity.yaml",
        3,
        "resource 'db_conn' must be a whole number of at least 1",
    ),
    (
        "priority_not_int.yaml",
        5,
        "priority must be a whole number, not the text 'high'",
    ),
    ("retries_negative.yaml", 5, "retries must be between 0 and 1000, not -1"),
    ("retries_without_count.yaml", 5, "retries needs a count"),
    (
        "command_number.yaml",
        4,
        "command must be text or a list of text, not the number 5",
    ),
    ("command_bool.yaml", 4, "not the boolean true"),
    ("command_empty_list.yaml", 4, "command is an empty list"),
    ("missing_command.yaml", 3, "the job has no command"),
    ("bad_time_of_day.yaml", 5, "'25:00' is not a time"),
    ("duration_too_long.yaml", 5, "job 'load': expected: '9999999999999999999"),
    ("duration_too_long.yaml", 6, "job 'load': timeout: '99999999999d' is longer than the 100 years"),
    ("bad_deadline.yaml", 5, "'tomorrow' is not a time"),
    ("bad_job_id.yaml", 3, "'load accounts' is not a valid job id: it holds ' ' (U+0020) (a job id is ASCII "
     "letters, digits and _ . : - only"),
    # Each id outside ASCII is named with the character it may not hold, whatever its script
    ("non_ascii_job_id.yaml", 3, "job 'société_load': 'société_load' is not a valid job id: it holds 'é' (U+00E9)"),
    ("non_ascii_job_id.yaml", 5, "job '日本': '日本' is not a valid job id: it holds '日' (U+65E5) (a job id is ASCII "
     "letters, digits and _ . : - only, as it names the job's files; other text can go in its description)"),
    ("non_ascii_job_id.yaml", 7, "job 'rocket_🚀': 'rocket_🚀' is not a valid job id: it holds '🚀' (U+1F680)"),
    ("dots_job_id.yaml", 3, "'..' is not a valid job id"),
    ("long_job_id.yaml", 3, "the job id is 201 characters long (at most 200: an id names the job's files)"),
    ("duplicate_dependency.yaml", 4, "depends on 'open' more than once"),
    ("bad_env.yaml", 6, "env 'REGION' must be text, not a mapping"),
    # A null value is no value: it never becomes the empty one unsaid
    ("env_null.yaml", 7, "job 'load': env 'LEDGER' must be text, not nothing (null) (write LEDGER: '' for an empty"),
    ("env_null.yaml", 8, "job 'load': env 'BRANCH' must be text, not nothing (null)"),
    ("env_null_flow.yaml", 3, "job 'load': env 'LEDGER' must be text, not nothing (null)"),
    ("bad_env_name.yaml", 6, "'1REGION' is not an environment variable name"),
    ("bad_exit_codes.yaml", 7, "'300-310' is not an exit code or range"),
    ("bad_jitter.yaml", 5, "retries jitter must be between 0 and 1"),
    ("bad_pool_name.yaml", 5, "pool must be a name of letters, digits, '_' or '-' (at most 64), not 'etl nodes'"),
    ("bad_agent.yaml", 5, "agent must be"),
    ("bad_backoff.yaml", 5, "retries backoff must be between 1 and 100, not 0.5"),
    ("backoff_too_big.yaml", 5, "job 'load': retries backoff must be between 1 and 100, not 1e+200"),
    ("job_not_mapping.yaml", 3, "a job must be a mapping of its settings"),
    ("second_document.yaml", 4, "a plan file holds one YAML document"),
    ("unknown_alias.yaml", 4, "alias '*load_cmd' names no anchor"),
    ("bad_timezone.yaml", 2, "unknown time zone 'Mars/Olympus_Mons'"),
    ("plan_name_dots.yaml", 1, "'..' cannot name a plan: it names a folder"),
    ("plan_name_control.yaml", 1, "the plan name holds a control character (U+000A)"),
    ("no_name.yaml", 1, "the plan has no name"),
    ("bad_type.yaml", 4, "unknown job type 'python'"),
    ("bad_bool.yaml", 5, "idempotent must be true or false"),
    ("depends_on_number.yaml", 5, "depends_on must be a list of job ids or a mapping"),
    ("unsupported_tag.yaml", 4, "unsupported YAML tag"),
    ("bad_condition.yaml", 7, "call is not allowed in a condition"),
    ("condition_not_upstream.yaml", 5, "reads job 'side', which is not upstream of it"),
    ("condition_unknown_job.yaml", 4, "the condition reads unknown job 'lod'"),
    ("condition_too_deep.yaml", 7, "job 'b': if: 'not not not"),
    ("condition_unknown_field.yaml", 7,
     "job 'report': if: 'jobs.load.exitcode == 0': a job has no field 'exitcode' (did you mean 'exit_code'?"),
    # A number is no condition, though its text would parse as one that always holds: one a line or one key a line
    ("condition_number.yaml", 8, "job 'report': if must be text, not the number 5 (write e.g. jobs[\"load\"]"),
    ("condition_number_flow.yaml", 4, "job 'report': if must be text, not the number 5"),
    ("condition_number_flow.yaml", 5, "job 'post': until must be text, not the number 1.5"),
    ("condition_own_result.yaml", 7, "job 'report': if reads 'result', which only an until has"),
    ("condition_undeclared_variable.yaml", 6,
     "job 'report': the condition reads undeclared variable 'regoin' (did you mean 'region'? declared: region)"),
    ("until_undeclared_variable.yaml", 3,
     "job 'poll': the until reads undeclared variable 'most' (declare it under `variables:` at the top)"),
    ("until_reads_job.yaml", 7, "job 'poll': until reads job 'load': an until reads only the job's own"),
    ("max_iterations_without_until.yaml", 5, "job 'poll': max_iterations without until"),
    ("condition_reads_itself.yaml", 3, "job 'load': a job cannot read its own outcome in its if (jobs.load)"),
    ("sla_mapping.yaml", 5, "job 'load': sla must be a tier, not a mapping (use one of: critical, high"),
    ("sla_list.yaml", 5, "job 'load': sla must be a tier, not a list"),
    ("group_weight_negative.yaml", 4, "weight of group g2 must be more than zero, not -3"),
    ("group_weight_zero.yaml", 2, "weight of group g1 must be more than zero, not 0"),
    ("resource_capacity_text.yaml", 4, "resource 's' must be a whole number of at least 1, not the text 'two'"),
    ("bad_until.yaml", 5, "'result.ready ==' is not a valid expression"),
    ("many_problems.yaml", 10, "depends on unknown job 'opn'"),
    ("for_each_empty.yaml", 5, "for_each lists no items"),
    ("for_each_unknown_variable.yaml", 5, "for_each: vars.regions is not a non-empty list variable"),
    # An item is text: never code of another language, never a here-document's end, never a way out of a cwd
    ("for_each_python_code.yaml", 3, "job 'load': argument 3 of the command is python3's program (-c): {item} "
     "there would be run as code, not read as text (pass the item as an argument of its own"),
    ("for_each_awk_program.yaml", 3, "job 'load': argument 4 of the command is awk's program: {item} there would "
     "be run as code"),
    ("for_each_quoted_heredoc_newline.yaml", 5, "job 'load': for_each item 'two\\nEOF\\ntouch /tmp/PWNED' cannot "
     "start: its item holds a line break, which could end the quoted here-document <<'EOF' early"),
    ("for_each_cwd_traversal.yaml", 3, "job 'load': for_each item '../../etc' cannot start: its item holds '..': "
     "in cwd /srv/regions/{item} it would name a folder outside the one the plan names"),
    ("item_in_env_without_loop.yaml", 3, "job 'load': env 'REGION' holds {item}, but the job has no for_each"),
    ("vars_placeholder_in_command.yaml", 5, "job 'load': the command holds '{vars.region}', which is never "
     "replaced: plan variables do not reach commands, cwd or env (give the job env: {REGION: ...}"),
    ("vars_placeholder_in_command.yaml", 7, "job 'post': the command holds '{region}', which is never replaced"),
    ("undeclared_group.yaml", 5, "group 'cards' is not declared under groups"),
    ("bad_cron.yaml", 3, "'99 * * * *' is not a cron expression"),
    ("cron_six_fields.yaml", 3, "'0 0 * * * *' has 6 fields, not the five of a cron expression"),
    ("cron_never_on_business_day.yaml", 3,
     "cron '0 0 * * sun' never fires on a business day (mon, tue, wed, thu, fri)"),
    ("cron_no_date.yaml", 3, "cron '0 0 31 2 *' never fires on a business day"),
    ("bad_holiday.yaml", 4, "holiday 'christmas' is not a date"),
    ("bad_holidays.yaml", 4, "holidays 'christmas', '2026-02-30' are not dates"),  # (each named at once)
    ("bad_run_as.yaml", 5, "job 'load': run_as: unknown user 'no_such_user_here'"),
    ("bad_roles.yaml", 3, "unknown role 'boss' under roles"),
    ("bad_limits.yaml", 2, "limits must be claim or enforce, not 'strict'"),
    ("bad_confirm.yaml", 6, "job 'post': confirm must be true or false, not the text 'yes'"),
    ("bad_four_eyes.yaml", 2, "four_eyes: unknown verb 'delete'"),
    ("bad_job_four_eyes.yaml", 5, "job 'load': four_eyes must be a list of verbs, not the text 'rerun'"),
    ("command_nul.yaml", 4, "job 'load': the command holds a NUL byte (no process can be given one"),
    ("env_nul.yaml", 3, "job 'load': env 'REGION' holds a NUL byte"),
    ("cwd_nul.yaml", 3, "job 'load': cwd holds a NUL byte"),
    ("on_failure_nul.yaml", 2, "on_failure holds a NUL byte"),
    ("exit_codes_empty.yaml", 5, "job 'load': exit_codes must not be empty: it would retry no exit code"),
    ("max_output_not_a_size.yaml", 5, "job 'extract': max_output: '12 parsecs' is not a size"),
    ("max_output_negative.yaml", 3, "job 'extract': max_output must be more than zero, not -1"),
    ("max_output_zero.yaml", 5, "job 'extract': max_output must be more than zero, not 0"),
    ("max_output_list.yaml", 5, "job 'extract': max_output must be a size, not a list"),
    ("max_output_defaults.yaml", 3, "defaults: max_output: '1 GB please' is not a size"),
    # A resource or group declared wrong spoils neither the others nor the reports of the jobs
    ("undeclared_beside_wrong.yaml", 2, "resource 'tape' must be a whole number of at least 1, not the number 0"),
    ("undeclared_beside_wrong.yaml", 2, "resource 'printer' must be a whole number of at least 1, not the text 'two'"),
    ("undeclared_beside_wrong.yaml", 5, "job 'load': group 'nightly' is not declared under groups (declared: "
     "night, day)"),
    ("undeclared_beside_wrong.yaml", 7, "job 'load': resource 'dbx' is not declared (declare it under the plan's "
     "top-level resources; declared: db, tape, printer)"),
    ("undeclared_beside_wrong.yaml", 7, "job 'load': asks for 5 of resource 'db', which has only 2"),
    ("undeclared_beside_wrong.yaml", 7, "job 'load': resource 'tapes' is not declared"),
    ("duplicate_env_key.yaml", 8, "job 'load': duplicate key 'REGION' (first at line 7)"),
    ("noop_with_command.yaml", 4, "job 'join': a noop job runs no command, but this one has one (remove the command, "
     "or give the job type: shell)"),
    ("noop_defaults_with_command.yaml", 5, "job 'load': a noop job runs no command, but this one has one (remove the "
     "command, or give the job type: shell, as the defaults' type: noop holds for every job without one)"),
    # Times that parse but make no sense to an operator, and misspelt durations with their likely meaning
    ("deadline_at_start.yaml", 5, "job 'load': deadline '+0s' is the very start of the run: no job can finish by then"),
    ("timeout_under_a_millisecond.yaml", 5,
     "job 'load': timeout: '0.0001ms' is shorter than 1ms, the shortest a duration may be other than 0"),
    ("not_before_after_deadline.yaml", 4, "job 'post': not_before '22:00' is after the deadline '21:00': the job can "
     "never meet it (for a deadline on the next day write deadline: '21:00+1d')"),
    ("not_before_after_deadline_defaults.yaml", 4,
     "defaults: not_before '+2h' is after the deadline '+1h': the job can never meet it"),
    ("max_delay_below_delay.yaml", 5, "job 'load': retries max_delay 10s is shorter than the delay 1m"),
    ("expected_past_timeout.yaml", 6, "job 'post': expected 1h30m is longer than its timeout 1h: the job would be "
     "killed before it is expected to end"),
    ("duration_unit_word.yaml", 5, "job 'load': timeout: '10 mins' is not a duration (did you mean '10m'?"),
    ("duration_last_unit_missing.yaml", 5, "job 'load': expected: '1h30' is not a duration (did you mean '1h30m'?"),
    ("duration_capital_unit.yaml", 5, "job 'load': retries delay: '5S' is not a duration (did you mean '5s'?"),
    ("deadline_without_plus.yaml", 5, "job 'load': deadline: '2h' is not a time; use HH:MM"),
    ("deadline_without_plus.yaml", 5, "(did you mean '+2h'?)"),
    ("deadline_without_colon.yaml", 5, "job 'load': deadline: '2330' is not a time; use HH:MM"),
    ("deadline_without_colon.yaml", 5, "(did you mean '23:30'?)"),
    ("weekday_misspelt.yaml", 4, "'mondayish' is not a weekday"),
    # An item that is no word is said as what it is, a YAML boolean as it is written: never Python's repr
    ("weekday_not_a_scalar.yaml", 4, "a list is not a weekday (mon, tue"),
    ("weekday_boolean.yaml", 4, "'no' is not a weekday"),
    ("holidays_not_scalars.yaml", 4, "holidays nothing (null), a list, 'yes' are not dates (write YYYY-MM-DD)"),
    ("not_before_too_far.yaml", 5, "job 'load': not_before: '+100000d' is longer than the 100 years"),
    # Digits of other scripts, which Python reads as numbers, are no part of a plan's numbers
    ("memory_other_digits.yaml", 5, "job 'load': memory must be MiB or a size like 512M or 4G, not the text "
     f"'{other_digits('512')}M'"),
    ("exit_codes_other_digits.yaml", 7, f"job 'load': '{other_digits('100-110')}' is not an exit code or range"),
]

# Problems whose message names a job: the job the report must carry.
JOB_OF = {
    "duplicate_job.yaml": "load",
    "unknown_dependency.yaml": "post",
    "cycle.yaml": "a",
    "unknown_sla.yaml": "load",
    "resource_over_capacity.yaml": "load",
    "dep_kind_mapping.yaml": "alert",
    "dep_kind_list.yaml": "alert",
}


def problems_of(path: Path) -> list[WloadError]:
    with pytest.raises(PlanError) as caught:
        load_plan(path)
    return caught.value.problems


@pytest.mark.parametrize(
    ("name", "line", "fragment"), BAD_PLANS, ids=[b[0] for b in BAD_PLANS]
)
def test_bad_plan_is_reported_with_file_and_line(
    name: str, line: int | None, fragment: str
) -> None:
    path = DATA / "bad" / name
    problems = problems_of(path)
    matching = [p for p in problems if fragment in p.one_line()]
    assert matching, f"no problem says {fragment!r}: {[p.one_line() for p in problems]}"
    problem = matching[0]
    assert problem.file == str(path)
    assert problem.line == line
    if name in JOB_OF:
        assert problem.job == JOB_OF[name]
    assert "Traceback" not in problem.one_line()


def test_every_bad_file_is_in_the_table() -> None:
    on_disk = {p.name for p in (DATA / "bad").glob("*.yaml")}
    assert on_disk == {name for name, _, _ in BAD_PLANS}


def test_one_line_names_file_line_and_job() -> None:
    path = DATA / "bad" / "unknown_dependency.yaml"
    (problem,) = problems_of(path)
    assert problem.one_line() == (
        f"{path}:6: job 'post': depends on unknown job 'lod' (did you mean 'load'?)"
    )


def test_all_problems_are_reported_at_once() -> None:
    problems = problems_of(DATA / "bad" / "many_problems.yaml")
    said = " | ".join(p.message for p in problems)
    for fragment in (
        "unknown SLA tier 'urgent'",
        "unknown job 'opn'",
        "'5 minutes' is not a duration",
        "unknown key 'comand'",
        "asks for 3 of resource 'db_conn'",
        "priority must be",
    ):
        assert fragment in said
    assert [p.line for p in problems] == sorted(p.line or 0 for p in problems)


def test_cycle_is_a_cycle_error_listing_the_path_in_order() -> None:
    (problem,) = problems_of(DATA / "bad" / "cycle.yaml")
    assert isinstance(problem, CycleError)
    assert problem.message == "dependency cycle: a -> c -> b -> a"


def test_hints_suggest_the_closest_key() -> None:
    (problem,) = problems_of(DATA / "bad" / "unknown_job_key.yaml")
    assert problem.hint is not None
    assert problem.hint.startswith("did you mean 'command'?")
    assert "depends_on" in problem.hint


@pytest.mark.parametrize(
    ("where", "key", "meant"),
    [
        ("job", "COMMAND", "command"),
        ("job", "Depends-On", "depends_on"),
        ("job", "cmd", "command"),
        ("job", "requires", "depends_on"),
        ("job", "needs", "depends_on"),
        ("top", "tasks", "jobs"),
        ("defaults", "cmd", None),
        ("schedule", "crn", "cron"),
    ],
)
def test_a_key_in_other_case_or_as_other_schedulers_name_it_is_told_its_name_here(
    where: str, key: str, meant: str | None
) -> None:
    body = {
        "job": f"jobs:\n  a: {{command: x, {key}: 1}}\n",
        "top": f"{key}: 1\njobs:\n  a: {{command: x}}\n",
        "defaults": f"defaults: {{{key}: 1}}\njobs:\n  a: {{command: x}}\n",
        "schedule": f"schedule: {{cron: '0 1 * * 1', {key}: 1}}\njobs:\n  a: {{command: x}}\n",
    }[where]
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: p\n" + body)
    (hint,) = [p.hint for p in caught.value.problems if key in p.message]
    assert hint is not None
    if meant is None:
        assert "did you mean" not in hint
    else:
        assert hint.startswith(f"did you mean '{meant}'?")


@pytest.mark.parametrize(
    "deps", ["\n      - a\n      -\n", " [a, '']\n", "\n      a: done\n      '': done\n"]
)
def test_an_empty_item_in_depends_on_is_said_to_be_empty_not_an_unknown_job(deps: str) -> None:
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: p\njobs:\n  a: {command: x}\n  b:\n    command: y\n    depends_on:" + deps, "p.yaml")
    (line,) = caught.value.lines()
    assert line.startswith("p.yaml:") and "job 'b': depends_on lists an empty item (remove it" in line


@pytest.mark.parametrize("where", ["jobs:\n  a: {command: x, retries: {cout: 2}}\n",
                                   "defaults: {retries: {cuont: 2}}\njobs:\n  a: {command: x}\n"])
def test_a_misspelt_retries_count_is_one_line_not_also_a_missing_count(where: str) -> None:
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: p\n" + where, "p.yaml")
    (line,) = caught.value.lines()
    assert "in retries (did you mean 'count'?" in line


def test_a_wrong_command_is_not_also_reported_missing() -> None:
    messages = [p.message for p in problems_of(DATA / "bad" / "command_number.yaml")]
    assert not any("has no command" in m for m in messages)


def test_missing_file_is_a_plan_error(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="plan file not found"):
        load_plan(tmp_path / "absent.yaml")


def test_directory_is_a_plan_error(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="is a directory"):
        load_plan(tmp_path)


def test_bytes_that_are_not_utf8_are_a_plan_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\njobs:\n  a: {command: 'true'}\n")
    with pytest.raises(PlanError) as caught:
        load_plan(path)
    problem = caught.value.problems[0]
    assert "not UTF-8" in problem.message and problem.line == 1


def test_deep_nesting_is_a_plan_error() -> None:
    text = (
        "name: deep\njobs:\n  a:\n    command: 'true'\n    env: "
        + "[" * 5000
        + "]" * 5000
        + "\n"
    )
    with pytest.raises(PlanError):
        load_plan_text(text)


def test_problems_beyond_the_cap_are_counted(tmp_path: Path) -> None:
    jobs = "".join(
        f"  j{i}: {{command: 'true', sla: bogus}}\n" for i in range(MAX_PROBLEMS + 50)
    )
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: many\njobs:\n" + jobs)
    problems = caught.value.problems
    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[-1].message == "50 more problems not shown"
    # The summary counts every problem past those it shows (it counted the 50 as one, and promised --json had all)
    lines = caught.value.lines(limit=20)
    assert lines[0].endswith(f"the same in {MAX_PROBLEMS - 1} more place(s): j1 line 4, j2 line 5, j3 line 6, ...")
    assert lines[-1] == "<string>: and 50 more problem(s) (`wloadctl validate --json` lists the first 1,000)"
    two = "".join(f"  j{i}: {{command: 5, depends_on: [zz{i}]}}\n" for i in range(3000))
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: many\njobs:\n" + two)
    lines = caught.value.lines(limit=20)
    shown = 500 + 18  # the command's problem in the first 500 jobs kept (one line), then 18 of the others
    assert lines[-1].startswith(f"<string>: and {6000 - shown:,} more problem(s)")


def test_only_the_first_unknown_dependencies_get_a_suggestion_each_name_once() -> None:
    # Given 40 jobs, each with a misspelt upstream (a suggestion compares with every id: for thousands of unknown
    # names in a big plan that took minutes), and one misspelling named twice
    jobs = "".join(f"  load_{i:02d}: {{command: 'true'}}\n"
                   f"  post_{i:02d}: {{command: 'true', depends_on: [lod_{i:02d}]}}\n" for i in range(40))
    jobs += "  again: {command: 'true', depends_on: [lod_00]}\n"
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: typos\njobs:\n" + jobs)
    hints = [p.hint for p in caught.value.problems if "unknown job" in p.message]
    # Then the first 20 names get theirs, the rest are said to be no job of the plan, and a name has one answer
    assert hints[:20] == [f"did you mean 'load_{i:02d}'?" for i in range(20)]
    assert hints[20:40] == [f"no job 'lod_{i:02d}' in this plan" for i in range(20, 40)]
    assert hints[40] == "did you mean 'load_00'?"


def test_conditions_must_read_upstream_jobs_near_or_far_however_many_read_the_same_one() -> None:
    # Given a chain a -> b -> c -> d -> e, a side job, and conditions reading a direct upstream (b), a far one read
    # by one job (c reads a), one read by several (d and e read a: its downstream is worked out once for them),
    # and jobs that are not upstream (e reads side; side reads b)
    plan = """name: reads
jobs:
  a: {command: 'true'}
  b: {command: 'true', depends_on: [a]}
  c: {command: 'true', depends_on: [b], if: 'jobs.b.exit_code == 0 and jobs.a.exit_code == 0'}
  d: {command: 'true', depends_on: [c], if: jobs.a.exit_code == 0}
  e: {command: 'true', depends_on: [d], if: 'jobs.a.exit_code == 0 and jobs.side.exit_code == 0'}
  side: {command: 'true', if: jobs.b.exit_code == 0}
"""
    with pytest.raises(PlanError) as caught:
        load_plan_text(plan)
    # Then only the two that read a job not upstream of them are refused, each naming the job it reads
    assert [(p.job, p.message) for p in caught.value.problems] == [
        ("e", "the condition reads job 'side', which is not upstream of it"),
        ("side", "the condition reads job 'b', which is not upstream of it")]


def test_a_huge_unknown_key_is_named_short_and_an_unclosed_mapping_at_the_end_on_its_line() -> None:
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: p\njobs:\n  a: {command: x, " + "x" * 1000 + ": 1}\n")
    (line,) = caught.value.lines()
    assert "unknown key '" + "x" * 60 + "...(1000 characters)'" in line and len(line) < 400
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: p\njobs:\n  a: {command: x, description: 'abc'\n\n")
    assert caught.value.problems[0].line == 3  # (the file has 4 lines; the parser's mark said 5)


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "good").glob("*.yaml")))
def test_good_plan_loads(name: str) -> None:
    plan = load_plan(DATA / "good" / name)
    assert plan.jobs
    Dag(plan).topo_order()


def test_path_and_digest_come_from_the_file() -> None:
    path = DATA / "good" / "minimal.yaml"
    plan = load_plan(str(path))
    assert plan.path == str(path)
    assert plan.digest == hashlib.sha256(path.read_bytes()).hexdigest()
    again = load_plan_text(path.read_text(), "stored.yaml")
    assert again.digest == plan.digest
    assert again.path == "stored.yaml"


def test_every_key_is_read() -> None:
    plan = load_plan(DATA / "good" / "all_features.yaml")
    assert plan.name == "all-features"
    assert plan.timezone == "Europe/London"
    assert plan.on_failure == "echo failed >&2"
    assert plan.variables == {"region": "emea", "branches": ["london", "paris"]}
    assert plan.resources == {"db_conn": 4, "mainframe_link": 1}
    open_day, load, recon = plan.jobs["open_day"], plan.jobs["load"], plan.jobs["recon"]
    assert open_day.command == ("echo", "open", "2024")
    assert (open_day.sla, open_day.priority, open_day.idempotent) == (
        SlaTier.CRITICAL,
        100,
        False,
    )
    assert (open_day.deadline, open_day.not_before) == ("22:00", "18:30")
    assert open_day.retry.count == 0
    assert open_day.line == 33
    assert load.timeout == 5400.0
    assert load.resources == (("db_conn", 2),)
    assert dict(load.env) == {
        "BUSINESS_DATE": "2024-03-29",
        "REGION": "apac",
        "BATCH": "7",
    }
    assert (load.deadline, load.preemptible, load.condition) == (
        "+2h",
        True,
        "vars.region == 'emea'",
    )
    assert load.description == "Load accounts"
    assert load.cwd == "/tmp"
    policy = recon.retry
    assert (policy.count, policy.delay, policy.backoff, policy.max_delay) == (
        5,
        30.0,
        2.0,
        600.0,
    )
    assert policy.exit_codes == ((1, 1), (75, 75), (100, 110))
    assert policy.on_timeout is False
    assert plan.jobs["alert"].dep_kinds == (DepKind.FAILURE,)
    cleanup = plan.jobs["cleanup"]
    assert (cleanup.type, cleanup.command) == ("noop", None)
    assert cleanup.dep_kinds == (DepKind.DONE, DepKind.SUCCESS)


def test_jobs_share_the_defaults_policy_and_repeated_values() -> None:
    plan = load_plan(DATA / "good" / "all_features.yaml")
    load, alert = plan.jobs["load"], plan.jobs["alert"]
    assert load.retry is alert.retry
    assert plan.jobs["cleanup"].env is alert.env


def test_shared_command_strings_and_upstream_ids_are_one_object() -> None:
    text = "name: s\njobs:\n  j0: {command: 'true'}\n" + "".join(
        f"  j{i}: {{command: 'true', depends_on: [j0]}}\n" for i in range(1, 5)
    )
    plan = load_plan_text(text)
    commands = {id(job.command) for job in plan.jobs.values()}
    assert len(commands) == 1
    assert plan.jobs["j3"].depends_on[0] is next(iter(plan.jobs))


def test_defaults_after_jobs_still_apply() -> None:
    plan = load_plan(DATA / "good" / "defaults_after_jobs.yaml")
    assert plan.jobs["load"].sla is SlaTier.LOW
    assert plan.jobs["post"].sla is SlaTier.HIGH
    assert plan.jobs["post"].timeout == 300.0
    assert plan.resources == {"db_conn": 2}


def test_anchors_and_merge_keys() -> None:
    plan = load_plan(DATA / "good" / "anchors_and_merges.yaml")
    paris = plan.jobs["load_paris"]
    assert paris.command == "echo load $BRANCH"
    assert (paris.sla, paris.timeout, dict(paris.env)) == (
        SlaTier.HIGH,
        600.0,
        {"BRANCH": "paris"},
    )
    assert plan.jobs["load_frankfurt"].sla is SlaTier.STANDARD


def test_a_merge_key_in_jobs_merges_jobs_and_the_jobs_own_ids_win() -> None:
    plan = load_plan_text(
        "name: p\nvariables:\n  shared: &common\n    a: {command: x}\n    b: {command: old}\n"
        "jobs:\n  b: {command: y, depends_on: [a]}\n  <<: *common\n  c: {command: z, depends_on: [b]}\n"
    )
    assert {jid: (j.command, j.depends_on) for jid, j in plan.jobs.items()} == {
        "a": ("x", ()),
        "b": ("y", ("a",)),
        "c": ("z", ("b",)),
    }


@pytest.mark.parametrize("style", ["flow", "block"])
def test_an_alias_of_an_anchored_job_id_is_that_id(style: str) -> None:
    jobs = (
        "  &up a: {command: x}\n  b: {command: y, depends_on: [*up]}\n"
        if style == "flow"
        else "  &up a:\n    command: x\n  b:\n    command: y\n    depends_on:\n      - *up\n"
    )
    plan = load_plan_text("name: p\njobs:\n" + jobs)
    assert plan.jobs["b"].depends_on == ("a",)


def test_forward_references_resolve() -> None:
    plan = load_plan(DATA / "good" / "forward_references.yaml")
    assert Dag(plan).topo_order() == ["load", "post", "close"]


def test_noop_jobs_need_no_command() -> None:
    plan = load_plan(DATA / "good" / "noop_defaults.yaml")
    assert [j.type for j in plan.jobs.values()] == ["noop", "noop", "noop", "shell"]
    assert plan.jobs["c"].depends_on == ()


def test_a_job_without_retries_has_none() -> None:
    plan = load_plan(DATA / "good" / "minimal.yaml")
    assert plan.jobs["hello"].retry is NO_RETRY


def test_bare_retry_count_keeps_the_defaults_delays() -> None:
    plan = load_plan_text(
        "name: r\ndefaults: {retries: {count: 1, delay: 5s}}\n"
        "jobs:\n  a: {command: x, retries: 4}\n"
    )
    assert (plan.jobs["a"].retry.count, plan.jobs["a"].retry.delay) == (4, 5.0)


# -- durations and times of day ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        ("90s", 90.0),
        ("20m", 1200.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("2d", 172800.0),
        ("500ms", 0.5),
        ("1d2h3m4s", 93784.0),
        (" 45s ", 45.0),
        ("0", 0.0),
        ("1.5h", 5400.0),
    ],
)
def test_parse_duration(text: str | int | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "soon", "20x", "-5s", "30m1h", "1h1h", "h", "1 h 2", True, -1]
)
def test_parse_duration_refuses(text: str | int | bool) -> None:
    with pytest.raises(ValueError, match="is not a duration; use a number of seconds"):
        parse_duration(text)


@pytest.mark.parametrize(
    "text", ["9" * 400, 10**400, float("inf"), "1e400", "99999999999d", "36501d", "+" + "9" * 400 + "s"],
    ids=["digits-400", "int-400-digits", "inf", "1e400", "11-digit-days", "36501d", "deadline-400-digits"],
)
def test_a_duration_past_a_hundred_years_is_refused(text: str | int | float) -> None:
    with pytest.raises(ValueError, match=r"longer than the 100 years|is not a duration"):
        if isinstance(text, str) and text.startswith("+"):
            parse_deadline(text)
        else:
            parse_duration(text)
    assert parse_duration("36500d") == 36500 * 86400.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5400, "1h30m"),
        (45, "45s"),
        (1.23, "1.2s"),
        (0.25, "250ms"),
        (90061, "1d1h1m1s"),
        (59.96, "1m"),
        (60, "1m"),
        (-90, "-1m30s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_times_of_day_and_deadlines() -> None:
    assert parse_time_of_day("06:30") == 23400
    assert parse_time_of_day("23:59:59") == 86399
    assert parse_day_time("01:30+1d") == (1, 5400)
    assert parse_deadline("+2h") == (True, 7200.0)
    assert parse_deadline("22:00") == (False, 79200.0)
    assert parse_deadline("02:00+1d") == (False, 93600.0)
    for bad in ("24:00", "6", "12:60", "07:30:61", "noon"):
        with pytest.raises(ValueError, match="not a time of day"):
            parse_time_of_day(bad)
    for bad in ("01:30+2h", "01:30+", "tomorrow", "+soon"):
        with pytest.raises(ValueError, match="not a time"):
            parse_deadline(bad)


def test_a_duration_under_the_finest_is_refused_only_when_asked() -> None:
    # A plan being read is held to FINEST; a plan read before (a resumed run's deadlines) is taken as it was.
    assert parse_duration("0.5ms") == 0.0005
    with pytest.raises(DurationRangeError, match=r"'0\.5ms' is shorter than 1ms"):
        parse_duration("0.5ms", finest=FINEST)
    with pytest.raises(DurationRangeError, match="shorter than 1ms"):
        parse_deadline("+0.0001ms", finest=FINEST)
    assert parse_duration("1ms", finest=FINEST) == 0.001
    assert parse_duration("0", finest=FINEST) == 0.0


@pytest.mark.parametrize(("text", "meant"), [
    ("10 mins", "10m"), ("2 hours", "2h"), ("30sec", "30s"), ("1 day", "1d"), ("500 msec", "500ms"),
    ("5S", "5s"), ("2H", "2h"), ("1h30", "1h30m"), ("1h 30", "1h30m"), ("5m30", "5m30s"), ("2d12", "2d12h"),
    ("1,5h", "1.5h"), ("10 mins 30 secs", "10m30s"),
    # No guess: a capital M may be a month; a sign, an exponent or a word are not slips of a unit
    ("5M", None), ("-5s", None), ("1e30", None), ("soon", None), ("30 1h", None), ("30m1h", None),
])
def test_a_misspelt_duration_is_given_its_likely_meaning(text: str, meant: str | None) -> None:
    assert duration_guess(text) == meant
    if meant is not None:
        parse_duration(meant, finest=FINEST)


@pytest.mark.parametrize(("not_before", "deadline", "said"), [
    ("22:00", "21:00", "'22:00' is after the deadline '21:00'"),
    ("22:00", "22:00", "'22:00' is the same time as the deadline '22:00'"),
    ("23:00", "01:00", "write deadline: '01:00+1d'"),
    ("05:00+1d", "04:00+1d", "'05:00+1d' is after the deadline '04:00+1d'"),
    ("+2h", "+90m", "'+2h' is after the deadline '+90m'"),
    ("21:00", "22:00", None),
    ("23:00", "01:00+1d", None),
    ("+1h", "+2h", None),
    # A time of day against a time after the start depends on when the run starts: not judged
    ("+2h", "01:00", None),
    ("23:00", "+1h", None),
])
def test_a_not_before_at_or_after_the_deadline_is_found(not_before: str, deadline: str, said: str | None) -> None:
    shut = closed_window(not_before, deadline)
    if said is None:
        assert shut is None
    else:
        assert shut is not None and said in " ".join(shut)


DURATION_KEYS = {
    "timeout": "    timeout: {}\n",
    "expected": "    expected: {}\n",
    "retries delay": "    retries: {{count: 2, delay: {}}}\n",
    "retries max_delay": "    retries: {{count: 2, max_delay: {}}}\n",
}
WHEN_KEYS = {"deadline": "    deadline: {}\n", "not_before": "    not_before: {}\n"}


@pytest.mark.parametrize("value", ["0.0001ms", "0.0009", ".nan", ".inf", "-.inf", "-5s", "true", "[1, 2]",
                                   "{a: 1}", "999999999d", "1000000000000000000000000000000", "1e30",
                                   "10 mins", "5S", "1h30", other_digits("'1s'"), other_digits("'500ms'"),
                                   f"'1h{other_digits('30')}m'", other_digits("'120'"), other_digits("'10s'", 0xFF10)])
@pytest.mark.parametrize("key", DURATION_KEYS)
def test_a_hostile_duration_is_refused_in_one_line_naming_job_and_key(key: str, value: str) -> None:
    text = "name: hostile\njobs:\n  load:\n    command: 'true'\n" + DURATION_KEYS[key].format(value)
    with pytest.raises(PlanError) as caught:
        load_plan_text(text, "hostile.yaml")
    (line,) = caught.value.lines()
    assert line.startswith(f"hostile.yaml:5: job 'load': {key}"), line
    assert "Traceback" not in line and "\n" not in line


@pytest.mark.parametrize("value", ["'+0.0001ms'", "'+999999999d'", "'06:30+1.5d'", "'25:00'", ".nan", ".inf",
                                   "true", "[06:30]", "'+10 mins'", "2h", other_digits("'+2s'"),
                                   f"'{other_digits('12:00')}+1d'", f"'12:00+{other_digits('1')}d'",
                                   other_digits("'06:30'"), other_digits("'2330'")])
@pytest.mark.parametrize("key", WHEN_KEYS)
def test_a_hostile_time_is_refused_in_one_line_naming_job_and_key(key: str, value: str) -> None:
    text = "name: hostile\njobs:\n  load:\n    command: 'true'\n" + WHEN_KEYS[key].format(value)
    with pytest.raises(PlanError) as caught:
        load_plan_text(text, "hostile.yaml")
    (line,) = caught.value.lines()
    assert line.startswith(f"hostile.yaml:5: job 'load': {key}"), line


@pytest.mark.parametrize(("key", "value", "seconds"), [
    ("timeout", "1ms", 0.001), ("expected", "0", 0.0), ("retries delay", "0", 0.0),
    ("retries max_delay", "0", 0.0), ("timeout", "'2 h'", 7200.0),
])
def test_durations_at_the_bounds_are_kept(key: str, value: str, seconds: float) -> None:
    text = "name: edge\njobs:\n  load:\n    command: 'true'\n" + DURATION_KEYS[key].format(value)
    spec = load_plan_text(text).jobs["load"]
    got = {"timeout": spec.timeout, "expected": spec.expected, "retries delay": spec.retry.delay,
           "retries max_delay": spec.retry.max_delay}[key]
    assert got == seconds


def test_a_not_before_at_the_start_means_no_wait() -> None:
    assert load_plan_text("name: n\njobs:\n  a: {command: 'true', not_before: '+0s'}\n").jobs["a"].not_before == "+0s"


def test_a_retry_delay_past_the_default_cap_is_kept_and_a_cap_alone_caps_the_default_delay() -> None:
    plan = load_plan_text("name: r\njobs:\n  slow: {command: 'true', retries: {count: 2, delay: 2h}}\n"
                          "  quick: {command: 'true', retries: {count: 2, max_delay: 5s}}\n")
    slow, quick = plan.jobs["slow"].retry, plan.jobs["quick"].retry
    assert (slow.delay, slow.max_delay) == (7200.0, 7200.0)  # not cut to the default cap of an hour
    assert (quick.delay, quick.max_delay) == (10.0, 5.0)  # every retry waits 5 s, as its cap says


# -- samples -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["eod_bank.yaml", "tutorial.yaml", "night_shift.yaml"])
def test_sample_validates(name: str) -> None:
    plan = load_plan(SAMPLES / name)
    assert Dag(plan).find_cycle() is None


def test_night_shift_takes_real_seconds_with_a_retry_an_approval_and_a_deadline() -> None:
    plan = load_plan(SAMPLES / "night_shift.yaml")
    assert 30 <= len(plan.jobs) <= 60
    naps = [int(m) for job in plan.jobs.values()
            for m in re.findall(r"sleep (\d+)", str(job.command))]
    assert len(naps) == len(plan.jobs) and min(naps) >= 2 and max(naps) <= 20
    flaky = plan.jobs["load_card_auths"]
    assert flaky.retry.count >= 1 and "WLOADCTL_ATTEMPT" in str(flaky.command)
    assert "approve_wires" in Dag(plan).topo_order()
    assert plan.jobs["send_wires"].depends_on == ("approve_wires",)
    # Goes AT_RISK once inside the five-minute risk window, long before the run ends.
    assert plan.jobs["close_night"].deadline == "+6m"


def test_eod_bank_has_the_promised_shape() -> None:
    plan = load_plan(SAMPLES / "eod_bank.yaml")
    assert 100 <= len(plan.jobs) <= 300
    kinds = {kind for job in plan.jobs.values() for kind in (job.dep_kinds or ())}
    assert {DepKind.FAILURE, DepKind.DONE} <= kinds
    assert {job.sla for job in plan.jobs.values()} == set(SlaTier)
    assert set(plan.resources) == {"db_conn", "mainframe_link"}
    assert any(job.retry.count > 1 for job in plan.jobs.values())


def run_in_order(plan: Plan, scratch: Path) -> list[str]:
    """Run each command once in dependency order, as a run would; return what ran."""
    ran = []
    for job_id in Dag(plan).topo_order():
        job = plan.jobs[job_id]
        if job.type == "noop" or DepKind.FAILURE in (job.dep_kinds or ()):
            continue  # failure handlers end SKIPPED when their upstream succeeds
        env = {**os.environ, "WLOADCTL_SCRATCH": str(scratch), **dict(job.env)}
        argv = (
            ["/bin/sh", "-c", job.command]
            if isinstance(job.command, str)
            else list(job.command or ())
        )
        done = subprocess.run(
            argv, env=env, cwd=job.cwd, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{job_id} exited {done.returncode}: {done.stderr}"
        ran.append(job_id)
    return ran


@pytest.mark.parametrize("name", ["eod_bank.yaml", "tutorial.yaml"])
def test_every_sample_command_succeeds(name: str, tmp_path: Path) -> None:
    plan = load_plan(SAMPLES / name)
    ran = run_in_order(plan, tmp_path)
    assert len(ran) >= len(plan.jobs) - 3
    if name == "eod_bank.yaml":
        assert (tmp_path / "closed").read_text() == "closed 2024-03-29\n"
        assert "ok" in (tmp_path / "reports" / "recon_summary.txt").read_text()


def test_unquoted_true_stays_a_boolean_after_a_quoted_one() -> None:
    text = "name: b\njobs:\n  a: {command: 'true'}\n  b: {command: true}\n"
    with pytest.raises(PlanError) as caught:
        load_plan_text(text)
    (problem,) = caught.value.problems
    assert (problem.job, problem.line) == ("b", 4)
    assert problem.hint == "quote it: command: 'true'"


def test_fast_spec_builder_gives_the_same_objects() -> None:
    plan = load_plan(DATA / "good" / "all_features.yaml")
    make = spec_maker(JobSpec)
    assert make is not JobSpec
    for job in plan.jobs.values():
        values = [getattr(job, name) for name in FIELDS]
        built = make(*values)
        assert type(built) is JobSpec
        assert built == JobSpec(*values) == job
        assert hash(built) == hash(job)


def test_fast_spec_builder_with_fixed_fields_takes_only_the_others() -> None:
    plan = load_plan(DATA / "good" / "all_features.yaml")
    for job in plan.jobs.values():
        fixed = {name: getattr(job, name) for name in FIELDS if name not in USUAL_FIELDS}
        make = spec_maker(JobSpec, fixed)
        built = make(*(getattr(job, name) for name in USUAL_FIELDS))
        assert type(built) is JobSpec
        assert built == job
        assert hash(built) == hash(job)
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.id = "other"  # type: ignore[misc]


def test_fast_spec_builder_steps_aside_for_post_init() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        amount: int

        def __post_init__(self) -> None:
            if self.amount < 0:
                raise ValueError("negative")

    assert spec_maker(Checked) is Checked
    with pytest.raises(ValueError, match="negative"):
        spec_maker(Checked, {"amount": -1})()
    assert spec_maker(Checked, {"amount": 2})() == Checked(2)


def test_nested_aliases_in_variables_are_refused() -> None:
    # Shared while read, but every copy is written out when the run journals the plan's variables.
    levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 30):
        levels.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]")
    text = "name: laughs\nvariables:\n" + "".join(f"  {line}\n" for line in levels)
    with pytest.raises(PlanError) as e:
        load_plan_text(text + "jobs:\n  a: {command: 'true'}\n")
    assert "aliases stand for more than" in e.value.lines()[0]


def test_a_very_long_value_is_clipped_in_its_message() -> None:
    with pytest.raises(PlanError) as e:
        load_plan_text("name: p\njobs: " + "x" * 5000 + "\n")
    line = e.value.lines()[0]
    assert "(5000 characters)" in line and len(line) < 200


def test_many_problems_are_summed_up_and_json_still_lists_each(tmp_path: Path) -> None:
    # Given a plan with one mistake in 300 jobs, and 30 different ones
    jobs = {f"j{i}": {"command": "true", "after": ["x"]} for i in range(300)}
    jobs |= {f"p{i}": {"command": "true", "priority": f"high{i}"} for i in range(30)}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "many", "jobs": jobs}, sort_keys=False))
    with pytest.raises(PlanError) as got:
        load_plan(plan)
    e = got.value
    assert len(e.lines()) == 330  # every problem, each on its line
    # When it is printed with a limit
    short = e.lines(20)
    # Then the copied mistake is one line naming the first job and the count of the others
    assert len(short) == 20
    assert short[0].startswith(f"{plan}:5: job 'j0': unknown key 'after'"), short[0]
    assert "the same in 299 more place(s): j1 line 9, j2 line 13, j3 line 17, ..." in short[0], short[0]
    # And the different ones each get a line until the limit, the rest counted
    assert all("priority" in line for line in short[1:19])
    assert short[19] == f"{plan}: and 12 more problem(s) (`wloadctl validate --json` lists every one)"
    # And a few problems are still listed one by one
    assert PlanError("p", problems=e.problems[:3]).lines(20) == [p.one_line() for p in e.problems[:3]]


# -- what a process can be started with ------------------------------------------


def test_a_job_whose_command_or_env_a_process_cannot_be_given_is_refused() -> None:
    # Given: a command text past one exec argument, an env value past it, and argv words past exec's total
    words = ", ".join([f"'{'q' * 100_000}'"] * 20)
    text = (
        "name: big\njobs:\n"
        f"  a: {{command: 'echo {'x' * 200_000}'}}\n"
        f"  b: {{command: 'true', env: {{A: '{'z' * 140_000}'}}}}\n"
        f"  c: {{command: [echo, {words}]}}\n"
        f"  d: {{command: [echo, '{'y' * 130_000}', '{'y' * 130_000}']}}\n"
    )
    # When: the plan is read
    with pytest.raises(PlanError) as caught:
        load_plan_text(text, "big.yaml")
    # Then: each job past a limit is named, one line each; d, under them, is not
    lines = {p.job: p.one_line() for p in caught.value.problems}
    assert set(lines) == {"a", "b", "c"}
    assert "the command is 200,005 bytes long" in lines["a"] and "131,071 bytes in one argument" in lines["a"]
    assert "env 'A' is longer than a process can be given" in lines["b"]
    assert "the command and env take 2,000,193 bytes" in lines["c"] and "ARG_MAX" in lines["c"]
    assert all(line.startswith("big.yaml:") and "\n" not in line for line in lines.values())


@pytest.mark.parametrize("name", [".", ".."])
def test_a_plan_named_as_a_folder_is_refused_in_one_line_and_its_state_dir_stays_under_the_root(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wloadctl.store import default_state_dir

    with pytest.raises(PlanError) as caught:
        load_plan_text(f"name: '{name}'\njobs:\n  a: {{command: 'true'}}\n", "p.yaml")
    assert [p.one_line() for p in caught.value.problems] == [
        f"p.yaml:1: '{name}' cannot name a plan: it names a folder "
        "(the name is the plan's state directory: add a letter or a digit)"]
    monkeypatch.setenv("WLOADCTL_HOME", str(tmp_path))
    assert default_state_dir(name).parent == tmp_path


@pytest.mark.parametrize("name", ["group_weight_negative.yaml", "group_weight_zero.yaml",
                                  "resource_capacity_text.yaml", "sla_mapping.yaml", "condition_reads_itself.yaml"])
def test_one_mistake_is_one_line(name: str) -> None:
    # A wrong declaration used to make every job that names it undeclared too, and a tier read as
    # a mapping or a list printed the parser's internal values
    (problem,) = problems_of(DATA / "bad" / name)
    assert "(None," not in problem.one_line() and "('" not in problem.one_line()


def test_a_key_past_yamls_limit_is_one_line_saying_so() -> None:
    # PyYAML and libyaml read no key past 1024 characters: the long id was taken for the value of
    # `jobs`, which was then said to be text
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: p\njobs:\n  " + "k" * 2000 + ": {command: 'true'}\n", "p.yaml")
    assert [p.one_line() for p in caught.value.problems] == [
        "p.yaml:3: YAML syntax error: a key longer than 1024 characters (a job id is at most 200) "
        "(check the indentation and quoting around this line)"]


@pytest.mark.parametrize("style", ["flow", "block"])
def test_for_each_takes_its_cap_over_a_list_or_a_variable_too(style: str) -> None:
    """`{items: ..., max_items: N}` is documented for every form of for_each: over a list or vars.NAME it was
    refused as 'for_each over an upstream's output must read a job'."""
    if style == "flow":
        jobs = ("  j: {for_each: {items: vars.desks, max_items: 10}, command: 'echo {item}'}\n"
                "  k: {for_each: {items: [x, y], max_items: 3}, command: 'echo {item}'}\n")
    else:
        jobs = ("  j:\n    for_each:\n      items: vars.desks\n      max_items: 10\n    command: echo {item}\n"
                "  k:\n    for_each:\n      items: [x, y]\n      max_items: 3\n    command: echo {item}\n")
    plan = load_plan_text("name: cap\nvariables: {desks: [a, b]}\njobs:\n" + jobs)
    assert sorted(plan.jobs) == ["j", "j@a", "j@b", "k", "k@x", "k@y"]
    with pytest.raises(PlanError) as e:
        load_plan_text("name: cap\njobs:\n  k: {for_each: {items: [x, y, z], max_items: 2}, command: 'true'}\n")
    assert "for_each lists 3 items, more than max_items 2" in str(e.value.problems[0] if e.value.problems
                                                                   else e.value)
    # A list variable is held to the cap too (its instances were all made, the cap ignored)
    body = jobs.replace("max_items: 10", "max_items: 1")
    with pytest.raises(PlanError) as e:
        load_plan_text("name: cap\nvariables: {desks: [a, b]}\njobs:\n" + body)
    said = " ".join(str(p) for p in e.value.problems) or str(e.value)
    assert "job 'j': for_each: vars.desks lists 2 items, more than max_items 1" in said, said


@pytest.mark.parametrize(("job", "found"), [
    ('{command: "echo {item}"}', "the command holds {item}, but the job has no for_each"),
    ('{command: "echo \\0"}', "the command holds a NUL byte"),
    ('{command: x, cwd: "/a\\0b"}', "cwd holds a NUL byte"),
    ('{command: x, env: {A: "\\0"}}', "env 'A' holds a NUL byte"),
    ('{command: x, type: noop}', "a noop job runs no command, but this one has one"),
    ('{command: [x, "\\0"]}', "an argument of the command holds a NUL byte"),
])
def test_one_odd_command_among_many_plain_ones_is_still_found(job: str, found: str) -> None:
    """Commands are checked by distinct setting when every job's is plain: an odd one turns that off."""
    plain = "".join(f"  p{i}: {{command: \"true\", depends_on: [p{i - 1}]}}\n" for i in range(1, 50))
    text = f"name: p\njobs:\n  p0: {{command: \"true\"}}\n{plain}  odd: {job}\n"
    with pytest.raises(PlanError) as e:
        load_plan_text(text)
    assert any(found in str(p) for p in e.value.problems), e.value.problems
    load_plan_text(f"name: p\njobs:\n  p0: {{command: \"true\"}}\n{plain}")


def test_a_cycle_through_thousands_of_jobs_is_told_in_a_short_line() -> None:
    n = 2000
    text = "name: c\njobs:\n" + "".join(f"  j{i}: {{command: 'true', depends_on: [j{(i + 1) % n}]}}\n"
                                         for i in range(n))
    with pytest.raises(PlanError) as e:
        load_plan_text(text)
    (problem,) = e.value.problems
    # (it named all 2,000 jobs: a line of 16 KB)
    assert problem.message == ("dependency cycle: j0 -> j1 -> j2 -> j3 -> j4 -> j5 -> ... 1,989 more ... -> j1995 -> "
                               "j1996 -> j1997 -> j1998 -> j1999 -> j0 (2,000 jobs)")


@pytest.mark.parametrize(("loop", "said"), [
    ("[a, b, a]", "for_each lists the item 'a' twice"),
    ("5", "for_each must be a list, vars.NAME or jobs.NAME.result.KEY, not the number 5"),
])
def test_a_wrong_for_each_is_told_once_not_also_as_a_command_without_a_loop(loop: str, said: str) -> None:
    with pytest.raises(PlanError) as e:
        load_plan_text(f"name: l\njobs:\n  lp: {{command: 'echo {{item}}', for_each: {loop}}}\n")
    assert [p.message for p in e.value.problems] == [said]


@pytest.mark.parametrize(("text", "said"), [
    # an alias of the very mapping it is in
    ("name: x\njobs: &j\n  a: {command: 'true'}\n  b: *j\n",
     ":4: job 'b': alias '*j' is inside the node its anchor '&j' names: a node cannot hold itself"),
    ("name: x\nvariables: &v\n  a: [1, *v]\njobs:\n  a: {command: 'true'}\n",
     ":3: alias '*v' is inside the node its anchor '&v' names"),
    # a tag plans do not take, on a job or on a setting
    ("name: x\njobs:\n  a: !!python/object/apply:os.system ['true']\n", ":3: job 'a': unsupported YAML tag"),
    ("name: x\njobs:\n  a:\n    command: 'true'\n    env: !!set {A: 1}\n", ":5: job 'a': unsupported YAML tag"),
    # an alias of no anchor, for a setting
    ("name: x\njobs:\n  a:\n    command: 'true'\n    env: *nope\n", ":5: job 'a': alias '*nope' names no anchor"),
    # a job whose id is a list: no word that the plan has no jobs
    ("name: x\njobs:\n  ? [a, b]\n  : {command: 'true'}\n", ":3: a job id must be plain text"),
])
def test_yaml_the_reader_cannot_read_is_told_once_not_again_by_what_was_to_come_of_it(text: str, said: str) -> None:
    with pytest.raises(PlanError) as e:
        load_plan_text(text)
    lines = e.value.lines()
    assert len(lines) == 1 and said in lines[0], lines


@pytest.mark.parametrize("jobs", ["  -rf:\n    command: x\n  b: {command: y, depends_on: [-rf]}\n",
                                  "  a-b: {command: x}\n  '-x': {command: y}\n"])
def test_a_job_id_starting_with_a_dash_is_refused_as_a_command_line_would_read_it_as_an_option(jobs: str) -> None:
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: p\njobs:\n" + jobs, "p.yaml")
    (line,) = caught.value.lines()
    assert line.startswith("p.yaml:") and "is not a valid job id: it starts with '-'" in line
    load_plan_text("name: p\njobs:\n  a-b: {command: x}\n  _x: {command: y}\n  x-: {command: z}\n", "p.yaml")
