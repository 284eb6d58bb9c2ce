"""An operator's identity in a live run comes from the kernel through the control socket, not from $USER."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli, evidence_plan, job_states, start, stop_proc, wait_for
from wloadctl.ipc.cleanup import scan_objects
from wloadctl.ipc.ctlsock import SOCKET_NAME
from wloadctl.ipc.naming import ROLE_CONTROL, object_name

pytestmark = pytest.mark.ipc


def test_a_verb_claiming_another_user_is_audited_as_the_caller_and_the_run_has_no_control_queue(
        tmp_path: Path, no_ipc_leaks: None) -> None:
    me = pwd.getpwuid(os.getuid()).pw_name
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {
        "first": {"sleep": 30}, "second": {"depends_on": ["first"]}})
    sd = tmp_path / "sd"
    proc = start("run", str(plan), "--state-dir", str(sd))
    try:
        wait_for(lambda: job_states(sd).get("first") == "RUNNING" if (sd / SOCKET_NAME).exists() else False,
                 what="first running")
        # Given a live run listening on its state directory's socket, and no control queue
        assert stat.S_ISSOCK(os.stat(sd / SOCKET_NAME).st_mode)
        assert stat.S_IMODE(os.stat(sd / SOCKET_NAME).st_mode) == 0o700
        run_id = json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["run"]
        assert object_name(run_id, ROLE_CONTROL) not in [o.name for o in scan_objects()]
        # When an operator claims to be someone else
        env = {**ENV, "USER": "someone-else", "LOGNAME": "someone-else"}
        p = subprocess.run([sys.executable, "-m", "wloadctl", "hold", "second", "--state-dir", str(sd),
                            "--reason", "month end"], capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        assert cli("kill", "first", "--state-dir", str(sd)).returncode == 0
        assert cli("skip", "second", "--state-dir", str(sd)).returncode == 0
        assert proc.wait(60) == 1
    finally:
        stop_proc(proc)
    # Then the audit names the kernel's user, and the socket went with the scheduler
    audit = json.loads(cli("audit", "--state-dir", str(sd), "--json").stdout)
    assert [(a["user"], a["verb"]) for a in audit] == [(me, "hold"), (me, "kill"), (me, "skip")]
    assert not (sd / SOCKET_NAME).exists()


def test_audit_verify_on_the_command_line(tmp_path: Path) -> None:
    import sqlite3

    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {"a": {"exit": 3}, "b": {"depends_on": ["a"]}})
    sd = tmp_path / "sd"
    assert cli("run", str(plan), "--state-dir", str(sd)).returncode == 1
    for verb in ("set-ok", "rerun"):
        assert cli(verb, "a", "--state-dir", str(sd), "--reason", "checked by hand").returncode == 0
    p = cli("audit", "--verify", "--state-dir", str(sd))
    assert p.returncode == 0 and p.stdout.strip() == "audit chain intact: 2 action(s) checked", p.stderr
    # When the journal file is edited around its triggers
    con = sqlite3.connect(sd / "journal.db", isolation_level=None)
    con.execute("DROP TRIGGER actions_no_update")
    con.execute("UPDATE actions SET reason = 'nobody asked' WHERE verb = 'rerun'")
    con.close()
    p = cli("audit", "--verify", "--state-dir", str(sd))
    assert p.returncode == 1
    assert "audit chain broken at action 2 of run" in p.stderr
    assert "rerun a): the row was changed after it was written" in p.stderr
