"""Starting a job's process for the executor: its own session, its output in a log file.

`os.posix_spawn` starts a job with one clone-and-exec and no Python work in between;
`subprocess.Popen` is kept for what posix_spawn cannot do here (a working directory,
a bare program name looked up in the job's own PATH). Both give the same process: the
leader of a new session and process group, stdin from /dev/null, stdout and stderr
appended to the attempt's log, no descriptor of the executor's inherited, SIGPIPE and
SIGXFSZ at their defaults.

A command given as text runs through `/bin/sh -c` only when it needs a shell: one with no
shell syntax (no quoting beyond plain quotes, no expansion, redirection, pipe, list, glob,
assignment or builtin) is split into words and run directly, as make does, saving the shell's
own start for each job. The program is looked up in the job's PATH once per (name, PATH). A job
that gets a cgroup of its own starts in it the same way: the executor steps into the group for the
moment of the clone and back (two writes to `cgroup.procs`), so no shell is started to move it.

A job's log is created when it first has output (`LogFile`): a job starts on a spare file of
its executor, renamed to the attempt's log path once it is not empty (at the executor's beat
while the job runs, at the latest when it ends) and lent to the next job when the job wrote
nothing. Creating a file costs a directory update (hundreds of microseconds on a journaled
file system, as much CPU as the rest of the job's path); most short jobs print nothing.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import count

from wloadctl.core.outputcap import cut_note
from wloadctl.procs.jobtree import joining
from wloadctl.procs.resultlog import say

LOG_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
"""How a log file is opened: appended to, created when missing, never inherited as such."""
LOG_MODE = 0o666
"""Permissions of a new log file before the umask (those of `open(path, "ab")`)."""
DEFAULT_SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)
"""Signals Python ignores for itself and a job gets back at their defaults (as Popen's restore_signals)."""
ARGV_CACHE = 4096
"""Command texts whose argv is kept (the cache starts over when full)."""
_SPARES = count()
"""Serial of spare log files made by this process."""

SHELL = "/bin/sh"
"""The shell of commands that need one."""
SHELL_CHARS = frozenset("#;&|<>(){}$`\\*?[]~!\n\r=%^")
"""Characters that make a command text need the shell (make's list, with `=`, `%` and newlines)."""
SHELL_WORDS = frozenset((
    ".", ":", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done", "elif", "else", "esac",
    "eval", "exec", "exit", "export", "fc", "fg", "fi", "for", "function", "getopts", "hash", "if", "jobs", "kill",
    "local", "read", "readonly", "return", "select", "set", "shift", "source", "test", "then", "time", "times",
    "trap", "type", "ulimit", "umask", "unalias", "unset", "until", "wait", "while", "[", "[[", "{", "}",
))
"""First words a shell gives its own meaning (builtins and keywords): such commands keep the shell."""


def plain_words(command: str) -> list[str] | None:
    """The words of a command text with no shell syntax, or None when it needs the shell."""
    if not command or any(c in SHELL_CHARS for c in command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or words[0] in SHELL_WORDS:
        return None
    return words


def nul_byte_in(command: str | Sequence[str] | None, env: Mapping[str, str], cwd: str | None) -> str | None:
    """What of a job's start holds a NUL byte (None: nothing does).

    No program's arguments, environment or path can hold one (C strings end at it), and
    Python refuses to start such a process with a ValueError, not an OSError: a job whose
    command, environment or working directory holds one cannot start, and is told so.
    Its environment gets NULs from outside the plan too: a checkpoint file the job wrote,
    or a loop's item from an upstream's result.

    Args:
        command: The job's command text or argv.
        env: What the job adds to the executor's environment (that one holds no NUL).
        cwd: Its working directory (None: the executor's).

    Returns:
        A phrase such as "its environment holds a NUL byte (in WLOADCTL_CHECKPOINT)", or None.
    """
    if command is not None and any("\0" in w for w in ([command] if isinstance(command, str) else command)):
        return "its command holds a NUL byte"
    for name, value in env.items():
        if "\0" in value or "\0" in name:
            return f"its environment holds a NUL byte (in {name.replace(chr(0), '')})"
    if cwd and "\0" in cwd:
        return "its working directory holds a NUL byte"
    return None


@dataclass(slots=True)
class Spawned:
    """A started job process."""

    pid: int
    """Its pid, also its process group and session id."""
    proc: subprocess.Popen[bytes] | None = None
    """The Popen object when it was started through subprocess (told the exit status once reaped)."""


@dataclass(slots=True)
class LogFile:
    """A job's output file: a spare lent to it until it has output, then its log at `final`."""

    fd: int
    """The executor's descriptor (write-only, append), the job's stdout and stderr."""
    path: str
    """Where the file is now: `final` once named, else the spare's name."""
    final: str
    """The attempt's log path."""
    named: bool
    """The file is at `final` (it had output, or it was opened there)."""


@dataclass
class Spawner:
    """Starts job processes; remembers the environment and the log directories it already made."""

    base_env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    """The executor's environment, every job's starting point."""
    posix_spawn: bool = hasattr(os, "posix_spawn")
    """Start through os.posix_spawn where it can (False: always subprocess.Popen)."""
    made_dirs: set[str] = field(default_factory=set)
    """Log directories known to exist."""
    programs: dict[tuple[str, str], str | None] = field(default_factory=dict)
    """Where a program name was found on a PATH (None: not there)."""
    argvs: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """The argv of a command text on a PATH, as argv_for found it (many jobs share a command)."""
    spares: dict[str, list[LogFile]] = field(default_factory=dict)
    """Empty spare files ready to be lent, by log directory."""
    spare_names: set[str] = field(default_factory=set)
    """Every spare file made and not yet named or removed (removed at close)."""
    home_group: str | None = None
    """The `cgroup.procs` of the executor's own cgroup (cgroup mode): it steps into a job's group for the
    moment of the job's start and comes back, so the job starts there without a shell to move it."""
    enter: Callable[[str], bool] = field(default=lambda procs: _move_self(procs))
    """Moves this process into the group of a `cgroup.procs` (the executor's job trees keep those files open)."""

    def argv_for(self, command: str | Sequence[str] | None, env: Mapping[str, str]) -> list[str]:
        """The argv that runs a job's command: its words when it needs no shell, else `/bin/sh -c TEXT`."""
        if not isinstance(command, str):
            words = list(command or ["true"])
            if "/" not in words[0]:
                # Found on PATH as the shell would (and started without one); a name not found is left for
                # `spawn` to refuse, in every mode alike.
                found = self._program(words[0], env)
                if found is not None and os.path.isabs(found):
                    words[0] = found
            return words
        key = (command, env.get("PATH", os.defpath))
        argv = self.argvs.get(key)
        if argv is None:
            if len(self.argvs) >= ARGV_CACHE:
                self.argvs.clear()
            argv = self.argvs[key] = self._argv_of(command, env)
        return list(argv)

    def _argv_of(self, command: str, env: Mapping[str, str]) -> list[str]:
        words = plain_words(command)
        if words is None:
            return [SHELL, "-c", command]
        name = words[0]
        if "/" not in name:
            found = self._program(name, env)
            if found is None or not os.path.isabs(found):
                # Not found (the shell says so, with its status 127), or found through a relative PATH
                # entry that the job's own working directory may change.
                return [SHELL, "-c", command]
            words[0] = found
        return words

    def _program(self, name: str, env: Mapping[str, str]) -> str | None:
        """Where PATH (the job's) finds program `name` (None: nowhere), looked up once per name and PATH."""
        key = (name, env.get("PATH", os.defpath))
        found = self.programs.get(key, "")
        if found == "":
            found = self.programs[key] = shutil.which(name, path=key[1])
        return found

    def env_for(self, extra: Mapping[str, str]) -> dict[str, str]:
        """The environment of a job adding `extra` (the shared base itself when it adds nothing)."""
        if not extra:
            return self.base_env
        env = dict(self.base_env)
        env.update(extra)
        return env

    def open_log(self, path: str) -> int:
        """Open (create) a log file for appending, making its directory when needed.

        Returns:
            A close-on-exec descriptor numbered 3 or above.

        Raises:
            OSError: The directory or the file cannot be made or opened.
        """
        d = os.path.dirname(path)
        if d and d not in self.made_dirs:
            os.makedirs(d, exist_ok=True)
            self.made_dirs.add(d)
        try:
            fd = os.open(path, LOG_FLAGS, LOG_MODE)
        except FileNotFoundError:
            if not d:
                raise
            # The directory was removed since it was made: make it again, once.
            self.made_dirs.discard(d)
            os.makedirs(d, exist_ok=True)
            self.made_dirs.add(d)
            fd = os.open(path, LOG_FLAGS, LOG_MODE)
        if fd < 3:
            # Only when the executor runs without a standard descriptor: keep 0-2 for the job.
            low, fd = fd, fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(low)
        return fd

    def lend_log(self, path: str) -> LogFile:
        """The output file of a job whose log is `path`: a spare until it has output.

        An attempt whose log exists already (a resumed attempt) appends to it as before.

        Raises:
            OSError: The directory or the file cannot be made or opened.
        """
        if os.path.lexists(path):
            return LogFile(self.open_log(path), path, path, True)
        d = os.path.dirname(path) or "."
        free = self.spares.get(d)
        while free:
            lf = free.pop()
            if os.fstat(lf.fd).st_size == 0:
                lf.final = path
                return lf
            # Written after its job ended (a straggler of that job's tree, killed since): the
            # output is that job's, at that job's log.
            self.publish_log(lf)
            os.close(lf.fd)
        spare = f"{d}/.spare-{os.getpid()}-{next(_SPARES)}"
        fd = self.open_log(spare)
        self.spare_names.add(spare)
        return LogFile(fd, spare, path, False)

    def publish_log(self, lf: LogFile) -> bool:
        """Give a lent file its log's name once it has output; return whether it is named."""
        if lf.named:
            return True
        try:
            if os.fstat(lf.fd).st_size == 0:
                return False
            os.rename(lf.path, lf.final)
        except OSError:
            return False  # tried again at the next beat or at the job's end
        self.spare_names.discard(lf.path)
        lf.path, lf.named = lf.final, True
        return True

    def return_log(self, lf: LogFile) -> None:
        """The job ended: its named log is closed, an unused spare is kept for the next job."""
        if self.publish_log(lf):
            os.close(lf.fd)
            return
        self.spares.setdefault(os.path.dirname(lf.path) or ".", []).append(lf)

    def close_logs(self) -> None:
        """Close and remove the spare files (what is lent out is closed by its holder)."""
        for free in self.spares.values():
            for lf in free:
                os.close(lf.fd)
        self.spares.clear()
        for name in self.spare_names:
            try:
                os.unlink(name)
            except OSError:
                pass
        self.spare_names.clear()

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None, log_fd: int,
              run_as: str | None = None, join: str | None = None) -> Spawned:
        """Start `argv` in a new session with stdin from /dev/null and stdout and stderr on `log_fd`.

        Args:
            argv: The program and its arguments.
            env: Its environment.
            cwd: Its working directory (None: the executor's).
            log_fd: Where its output goes.
            run_as: A user to run it as (the log becomes theirs); needs root unless it is this user.
            join: A cgroup's `cgroup.procs` the process starts in: this process steps into it for the
                start when `home_group` is set, else a shell moves the job there before it execs (and a
                `run_as` job joins it before it drops to the user).

        Raises:
            OSError: The process could not be started (no such program, no such directory, a
                run_as user this executor may not become, ...).
        """
        if run_as is not None:
            return self._spawn_as(argv, env, cwd, log_fd, run_as, join)
        if self.posix_spawn and not cwd and "/" in argv[0]:
            if join is None:
                sp = self._posix_spawn(argv, env, log_fd)
            elif self.home_group is not None and self.enter(join):
                # The child is made in the group this process is in: it starts there, and so does
                # everything it forks. Only the moment of the clone is spent in the job's group.
                try:
                    sp = self._posix_spawn(argv, env, log_fd)
                finally:
                    if not self.enter(self.home_group):
                        # Killing the job's group would kill this executor too: it must not go on.
                        raise RuntimeError(f"cannot move back to {self.home_group} after starting a job")
            else:
                sp = None
            if sp is not None:
                return sp
        if join is not None:
            if "/" not in argv[0] and self._program(argv[0], env) is None:
                # Not for the joining shell to say (its 127, worded after the group's file): as where none joins.
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
            # A shell moves the process into its group before it becomes the job.
            argv = joining(join, list(argv))
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                                cwd=cwd or None, env=env, start_new_session=True, close_fds=True)
        return Spawned(proc.pid, proc)

    def _posix_spawn(self, argv: Sequence[str], env: Mapping[str, str], log_fd: int) -> Spawned | None:
        """Start through os.posix_spawn (None where the C library cannot start a new session with it)."""
        try:
            pid = os.posix_spawn(
                argv[0], list(argv), env,
                file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                              (os.POSIX_SPAWN_DUP2, log_fd, 1), (os.POSIX_SPAWN_DUP2, log_fd, 2)],
                setsid=True, setsigdef=DEFAULT_SIGNALS)
        except NotImplementedError:
            self.posix_spawn = False  # a C library without POSIX_SPAWN_SETSID
            return None
        return Spawned(pid)

    @staticmethod
    def _spawn_as(argv: Sequence[str], env: Mapping[str, str], cwd: str | None, log_fd: int, user: str,
                  join: str | None) -> Spawned:
        pw = run_as_user(user)
        os.fchown(log_fd, pw.pw_uid, pw.pw_gid)
        groups = os.getgrouplist(user, pw.pw_gid)

        def become() -> None:
            # After fork, before exec: join the job's cgroup while still root, then drop to the user.
            if join:
                with open(join, "w") as f:
                    f.write("0")
            if os.geteuid() == 0:
                os.setgroups(groups)
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)

        env = {**env, "USER": user, "LOGNAME": user, "HOME": pw.pw_dir}
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                                cwd=cwd or None, env=env, start_new_session=True, close_fds=True,
                                # preexec_fn is safe here: the executor runs one thread.
                                preexec_fn=become)
        return Spawned(proc.pid, proc)


