"""Fault scenarios that need a small disk of their own: run inside user, mount, IPC and pid namespaces.

The test (outside) starts `python -m tests.faults.inns SCENARIO CONFIG` through `ns_command`: a
tmpfs of a few MiB is mounted on the state directory (and a private one on /dev/shm), so the
scenario can fill them without touching the host. Everything the scenario starts lives in the
pid namespace and dies with it. What it saw goes to a JSON report outside the small disks;
the test asserts on that report.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def ns_available() -> bool:
    """Whether this process may make the namespaces (root, or a user namespace of its own; util-linux unshare)."""
    if shutil.which("unshare") is None:
        return False
    probe = ([] if os.geteuid() == 0 else ["--user", "--map-root-user"]) + ["--ipc", "--mount", "true"]
    return subprocess.run(["unshare", *probe], capture_output=True).returncode == 0


def ns_command(mounts: list[tuple[Path | str, str]], args: list[str]) -> list[str]:
    """`args` run in fresh namespaces, with a tmpfs of the given size (e.g. "16m") mounted at each path."""
    own = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    script = " && ".join(f"mount -t tmpfs -o size={size} tmpfs {path}" for path, size in mounts)
    return ["unshare", *own, "--ipc", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
            "sh", "-c", f"{script} && exec \"$@\"", "ns", *args]


# -- inside the namespaces ---------------------------------------------------------------


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wloadctl", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def status(sd: Path) -> dict[str, Any]:
    p = cli("status", "--state-dir", str(sd), "--json")
    try:
        return json.loads(p.stdout) if p.returncode in (0, 1) else {}  # (1: the run ended with a job failed)
    except ValueError:
        return {}


def wait_for(pred: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def starts(evidence: Path) -> int:
    """Lines of job starts in the evidence file."""
    try:
        return sum(1 for line in evidence.read_text().splitlines() if " start " in line)
    except OSError:
        return 0


def ends(evidence: Path) -> int:
    """Lines of job ends in the evidence file."""
    try:
        return sum(1 for line in evidence.read_text().splitlines() if " end " in line)
    except OSError:
        return 0


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill a scenario's scheduler left running by a failure (it has its pid namespace's jobs to take along)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def fill(path: Path, append: bool = False) -> str:
    """Fill the disk under `path` with one file (`append`: fill what was freed since, at its end); return what dd
    said."""
    more = ["oflag=append", "conv=notrunc"] if append else []
    p = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=64k", *more], capture_output=True, text=True)
    return p.stderr.strip().splitlines()[0] if p.stderr.strip() else ""


def journal_facts(sd: Path) -> dict[str, Any]:
    """Integrity, each job's successes, and the run's status, read from the journal."""
    from wloadctl.core.states import JobState
    from wloadctl.store import Store

    con = sqlite3.connect(sd / "journal.db")
    try:
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()
    with Store.open(sd, readonly=True) as st:
        run = st.latest_run()
        assert run is not None
        succeeded = {jid: len([t for t in st.transitions_of(run.id, k) if t[1] == JobState.SUCCEEDED])
                     for k, jid in enumerate(st.job_ids(run.id))}
        return {"integrity": integrity, "succeeded": succeeded, "run_status": run.status, "run_id": run.run_id}


def leftovers(run_id: str) -> dict[str, list[str]]:
    """The run's IPC objects in this namespace's /dev/shm, and wloadctl processes still alive here."""
    shm = [n for n in os.listdir("/dev/shm") if run_id in n]
    procs = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "wloadctl" in cmd and "tests.faults.inns" not in cmd:
                procs.append(cmd)
    return {"shm": shm, "procs": procs}


def full_state_dir(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fill the state directory's disk mid-run, watch the scheduler pause, free the space, watch it finish."""
    sd, plan, evidence = Path(cfg["sd"]), cfg["plan"], Path(cfg["evidence"])
    log = open(cfg["log"], "ab")
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", plan, "--state-dir", str(sd),
                             "--executors", "2", "--slots", "2"], stdout=subprocess.DEVNULL, stderr=log, env=ENV)
    log.close()
    got: dict[str, Any] = {}
    try:
        # A few jobs done, the run well under way
        wait_for(lambda: status(sd).get("counts", {}).get("SUCCEEDED", 0) >= cfg["fill_after"], "first successes")
        got["dd"] = fill(sd / "filler")
        # Paused, and nothing running any more: the jobs running at the fill have ended and reported
        # (a job the scheduler chose in the turn the disk refused stays QUEUED, its dispatch held back)
        def quiet() -> dict[str, Any] | None:
            s = status(sd)
            idle = s.get("paused") and not s["counts"].get("RUNNING") and \
                not any(e["running"] for e in s["executors"]) and starts(evidence) == ends(evidence)
            return s if idle else None

        st = wait_for(quiet, "a paused scheduler with nothing running")
        # (a task sent just before the disk filled may still sit in the request queue: give an
        # idle executor the time to take it, and wait for it to end)
        time.sleep(0.5)
        st = wait_for(quiet, "a paused scheduler with nothing running, again")
        got["paused_status"] = st
        got["status_text"] = cli("status", "--state-dir", str(sd)).stdout
        before = starts(evidence)
        time.sleep(1.0)  # a few beats: each retries the journal and fails
        again = status(sd)
        got["still_paused"] = bool(again.get("paused"))
        got["starts_while_paused"] = starts(evidence) - before
        got["alive_while_paused"] = proc.poll() is None
        (sd / "filler").unlink()
        got["rc"] = proc.wait(timeout=120)
    finally:
        _kill(proc)
    got.update(journal_facts(sd))
    got.update(leftovers(got["run_id"]))
    got["events"] = events_of(sd)
    return got


