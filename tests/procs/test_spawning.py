"""Job processes started through posix_spawn and through Popen behave the same."""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wloadctl.procs.spawning import Spawned, Spawner, keep_descriptors_from_jobs, plain_words, reap, tail_of

SH = "/bin/sh"


@pytest.fixture(params=[True, False], ids=["posix_spawn", "popen"])
def spawner(request: pytest.FixtureRequest) -> Spawner:
    """A spawner on either path."""
    if request.param and not hasattr(os, "posix_spawn"):
        pytest.skip("no os.posix_spawn")
    return Spawner(posix_spawn=request.param)


def run(sp: Spawner, argv: list[str], log: Path, env: dict[str, str] | None = None,
        cwd: str | None = None) -> tuple[int, bytes, Spawned]:
    """Start, wait through a pidfd as the executor does, reap; (exit code, tail, process)."""
    fd = sp.open_log(str(log))
    try:
        proc = sp.spawn(argv, sp.env_for(env or {}), cwd, fd)
        pidfd = os.pidfd_open(proc.pid)
        try:
            assert select.select([pidfd], [], [], 30)[0], "the job did not exit"
        finally:
            os.close(pidfd)
        rc = reap(proc)
        return rc, tail_of(fd, str(log), 4096), proc
    finally:
        os.close(fd)


def test_exit_codes_logs_and_tails(spawner: Spawner, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "a" / "1.log"
    rc, tail, proc = run(spawner, [SH, "-c", "echo out; echo err >&2; exit 3"], log)
    assert rc == 3 and tail == b"out\nerr\n" and log.read_bytes() == b"out\nerr\n"
    assert (proc.proc is None) == spawner.posix_spawn
    rc, tail, _ = run(spawner, [SH, "-c", "echo again"], log)  # appended, as a retry's reopen
    assert rc == 0 and tail == b"out\nerr\nagain\n"


def test_a_signal_is_reported_as_minus_its_number(spawner: Spawner, tmp_path: Path) -> None:
    rc, tail, _ = run(spawner, [SH, "-c", "kill -TERM $$"], tmp_path / "x.log")
    assert rc == -signal.SIGTERM and tail == b""


def test_command_not_found_is_the_shells_127(spawner: Spawner, tmp_path: Path) -> None:
    rc, tail, _ = run(spawner, [SH, "-c", "no-such-command-anywhere"], tmp_path / "x.log")
    assert rc == 127 and b"not found" in tail


def test_a_missing_program_or_directory_fails_to_start(spawner: Spawner, tmp_path: Path) -> None:
    fd = spawner.open_log(str(tmp_path / "x.log"))
    try:
        with pytest.raises(OSError) as e:
            spawner.spawn(["/no/such/program"], spawner.base_env, None, fd)
        assert e.value.errno == errno.ENOENT and e.value.strerror == "No such file or directory"
        with pytest.raises(OSError) as e:
            spawner.spawn([SH, "-c", "true"], spawner.base_env, str(tmp_path / "gone"), fd)
        assert e.value.errno == errno.ENOENT
    finally:
        os.close(fd)


def test_a_working_directory_and_a_bare_program_name_go_through_popen(tmp_path: Path) -> None:
    sp = Spawner(posix_spawn=True)
    rc, tail, proc = run(sp, ["pwd"], tmp_path / "x.log", cwd=str(tmp_path))
    assert rc == 0 and tail == f"{tmp_path}\n".encode() and proc.proc is not None
    rc, tail, proc = run(sp, ["echo", "hi"], tmp_path / "y.log")
    assert rc == 0 and tail == b"hi\n" and proc.proc is not None


def test_the_job_leads_its_own_session_and_a_group_kill_stops_its_children(
        spawner: Spawner, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    fd = spawner.open_log(str(tmp_path / "x.log"))
    try:
        proc = spawner.spawn([SH, "-c", f"sleep 30 & echo $! > {pids}; wait"], spawner.base_env, None, fd)
    finally:
        os.close(fd)
    deadline = time.time() + 10
    while not (pids.exists() and pids.read_text().strip()) and time.time() < deadline:
        time.sleep(0.02)
    child = int(pids.read_text())
    assert os.getsid(proc.pid) == proc.pid and os.getpgid(proc.pid) == proc.pid
    assert os.getpgid(child) == proc.pid
    os.killpg(proc.pid, signal.SIGTERM)
    assert reap(proc) == -signal.SIGTERM
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    else:
        pytest.fail("the job's child outlived the group kill")


def test_stdin_is_empty_and_signals_python_ignores_are_back_at_defaults(spawner: Spawner, tmp_path: Path) -> None:
    rc, tail, _ = run(spawner, ["/bin/cat", "-"], tmp_path / "in.log")
    assert rc == 0 and tail == b""
    assert signal.getsignal(signal.SIGPIPE) is signal.SIG_IGN  # Python's own, inherited but for the reset
    rc, tail, _ = run(spawner, ["/bin/cat", "/proc/self/status"], tmp_path / "status.log")
    ignored = int(next(ln for ln in tail.decode().splitlines() if ln.startswith("SigIgn:")).split()[1], 16)
    assert rc == 0 and not ignored & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1))


