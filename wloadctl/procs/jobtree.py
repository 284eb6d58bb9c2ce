"""A job's whole process tree: kept in a cgroup v2 where the host allows one, else caught by a subreaper.

Signalling a job's process group misses what left it (`setsid cmd &`, a double fork). Two ways
to end the whole tree, chosen once per executor (`detect`):

* **cgroup**: the executor may make child groups in its cgroup v2 (root, or a delegated
  subtree). Each attempt runs alone in a group `<own group>/wloadctl.<run>/e<executor>.<pid>-g<n>`
  of its executor (index and pid), started in it (so nothing it forks can start outside), and
  what it leaves when it ends is ended with `cgroup.kill`. A group its job left empty is kept for
  the executor's next job: making and removing a group for every job cost about a tenth of a
  `true` job's throughput. Memory and CPU claims can become `memory.max`/`cpu.max` where those
  controllers are enabled (`limits: enforce`); such a group is the job's alone, removed after it.
* **subreaper**: the executor is a child subreaper (PR_SET_CHILD_SUBREAPER), so what a job
  leaves behind is re-parented to it instead of init. Every job carries a marker in its
  environment (`WLOADCTL_TREE=run/executor/task/attempt`); when a job ends, whatever was
  re-parented from it (found by that marker, or by the job's session and group) is killed
  with its descendants, and reaped. A stray that cleared its environment and left the job's
  session too is ended once no job of the executor runs (every child it has then is a stray).

`WLOADCTL_JOB_TREE=subreaper` forces the second mode (a host with cgroups can test it).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Mode = Literal["cgroup", "subreaper"]

TREE_ENV = "WLOADCTL_TREE"
"""Environment variable marking every process of a job: `run/executor/task/attempt`."""
MODE_ENV = "WLOADCTL_JOB_TREE"
"""`auto` (default), `cgroup` or `subreaper`."""
LIMITS_ENV = "WLOADCTL_LIMITS"
"""What a job under `limits: enforce` is told: its claims, and those this host could not enforce."""
PR_SET_CHILD_SUBREAPER = 36
"""prctl option (linux/prctl.h)."""
JOIN_SCRIPT = 'echo 0 > "$1" || exit 126; shift; exec "$@"'
"""Run by /bin/sh (named `wloadctl` in what it says) before a job's command: move this process into its cgroup
(`$1`), then become the job."""
WARM_ENV = "WLOADCTL_CGROUP_WARM"
"""Seconds between the writes that keep cgroup moves fast where the mount lacks `favordynmods` (0: none)."""
WARM_LEAST = 0.001
"""The shortest $WLOADCTL_CGROUP_WARM taken (a smaller positive setting reads as this)."""
WARM_EVERY = 0.005
"""The default of $WLOADCTL_CGROUP_WARM. A write to `cgroup.procs` takes the kernel's cgroup threadgroup rwsem
for writing; without `favordynmods` the first write after the last one's RCU grace period has run out (15-20 ms
of quiet on Linux 6.18 here) waits a whole grace period, 8 ms at the median and up to 16 ms, where one within it
takes 0.06 ms. A write every 5 ms while jobs run keeps every job's start on the fast side (an executor started ahead
writes as often while it waits to be taken: prestart.await_go)."""
WARM_IDLE = 1.0
"""Seconds an executor goes on with those writes with no job running: after it starts and after its last job
ends (a next job is likely soon: the first of a run, the next of a chain whose upstream ran elsewhere)."""


@dataclass(frozen=True, slots=True)
class Containment:
    """The mode in force on this host for this user, and why."""

    mode: Mode
    """cgroup or subreaper."""
    base: Path | None
    """The cgroup v2 directory job groups are made under (cgroup mode)."""
    controllers: frozenset[str]
    """Controllers job groups can use (memory, cpu: limits can be enforced)."""
    why: str
    """What was found (for `wloadctl doctor`)."""


def _own_cgroup2() -> tuple[Path | None, str]:
    """The cgroup v2 directory this process is in, and a description of what was found."""
    mounts = []
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            pre, _, post = line.partition(" - ")
            if post.split()[:1] == ["cgroup2"]:
                mounts.append(pre.split()[4])
    except OSError:
        pass
    if not mounts:
        return None, "no cgroup2 mount"
    own = ""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                own = line[3:].strip()
    except OSError:
        pass
    if own.endswith(" (deleted)") or not own:
        return None, f"cgroup2 at {', '.join(mounts)} but this process is in no cgroup2 group"
    return Path(mounts[0]) / own.lstrip("/"), f"cgroup2 at {mounts[0]}, own group {own}"


def detect(run_id: str = "") -> Containment:
    """Which mode this process can use: cgroup when it may make a child group in its own cgroup v2."""
    want = os.environ.get(MODE_ENV, "auto")
    here, found = _own_cgroup2()
    if want == "subreaper":
        return Containment("subreaper", None, frozenset(), f"{MODE_ENV}=subreaper; {found}")
    if here is None:
        return Containment("subreaper", None, frozenset(), found)
    probe = here / f"wloadctl.probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as e:
        return Containment("subreaper", None, frozenset(),
                           f"{found}: not delegated to uid {os.getuid()} ({e.strerror})")
    try:
        controllers = frozenset((here / "cgroup.controllers").read_text().split())
    except OSError:
        controllers = frozenset()
    return Containment("cgroup", here, controllers & {"memory", "cpu"},
                       f"{found}: writable; controllers for limits: "
                       f"{', '.join(sorted(controllers & {'memory', 'cpu'})) or 'none'}")


def favoring_dynmods(mountinfo: str, base: Path) -> tuple[str, bool] | None:
    """(mount point, whether it has `favordynmods`) of the cgroup2 mount holding `base` (None: no such mount in
    `mountinfo`). A kernel built with CONFIG_CGROUP_FAVOR_DYNMODS=y mounts with it."""
    best: tuple[str, bool] | None = None
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        fields, rest = pre.split(), post.split()
        if len(fields) < 6 or rest[:1] != ["cgroup2"]:
            continue
        point = fields[4]
        if base == Path(point) or Path(point) in base.parents:
            options = fields[5].split(",") + (rest[2].split(",") if len(rest) > 2 else [])
            if best is None or len(point) > len(best[0]):
                best = (point, "favordynmods" in options)
    return best


def mount_favors(base: Path, mountinfo: str | None = None) -> tuple[str, bool] | None:
    """`favoring_dynmods` of this process's mounts (`mountinfo`: the text of /proc/self/mountinfo, read when None;
    None when it cannot be read)."""
    try:
        text = Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo
    except OSError:
        return None
    return favoring_dynmods(text, base)


def warm_interval(base: Path, mountinfo: str | None = None) -> float:
    """Seconds between an executor's keep-warm writes for job groups under `base`: $WLOADCTL_CGROUP_WARM, else
    WARM_EVERY where the cgroup2 mount lacks `favordynmods`, else 0 (moves are fast without them).

    `mountinfo` is the text of /proc/self/mountinfo (read when None).
    """
    given = os.environ.get(WARM_ENV)
    if given is not None:
        try:
            every = float(given)
        except ValueError:
            return WARM_EVERY
        # At most a write a millisecond: a smaller setting would keep the executor's loop from waiting at all.
        return max(WARM_LEAST, every) if every > 0 else 0.0
    found = mount_favors(base, mountinfo)
    return 0.0 if found is not None and found[1] else WARM_EVERY


def waiting_warmer() -> tuple[int, float] | None:
    """For an executor started ahead, waiting to be taken: (a descriptor of its own group's `cgroup.procs`, seconds
    between keep-warm writes to it), so that the first job it starts does not wait a grace period; None where
    there are none to make (subreaper mode, a mount with `favordynmods`, $WLOADCTL_CGROUP_WARM=0, no such group)."""
    if os.environ.get(MODE_ENV) == "subreaper":
        return None
    here, _found = _own_cgroup2()
    if here is None:
        return None
    every = warm_interval(here)
    if not every:
        return None
    try:
        return os.open(here / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC), every
    except OSError:
        return None


def write_self(fd: int) -> bool:
    """Write this process into the group of the `cgroup.procs` open at `fd` (into its own group: a keep-warm write,
    which moves nothing); False when refused."""
    try:
        return os.write(fd, b"0") == 1
    except OSError:
        return False


def become_subreaper(on: bool = True) -> bool:
    """Make this process the child subreaper of its descendants (or stop being one); False where prctl fails."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def marker(run_id: str, executor: int, task: int, attempt: int) -> str:
    """The value of TREE_ENV for one attempt."""
    return f"{run_id}/{executor}/{task}/{attempt}"