def _move_self(procs: str) -> bool:
    """Move this process into the cgroup of `procs` (its `cgroup.procs`); False when that is refused."""
    try:
        fd = os.open(procs, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, b"0")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def run_as_user(user: str) -> pwd.struct_passwd:
    """The account a `run_as` job runs as, if this process may become it.

    Raises:
        OSError: The user is unknown here, or this process is neither root nor that user.
    """
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise OSError(errno.EINVAL, f"run_as: unknown user '{user}'") from None
    if os.geteuid() != 0 and pw.pw_uid != os.geteuid():
        raise OSError(errno.EPERM, f"run_as {user} needs the scheduler to run as root")
    return pw


def keep_descriptors_from_jobs(low: int = 3) -> None:
    """Mark every open descriptor from `low` up close-on-exec (posix_spawn has no close_fds).

    What Python opens is close-on-exec already; this covers what the executor inherited.
    """
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd >= low:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass  # the listing's own descriptor, closed by now


def reap(sp: Spawned) -> int:
    """Wait for a started process; return its exit code, or minus the signal that ended it."""
    _, status = os.waitpid(sp.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    if sp.proc is not None:
        sp.proc.returncode = rc  # reaped here: Popen must never wait for this pid again
    return rc


def cut_log(log: LogFile, cap: int, stopped: bool) -> bool:
    """Cut a job's log that passed its max_output back to `cap` bytes, and say so on a line of its own at its end.

    Called once the job is reaped: whatever it wrote, the disk keeps at most the cap and that line.

    Args:
        log: the job's output file (still open; write-only, appending).
        cap: its max_output in bytes.
        stopped: the executor stopped the job for it (else the job had ended before it was seen).

    Returns:
        Whether the log had passed its cap (it is then cut, unless the file system refused: said on stderr).
    """
    try:
        if os.fstat(log.fd).st_size <= cap:
            return False
    except OSError:
        return False
    try:
        os.ftruncate(log.fd, cap)
        os.write(log.fd, f"{_line_break(log.path, cap)}{cut_note(cap, stopped)}\n".encode())
    except OSError as e:
        say(f"cannot cut the log {log.path} back to its max_output: {e.strerror or e}")
    return True


def _line_break(path: str, size: int) -> str:
    """What puts a line appended to the file at `path`, `size` bytes long, on a line of its own: "" when its
    last byte ends a line, else a line break (also when it cannot be read: the descriptor is write-only)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return "\n"
    try:
        return "" if os.pread(fd, 1, size - 1) == b"\n" else "\n"
    except OSError:
        return "\n"
    finally:
        os.close(fd)


def tail_of(log_fd: int, path: str, limit: int) -> bytes:
    """The last `limit` bytes written to an open log file (b"" when nothing was, without opening it)."""
    try:
        size = os.fstat(log_fd).st_size
        if not size:
            return b""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        start = max(0, size - limit)
        return os.pread(fd, size - start, start)
    except OSError:
        return b""
    finally:
        os.close(fd)


def remove_dead_spares(logs: str) -> int:
    """Remove the spare log files (`.spare-PID-N`) of processes that are gone from a run's logs folder.

    An executor removes its spares when it closes; one killed -9 leaves them, empty. Returns how many
    were removed.
    """
    from wloadctl.procs.health import pid_alive

    removed = 0
    try:
        names = os.listdir(logs)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(".spare-"):
            continue
        pid = name.split("-")[1]
        if pid.isdigit() and not pid_alive(int(pid)):
            try:
                os.unlink(os.path.join(logs, name))
                removed += 1
            except OSError:
                pass
    return removed
