"""Jobs written one key a line, read without YAML events: the same plans and problems as the parser gives."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

from wloadctl.core import planblocks, planfile, planlines
from wloadctl.core.plan import Plan
from wloadctl.core.planfile import load_plan, load_plan_text
from wloadctl.core.planlines import JobLines
from wloadctl.errors import PlanError
from wloadctl.gen import write_plan

# (plan text, whether its jobs are read line by line)
CASES: list[tuple[str, bool]] = [
    ('name: p\njobs:\n  a:\n    command: "true"\n  b:\n    command: "true"\n    depends_on:\n      - a\n'
     "    sla: high\n", True),
    ("name: p\njobs:\n  a:\n    command: echo a, b {c} x:y a#b\n    retries: 2\n  b:\n    command: 'q'\n"
     "    depends_on: [a]\n", True),
    ("name: p\njobs:\n  a:   # the first\n    command: x  # run x\n\n    # between\n    sla: low\n\n"
     "  # before b\n\n  b:\n    depends_on:\n    - a\n    command: y\n", True),
    ("name: p\njobs:\n  a:\n    command: x\n  b: {command: y, depends_on: [a]}\n  c:\n    command: z\n", True),
    ("name: p\njobs:\n  a:\n    command: ./run.sh --day 1\n\n  b:\n    command: ./run.sh b\n    depends_on: [a]\n"
     "    sla: low\n\n  # c next\n\n  c:\n    depends_on: [a, b]\n    command: x\n  d:\n    command: 0x1f\n"
     "  e:\n    command: yes\n    depends_on: [a, zz]\n  f:\n    command: ok\n    depends_on: [a, a]\n", True),
    ("name: p\njobs:\n  a:\n    command: x\n    depends_on:\n      - b\n      - c\n  b:\n    command: y\n"
     "    depends_on: [a]\n", True),
    ("name: p\njobs:\n  a:\n    command: x\n    depends_on:\n      - a\n", True),
    ("name: p\njobs:\n  a:\n    command: x\n  a:\n    command: y\n", True),
    ("name: p\njobs:\n  a:\n    command: x\n    command: y\n    sla: high\n    sla: nope\n", True),
    ("name: p\njobs:\n  a:\n    command: x\n  b:\n    command: y\n    depends_on:\n      - a\n      - a\n", True),
    ("name: p\njobs:\n  a:\n    command: x\n  b:\n    command: y\n    depends_on:\n      - zz\n", True),
    ('name: p\njobs:\n  a:\n    command: ""\n  b:\n    command: 5\n  c:\n    command: true\n'
     "  d:\n    command: [x, y]\n  e:\n    command:\n  f:\n    command:\n      - sleep\n      - '1'\n", True),
    ("name: p\njobs:\n  a:\n    command: echo\n    depends_on: 5\n    retries: x\n    type: weird\n"
     "    unknown: 1\n    sla:\n", True),
    ("name: p\njobs:\n  a:\n    command: echo\n    depends_on:\n      - 1\n      - true\n    priority: 1.5\n"
     "    sla: null\n", True),
    ("name: p\njobs:\n  a:\n  b:\n    command: x\n  c:\n", True),
    ("name: p\ndefaults: {type: noop}\njobs:\n  a:\n    sla: critical\n  b:\n    depends_on:\n      - a\n"
     "    sla: low\n  c:\n    depends_on: [a, b]\n  d:\n  e:\n    depends_on:\n      - zz\n", True),
    ('name: p\ndefaults:\n  command: "echo hi"\njobs:\n  a:\n    sla: high\n  b:\n    depends_on:\n'
     "      - a\n", True),
    ("name: p\ngroups: {g: 1}\njobs:\n  a:\n    command: x\n    group: g\n  b:\n    command: y\n"
     "    group: h\n", True),
    ('name: p\njobs:\n  a:\n    command: x\n  b:\n    command: y\n    if: "jobs.a.exit_code == 0"\n', True),
    ("name: p\nvariables: {r: [1, 2]}\njobs:\n  a:\n    command: echo\n    for_each: r\n", True),
    ("name: p\njobs:\n  a:\n    command: echo\n    for_each:\n      - emea\n      - 'amer'\n", True),
    ("name: p\r\njobs:\r\n  a:\r\n    command: x\r\n  b:\r\n    depends_on:\r\n      - a\r\n"
     "    command: y\r\n", True),
    ("name: p\njobs:\n  a:\n    command: x\n  b:\n    command: y", True),
    ("name: p\njobs:\n  a:\n    command: x\n    " + "k" * 1024 + ": 1\n", True),
    ("name: p\njobs:\n  a:\n    command: x\n    " + "k" * 1025 + ": 1\n", False),
    ("name: p\njobs:\n# at column 0\n  a:\n    command: x\n#\n    depends_on:\n# here too\n      - b\n  b:\n"
     "    command: y\n", True),
    ("name: p\njobs:\n  a:\n    command: echo\n      more\n", False),
    ("name: p\njobs:\n  a:\n    command: echo\n\n      more\n", False),
    ("name: p\njobs:\n  a:\n    env:\n      A: b\n    command: x\n", False),
    ("name: p\njobs:\n  a:\n    command: x\n     sla: high\n", False),
    ("name: p\njobs:\n  a:\n    command: x\n   sla: high\n", False),
    ("name: p\njobs:\n  a:\n    command: |\n      echo\n", False),
    ("name: p\njobs:\n  a:\n    command: &c x\n  b:\n    command: *c\n", False),
    ("name: p\njobs:\n  a:\n    command: x\n    depends_on:\n      - b\n       - c\n", False),
    ("name: p\njobs:\n  a:\n    command: x\n    depends_on:\n      - b: c\n", False),
    ("name: p\njobs:\n  a:\n    command: x\n    sla: high\n      - c\n", False),
    ("name: p\njobs:\n  a:\n    command: x\n    <<: {sla: high}\n", False),
    ("name: p\njobs:\n  a:\n    command: x\nlate: 1\n", False),
    ("name: p\njobs:\n  a:\n    command: x\n  b: {command: y\n", False),
    ("name: p\njobs:\n  a:\n    - x\n", False),
    ("name: p\njobs:\n  a:\n\tcommand: x\n", False),
    ("name: p\njobs:\n  a:\n    command: caf\u00e9\n", False),
    ('name: p\njobs:\n  a:\n    command: "a\\"b"\n', False),
    ("name: p\njobs:\n  \"a\":\n    command: x\n", False),
]


def _outcome(load: Any) -> tuple[Any, ...]:
    try:
        plan = load()
    except PlanError as err:
        return ("problems", err.lines())
    return ("plan", list(plan.jobs.items()), plan.name, plan.variables, plan.groups, plan.digest)


def _both(monkeypatch: pytest.MonkeyPatch, load: Any) -> tuple[tuple[Any, ...], tuple[Any, ...], bool]:
    """(outcome with the line path allowed, outcome through the parser only, whether lines were read)."""
    read = planfile.read_jobs
    used: list[int] = []

    def counting(*args: Any) -> None:
        read(*args)
        used.append(1)

    monkeypatch.setattr(planfile, "read_jobs", counting)
    fast = _outcome(load)
    monkeypatch.setattr(JobLines, "split", classmethod(lambda cls, stream: None))
    slow = _outcome(load)
    monkeypatch.undo()
    return fast, slow, bool(used)


@pytest.mark.parametrize(("text", "by_lines"), CASES)
def test_same_as_the_parser(monkeypatch: pytest.MonkeyPatch, text: str, by_lines: bool) -> None:
    fast, slow, used = _both(monkeypatch, lambda: load_plan_text(text, "p.yaml"))
    assert fast == slow
    assert used == by_lines


@pytest.mark.parametrize("kind", ["shell", "noop"])
@pytest.mark.parametrize("shape", ["bank", "wide", "chain"])
def test_generated_block_plans_read_by_lines_as_their_flow_twins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shape: str, kind: str
) -> None:
    block, flow = tmp_path / "block.yaml", tmp_path / "flow.yaml"
    write_plan(block, 3000, shape, 1, job_type=kind, style="block")  # type: ignore[arg-type]
    write_plan(flow, 3000, shape, 1, job_type=kind)  # type: ignore[arg-type]
    fast, slow, used = _both(monkeypatch, lambda: load_plan(block))
    assert used and fast[0] == "plan" and len(fast[1]) == 3000
    assert fast == slow
    assert _lineless(load_plan(block)) == _lineless(load_plan(flow))


def test_chunks_cut_between_jobs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A plan many reads long, with blank and comment lines where a read may end, is read whole."""
    path = tmp_path / "plan.yaml"
    write_plan(path, 20000, "bank", 3, style="block")
    text = path.read_text().replace("    sla: high\n", "    sla: high\n\n  # high\n\n")
    text = text.replace('command: "true"', "command: true_or_false").replace("    sla: low\n", "    sla: low\n\n")
    path.write_text(text)
    fast, slow, used = _both(monkeypatch, lambda: load_plan(path))
    assert used and fast[0] == "plan" and len(fast[1]) == 20000
    assert fast == slow


