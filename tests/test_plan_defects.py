"""Plans that loaded but could not run as written: alias bombs, conditions that are never true, placeholders
that are never replaced, long scalars, bytes that are not UTF-8, and loops over undeclared variables."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

import wloadctl.core.planfile as planfile
import wloadctl.core.planvalues as planvalues
from tests.integration.helpers import cli
from wloadctl.core.planfields import JOB_KEYS
from wloadctl.core.planfile import load_plan, load_plan_bytes, load_plan_text
from wloadctl.errors import PlanError

BOMB = "YAML aliases stand for more than"


def laughs(levels: int, indent: str = "  ") -> str:
    """Anchors a0..aN, each a list of nine aliases to the one before: a_N stands for 9**(N+1) scalars."""
    lines = [f"{indent}a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"{indent}a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "".join(f"{line}\n" for line in lines)


def problems(text: str) -> list[str]:
    """The one-line problems of a plan that must be refused."""
    with pytest.raises(PlanError) as caught:
        load_plan_text(text, "plan.yaml")
    return caught.value.lines()


# -- 1. alias bombs ---------------------------------------------------------------------------------------


def test_an_alias_bomb_in_variables_is_refused_in_one_line_naming_its_line() -> None:
    lines = problems("name: bomb\nvariables:\n" + laughs(8) + "jobs:\n  j: {command: 'true'}\n")
    assert len(lines) == 1
    assert lines[0].startswith("plan.yaml:") and BOMB in lines[0]
    line = int(lines[0].split(":")[1])
    assert 3 <= line <= 11  # one of the anchors' lines


@pytest.mark.parametrize("where", [
    "jobs:\n  j:\n    command: 'true'\n    env: {A: *a5, B: *a5}\n",
    "jobs:\n  j:\n    command: 'true'\n    depends_on: [*a5, *a5]\n",
    "defaults:\n  env: {A: *a5, B: *a5}\njobs:\n  j: {command: 'true'}\n",
    "jobs:\n  j:\n    command: 'true'\n    for_each: [*a5, *a5]\n",
    "jobs:\n  j: &j {command: 'true', env: {A: *a5, B: *a5}}\n",
])
def test_aliases_are_counted_wherever_they_are_used(where: str) -> None:
    # a5 alone stands for about 600,000 nodes (it loads); two more uses of it go past the bound
    head = "name: bomb\nvariables:\n" + laughs(5)
    assert load_plan_text(head + "jobs:\n  j: {command: 'true'}\n").variables["a5"]
    assert any(BOMB in line for line in problems(head + where))


def test_many_small_merges_in_a_large_plan_still_load() -> None:
    # Aliases of a plan's shared settings, used by every job: not a bomb
    jobs = "".join(f"  j{i}: {{<<: *base, command: 'echo {i}'}}\n" for i in range(20000))
    text = ("name: big\nvariables:\n  base: &base {sla: low, retries: 1, env: {A: '1', B: '2', C: '3'}}\n"
            "jobs:\n" + jobs)
    assert len(load_plan_text(text).jobs) == 20000


def test_validate_and_run_refuse_an_alias_bomb_before_a_run_is_made(tmp_path: Path) -> None:
    plan = tmp_path / "bomb.yaml"
    plan.write_text("name: bomb\nvariables:\n" + laughs(6) + "jobs:\n  j: {command: 'true'}\n")
    checked = cli("validate", str(plan), timeout=60)
    assert checked.returncode == 2 and BOMB in checked.stdout + checked.stderr
    sd = tmp_path / "sd"
    ran = cli("run", str(plan), "--state-dir", str(sd), timeout=60)
    assert ran.returncode == 2, ran.stderr
    assert BOMB in ran.stderr and "internal error" not in ran.stderr
    assert not sd.exists()


# -- 2. conditions that are never true ---------------------------------------------------------------------

JOBS = ("name: c\njobs:\n  a: {command: 'true'}\n  l: {command: 'echo {item}', for_each: [x, y]}\n"
        "  b:\n    command: 'true'\n    depends_on: [a, l]\n")


@pytest.mark.parametrize(("cond", "said"), [
    ("\"jobs.a.state == 'SUCCESS'\"", "did you mean 'SUCCEEDED'"),
    ("\"jobs.a.state == 'succeeded'\"", "did you mean 'SUCCEEDED'"),
    ("\"jobs.a.state == 'COMPLETED'\"", "did you mean 'SUCCEEDED'"),
    ("\"jobs['a'].state in ['FAILED', 'TIMEOUT']\"", "did you mean 'TIMED_OUT'"),
    ("'jobs.a.exit_code == \"0\"'", "exit_code is a number"),
    ("jobs.l.result.n == 1", "for_each job"),
])
def test_a_condition_that_is_never_true_is_refused_naming_job_and_expression(cond: str, said: str) -> None:
    lines = problems(JOBS + f"    if: {cond}\n")
    assert len(lines) == 1, lines
    expression = cond.strip("'\"").replace("\\'", "'")
    assert lines[0].startswith("plan.yaml:") and "job 'b'" in lines[0] and said in lines[0]
    assert expression.split(" ")[0] in lines[0]


@pytest.mark.parametrize("cond", [
    "\"jobs.a.state == 'FAILED' or jobs.a.exit_code != 0\"",
    "\"jobs.a.state in ('SUCCEEDED', 'SKIPPED')\"",
    "\"jobs.l.state == 'SUCCEEDED'\"",
    "\"'FAIL' in jobs.a.state\"",
    "jobs.a.exit_code in [0, 3]",
    "jobs.a.result.n == '1'",
])
def test_conditions_that_can_hold_still_load(cond: str) -> None:
    assert load_plan_text(JOBS + f"    if: {cond}\n").jobs["b"].condition


# -- 3. long scalars ---------------------------------------------------------------------------------------


def test_a_long_description_on_its_own_line_takes_memory_in_proportion() -> None:
    size = 2_000_000
    text = "name: big\njobs:\n  a:\n    command: 'true'\n    description: " + "x" * size + "\n"
    tracemalloc.start()
    try:
        plan = load_plan_text(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert plan.read_by_lines and len(plan.jobs["a"].description or "") == size
    assert peak < 20 * size  # the text, its bytes and a few copies; not hundreds of bytes a character


@pytest.mark.parametrize(("where", "said"), [
    ("jobs:\n  b: {command: x, depends_on: [LONG]}\n", "plan.yaml:3: job 'b': depends on unknown job 'aaaa"),
    ("jobs:\n  b: {command: x, sla: LONG}\n", "plan.yaml:3: job 'b': unknown SLA tier 'aaaa"),
    ("timezone: LONG\njobs:\n  b: {command: x}\n", "plan.yaml:2: unknown time zone 'aaaa"),
])
def test_a_long_value_refused_is_clipped_in_its_line(where: str, said: str) -> None:
    # (the value was quoted whole: a value of 100,000 characters made a line of 100,000 characters)
    (line,) = problems("name: p\n" + where.replace("LONG", "a" * 100_000))
    assert line.startswith(said) and "a" * 60 + "...(100000 characters)'" in line and len(line) < 300


def test_running_out_of_memory_while_loading_is_one_line_naming_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    def exhausted(*_args: object, **_kw: object) -> None:
        raise MemoryError

    monkeypatch.setattr(planfile._PlanBuilder, "build", exhausted)
    with pytest.raises(PlanError) as caught:
        load_plan_text("name: p\njobs:\n  a: {command: 'true'}\n", "huge.yaml")
    assert caught.value.lines() == [caught.value.lines()[0]]
    assert "huge.yaml" in caught.value.lines()[0] and "memory" in caught.value.lines()[0]


# -- 4. placeholders, encodings, loops over variables -----------------------------------------------------


def test_item_in_a_job_without_for_each_is_refused() -> None:
    lines = problems("name: p\njobs:\n  a:\n    command: echo {item}\n")
    assert len(lines) == 1 and "job 'a'" in lines[0] and "no for_each" in lines[0]


@pytest.mark.parametrize("word", ["{itm}", "{items}", "{Item}"])
def test_a_misspelt_item_in_a_loop_is_refused_with_did_you_mean(word: str) -> None:
    lines = problems(f"name: p\njobs:\n  a:\n    for_each: [x, y]\n    command: [sh, -c, 'echo {word}']\n")
    assert len(lines) == 1 and word in lines[0] and "did you mean '{item}'" in lines[0]


def test_shell_braces_and_json_are_not_placeholders() -> None:
    text = ("name: p\njobs:\n"
            "  a:\n    command: >-\n      echo ${HOME} ${item} {a,b} '{\"k\": 1}' && f() { echo; }\n"
            "  l:\n    for_each: [x]\n    command: awk '{print}' {item} ${HOME}\n")
    assert set(load_plan_text(text).jobs) >= {"a", "l"}


@pytest.mark.parametrize("form", ["  a:\n    command: echo caf\xe9\n", "  a: {command: 'echo caf\xe9'}\n"])
def test_a_latin1_byte_is_named_as_not_utf8_with_its_line(tmp_path: Path, form: str) -> None:
    data = ("name: p\njobs:\n" + form).encode("latin-1")
    path = tmp_path / "latin1.yaml"
    path.write_bytes(data)
    for load in (lambda: load_plan(path), lambda: load_plan_bytes(data, str(path))):
        with pytest.raises(PlanError) as caught:
            load()
        [line] = caught.value.lines()
        assert line.startswith(f"{path}:{3 if '{' in form else 4}: ")
        assert "not UTF-8" in line and f"byte offset {data.index(0xE9)}" in line and "indentation" not in line


def test_a_control_character_is_named_with_its_line() -> None:
    [line] = problems("name: p\ndescription: a\x01b\njobs:\n  a: {command: 'true'}\n")
    assert line.startswith("plan.yaml:2: ") and "U+0001" in line


def test_a_loop_over_a_misspelt_variable_is_reported_with_the_other_problems() -> None:
    lines = problems("name: p\nvariables:\n  regions: [emea, amer]\njobs:\n"
                     "  a: {command: 'true', priorty: 3}\n"
                     "  l: {for_each: vars.regoin, command: 'echo {item}'}\n")
    assert len(lines) == 2
    assert "priorty" in lines[0]
    assert "job 'l'" in lines[1] and "regoin" in lines[1] and "did you mean 'vars.regions'" in lines[1]


def test_a_loop_over_a_variable_that_is_no_list_is_reported_with_the_other_problems() -> None:
    lines = problems("name: p\nvariables:\n  regions: emea\njobs:\n"
                     "  a: {command: 'true', priorty: 3}\n"
                     "  l: {for_each: vars.regions, command: 'echo {item}'}\n")
    assert len(lines) == 2 and "not a non-empty list variable" in lines[1]


# -- 5. times that parse but cannot be meant ------------------------------------------------------------------


def test_validate_and_run_refuse_times_no_operator_means_one_line_each_before_a_run_is_made(tmp_path: Path) -> None:
    plan = tmp_path / "times.yaml"
    plan.write_text("name: times\njobs:\n"
                    "  a: {command: 'true', deadline: '+0s'}\n"
                    "  b: {command: 'true', timeout: 0.0001ms}\n"
                    "  c: {command: 'true', depends_on: [a], not_before: '22:00', deadline: '21:00'}\n")
    said = [f"{plan}:3: job 'a': deadline '+0s' is the very start of the run",
            f"{plan}:4: job 'b': timeout: '0.0001ms' is shorter than 1ms",
            f"{plan}:5: job 'c': not_before '22:00' is after the deadline '21:00'"]
    checked = cli("validate", str(plan), timeout=60)
    sd = tmp_path / "sd"
    ran = cli("run", str(plan), "--state-dir", str(sd), timeout=60)
    for p in (checked, ran):
        assert p.returncode == 2, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 3 and "Traceback" not in p.stderr, p.stderr
        for line, start in zip(lines, said, strict=True):
            assert line.startswith(start), line
    assert not sd.exists()


# -- 6. dependency kinds of the wrong type --------------------------------------------------------------------


def test_validate_and_run_name_the_type_of_a_dependency_kind_that_is_no_word(tmp_path: Path) -> None:
    # (a mapping or a list was said to be the unknown kind 'None', with 'done' offered for it)
    plan = tmp_path / "kinds.yaml"
    plan.write_text("name: kinds\njobs:\n  b: {command: 'true'}\n"
                    "  a: {command: 'true', depends_on: {b: {x: 1}}}\n"
                    "  c:\n    command: 'true'\n    depends_on:\n      b: [success]\n"
                    "  d: {command: 'true', depends_on: {b: }}\n")
    said = [f"{plan}:4: job 'a': depends_on 'b' must be success, failure or done, not a mapping",
            f"{plan}:8: job 'c': depends_on 'b' must be success, failure or done, not a list",
            f"{plan}:9: job 'd': depends_on 'b' must be success, failure or done, not nothing (null)"]
    checked = cli("validate", str(plan), timeout=60)
    sd = tmp_path / "sd"
    ran = cli("run", str(plan), "--state-dir", str(sd), timeout=60)
    for p in (checked, ran):
        assert p.returncode == 2, p.stderr
        assert p.stderr.strip().splitlines() == said and "Traceback" not in p.stderr, p.stderr
    assert not sd.exists()


# -- 7. long lists and long runs of blank lines: read in one pass (in square time, minutes) ----------------------


def test_an_upstream_listed_twice_at_the_end_of_a_long_fan_in_is_found_in_time_in_proportion() -> None:
    # (each id was looked for among all the ids before it: 20,000 upstreams took seconds, 100,000 minutes)
    ids = [f"j{i}" for i in range(20_000)]
    text = ("name: p\njobs:\n" + "".join(f"  {j}: {{type: noop}}\n" for j in ids)
            + f"  z: {{type: noop, depends_on: [{', '.join(ids)}, j19999]}}\n")
    said = problems(text)
    assert said == ["plan.yaml:20003: job 'z': depends on 'j19999' more than once (list each upstream once)"]


def test_an_item_listed_twice_at_the_end_of_a_long_for_each_is_found_in_time_in_proportion() -> None:
    items = ", ".join(f"i{k}" for k in range(40_000))
    said = problems(f"name: p\njobs:\n  a: {{command: 'echo {{item}}', for_each: [{items}, i39999]}}\n")
    assert said == ["plan.yaml:3: job 'a': for_each lists the item 'i39999' twice (each item makes one instance: "
                    "list it once)"]


def test_a_misspelt_key_in_every_job_of_a_large_plan_is_compared_with_the_accepted_keys_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (the closest key was looked for again for each job: 200,000 jobs took twenty seconds to refuse)
    compared: list[str] = []
    close_matches = planvalues.difflib.get_close_matches

    def counted(word: str, *args: object, **kwargs: object) -> list[str]:
        compared.append(word)
        return close_matches(word, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(planvalues.difflib, "get_close_matches", counted)
    planvalues.meant_key.cache_clear()
    text = "name: p\njobs:\n" + "".join(f"  j{i}: {{command: x, timout: 5}}\n" for i in range(40_000))
    said = problems(text)
    assert compared.count("timout") == 1
    assert said[0] == ("plan.yaml:3: job 'j0': unknown key 'timout' (did you mean 'timeout'? accepted: "
                       + ", ".join(JOB_KEYS) + ")")