def group_prefix(executor: int, pid: int | None = None) -> str:
    """The start of the names of an executor's job groups (of every executor with that index without `pid`)."""
    return f"e{executor}." if pid is None else f"e{executor}.{pid}-"


def run_group(base: Path, run_id: str) -> Path:
    """The run's cgroup under `base`."""
    return base / f"wloadctl.{run_id}"


# -- /proc --------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, int, int, str] | None:
    """(ppid, pgid, sid, state letter) of a process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[1]), int(fields[2]), int(fields[3]), fields[0].decode()


def _marker_of(pid: int) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    key = TREE_ENV.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(key):
            return item[len(key) :].decode(errors="replace")
    return None


def children_of(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc/PID/task/*/children, else a /proc scan)."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(x) for x in f.read().split()]
        return out
    except OSError:
        pass
    return [p for p in _all_pids() if (st := _stat(p)) is not None and st[0] == pid]


def own_children() -> list[int]:
    """Direct children of this process: one read of its thread's list while it runs one thread."""
    if threading.active_count() > 1:
        return children_of(os.getpid())
    try:
        fd = os.open(f"/proc/self/task/{threading.get_native_id()}/children", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return children_of(os.getpid())
    try:
        raw = b""
        while chunk := os.read(fd, 1 << 16):
            raw += chunk
        return [int(x) for x in raw.split()]
    finally:
        os.close(fd)


def _all_pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def descendants(roots: Iterable[int]) -> list[int]:
    """`roots` and every process below them."""
    seen: list[int] = []
    todo = list(roots)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += children_of(p)
    return seen


def kill_all(pids: Iterable[int]) -> int:
    """SIGKILL each pid that still exists; how many were signalled."""
    n = 0
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
            n += 1
        except (ProcessLookupError, PermissionError):
            pass
    return n


def kill_marked(prefix: str) -> int:
    """SIGKILL every process of this user whose job marker starts with `prefix` (an executor is gone)."""
    uid = os.getuid()
    hits = []
    for p in _all_pids():
        try:
            if uid and os.stat(f"/proc/{p}").st_uid != uid:
                continue
        except OSError:
            continue
        m = _marker_of(p)
        if m is not None and (m + "/").startswith(prefix):
            hits.append(p)
    return kill_all(descendants(hits))


# -- the executor's side --------------------------------------------------------------------


@dataclass
class JobTrees:
    """An executor's job trees: made before a job starts, ended when it ends."""

    run_id: str
    """The run."""
    executor: int
    """This executor's index."""
    how: Containment
    """The mode in force."""
    dying: dict[Path, float] = field(default_factory=dict)
    """Job groups killed but not yet empty (removed when they are), with when they were killed."""
    leaders: set[int] = field(default_factory=set)
    """Pids of the jobs' first processes, reaped by the executor itself (never here)."""
    held: dict[tuple[int, int], tuple[str, bool]] = field(default_factory=dict)
    """(task, attempt) -> the group its job runs in, and whether limits were set on it (cgroup mode)."""
    spare: list[str] = field(default_factory=list)
    """Groups whose jobs ended and left nothing: the next jobs run in them."""
    made: int = 0
    """Groups made so far (numbers their names)."""
    tag: str = field(default_factory=lambda: secrets.token_hex(4))
    """Drawn as the executor starts, in each of its groups' names: the cgroup tree is the host's, shared by every
    pid namespace on it, and an executor's index and pid are not its own there (two agents of one node name on
    the host, in their own namespaces, have executors 0 and 1 of the same pids; so has an agent started again
    after its node was killed whole). A group this executor killed and another removed (an agent's start removes
    its node's empty groups) is never made again by another under the same name, which the first would take for
    its own at its next tidy (and kill the other's job in it), nor does another's job run without a group when a
    name it would make is taken."""
    files: dict[str, int] = field(default_factory=dict)
    """Open descriptors of the groups' `cgroup.procs` and `cgroup.events`, by path, kept while the group is:
    an open of a cgroup file costs more than the write or read it is for."""
    _rg: str | None = None
    """The run's cgroup directory once known (see `_run_group`)."""
    _home: tuple[Path, str] | None = None
    """The group this executor is in and its `cgroup.procs`, once asked for (see `home_group`)."""
    warm_every: float = 0.0
    """Seconds between writes that keep the kernel's cgroup moves fast (0: not needed, or turned off); see
    WARM_EVERY."""
    last_move: float = 0.0
    """When this executor last wrote to a `cgroup.procs` (monotonic clock)."""

    def __post_init__(self) -> None:
        if self.how.mode == "subreaper" and not become_subreaper():
            self.how = Containment("subreaper", None, frozenset(), self.how.why + "; prctl failed")
        if self.how.mode == "cgroup" and self.how.base is not None:
            self.warm_every = warm_interval(self.how.base)

    def prepare(self, task: int, attempt: int, env: dict[str, str], cpu: float, memory: int,
                enforce: bool) -> str | None:
        """Mark the job's environment and, in cgroup mode, make its group.

        Under `enforce`, the job's memory and cpu claims become its group's limits where the
        controllers allow, and $WLOADCTL_LIMITS tells the job which did (see `limits_text`).

        Returns:
            The group's `cgroup.procs` the job must join before it execs (None: no group).
        """
        env[TREE_ENV] = marker(self.run_id, self.executor, task, attempt)
        wanted = {k: v for k, v in (("memory", memory), ("cpu", cpu)) if v} if enforce else {}
        applied: set[str] = set()
        try:
            return self._group(task, attempt, wanted, applied)
        finally:
            if wanted:
                env[LIMITS_ENV] = limits_text(wanted, applied, self.how)

    def _group(self, task: int, attempt: int, wanted: dict[str, float], applied: set[str]) -> str | None:
        if self.how.mode != "cgroup" or self.how.base is None:
            return None
        while self.spare and not wanted:
            g = self.spare.pop()
            if not self._empty(g):
                self._forget(g)  # removed from outside (`wloadctl cleanup` of a run it took for gone)
                continue
            self.held[(task, attempt)] = (g, False)
            return f"{g}/cgroup.procs"
        rg = self._run_group()
        # Plain strings and os calls: this runs for a job, where Path objects cost more than the mkdir.
        self.made += 1
        g = f"{rg}/{group_prefix(self.executor, os.getpid())}{self.tag}.g{self.made}"
        try:
            try:
                os.mkdir(g)
            except FileNotFoundError:
                # The run's group is not there yet (the first job), or was removed: made, then the job's.
                os.makedirs(rg, exist_ok=True)
                with contextlib.suppress(OSError):
                    Path(rg, "cgroup.subtree_control").write_text(
                        " ".join(f"+{c}" for c in sorted(self.how.controllers)))
                os.mkdir(g)
        except OSError:
            return None  # the group cannot be made: the process group's signal is all there is
        self.held[(task, attempt)] = (g, bool(wanted))
        for name, value in wanted.items():
            if name not in self.how.controllers:
                continue
            with contextlib.suppress(OSError):
                if name == "memory":
                    Path(g, "memory.max").write_text(str(int(value) * 1024 * 1024))
                else:
                    Path(g, "cpu.max").write_text(f"{int(value * 100000)} 100000")
                applied.add(name)
        return f"{g}/cgroup.procs"

    def _run_group(self) -> str:
        """The run's cgroup directory (cgroup mode), as a string."""
        if self._rg is None:
            assert self.how.base is not None
            self._rg = str(run_group(self.how.base, self.run_id))
        return self._rg

    def end(self, task: int, attempt: int, pid: int) -> int:
        """The job's leader `pid` ended (or was killed): end everything else of its tree.

        Returns:
            How many processes were signalled.
        """
        n = 0
        held = self.held.pop((task, attempt), None)
        if held is not None:
            name, limited = held
            if self._empty(name):
                # The common case: the job left nothing. Its group serves the next job, unless it
                # carries this one's limits.
                if not limited:
                    self.spare.append(name)
                    return 0
                with contextlib.suppress(OSError):
                    self._remove(name)
                    return 0
            g = Path(name)
            n += _kill_group(g)
            self.dying[g] = time.time()
        # No group could be made, or what was in it is being killed: strays out of it have the marker.
        mark = marker(self.run_id, self.executor, task, attempt)
        # A subreaper running no other job knows every child it has is a stray of a job that ended, one that
        # cleared its environment and left the job's session too (`env -i setsid daemon &`).
        idle = not self.leaders and self.how.mode == "subreaper"
        left = []
        for c in own_children():
            if c in self.leaders:
                continue  # another job's first process, running: never a stray of this one
            st = _stat(c)
            if st is None:
                continue
            if idle or _marker_of(c) == mark or pid in (st[1], st[2]):
                left.append(c)
        if left:
            n += kill_all(descendants(left))
        if left or self.dying:
            # What was killed is reaped here or at the next beat's tidy (nothing was left: no scan).
            self.tidy()
        return n

    def home_group(self) -> str | None:
        """The `cgroup.procs` of the group this executor is in (cgroup mode), where it comes back to
        after starting a job in the job's own group."""
        if self.how.mode != "cgroup" or self.how.base is None:
            return None
        if self._home is None or self._home[0] is not self.how.base:
            self._home = (self.how.base, str(self.how.base / "cgroup.procs"))  # a Path join costs more than the write
        return self._home[1]

    def enter(self, procs: str) -> bool:
        """Move this process into the group of `procs` (its `cgroup.procs`); False when that is refused."""
        fd = self._file(procs, os.O_WRONLY)
        try:
            return fd is not None and write_self(fd)
        finally:
            self.last_move = time.monotonic()

    def keep_warm(self, now: float) -> None:
        """Write this executor into its own group again when `warm_every` has passed since its last move.

        The write moves nothing, but it takes the rwsem every move takes, so the kernel keeps moves on
        their fast path: the next job's start does not wait for an RCU grace period (see WARM_EVERY).
        Called by the executor's loop while it has jobs running and for WARM_IDLE after.
        """
        if now - self.last_move >= self.warm_every:
            home = self.home_group()
            if home is not None and not self.enter(home):
                self.warm_every = 0.0  # refused: nothing to keep warm

    def _empty(self, group: str) -> bool:
        """Whether no process is left in a group or in groups below it (`populated 0`); False when unreadable."""
        fd = self._file(f"{group}/cgroup.events", os.O_RDONLY)
        try:
            return fd is not None and b"populated 0" in os.pread(fd, 256, 0)
        except OSError:
            return False

    def _file(self, path: str, flags: int) -> int | None:
        fd = self.files.get(path)
        if fd is None:
            try:
                fd = self.files[path] = os.open(path, flags | os.O_CLOEXEC)
            except OSError:
                return None
        return fd

    def _remove(self, group: str) -> None:
        """Remove an emptied group, and forget its files.

        Raises:
            OSError: it is not empty, or is gone already (FileNotFoundError).
        """
        try:
            os.rmdir(group)
        except FileNotFoundError:
            self._forget(group)
            raise
        self._forget(group)

    def _forget(self, group: str) -> None:
        for name in ("cgroup.procs", "cgroup.events"):
            fd = self.files.pop(f"{group}/{name}", None)
            if fd is not None:
                os.close(fd)

    def tidy(self) -> None:
        """Reap ended strays re-parented here (not the jobs' leaders) and remove emptied job groups."""
        if self.how.mode == "subreaper":
            strays = []
            for c in own_children():
                st = _stat(c)
                if c in self.leaders or st is None:
                    continue
                if st[3] in ("Z", "X"):
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(c, os.WNOHANG)
                elif not self.leaders:
                    strays.append(c)  # no job runs here: whatever reached this subreaper is left of one (see end)
            if strays:
                kill_all(descendants(strays))
        for g, when in list(self.dying.items()):
            try:
                self._remove(str(g))
                del self.dying[g]
            except FileNotFoundError:
                del self.dying[g]
            except OSError as e:
                if e.errno == errno.EBUSY and time.time() - when > 1.0:
                    _kill_group(g)

    def close(self) -> None:
        """At exit: end what is left in this executor's groups and remove them (best effort)."""
        for name in self.spare:
            with contextlib.suppress(OSError):
                self._remove(name)
        self.spare.clear()
        for g in list(self.dying):
            _kill_group(g)
        deadline = time.time() + 2.0
        while self.dying and time.time() < deadline:
            self.tidy()
            if self.dying:
                time.sleep(0.02)
        for fd in self.files.values():
            os.close(fd)
        self.files.clear()


def unenforced(claims: Iterable[str], how: Containment) -> str | None:
    """What a run under `limits: enforce` is told at its start when this host cannot make some of its jobs'
    claims (`memory`, `cpu`) limits; None when it can make them all."""
    missed = sorted({c for c in claims if c not in how.controllers})
    if not missed:
        return None
    why = "no cgroup of its own here" if how.mode != "cgroup" else \
        f"the {' and '.join(missed)} controller{'s are' if len(missed) > 1 else ' is'} not enabled in its cgroup"
    return (f"limits: enforce: this host cannot limit the {' and '.join(missed)} its jobs claim ({why}): "
            "they run without those limits (`wloadctl doctor` says what the host lacks)")


def limits_text(wanted: dict[str, float], applied: set[str], how: Containment) -> str:
    """`memory=64M cpu=0.5`, then `; not enforced: ...` naming the claims this host could not make limits."""
    text = " ".join(f"memory={int(v)}M" if k == "memory" else f"cpu={v:g}" for k, v in wanted.items())
    missed = [k for k in wanted if k not in applied]
    if missed:
        why = "no cgroup" if how.mode != "cgroup" else "controller not available"
        text += f"; not enforced: {', '.join(missed)} ({why})"
    return text


def joining(procs: str, argv: list[str]) -> list[str]:
    """`argv` started through /bin/sh that first moves itself into the group of `procs`."""
    return ["/bin/sh", "-c", JOIN_SCRIPT, "wloadctl", procs, *argv]


def _kill_group(g: Path) -> int:
    """Kill every process of a cgroup: cgroup.kill where the kernel has it, else each listed pid."""
    try:
        (g / "cgroup.kill").write_text("1")
        return 1
    except OSError:
        pass
    try:
        pids = [int(x) for x in (g / "cgroup.procs").read_text().split()]
    except OSError:
        return 0
    return kill_all(pids)


def _kill_groups(run_id: str, prefix: str) -> int:
    """Kill every job group of the run whose name starts with `prefix`."""
    n = 0
    how = detect(run_id)
    if how.mode == "cgroup" and how.base is not None:
        with contextlib.suppress(OSError):
            for g in run_group(how.base, run_id).iterdir():
                if g.name.startswith(prefix) and g.is_dir():
                    n += _kill_group(g)
    return n


def kill_executor_trees(run_id: str, executor: int) -> int:
    """An executor is gone (before another takes its index): end the trees of every job it ran
    (its groups, then marked processes)."""
    return _kill_groups(run_id, group_prefix(executor)) + kill_marked(f"{run_id}/{executor}/")


def kill_job_tree(run_id: str, executor: int, executor_pid: int, task: int, attempt: int) -> int:
    """An attempt whose executor (`executor_pid`) is gone: end that executor's groups, each holding one of
    its jobs, all lost with it, and every process carrying the attempt's marker."""
    return _kill_groups(run_id, group_prefix(executor, executor_pid)) + \
        kill_marked(marker(run_id, executor, task, attempt) + "/")


def remove_run_groups(run_id: str) -> int:
    """At the end of a run: remove its cgroup directory (and the empty job groups left in it).

    Returns:
        How many directories were removed.
    """
    how = detect(run_id)
    if how.mode != "cgroup" or how.base is None:
        return 0
    rg = run_group(how.base, run_id)
    n = 0
    with contextlib.suppress(OSError):
        for g in rg.iterdir():
            if g.is_dir():
                with contextlib.suppress(OSError):
                    g.rmdir()
                    n += 1
        rg.rmdir()
        n += 1
    return n


def grouped_runs() -> list[str]:
    """Ids of the runs with a cgroup directory under this process's group (cgroup mode)."""
    how = detect()
    if how.mode != "cgroup" or how.base is None:
        return []
    try:
        return sorted(d.name.removeprefix("wloadctl.") for d in how.base.iterdir()
                      if d.name.startswith("wloadctl.") and d.is_dir())
    except OSError:
        return []
