"""One-line jobs read without YAML events: the same plans and the same problems as the parser gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wloadctl.core import planfile
from wloadctl.core.planfile import load_plan, load_plan_text
from wloadctl.core.planlines import JobLines
from wloadctl.errors import PlanError
from wloadctl.gen import write_plan

DATA = Path(__file__).resolve().parent.parent / "data" / "plans"

# (plan text, whether its jobs are read line by line)
CASES: list[tuple[str, bool]] = [
    ('name: p\njobs:\n  a: {command: "true"}\n  b: {command: "true", depends_on: [a], sla: high}\n', True),
    ('name: p\njobs:\n  a: {command: "x, ]} # y", exit_codes: ["]", \'a,b\']}\n', True),
    ('name: p\njobs:\n  a: {command: "true"}\n  b: {command: "true", depends_on: [a, c]}\n'
     '  c: {command: "true", depends_on: [b]}\n', True),
    ('name: p\njobs:\n  a: {command: "true", depends_on: [a]}\n', True),
    ('name: p\njobs:\n  a: {command: "true"}\n  a: {command: "false"}\n', True),
    ('name: p\njobs:\n  a: {command: "true", command: "x"}\n', True),
    ('name: p\njobs:\n  a: {command: "true", sla: high, sla: low, sla: bad}\n', True),
    ('name: p\njobs:\n  a: {command: "true"}\n  b: {command: "true", depends_on: [a, a]}\n', True),
    ('name: p\njobs:\n  a: {command: "true"}\n  b: {command: "true", depends_on: [zz]}\n', True),
    ('name: p\njobs:\n  a: {command: ""}\n  b: {command: 5}\n  c: {command: true}\n  d: {command: [x, y]}\n', True),
    ("name: p\njobs:\n  a: {command: echo, depends_on: 5, retries: x, type: weird, unknown: 1}\n", True),
    ("name: p\njobs:\n  a: {command: echo, depends_on: [1, true], priority: 1.5, sla: null}\n", True),
    ('name: p\njobs:\n  a: {command: "true", depends_on: [b]}\n  b: {command: "true", depends_on: [a]}\n', True),
    ('name: p\ndefaults: {sla: high, type: noop}\njobs:\n  a: {}\n  b: {depends_on: [a]}\n', True),
    ('name: p\ndefaults: {type: noop}\njobs:\n  a: {sla: critical}\n  b: {depends_on: [a], sla: low}\n'
     '  c: {depends_on: [a, b]}\n  d: {sla: nope}\n  e: {depends_on: [zz]}\n  a: {}\n  f: {depends_on: [f]}\n', True),
    ('name: p\ndefaults: {command: "echo hi"}\njobs:\n  a: {}\n  b: {depends_on: [a], sla: high}\n', True),
    ('name: p\njobs:\n  a: {}\n  b: {depends_on: [a]}\n  c: {sla: high}\n', True),
    ('name: p\ngroups: {g: 1}\njobs:\n  a: {command: "true", group: g}\n  b: {command: "true", group: h}\n', True),
    ('name: p\njobs:\n  a: {command: "true"}\n  b: {command: "true", if: "jobs.a.exit_code == 0"}\n', True),
    ('name: p\nvariables: {r: [1, 2]}\njobs:\n  a: {command: "echo", for_each: r}\n', True),
    ('name: p\r\njobs:\r\n  a: {command: "true"}\r\n  b: {command: "true", depends_on: [a]}\r\n', True),
    ('name: p\njobs:\n  a: {command: "true"}  #c\n  #x\n#y\n\n  b: {command: "true"}', True),
    ('\ufeffjobs:\n  a:  { command: \'t\' ,depends_on: [ ] }\nbogus: 1\n', False),
    ('name: p\nx: &c {command: "true"}\njobs:\n  a: *c\n', False),
    ('name: p\njobs: {}\njobs:\n  a: {command: "true"}\n', False),
    ('name: "p\njobs:\n  a: {command: "true"}\n', False),
    ('name: p\njobs:\n  a: {command: "true"}\ndefaults: {sla: low}\n', False),
    ('name: p\njobs:\n  a: {command: "true"}\n---\nname: q\n', False),
    ('name: p\rjobs:\r  a: {command: "true"}\r', False),
    ('name: p\njobs:\n  a: {command: "true"}\n   b: {command: "true"}\n', False),
    ('name: p\njobs:\n  a: {command: "caf\u00e9"}\n', False),
    ('name: p\njobs:\n  a: {command: "a\\"b"}\n', False),
    ('name: p\njobs:\n  a: {command: "true", retries: {count: 2}}\n', False),
    ('name: p\njobs:\n  a: {command: "true", <<: {sla: high}}\n', False),
    ("name: p\njobs:\n  a:\n    command: x\n", True),
    ("name: p\njobs:\n", False),
    # A key past YAML's 1024 characters is the parser's to refuse (the line read said "unknown key" of it)
    ("name: p\njobs:\n  a: {command: x, " + "k" * 1024 + ": 1}\n", True),
    ("name: p\njobs:\n  a: {command: x, " + "k" * 1025 + ": 1}\n", False),
    # An unclosed flow mapping on the last line: said of that line, not of the one past the end of the file
    ("name: p\njobs:\n  a: {command: x, description: 'abc'\n", False),
    ("name: p\njobs:\n  a: {command: x, description: 'abc'", False),
    ("name: p\njobs:\n  a: {command: x, description: 'abc'\n\n\n", False),
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


@pytest.mark.parametrize("path", sorted(DATA.rglob("*.yaml")), ids=lambda p: p.name)
def test_data_plans_same_as_the_parser(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    fast, slow, _ = _both(monkeypatch, lambda: load_plan(path))
    assert fast == slow


@pytest.mark.parametrize("kind", ["shell", "noop"])
@pytest.mark.parametrize("shape", ["bank", "wide", "chain"])
def test_generated_plans_read_by_lines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shape: str,
                                       kind: str) -> None:
    path = tmp_path / "plan.yaml"
    write_plan(path, 3000, shape, 1, job_type=kind)  # type: ignore[arg-type]
    fast, slow, used = _both(monkeypatch, lambda: load_plan(path))
    assert used and fast[0] == "plan" and len(fast[1]) == 3000
    assert fast == slow


def test_a_late_odd_line_reads_the_whole_plan_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A line outside the one-line shape, far into a file, still gives the parser's plan and digest."""
    path = tmp_path / "plan.yaml"
    write_plan(path, 30000, "bank", 2)  # more than one read of the file
    with open(path, "a", encoding="utf-8") as out:
        out.write("  late:\n    command: echo late\n    depends_on: [s00_open_day_000000]\n")
    fast, slow, used = _both(monkeypatch, lambda: load_plan(path))
    assert not used and fast[0] == "plan" and len(fast[1]) == 30001
    assert fast == slow