class _Counted:
    """A compiled pattern whose fullmatch calls are counted."""

    def __init__(self, pattern: Any) -> None:
        self.pattern, self.calls = pattern, 0

    def fullmatch(self, *args: Any) -> Any:
        self.calls += 1
        return self.pattern.fullmatch(*args)


def test_a_long_run_of_blank_lines_inside_a_job_is_read_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # (each blank line looked ahead over all the ones after it: 10,000 of them took a minute and a half)
    text = ("name: p\njobs:\n  a:\n    command: x\n" + "\n  # between\n   \n" * 2000
            + "    sla: high\n  b:\n    command: y\n    depends_on: [a]\n    timout: 1\n")
    blank = _Counted(planblocks._BLANK)
    monkeypatch.setattr(planblocks, "_BLANK", blank)
    fast, slow, used = _both(monkeypatch, lambda: load_plan_text(text, "p.yaml"))
    assert blank.calls < 4 * text.count("\n")  # (in square time: millions)
    assert used and fast == slow
    assert fast[1][0].startswith("p.yaml:6009: job 'b': unknown key 'timout'")


def test_a_job_many_reads_long_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # (the text held since the last whole job was searched and copied again at each read: a job of 400,000
    # upstream lines took seconds more than its size; small reads show it at a small size)
    monkeypatch.setattr(planlines, "_CHUNK", 256)
    text = "name: p\njobs:\n  a:\n    command:\n" + "      - echo\n" * 20_000 + "  b:\n    command: x\n"
    plan = load_plan_text(text)
    assert plan.read_by_lines and plan.jobs["a"].command == ("echo",) * 20_000 and plan.jobs["b"].line == 20_005


