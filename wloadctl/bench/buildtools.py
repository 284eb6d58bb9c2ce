"""ninja and make on the same DAG and commands as a generated plan."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from wloadctl.gen import Shape, iter_jobs

TOOLS: tuple[str, ...] = ("ninja", "make")
"""The build tools compared, by executable name."""


def write_ninja_file(
    path: Path, jobs: int, shape: Shape, seed: int, command: str
) -> None:
    """A build.ninja with one edge per job, running only the job's command.

    Unlike `wloadctl.gen.write_ninja`, no stamp file is touched after each
    command: a fresh build runs every edge once in dependency order without
    outputs, and a `touch` per job would cost ninja a second process per job
    that wloadctl does not spend. Both tools then run `/bin/sh -c COMMAND` once
    per job.
    """
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        out.write(
            f"# same DAG as: wloadctl gen --jobs {jobs} --shape {shape} --seed {seed}\n"
        )
        out.write(f"rule job\n  command = {command.replace('$', '$$')}\n\n")
        write = out.write
        for job, deps, _ in iter_jobs(jobs, shape, seed):
            write(f"build {job}: job{' | ' + ' '.join(deps) if deps else ''}\n")


def write_makefile(
    path: Path, jobs: int, shape: Shape, seed: int, command: str
) -> None:
    """A Makefile: one target per job, its recipe only the job's command.

    See write_ninja_file for why there are no stamp files.
    """
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        out.write(
            f"# same DAG as: wloadctl gen --jobs {jobs} --shape {shape} --seed {seed}\n"
        )
        out.write(".DEFAULT_GOAL := all\n.PHONY: all\n")
        write = out.write
        recipe = command.replace("$", "$$")
        for job, deps, _ in iter_jobs(jobs, shape, seed):
            write(f"{job}: {' '.join(deps)}\n\t@{recipe}\nall: {job}\n")


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One timed build."""

    seconds: float
    """Wall time of the whole command."""
    cpu_seconds: float
    """User + system CPU of the tool and the commands it ran."""
    ok: bool
    """Exit status 0."""
    error: str
    """Last line of its error output when it failed."""


def available(tool: str) -> bool:
    """Whether the tool is on PATH."""
    return shutil.which(tool) is not None


def run_tool(tool: str, workdir: Path, parallel: int, timeout: float) -> ToolRun:
    """Run `ninja -j N` or `make -j N` from a clean state in the file's directory.

    Args:
        tool: `ninja` or `make`.
        workdir: holds `build.ninja` or `Makefile`.
        parallel: the -j value.
        timeout: seconds before it is killed.

    Returns:
        Its timing; `ok` False when it failed or timed out.
    """
    for stale in (".ninja_log", ".ninja_deps"):
        (workdir / stale).unlink(missing_ok=True)
    argv = [tool, f"-j{parallel}"]
    t0 = time.perf_counter()
    before = os.times()
    try:
        done = subprocess.run(
            argv,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return ToolRun(
            time.perf_counter() - t0, 0.0, False, f"stopped after {timeout:.0f}s"
        )
    seconds = time.perf_counter() - t0
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    err = done.stderr.decode(errors="replace").strip().splitlines()
    return ToolRun(
        seconds, cpu, done.returncode == 0, err[-1] if err and done.returncode else ""
    )
