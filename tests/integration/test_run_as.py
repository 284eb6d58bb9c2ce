"""`run_as: USER`: as root the job, its files and its log are the user's; otherwise a clear refusal."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import cli, job_states

pytestmark = pytest.mark.ipc


def test_run_as_another_user(tmp_path: Path, no_ipc_leaks: None) -> None:
    me = os.geteuid()
    # root runs jobs as an ordinary user; anybody else asks for root's own account
    other = "nobody" if me == 0 else "root"
    # Somewhere the other user can reach (pytest's own base directory is 0700)
    out = Path(tempfile.mkdtemp(prefix="wloadctl-run-as-"))
    out.chmod(0o777)
    try:
        check(tmp_path, out, me, other)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def check(tmp_path: Path, out: Path, me: int, other: str) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "as_user", "jobs": {
        "who": {"command": f"id -un > {out}/who; echo done", "run_as": other}}}))
    sd = tmp_path / "sd"
    p = cli("run", str(plan), "--state-dir", str(sd))
    if me == 0:
        # Then the job ran as that user, and its file and log are theirs
        assert p.returncode == 0, p.stderr
        assert (out / "who").read_text().strip() == other
        uid = pwd.getpwnam(other).pw_uid
        assert (out / "who").stat().st_uid == uid
        logs = list((sd / "logs").rglob("who*"))
        assert logs and all(lg.stat().st_uid == uid for lg in logs)
    else:
        # Then the job fails to start, saying why
        assert p.returncode == 1
        assert job_states(sd) == {"who": "FAILED"}
        why = json.loads(cli("why", "who", "--state-dir", str(sd), "--json").stdout)
        assert any(f"run_as {other} needs the scheduler to run as root" in r for r in why["reasons"]), why
        assert not (out / "who").exists()


def test_a_run_as_job_writes_its_result_and_checkpoint(tmp_path: Path, no_ipc_leaks: None) -> None:
    # As root (CI) the job runs as an ordinary user who cannot reach the state directory (pytest's
    # base is 0700); anybody else runs it as themselves through the same run_as path.
    me = os.geteuid()
    user = "nobody" if me == 0 else pwd.getpwuid(me).pw_name
    # Given a run_as job that checkpoints and fails, then on its retry writes a result from its checkpoint
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "as_user_files", "jobs": {
        "produce": {
            "run_as": user,
            "retries": {"count": 1, "delay": "0s"},
            "command": 'if [ -z "$WLOADCTL_CHECKPOINT" ]; then '
                       'echo chunk-42 > "$WLOADCTL_CHECKPOINT_FILE"; exit 1; fi; '
                       'printf \'{"rows": 2000, "resumed": "%s", "who": "%s", "dir": "%s"}\' '
                       '"$(cat "$WLOADCTL_CHECKPOINT_FILE")" "$(id -un)" "$(dirname "$WLOADCTL_RESULT_FILE")" '
                       '> "$WLOADCTL_RESULT_FILE"'},
        "big": {"command": "true", "depends_on": ["produce"],
                "if": f'jobs["produce"].result.rows > 1000 and jobs["produce"].result.who == "{user}" '
                      'and jobs["produce"].result.resumed == "chunk-42"'},
        "small": {"command": "true", "depends_on": ["produce"], "if": "jobs.produce.result.rows <= 1000"},
    }}))
    sd = tmp_path / "sd"
    # When it runs
    p = cli("run", str(plan), "--state-dir", str(sd), "--json")
    # Then the retry got the checkpoint back and the downstream `if` read the result
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"] == {"produce": "SUCCEEDED", "big": "SUCCEEDED", "small": "SKIPPED"}
    run_results = list((sd / "results").rglob("produce.2"))
    assert len(run_results) == 1
    got = json.loads(run_results[0].read_text())
    assert got["who"] == user and got["resumed"] == "chunk-42"
    # and the job's own directory is gone, its logs are the user's
    assert got["dir"].startswith(tempfile.gettempdir()) and not os.path.exists(got["dir"])
    uid = pwd.getpwnam(user).pw_uid
    logs = list((sd / "logs").rglob("produce*"))
    assert len(logs) == 2 and all(lg.stat().st_uid == uid for lg in logs)
