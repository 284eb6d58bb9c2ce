"""Agents as separate hosts for tests: each in its own IPC, mount and pid namespaces (its own queues and
/dev/shm), sharing nothing with the scheduler but the broker; killing the node kills everything on it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def unshare_available() -> bool:
    """Whether this process may make namespaces (root, or a user namespace of its own; util-linux unshare)."""
    if shutil.which("unshare") is None:
        return False
    probe = ([] if os.geteuid() == 0 else ["--user", "--map-root-user"]) + ["--ipc", "--mount", "true"]
    return subprocess.run(["unshare", *probe], capture_output=True).returncode == 0


def host_command(args: list[str], hostname: str | None = None, shell_init: bool = False) -> list[str]:
    """`args` run on a "host" of its own: IPC, mount and pid namespaces (and its host name, when given).

    With `shell_init` the shell stays the namespace's init and `args` runs as its child, as a
    service does on a real host: an init is spared its own SIGKILL and SIGSTOP by the kernel.
    """
    # The IPC namespace alone makes its queues private (they need no mount to work); its
    # shared memory lives in its own tmpfs.
    # (A shell execs the last command of its script itself: the `exit` after it keeps the shell.)
    script = "mount -t tmpfs tmpfs /dev/shm && " + ("{ \"$@\"; exit $?; }" if shell_init else "exec \"$@\"")
    uts: list[str] = []
    if hostname is not None:
        script = f"hostname {hostname} && {script}"
        uts = ["--uts"]
    # Without root, a user namespace of its own lets the node mount its /dev/shm.
    own = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *own, "--ipc", "--mount", "--pid", *uts, "--fork", "--kill-child", "--mount-proc",
            "sh", "-c", script, "node", *args]


class Node:
    """One agent on its own "host"."""

    marker = b"agent"
    """A word of the command line of the process this host is about (see agent_pid)."""

    def __init__(self, name: str, url: str, state_dir: Path, pools: list[str], slots: int = 4,
                 isolated: bool = True, extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.extra = extra
        self.env = {**ENV, **(env or {})}
        """The agent's environment (ENV, and `env` over it)."""
        self.name = name
        self.url = url
        self.state_dir = state_dir
        self.pools = pools
        self.slots = slots
        self.isolated = isolated
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = state_dir.parent / f"{name}.out"

    def command(self) -> list[str]:
        """The wloadctl command line this host runs."""
        args = [sys.executable, "-m", "wloadctl", "agent", "--broker", self.url, "--name", self.name,
                "--slots", str(self.slots), "--state-dir", str(self.state_dir)]
        for p in self.pools:
            args += ["--pool", p]
        args += list(self.extra)
        return args

    def start(self) -> Node:
        """Start the agent (in its namespaces when isolated)."""
        args = self.command()
        if self.isolated:
            args = host_command(args)
        self.state_dir.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                     cwd=self.state_dir.parent, start_new_session=True)
        out.close()
        return self

    def output(self) -> str:
        """What the agent printed."""
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def kill_node(self) -> None:
        """kill -9 the whole node: the agent, its executors and their jobs."""
        assert self.proc is not None
        if self.isolated:
            os.kill(self.proc.pid, signal.SIGKILL)  # the namespace's init goes, and everything in it
        else:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def signal_agent(self, sig: int) -> None:
        """Send a signal to the agent process alone."""
        pid = self.agent_pid()
        os.kill(pid, sig)

    def agent_pid(self) -> int:
        """The agent's pid as this host sees it."""
        assert self.proc is not None
        if not self.isolated:
            return self.proc.pid
        deadline = time.time() + 10
        while time.time() < deadline:
            for pid in _children(self.proc.pid, deep=True):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                # (The host's shell, when it stays init, carries the same words as its arguments.)
                if cmd[0] != b"sh" and self.marker in cmd and b"wloadctl" in cmd and b"--state-dir" in cmd:
                    return pid
            time.sleep(0.05)
        raise AssertionError(f"no agent process of {self.name}")

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the agent cleanly (SIGTERM), then make sure nothing of the node is left."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.signal_agent(signal.SIGTERM)
            self.proc.wait(timeout)
        except (AssertionError, ProcessLookupError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            self.kill_node()


class SchedulerHost(Node):
    """A scheduler (`wloadctl run` or `wloadctl scheduler --standby`) on a host of its own, with its host name.

    Its journal is a server's and its jobs run on agents: it shares nothing with other hosts but
    PostgreSQL and the broker.
    """

    def __init__(self, name: str, url: str, state_dir: Path, argv: list[str]) -> None:
        super().__init__(name, url, state_dir, [])
        self.argv = argv
        """wloadctl arguments after the program (the verb and its options)."""
        self.marker = argv[0].encode()

    def command(self) -> list[str]:
        """`wloadctl ARGV --state-dir DIR`, its own host name, unbuffered output."""
        return [sys.executable, "-m", "wloadctl", *self.argv, "--state-dir", str(self.state_dir)]

    def start(self) -> SchedulerHost:
        """Start it on its own host (named after it)."""
        self.state_dir.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "ab")
        # Not its host's init: a scheduler asked to drill itself signals itself.
        self.proc = subprocess.Popen(host_command(self.command(), hostname=self.name, shell_init=True), stdout=out,
                                     stderr=subprocess.STDOUT, env=ENV, cwd=self.state_dir.parent,
                                     start_new_session=True)
        out.close()
        return self

    def scheduler_pid(self) -> int:
        """The scheduler's pid as this host sees it."""
        return self.agent_pid()

    def pause(self) -> None:
        """SIGSTOP the scheduler (a host frozen, or cut off)."""
        os.kill(self.scheduler_pid(), signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT it."""
        os.kill(self.scheduler_pid(), signal.SIGCONT)

    def wait(self, timeout: float) -> int:
        """Wait for it to exit; its exit status."""
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop it (SIGTERM), then make sure nothing of the host is left."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.kill(self.scheduler_pid(), signal.SIGCONT)
            os.kill(self.scheduler_pid(), signal.SIGTERM)
            self.proc.wait(timeout)
        except (AssertionError, ProcessLookupError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            self.kill_node()


def _children(pid: int, deep: bool = False) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for tid in os.listdir(f"/proc/{p}/task") if os.path.isdir(f"/proc/{p}/task") else []:
            try:
                kids = [int(x) for x in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            if deep:
                todo += kids
    return out