def events_of(sd: Path) -> list[str]:
    """The names of the run's structured events, in order (a line that is not whole JSON is named `torn`)."""
    out = []
    for line in (sd / "events.jsonl").read_text().splitlines():
        try:
            out.append(str(json.loads(line)["event"]))
        except (ValueError, KeyError):
            out.append("torn")
    return out


def shm_full_at_start(cfg: dict[str, Any]) -> dict[str, Any]:
    """Start a run on a /dev/shm too small for it: what it says, and what it leaves."""
    sd = Path(cfg["sd"])
    p = cli("run", cfg["plan"], "--state-dir", str(sd), "--executors", "2", "--slots", "2")
    got: dict[str, Any] = {"rc": p.returncode, "stderr": p.stderr, "shm": sorted(os.listdir("/dev/shm"))}
    got["procs"] = leftovers("wloadctl")["procs"]
    got["status"] = cli("status", "--state-dir", str(sd)).stdout if (sd / "journal.db").exists() else ""
    return got


def shm_full_mid_run(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fill /dev/shm mid-run: the scheduler stops sending, says why, and sends again when there is room."""
    sd, plan = Path(cfg["sd"]), cfg["plan"]
    log = open(cfg["log"], "ab")
    # --prefetch 0: no task is taken ahead and no follower sent behind the gate job, so no later job's payload
    # grows the arena before /dev/shm is filled (the run would then go on, one job at a time, in the room it has).
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", plan, "--state-dir", str(sd),
                             "--executors", "2", "--slots", "2", "--prefetch", "0"],
                            stdout=subprocess.DEVNULL, stderr=log, env=ENV)
    log.close()
    got: dict[str, Any] = {}
    try:
        wait_for(lambda: status(sd).get("counts", {}).get("SUCCEEDED", 0) >= cfg["fill_after"], "first successes")
        got["dd"] = fill(Path("/dev/shm/filler"))
        Path(cfg["gate"]).touch()
        st = wait_for(lambda: (s := status(sd)).get("paused") and s, "a scheduler short of /dev/shm")
        got["paused_status"] = st
        got["status_text"] = cli("status", "--state-dir", str(sd)).stdout
        got["alive_while_paused"] = proc.poll() is None
        Path("/dev/shm/filler").unlink()
        got["rc"] = proc.wait(timeout=120)
    finally:
        _kill(proc)
    got.update(journal_facts(sd))
    got.update(leftovers(got["run_id"]))
    return got


def full_from_the_start(cfg: dict[str, Any]) -> dict[str, Any]:
    """A run whose first job fills the state directory's disk at once, before the run's first journal writes
    after dispatch (the plan's copy, its facts); the job waits for the filler to go, which the scenario removes
    once the scheduler says it paused."""
    sd, plan = Path(cfg["sd"]), cfg["plan"]
    log = open(cfg["log"], "ab")
    proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", plan, "--state-dir", str(sd)],
                            stdout=subprocess.DEVNULL, stderr=log, env=ENV)
    log.close()
    got: dict[str, Any] = {}
    try:
        wait_for(lambda: (sd / "filler").exists() and b"paused: no space" in Path(cfg["log"]).read_bytes(),
                 "the disk full and the scheduler paused")
        time.sleep(1.0)  # the writes after the first turn come and are refused
        got["alive_while_full"] = proc.poll() is None
        (sd / "filler").unlink()
        got["rc"] = proc.wait(timeout=120)
    finally:
        _kill(proc)
    got.update(journal_facts(sd))
    got.update(leftovers(got["run_id"]))
    got["why"] = cli("why", "b", "--state-dir", str(sd), "--json").stdout
    return got


def full_before_the_run(cfg: dict[str, Any]) -> dict[str, Any]:
    """`wloadctl run` on a state directory whose disk is full, then on one with too little room for the journal."""
    sd, plan = Path(cfg["sd"]), cfg["plan"]
    got: dict[str, Any] = {}
    fill(sd / "filler")
    p = cli("run", plan, "--state-dir", str(sd / "run"))
    got["full"] = {"rc": p.returncode, "stderr": p.stderr}
    (sd / "filler").unlink()
    shutil.rmtree(sd / "run", ignore_errors=True)
    room = shutil.disk_usage(sd).free - cfg["leave"]
    subprocess.run(["dd", "if=/dev/zero", f"of={sd / 'filler'}", "bs=1k", f"count={room // 1024}"],
                   capture_output=True)
    p = cli("run", plan, "--state-dir", str(sd / "run"))
    got["nearly"] = {"rc": p.returncode, "stderr": p.stderr}
    got.update(leftovers(""))
    return got


def small_state_dir(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fill a small state directory's disk once its run is under way; once the scheduler has paused, free the
    space and watch the run finish, or (cfg "stop") stop it while paused, free the space and resume it."""
    sd, plan = Path(cfg["sd"]), cfg["plan"]
    err = Path(cfg["log"])
    with open(err, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", plan, "--state-dir", str(sd)],
                                stdout=subprocess.DEVNULL, stderr=log, env=ENV)
    got: dict[str, Any] = {}
    try:
        wait_for(lambda: status(sd).get("counts", {}).get("SUCCEEDED", 0) >= cfg["fill_after"], "first successes")
        got["dd"] = fill(sd / "filler")

        def paused() -> bool:
            # The scheduler gives its journal's log back to the disk when a write is refused: what that frees is
            # filled again, so the pause lasts until the test frees the space (a poll could miss a short one).
            fill(sd / "filler", append=True)
            return bool(status(sd).get("paused"))

        wait_for(paused, "a paused scheduler")
        if cfg.get("stop"):
            proc.terminate()
            got["rc"] = proc.wait(timeout=60)
            got["stop_said"] = err.read_text().strip().splitlines()[-1]
            (sd / "filler").unlink()
            resumed = cli("resume", "--state-dir", str(sd), timeout=120)
            got["resume_rc"], got["resume_err"] = resumed.returncode, resumed.stderr
            got["resume_err"] += cli("status", "--state-dir", str(sd), "--all").stdout
        else:
            (sd / "filler").unlink()
            got["rc"] = proc.wait(timeout=60)  # a journal wedged for good never gets there
    finally:
        _kill(proc)
    got["wal"] = (sd / "journal.db-wal").stat().st_size if (sd / "journal.db-wal").exists() else 0
    got.update(journal_facts(sd))
    got.update(leftovers(got["run_id"]))
    return got


SCENARIOS = {"full_state_dir": full_state_dir, "shm_full_at_start": shm_full_at_start,
             "shm_full_mid_run": shm_full_mid_run, "full_from_the_start": full_from_the_start,
             "full_before_the_run": full_before_the_run, "small_state_dir": small_state_dir}


def main() -> int:
    name, cfg_path = sys.argv[1], Path(sys.argv[2])
    cfg = json.loads(cfg_path.read_text())
    report = SCENARIOS[name](cfg)
    Path(cfg["report"]).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
