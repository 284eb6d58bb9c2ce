"""`wloadctl doctor`: the limits it reports are the kernel's, and a live run shows in its use."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import ENV, cli, evidence_plan, status, wait_for
from wloadctl.ipc.mq import queue_charge
from wloadctl.ipc.quota import run_shapes
from wloadctl.procs.jobtree import WARM_ENV, WARM_EVERY, detect, favoring_dynmods, warm_interval
from wloadctl.procs.limits import judge, probe, run_queue_bytes

KEYS = {"name", "limit", "used", "unit", "verdict", "hint", "note"}


def doctor_json() -> dict[str, dict]:
    p = cli("doctor", "--json", timeout=60)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert isinstance(rows, list) and rows
    for r in rows:
        assert set(r) == KEYS and r["verdict"] in ("ok", "low", "exhausted")
        assert r["limit"] is None or isinstance(r["limit"], int)
        assert r["used"] is None or isinstance(r["used"], int)
    return {r["name"].split(" (")[0]: r for r in rows}


def soft(which: int) -> int | None:
    v = resource.getrlimit(which)[0]
    return None if v == resource.RLIM_INFINITY else v


def test_doctor_reports_the_kernels_limits() -> None:
    rows = doctor_json()
    assert rows["mqueue bytes"]["limit"] == soft(resource.RLIMIT_MSGQUEUE)
    assert rows["open files"]["limit"] == soft(resource.RLIMIT_NOFILE)
    assert rows["processes"]["limit"] == soft(resource.RLIMIT_NPROC)
    for key in ("msg_max", "msgsize_max", "queues_max"):
        assert rows[f"fs.mqueue.{key}"]["limit"] == int(Path("/proc/sys/fs/mqueue", key).read_text())
    st = os.statvfs("/dev/shm")
    assert rows["/dev/shm space"]["limit"] == st.f_blocks * st.f_frsize
    assert "cgroup v2" in rows and "wloadctl runs holding IPC objects" in rows
    # doctor says which way a job's whole tree is ended on this host
    assert f"job tree kill: {detect().mode}" in cli("doctor").stdout


def test_doctor_prints_one_line_per_limit_with_a_verdict() -> None:
    p = cli("doctor", timeout=60)
    assert p.returncode == 0, p.stderr
    heads = [line for line in p.stdout.splitlines() if not line.startswith(" ")]
    assert len(heads) == len(probe())
    assert all(line.split()[0] in ("ok", "low", "exhausted") for line in heads)


def test_judge_and_queue_charge() -> None:
    assert judge(10, 100) == "ok" and judge(90, 100) == "low" and judge(100, 100) == "exhausted"
    assert judge(50, 100, need=60) == "low" and judge(5, None) == "ok"
    # ipc/mqueue.c: texts + one 48-byte header per slot + one 48-byte priority node per slot.
    assert queue_charge(10, 8192) == 10 * (8192 + 48) + 10 * 48
    # The default ulimit -q (819,200 bytes) holds nine default queues, not ten.
    assert 819200 // queue_charge(10, 8192) == 9
    # A run's queues are sized so that fifty runs fit the quota (see wloadctl.ipc.quota); it holds
    # two (request, response): verbs come over the control socket.
    shapes = run_shapes(10**6)
    assert run_queue_bytes() == shapes.charge == shapes.request.charge + shapes.response.charge  # the largest run


@pytest.mark.ipc
def test_a_live_run_counts_in_the_runs_and_queue_bytes(tmp_path: Path, no_ipc_leaks: None) -> None:
    plan = evidence_plan(tmp_path / "plan.yaml", tmp_path / "ev", {"nap": {"sleep": 60}})
    sd = tmp_path / "sd"
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)
    try:
        def live() -> bool:
            try:
                return bool(status(sd)["live"])
            except (json.JSONDecodeError, ValueError):
                return False

        wait_for(live, what="the run live")
        run_id = status(sd)["run"]
        rows = doctor_json()
        runs = rows["wloadctl runs holding IPC objects"]
        assert runs["used"] >= 1
        if runs["used"] <= 10:  # the note names the first ten
            assert run_id in runs["note"]
        assert rows["mqueue bytes"]["used"] >= run_shapes(1).charge
    finally:
        proc.send_signal(signal.SIGTERM)  # stops its jobs too (Ctrl-C would leave them running)
        proc.wait(60)


MOUNTINFO = """\
25 30 0:23 / /sys rw,nosuid - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 25 0:39 / /sys/fs/cgroup/other rw,relatime - cgroup2 cgroup2 rw,favordynmods
"""


def test_favordynmods_is_read_from_the_mount_holding_the_job_groups() -> None:
    assert favoring_dynmods(MOUNTINFO, Path("/sys/fs/cgroup/unified/a/b")) == ("/sys/fs/cgroup/unified", False)
    assert favoring_dynmods(MOUNTINFO, Path("/sys/fs/cgroup/other")) == ("/sys/fs/cgroup/other", True)
    assert favoring_dynmods(MOUNTINFO, Path("/sys/fs/cgroup/unifiedx")) is None
    shown = MOUNTINFO.replace("rw,relatime - cgroup2 cgroup2 rw\n", "rw,relatime,favordynmods - cgroup2 cgroup2 rw\n")
    assert favoring_dynmods(shown, Path("/sys/fs/cgroup/unified/g")) == ("/sys/fs/cgroup/unified", True)
    assert favoring_dynmods("", Path("/sys/fs/cgroup")) is None


def test_executors_keep_moves_fast_only_where_the_mount_lacks_favordynmods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WARM_ENV, raising=False)
    assert warm_interval(Path("/sys/fs/cgroup/unified/a"), MOUNTINFO) == WARM_EVERY
    assert warm_interval(Path("/sys/fs/cgroup/other/a"), MOUNTINFO) == 0.0
    # An operator's setting wins either way; a negative one turns it off, one that is no number is ignored.
    monkeypatch.setenv(WARM_ENV, "0.02")
    assert warm_interval(Path("/sys/fs/cgroup/other/a"), MOUNTINFO) == 0.02
    monkeypatch.setenv(WARM_ENV, "-1")
    assert warm_interval(Path("/sys/fs/cgroup/unified/a"), MOUNTINFO) == 0.0
    monkeypatch.setenv(WARM_ENV, "nan")
    assert warm_interval(Path("/sys/fs/cgroup/unified/a"), MOUNTINFO) == 0.0
    # A write every microsecond would keep the executor's loop from ever waiting: a millisecond at least
    monkeypatch.setenv(WARM_ENV, "0.000001")
    assert warm_interval(Path("/sys/fs/cgroup/unified/a"), MOUNTINFO) == 0.001
    monkeypatch.setenv(WARM_ENV, "often")
    assert warm_interval(Path("/sys/fs/cgroup/unified/a"), MOUNTINFO) == WARM_EVERY


def test_doctor_says_whether_job_starts_wait_for_the_kernel() -> None:
    rows = doctor_json()
    how = detect()
    row = rows.get("cgroup job starts")
    if how.mode != "cgroup":
        assert row is None
        return
    assert how.base is not None
    found = favoring_dynmods(Path("/proc/self/mountinfo").read_text(), how.base)
    assert found is not None and row is not None
    assert row["verdict"] == ("ok" if found[1] else "low")
    assert found[1] or f"remount,favordynmods {found[0]}" in row["hint"]
    # and whether the executors keep moves fast meanwhile (this suite runs with the default setting)
    assert found[1] or "write into their own group every 5 ms" in row["note"], row["note"]


def test_a_run_is_told_at_its_start_which_claims_its_host_cannot_limit(tmp_path: Path, no_ipc_leaks: None) -> None:
    """`limits: enforce` on a host without the controllers: jobs ran over their claims, and only a variable in
    their own environment said so, nothing on the run's terminal, in status or in the events."""
    from pathlib import Path as P

    from wloadctl.procs.jobtree import Containment, unenforced

    group = Containment("cgroup", P("/sys/fs/cgroup/x"), frozenset({"cpu"}), "")
    assert unenforced({"cpu"}, group) is None
    assert unenforced({"memory", "cpu"}, group) == (
        "limits: enforce: this host cannot limit the memory its jobs claim (the memory controller is not enabled "
        "in its cgroup): they run without those limits (`wloadctl doctor` says what the host lacks)")
    assert "(no cgroup of its own here)" in (unenforced({"memory"}, Containment("subreaper", None, frozenset(), ""))
                                             or "")
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: lim\nlimits: enforce\njobs:\n  hog: {command: 'true', memory: 64M, cpu: 0.5}\n"
                    "  free: {command: 'true'}\n")
    # Forced to the subreaper mode, no host can make limits: said once, before the jobs' lines
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "a"), env={"WLOADCTL_JOB_TREE": "subreaper"})
    assert p.returncode == 0, p.stderr
    told = [line for line in p.stderr.splitlines() if "limits: enforce" in line]
    assert told == ["wloadctl: limits: enforce: this host cannot limit the cpu and memory its jobs claim (no cgroup "
                    "of its own here): they run without those limits (`wloadctl doctor` says what the host lacks)"]
    # A plan that only claims (the default) is not told: its claims decide where and when jobs start
    plan.write_text(plan.read_text().replace("limits: enforce\n", ""))
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "b"), env={"WLOADCTL_JOB_TREE": "subreaper"})
    assert p.returncode == 0 and "limits" not in p.stderr, p.stderr
