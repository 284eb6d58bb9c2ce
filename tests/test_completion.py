"""`wloadctl --version` and the shell completion scripts, driven in a real bash."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from wloadctl.cli import build_parser

BIN = str(Path(sys.executable).parent)


def wl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wloadctl", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def complete(words: list[str], env: dict[str, str] | None = None) -> list[str]:
    """Source the bash script, set COMP_WORDS to `words` (the last one being typed), return COMPREPLY."""
    script = wl("completion", "bash").stdout
    quoted = " ".join("'" + w + "'" for w in words)
    prog = (f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _wloadctl; "
            'printf "%s\\n" "${COMPREPLY[@]}"')
    run_env = {**(env or os.environ), "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    p = subprocess.run(["bash", "--norc", "-c", prog], capture_output=True, text=True, timeout=60, env=run_env)
    assert p.returncode == 0, p.stderr
    return [w for w in p.stdout.split("\n") if w]


def test_version_is_the_package_metadata_version() -> None:
    p = wl("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"wloadctl {version('wloadctl')}"


def test_bash_completes_verbs_and_hides_internal_commands() -> None:
    assert complete(["wloadctl", "h"]) == ["hold", "history", "host"]
    every = complete(["wloadctl", ""])
    assert "completion" in every and "status" in every
    assert not any(w.startswith("_") for w in every)
    assert complete(["wloadctl", "--v"]) == ["--version"]


def test_bash_completes_each_verbs_options_as_the_parser_has_them() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run_opts = sorted(o for a in sub.choices["run"]._actions for o in a.option_strings if o.startswith("--exit"))
    assert complete(["wloadctl", "run", "--exit"]) == run_opts == ["--exit-on-hold"]
    assert complete(["wloadctl", "logs", "--f"]) == ["--follow"]
    assert complete(["wloadctl", "rerun", "x", "--d"]) == ["--downstream"]


@pytest.mark.ipc
def test_bash_completes_job_ids_of_the_latest_run(tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given a finished run in a state directory
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "ids", "jobs": {
        "load_eu": {"command": "true"}, "load_us": {"command": "true"}, "post": {"command": "true"}}}))
    sd = tmp_path / "sd"
    assert wl("run", str(plan), "--state-dir", str(sd), "--quiet").returncode == 0
    # Then job words complete to its job ids, with --state-dir or $WLOADCTL_STATE_DIR
    assert complete(["wloadctl", "hold", "--state-dir", str(sd), "load"]) == ["load_eu", "load_us"]
    assert complete(["wloadctl", "why", "--state-dir", str(sd), ""]) == ["load_eu", "load_us", "post"]
    env = {**os.environ, "WLOADCTL_STATE_DIR": str(sd)}
    assert complete(["wloadctl", "release", "p"], env=env) == ["post"]
    assert wl("_complete-jobs", "--state-dir", str(sd)).stdout.split() == ["load_eu", "load_us", "post"]
    assert wl("_complete-jobs", "--state-dir", str(tmp_path / "none")).stdout == ""


def test_zsh_script_is_made_from_the_same_parser() -> None:
    script = wl("completion", "zsh").stdout
    assert script.startswith("#compdef wloadctl") and "_complete-jobs" in script
    assert "        run) opts=(-h --help --state-dir" in script and "--exit-on-hold" in script


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_loads_in_zsh() -> None:
    script = wl("completion", "zsh").stdout
    p = subprocess.run(["zsh", "-f", "-c", f"autoload -U compinit && compinit -u\n{script}\nwhence -w _wloadctl"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "function" in p.stdout, p.stderr