def test_no_descriptor_of_the_executor_reaches_the_job(spawner: Spawner, tmp_path: Path) -> None:
    r, w = os.pipe()
    os.set_inheritable(w, True)
    try:
        keep_descriptors_from_jobs()
        assert not os.get_inheritable(w)
        code = "import os; print(sorted(int(n) for n in os.listdir('/proc/self/fd')))"
        rc, tail, _ = run(spawner, [sys.executable, "-c", code], tmp_path / "x.log")
        assert rc == 0 and tail == b"[0, 1, 2, 3]\n"  # 3: the listing's own
    finally:
        os.close(r)
        os.close(w)


def test_the_environment_adds_the_payloads_without_changing_the_base(spawner: Spawner, tmp_path: Path) -> None:
    assert spawner.env_for({}) is spawner.base_env
    rc, tail, _ = run(spawner, [SH, "-c", 'echo "$WL_X-$HOME"'], tmp_path / "x.log", env={"WL_X": "1"})
    assert rc == 0 and tail == f"1-{os.environ.get('HOME', '')}\n".encode()
    assert "WL_X" not in spawner.base_env


def test_a_removed_log_directory_is_made_again(tmp_path: Path) -> None:
    sp = Spawner()
    d = tmp_path / "logs"
    os.close(sp.open_log(str(d / "a.log")))
    (d / "a.log").unlink()
    d.rmdir()
    os.close(sp.open_log(str(d / "b.log")))
    assert (d / "b.log").exists()


