"""The systemd units in contrib/systemd: checked by `systemd-analyze verify`, and carrying what a run needs."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wloadctl.errors import Fenced

UNITS = Path(__file__).parents[1] / "contrib" / "systemd"
INSTANCES = {"wloadctl-scheduler@.service": "nightly", "wloadctl-standby@.service": "nightly",
             "wloadctl-agent@.service": "batch"}


def _service(path: Path) -> configparser.SectionProxy:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(path.read_text())
    return cp["Service"]


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_each_unit_restarts_on_a_crash_leaves_jobs_running_and_raises_the_limits(name: str) -> None:
    svc = _service(UNITS / name)
    assert svc["Restart"] == "on-failure" and "2" in svc["RestartPreventExitStatus"].split()
    if name != "wloadctl-agent@.service":
        # A scheduler fenced by a takeover is not restarted to take the run back from its successor.
        assert str(Fenced.exit_code) in svc["RestartPreventExitStatus"].split()
    assert svc["KillMode"] == "process"  # executors and jobs outlive a restarted scheduler or agent
    for limit in ("LimitMSGQUEUE", "LimitNOFILE", "LimitNPROC"):  # what `wloadctl doctor` checks
        assert int(svc[limit]) > 0
    assert svc["Delegate"] == "yes"
    assert "/usr/local/bin/wloadctl " in svc["ExecStart"] and "--state-dir ${STATE_DIRECTORY}" in svc["ExecStart"]


def test_systemd_analyze_verifies_every_unit(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed here (apt-get install systemd); the units were not verified")
    # The units name the installed command; here it is this environment's.
    exe = Path(sys.executable).parent / "wloadctl"
    assert exe.exists(), exe
    for name in INSTANCES:
        (tmp_path / name).write_text((UNITS / name).read_text().replace("/usr/local/bin/wloadctl", str(exe)))
    paths = [str(tmp_path / name.replace("@.", f"@{inst}.")) for name, inst in INSTANCES.items()]
    r = subprocess.run([tool, "verify", *paths], capture_output=True, text=True, timeout=120)
    # verify only warns (exit 0) about a setting it cannot parse: any word from it is a failure.
    assert r.returncode == 0 and not r.stderr.strip() and not r.stdout.strip(), r.stderr + r.stdout
    # And the check has teeth: a bad kill mode is reported
    bad = tmp_path / "wloadctl-agent@.service"
    bad.write_text(bad.read_text().replace("KillMode=process", "KillMode=sometimes"))
    r = subprocess.run([tool, "verify", str(tmp_path / "wloadctl-agent@batch.service")], capture_output=True,
                       text=True, timeout=120)
    assert "kill mode" in r.stderr