def _lineless(plan: Plan) -> Plan:
    """The plan with each job's line set to 0, and no path or digest (the styles differ only there)."""
    jobs = {jid: dataclasses.replace(j, line=0) for jid, j in plan.jobs.items()}
    return dataclasses.replace(plan, jobs=jobs, path="", digest="", read_by_lines=False)


def _key_values(i: int, rng: random.Random, ids: list[str], nested: bool) -> dict[str, Any]:
    """The settings of job i: every kind of job key over the jobs, lists and (if `nested`) mappings."""
    job: dict[str, Any] = {}
    kind = i % 9
    if kind == 8:
        job["type"] = "noop"
    else:
        job["command"] = [f"echo {i}", ["echo", f"{i}"], "true"][i % 3]
    if ids:
        job["depends_on"] = sorted(set(rng.sample(ids, min(len(ids), 1 + i % 3))))
    if i % 4 == 0:
        job["sla"] = ["critical", "high", "standard", "low"][i // 4 % 4]
    extra: list[tuple[str, Any]] = [
        ("priority", i % 7),
        ("timeout", "20m"),
        ("retries", i % 3),
        ("cwd", "/tmp"),
        ("idempotent", i % 2 == 0),
        ("deadline", "22:00"),
        ("not_before", "18:30"),
        ("preemptible", True),
        ("if", "vars.region == 'emea'"),
        ("until", "result.ready == 1"),
        ("max_iterations", 3),
        ("for_each", ["emea", "amer"]),
        ("group", "g"),
        ("cpu", 1.5),
        ("memory", 512),
        ("expected", 10),
        ("description", f"job number {i}"),
    ]
    if nested:
        extra += [
            ("resources", {"db": 1}),
            ("env", {"REGION": "apac", "BATCH": i}),
            ("retries", {"count": 2, "delay": "30s"}),
        ]
    for key, value in rng.sample(extra, 3):
        if (key == "for_each" and "until" in job) or (key == "until" and "for_each" in job):
            continue
        job[key] = value
    if "max_iterations" in job and "until" not in job:
        # max_iterations bounds an until: alone it is refused.
        if "for_each" in job:
            del job["max_iterations"]
        else:
            job["until"] = "result.ready == 1"
    return job


def _scalar(value: Any) -> str:
    return json.dumps(value)


def _flow(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items()) + "}"
    return _scalar(value)


def _write_both(tmp_path: Path, count: int, nested: bool) -> tuple[Path, Path]:
    """The same plan of `count` jobs written one job a line and one key a line."""
    rng = random.Random(count)
    head = "name: every-key\ngroups: {g: 1}\nvariables: {region: emea}\nresources: {db: 4}\njobs:\n"
    flow, block = [head], [head]
    ids: list[str] = []
    for i in range(count):
        jid = f"job_{i:04d}"
        job = _key_values(i, rng, ids[-30:], nested)
        flow.append(f"  {jid}: {{{', '.join(f'{k}: {_flow(v)}' for k, v in job.items())}}}\n")
        block.append(f"  {jid}:\n")
        for n, (key, value) in enumerate(job.items()):
            if isinstance(value, list) and n % 2 == 0:
                block.append(f"    {key}:\n" + "".join(f"      - {_scalar(v)}\n" for v in value))
            elif isinstance(value, dict):
                block.append(f"    {key}:\n" + "".join(f"      {k}: {_scalar(v)}\n" for k, v in value.items()))
            elif isinstance(value, str) and value.startswith("echo") and i % 2:
                block.append(f"    {key}: {value}\n")  # plain, with spaces
            else:
                block.append(f"    {key}: {_flow(value)}\n")
        ids.append(jid)
    paths = tmp_path / "flow.yaml", tmp_path / "block.yaml"
    for path, parts in zip(paths, (flow, block), strict=True):
        path.write_text("".join(parts))
    return paths


@pytest.mark.parametrize("nested", [False, True])
def test_every_key_kind_loads_alike_in_both_styles(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, nested: bool
) -> None:
    # Given: 400 jobs using every kind of job key, written one job a line and one key a line
    flow, block = _write_both(tmp_path, 400, nested)
    # When: both are loaded, the block one also through the parser alone
    fast, slow, used = _both(monkeypatch, lambda: load_plan(block))
    # Then: the same jobs (but for their lines), and the block plan read by lines unless nested
    assert fast == slow
    assert used == (not nested)
    assert _lineless(load_plan(block)) == _lineless(load_plan(flow))
    assert sum(j.for_each is None for j in load_plan(block).jobs.values()) > 300  # for_each makes instances


@pytest.mark.parametrize("text", [
    "name: p\njobs:\n  a: {command: x}\n  b: {command: y, depends_on: [a], if: 5}\n",
    "name: p\njobs:\n  a:\n    command: x\n  b:\n    command: y\n    depends_on: [a]\n    if: 5\n",
])
def test_a_number_for_a_condition_is_refused_by_lines_and_by_the_parser_alike(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    fast, slow, used = _both(monkeypatch, lambda: load_plan_text(text, "p.yaml"))
    assert used and fast == slow
    assert fast[0] == "problems" and len(fast[1]) == 1
    assert fast[1][0].startswith(f"p.yaml:{text.count(chr(10))}: job 'b': if must be text, not the number 5 ")


@pytest.mark.parametrize("style", ["flow", "block"])
def test_yaml_booleans_are_the_conditions_constants_however_spelled(monkeypatch: pytest.MonkeyPatch,
                                                                     style: str) -> None:
    # (`if: true` was refused, "unknown name 'true'", while `if: True`, the same YAML value, held: `if: false` is
    # how a job is turned off without taking it out of the plan)
    spellings = {"t1": "true", "t2": "True", "t3": "yes", "t4": "on", "f1": "false", "f2": "FALSE", "f3": "no"}
    if style == "flow":
        body = "".join(f"  {j}: {{command: x, if: {v}}}\n" for j, v in spellings.items())
    else:
        body = "".join(f"  {j}:\n    command: x\n    if: {v}\n" for j, v in spellings.items())
    text = "name: p\njobs:\n" + body
    fast, slow, used = _both(monkeypatch, lambda: load_plan_text(text, "p.yaml"))
    assert used and fast == slow
    plan = load_plan_text(text, "p.yaml")
    assert {j: plan.jobs[j].condition for j in spellings} == {j: str(j[0] == "t") for j in spellings}