def test_a_tail_is_the_last_bytes_and_nothing_for_an_empty_log(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    fd = Spawner().open_log(str(log))
    try:
        assert tail_of(fd, str(log), 8) == b""
        os.write(fd, b"0123456789abcdef")
        assert tail_of(fd, str(log), 8) == b"89abcdef"
        assert tail_of(fd, str(log), 100) == b"0123456789abcdef"
    finally:
        os.close(fd)


@pytest.mark.parametrize(("command", "words"), [
    ("true", ["true"]),
    ("echo a  b", ["echo", "a", "b"]),
    ("printf 'x y'", ["printf", "x y"]),
    ('echo "a b" c', ["echo", "a b", "c"]),
    ("echo $HOME", None), ("a=1 env", None), ("cd /tmp", None), ("ls *.py", None), ("x && y", None),
    ("x; y", None), ("x | y", None), ("x > f", None), ("echo ~", None), ("echo a\\ b", None),
    ("echo 'unclosed", None), ("exit 3", None), ("echo a\nb", None), ("", None), ("   ", None),
])
def test_a_command_needs_the_shell_only_for_shell_syntax(command: str, words: list[str] | None) -> None:
    assert plain_words(command) == words


def test_a_plain_command_runs_without_the_shell_and_the_rest_through_it(tmp_path: Path) -> None:
    sp = Spawner()
    env = sp.env_for({"PATH": f"{tmp_path}:/usr/bin:/bin"})
    prog = tmp_path / "say-argv"
    prog.write_text("#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\necho \"parent $PPID\"\n")
    prog.chmod(0o755)
    argv = sp.argv_for("say-argv 'a b' c", env)
    assert argv == [str(prog), "a b", "c"]
    rc, tail, _ = run(sp, argv, tmp_path / "direct.log", {"PATH": env["PATH"]})
    assert rc == 0 and tail.startswith(b"[a b]\n[c]\n")
    assert sp.argv_for("say-argv $HOME", env) == [SH, "-c", "say-argv $HOME"]
    # Not found on the PATH: the shell reports it, with its status.
    argv = sp.argv_for("no-such-command-anywhere x", env)
    assert argv[:2] == [SH, "-c"]
    rc, tail, _ = run(sp, argv, tmp_path / "missing.log")
    assert rc == 127 and b"not found" in tail
    assert sp.argv_for(["/bin/echo", "$x"], env) == ["/bin/echo", "$x"]


def test_a_log_is_made_at_first_output_and_a_silent_jobs_spare_is_lent_again(
        spawner: Spawner, tmp_path: Path) -> None:
    def job(argv: list[str], log: Path) -> tuple[int, bytes]:
        lf = spawner.lend_log(str(log))
        proc = spawner.spawn(argv, spawner.env_for({}), None, lf.fd)
        pidfd = os.pidfd_open(proc.pid)
        try:
            assert select.select([pidfd], [], [], 30)[0], "the job did not exit"
        finally:
            os.close(pidfd)
        rc = reap(proc)
        tail = tail_of(lf.fd, lf.path, 4096) if spawner.publish_log(lf) else b""
        spawner.return_log(lf)
        return rc, tail

    d = tmp_path / "logs"
    # Given a silent job, when it ends, then no log exists and its spare waits for the next job
    assert job(["/bin/true"], d / "quiet.1.log") == (0, b"")
    assert not (d / "quiet.1.log").exists()
    spares = sorted(p.name for p in d.iterdir())
    assert len(spares) == 1 and spares[0].startswith(".spare-")
    # When a job writes, then the same file becomes its log
    assert job([SH, "-c", "echo out; echo err >&2"], d / "loud.1.log") == (0, b"out\nerr\n")
    assert (d / "loud.1.log").read_bytes() == b"out\nerr\n"
    assert list(d.iterdir()) == [d / "loud.1.log"]
    # An attempt whose log exists already appends to it (a resumed attempt)
    assert job([SH, "-c", "echo again"], d / "loud.1.log") == (0, b"out\nerr\nagain\n")
    assert job(["/bin/true"], d / "quiet.2.log") == (0, b"")
    spawner.close_logs()
    assert sorted(p.name for p in d.iterdir()) == ["loud.1.log"]


def test_a_running_jobs_output_is_named_when_published(spawner: Spawner, tmp_path: Path) -> None:
    log = tmp_path / "slow.1.log"
    lf = spawner.lend_log(str(log))
    proc = spawner.spawn([SH, "-c", "echo started; exec sleep 30"], spawner.env_for({}), None, lf.fd)
    try:
        deadline = time.monotonic() + 30
        while not spawner.publish_log(lf):
            assert time.monotonic() < deadline, "no output seen"
            time.sleep(0.01)
        assert log.read_bytes() == b"started\n"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        reap(proc)
        spawner.return_log(lf)
        spawner.close_logs()
    assert list(tmp_path.iterdir()) == [log]


def test_spare_log_files_of_dead_processes_are_removed_and_those_of_live_ones_kept(tmp_path: Path) -> None:
    from wloadctl.procs.spawning import remove_dead_spares

    gone = subprocess.Popen(["true"])
    gone.wait()
    mine = tmp_path / f".spare-{os.getpid()}-1"
    dead = tmp_path / f".spare-{gone.pid}-7"
    log = tmp_path / "job.1.log"
    for p in (mine, dead, log):
        p.write_bytes(b"")
    assert remove_dead_spares(str(tmp_path)) == 1
    assert mine.exists() and log.exists() and not dead.exists()
    assert remove_dead_spares(str(tmp_path / "absent")) == 0


def test_own_children_lists_this_process_children_as_the_proc_scan_does() -> None:
    from wloadctl.procs.jobtree import children_of, own_children

    procs = [subprocess.Popen(["sleep", "30"]) for _ in range(3)]
    try:
        mine = own_children()
        assert {p.pid for p in procs} <= set(mine)
        assert sorted(mine) == sorted(children_of(os.getpid()))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert not {p.pid for p in procs} & set(own_children())
