"""Hostile plans through `wloadctl validate`: each is read or refused in bounded time and memory, with a
one-line message naming the file and line, never a traceback."""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.helpers import ENV

MEMORY_CAP = 3 * 1024**3
"""Address space a validation may use: a plan that multiplies itself must be refused before that."""


def deep(p: Path) -> bytes:
    return b"name: d\njobs:\n  a:\n    command: 'true'\n    env: " + b"[" * 200_000 + b"]" * 200_000 + b"\n"


def deep_blocks(p: Path) -> bytes:
    return b"name: d\njobs:\n  a:\n    command: 'true'\n    env:\n" + b"".join(
        b"  " * (k + 3) + f"k{k}:\n".encode() for k in range(3000))


def huge_string(p: Path) -> bytes:
    return b'name: h\njobs:\n  a:\n    command: "' + b"x" * 30_000_000 + b'"\n'


def huge_id(p: Path) -> bytes:
    return b"name: h\njobs:\n  " + b"j" * 5_000_000 + b": {command: 'true'}\n"


def alias_bomb(p: Path) -> bytes:
    lines = ["name: b", "variables:", "  x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    lines += ["jobs:", "  a: {command: 'true', for_each: vars.x9}"]
    return ("\n".join(lines) + "\n").encode()


def alias_bomb_env(p: Path) -> bytes:
    return alias_bomb(p).replace(b"for_each: vars.x9", b"env: {A: *a9}")


def merge_bomb(p: Path) -> bytes:
    lines = ["name: m", "defaults: &d0 {timeout: 5}"]
    lines += [f"x{i}: &d{i} {{<<: [*d{i - 1}, *d{i - 1}]}}" for i in range(1, 30)]
    lines += ["jobs:", "  a: {<<: *d29, command: 'true'}"]
    return ("\n".join(lines) + "\n").encode()


def not_utf8(p: Path) -> bytes:
    return b'name: n\njobs:\n  a: {command: "echo \xff\xfe\xc3\x28"}\n'


def binary(p: Path) -> bytes:
    return bytes(range(256)) * 64


def million_one_line(p: Path) -> bytes:
    return ("{name: m, jobs: {" + ", ".join(f"j{i}: {{command: 'true'}}" for i in range(1_000_000))
            + "}}\n").encode()


def one_mistake_everywhere(p: Path) -> bytes:
    # A generator's typo copied into every job: one line for it, not 20,000.
    return ("name: m\njobs:\n" + "".join(f"  j{i}:\n    command: 'true'\n    after: [j{i - 1}]\n"
                                         for i in range(1, 20_001))).encode()


CASES: list[tuple[Callable[[Path], bytes], int, str]] = [
    (deep, 2, "nest"),  # "nested too deeply", or the YAML parser's "exceeded maximum nesting depth"
    (deep_blocks, 2, "the YAML is nested too deeply to be a plan"),
    (huge_string, 2, "more than a process can be given"),  # read whole, then refused: no process could run it
    (huge_id, 2, "job id"),
    (alias_bomb, 2, "YAML aliases stand for more than"),
    (alias_bomb_env, 2, "YAML aliases stand for more than"),
    (merge_bomb, 2, "unknown top-level key 'x1'"),
    (not_utf8, 2, "plan.yaml:3: the file is not UTF-8 text (byte 0xff at byte offset 35)"),
    (binary, 2, "plan.yaml"),
    (million_one_line, 0, "ok (1000000 jobs)"),
    (one_mistake_everywhere, 2, "unknown key 'after' (did you mean 'depends_on'? accepted: command"),
]


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


@pytest.mark.parametrize(("make", "code", "fragment"), CASES, ids=[c[0].__name__ for c in CASES])
def test_a_hostile_plan_is_read_or_refused_clearly(tmp_path: Path, make: Callable[[Path], bytes], code: int,
                                                   fragment: str) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_bytes(make(tmp_path))
    p = subprocess.run([sys.executable, "-m", "wloadctl", "validate", str(plan)], capture_output=True,
                       timeout=180, env=ENV, preexec_fn=capped)
    out = (p.stdout + p.stderr).decode(errors="replace")
    assert "Traceback" not in out and "MemoryError" not in out, out[-2000:]
    assert p.returncode == code, out[-2000:]
    assert fragment in out, out[-2000:]
    if code:
        lines = p.stderr.decode(errors="replace").splitlines()
        assert lines and all(line.startswith(str(plan)) for line in lines), lines[:5]
        assert max(len(line) for line in lines) < 600, "a message must not echo the hostile input"
        assert len(lines) <= 20, f"{len(lines)} lines: many problems are summed up, not all printed"
