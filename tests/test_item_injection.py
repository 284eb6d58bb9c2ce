"""A loop's item from an upstream's output is text to every command it reaches, never code: real runs whose
jobs would write a marker file if an item ran as a command."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import cli, status


def produce(items: list[str]) -> dict[str, Any]:
    """A job whose result is `{"items": items}`."""
    src = "import os, sys; open(os.environ['WLOADCTL_RESULT_FILE'], 'w').write(sys.argv[1])"
    return {"command": [sys.executable, "-c", src, json.dumps({"items": items})]}


def loop(upstream: str, command: str | list[str], **keys: Any) -> dict[str, Any]:
    return {"for_each": f"jobs.{upstream}.result.items", "depends_on": [upstream], "command": command, **keys}


@pytest.mark.ipc
def test_items_from_an_upstream_run_as_no_command_in_scripts_here_documents_or_cwd(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    # Given items that would write the marker if a shell read them as code
    marker, out = tmp_path / "pwned", tmp_path / "out"
    (tmp_path / "dirs" / "d1").mkdir(parents=True)
    hostile = [f"x; echo PWNED-EC >> {marker}", f"$(echo PWNED >> {marker})"]
    jobs = {
        "hostile": produce(hostile),
        "ec": loop("hostile", ["bash", "-ec", f"echo \"ec: {{item}}\" >> {out}"]),
        "env_sh": loop("hostile", ["/usr/bin/env", "sh", "-c", f"echo env_sh: {{item}} >> {out}"]),
        "nice_bash": loop("hostile", ["nice", "bash", "-l", "-c", f"echo nice_bash: {{item}} >> {out}"]),
        "timeout_sh": loop("hostile", ["timeout", "30", "sh", "-xc", f"echo timeout_sh: {{item}} >> {out}"]),
        "quoted": loop("hostile", f"cat >> {out} <<'EOF'\nquoted: {{item}}\nEOF"),
        "lines": produce(["plain", f"a\nEOF\necho PWNED-HEREDOC >> {marker}"]),
        "heredoc": loop("lines", f"cat >> {out} <<'EOF'\nheredoc: {{item}}\nEOF"),
        "dirs": produce(["d1", "../.."]),
        "in_dir": loop("dirs", f"echo \"in_dir: $(pwd) $WHERE\" >> {out}", cwd=f"{tmp_path}/dirs/{{item}}",
                       env={"WHERE": "at {item}"}),
    }
    plan = tmp_path / "items.yaml"
    plan.write_text(json.dumps({"name": "items", "jobs": jobs}))
    sd = tmp_path / "sd"
    # When it runs
    p = cli("run", str(plan), "--state-dir", str(sd))
    # Then no item ran, and each reached its command as its text
    assert not marker.exists(), marker.read_text()
    assert p.returncode != 0, "the instances that cannot start fail the run"
    lines = sorted(out.read_text().splitlines())
    expected = [f"{name}: {item}" for name in ("ec", "env_sh", "nice_bash", "quoted", "timeout_sh")
                for item in hostile]
    expected += ["heredoc: plain", f"in_dir: {tmp_path}/dirs/d1 at d1"]
    assert lines == sorted(expected)
    # And an instance whose item cannot be given safely failed to start, saying why
    jobs_now = {j["job"]: j for j in status(sd)["jobs"]}
    unfit = {name: j for name, j in jobs_now.items() if j["state"] == "FAILED" and "@" in name}
    assert sorted(j.split("@")[0] for j in unfit) == ["heredoc", "in_dir"]
    reasons = {name.split("@")[0]: j["reason"] for name, j in unfit.items()}
    assert reasons["heredoc"] == ("could not start: its item holds a line break, which could end the quoted "
                                  "here-document <<'EOF' early and run the rest as commands")
    assert reasons["in_dir"] == (f"could not start: its item holds '..': in cwd {tmp_path}/dirs/{{item}} it would "
                                 "name a folder outside the one the plan names")
    assert "\n" not in reasons["heredoc"]
