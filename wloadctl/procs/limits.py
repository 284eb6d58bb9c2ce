"""The host limits wloadctl runs into, and how much of each this user holds now (`wloadctl doctor`)."""

from __future__ import annotations

import dataclasses
import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from wloadctl.errors import TransportError
from wloadctl.ipc.cleanup import MQUEUE_DIR, SHM_DIR, scan_objects
from wloadctl.ipc.mq import queue_charge, queue_shape, queues_fit
from wloadctl.ipc.naming import QUEUE_ROLES, object_name
from wloadctl.ipc.quota import KernelLimits, RunShapes, most_charge
from wloadctl.procs.jobtree import WARM_ENV, WARM_IDLE, detect, mount_favors, warm_interval

Verdict = Literal["ok", "low", "exhausted"]

LOW_SHARE = 0.8
"""A limit more than this share used is `low`."""
MQUEUE_SYSCTL = Path("/proc/sys/fs/mqueue")
"""Where the kernel shows its queue limits."""
CGROUP_ROOT = Path("/sys/fs/cgroup")
"""Where a cgroup v2 hierarchy is mounted on a unified host."""


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit, what is used of it now, and what to do when it is short."""

    name: str
    """What is limited, e.g. `mqueue bytes (ulimit -q)`."""
    limit: int | None
    """The limit (None: unlimited, or not known here)."""
    used: int | None
    """How much of it is used now (None: cannot be measured here)."""
    unit: str
    """bytes, queues, files, processes, runs, or `` for yes/no checks."""
    verdict: Verdict
    """ok, low (little room left, or a feature missing) or exhausted."""
    hint: str
    """How to raise it, or what to do."""
    note: str = ""
    """How `used` was measured, or what was found."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (`wloadctl doctor --json`)."""
        return dataclasses.asdict(self)


def judge(used: int | None, limit: int | None, need: int = 0) -> Verdict:
    """ok, low or exhausted for `used` of `limit`, when `need` more should still fit."""
    if used is None or limit is None:
        return "ok"
    if used >= limit:
        return "exhausted"
    if used + need > limit or used > LOW_SHARE * limit:
        return "low"
    return "ok"


def _rlimit(which: int) -> tuple[int | None, int | None]:
    soft, hard = resource.getrlimit(which)
    inf = resource.RLIM_INFINITY
    return (None if soft == inf else soft), (None if hard == inf else hard)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _our_queues() -> tuple[list[tuple[int, int]], str]:
    """Shapes of this user's queues, and how they were found.

    With /dev/mqueue mounted every queue of the user is listed (wloadctl's or not);
    without it, the queues of the runs whose segments are in /dev/shm are opened by name.
    """
    uid = os.getuid()
    shapes: list[tuple[int, int]] = []
    try:
        if not os.path.ismount(MQUEUE_DIR):
            raise FileNotFoundError(MQUEUE_DIR)  # an empty folder there lists nothing: count by name
        entries = [e for e in os.scandir(MQUEUE_DIR) if e.stat(follow_symlinks=False).st_uid == uid]
    except OSError:
        entries = []
        runs = sorted({o.run_id for o in scan_objects()})
        for run_id in runs:
            for role in QUEUE_ROLES:
                shape = queue_shape(object_name(run_id, role))
                if shape is not None:
                    shapes.append(shape)
        return shapes, f"{MQUEUE_DIR} not mounted: counted the queues of wloadctl runs only"
    for e in entries:
        shape = queue_shape("/" + e.name)
        if shape is not None:
            shapes.append(shape)
    return shapes, f"every queue of this user in {MQUEUE_DIR}"


def run_queue_bytes() -> int:
    """Bytes of `ulimit -q` the largest run takes under this user's limits (request and response queues)."""
    return most_charge()


def runs_holding_queues() -> list[str]:
    """Ids of this user's runs that hold at least one queue now."""
    runs = sorted({o.run_id for o in scan_objects()})
    return [r for r in runs if any(queue_shape(object_name(r, role)) is not None for role in QUEUE_ROLES)]


def queue_room(need: int | None = None, probe: RunShapes | None = None, probe_id: str = "") -> None:
    """Check that a new run's queues fit the user's queue quota now.

    Args:
        need: Bytes the run's queues take (the largest run's by default).
        probe: The run's queue shapes: made for a moment under `probe_id`'s name (a run id), so that
            the kernel's count decides, with the queues no listing shows (removed ones a process
            keeps open, those of another IPC namespace).
        probe_id: The run id the probe's names carry.

    Raises:
        TransportError: One line naming the limit, how many runs hold queues and how to raise it.
    """
    limits = KernelLimits.read()
    if limits.quota is None:
        return
    need = most_charge(limits) if need is None else need
    shapes, _how = _our_queues()
    used = sum(queue_charge(m, s) for m, s in shapes)
    if used + need > limits.quota:
        raise quota_full(limits, used, need)
    if probe is not None and not queues_fit(
            [(q.messages, q.size) for q in (probe.request, probe.response)], probe_id):
        raise quota_full(limits, used, need)


def hidden_queue_holders() -> list[int]:
    """Pids of this user's processes holding queues whose names were removed (charged to the quota until
    closed, listed nowhere)."""
    try:
        if not os.path.ismount(MQUEUE_DIR):
            return []  # (a descriptor's device is what tells a queue from a removed file)
        dev = os.stat(MQUEUE_DIR).st_dev
    except OSError:
        return []
    pids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        fds = f"/proc/{entry}/fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue  # gone, or another user's
        for fd in names:
            try:
                target = os.readlink(f"{fds}/{fd}")
                if not target.endswith(" (deleted)") or target.count("/") != 1:
                    continue
                if os.stat(f"{fds}/{fd}").st_dev == dev:
                    pids.append(int(entry))
                    break
            except OSError:
                continue
    return pids


def quota_full(limits: KernelLimits | None = None, used: int | None = None, need: int | None = None,
               ) -> TransportError:
    """The one-line error for a queue quota too full for another run."""
    limits = limits or KernelLimits.read()
    if used is None:
        used = sum(queue_charge(m, s) for m, s in _our_queues()[0])
    need = most_charge(limits) if need is None else need
    holders = len(runs_holding_queues())
    raise_to = f" (hard limit {limits.hard})" if limits.hard is not None else ""
    if limits.quota is not None and used + need <= limits.quota:
        # The queues this user can list leave room: the kernel counts others, which no cleanup can remove.
        held = hidden_queue_holders()
        by = f" (pid {' '.join(map(str, held[:10]))})" if held else ""
        return TransportError(
            f"cannot start the run: the message-queue quota (ulimit -q {limits.quota} bytes) is full: "
            f"{holders} run(s) hold queues now ({used} bytes listed in {MQUEUE_DIR}), and the rest is held by "
            f"queues listed nowhere: removed while a process keeps them open{by}, or made in another IPC "
            f"namespace; a run needs {need} more",
            hint="end the processes that hold them (`wloadctl cleanup` cannot: they have no name left), or "
                 f"raise it with `ulimit -q BYTES`{raise_to} or `msgqueue` in /etc/security/limits.conf")
    return TransportError(
        f"cannot start the run: the message-queue quota (ulimit -q {limits.quota} bytes) is full: "
        f"{holders} run(s) hold queues now ({used} bytes), a run needs {need} more",
        hint=f"raise it with `ulimit -q BYTES`{raise_to} or `msgqueue` in /etc/security/limits.conf, "
             "wait for a run to end, or remove crashed runs' queues with `wloadctl cleanup`")


def _queue_limits() -> list[Limit]:
    soft, hard = _rlimit(resource.RLIMIT_MSGQUEUE)
    shapes, how = _our_queues()
    per_run = run_queue_bytes()
    used = sum(queue_charge(m, s) for m, s in shapes)
    raise_to = f" (hard limit {hard})" if hard is not None else ""
    out = [Limit("mqueue bytes (ulimit -q)", soft, used, "bytes", judge(used, soft, per_run),
                 f"raise with `ulimit -q BYTES`{raise_to}, or `msgqueue` in /etc/security/limits.conf; "
                 f"a run takes up to {per_run} bytes", f"{len(shapes)} queue(s); {how}")]
    biggest_n = max((m for m, _s in shapes), default=None)
    biggest_s = max((s for _m, s in shapes), default=None)
    for key, used_now, unit, what in (("msg_max", biggest_n, "messages", "messages per queue"),
                                      ("msgsize_max", biggest_s, "bytes", "bytes per message")):
        lim = _read_int(MQUEUE_SYSCTL / key)
        # A cap per queue, not a pool: queues made at the cap are fine; larger ones need root.
        capped: Verdict = "exhausted" if used_now is not None and lim is not None and used_now > lim else "ok"
        out.append(Limit(f"fs.mqueue.{key} ({what})", lim, used_now, unit, capped,
                         f"raise with `sysctl -w fs.mqueue.{key}=N` (root)",
                         "largest of this user's queues (a cap per queue)"))
    qmax = _read_int(MQUEUE_SYSCTL / "queues_max")
    try:
        total: int | None = len(os.listdir(MQUEUE_DIR))
        note = f"queues of every user in {MQUEUE_DIR}"
    except OSError:
        total, note = len(shapes), f"{MQUEUE_DIR} not mounted: this user's wloadctl queues only"
    out.append(Limit("fs.mqueue.queues_max (queues on the host)", qmax, total, "queues",
                     judge(total, qmax, len(QUEUE_ROLES)),
                     "raise with `sysctl -w fs.mqueue.queues_max=N` (root)", note))
    return out


def _shm_limit() -> Limit:
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return Limit(f"{SHM_DIR} space", None, None, "bytes", "exhausted",
                     f"mount a tmpfs on {SHM_DIR}: shared memory segments live there", "not mounted")
    size = st.f_blocks * st.f_frsize
    used = size - st.f_bavail * st.f_frsize
    ours = 0
    for o in scan_objects():
        if o.kind == "shm":
            try:
                ours += os.stat(os.path.join(SHM_DIR, o.name[1:])).st_blocks * 512
            except OSError:
                pass
    return Limit(f"{SHM_DIR} space", size, used, "bytes", judge(used, size),
                 f"free space, or grow it: `mount -o remount,size=4G {SHM_DIR}` (root)",
                 f"wloadctl segments of this user hold {ours} bytes")


def _user_threads(uid: int) -> int:
    """Tasks (threads) this user runs: what RLIMIT_NPROC counts."""
    n = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            text = Path("/proc", d, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        real = fields.get("Uid", "").split()
        if real and int(real[0]) == uid:  # RLIMIT_NPROC counts by real uid
            n += int(fields.get("Threads", "1").strip() or 1)
    return n


def _process_limits() -> list[Limit]:
    soft, hard = _rlimit(resource.RLIMIT_NOFILE)
    try:
        fds: int | None = len(os.listdir("/proc/self/fd"))
    except OSError:
        fds = None
    out = [Limit("open files (ulimit -n)", soft, fds, "files", judge(fds, soft),
                 "raise with `ulimit -n N`" + (f" (hard limit {hard})" if hard is not None else ""),
                 "this process; each scheduler and executor has its own")]
    soft, hard = _rlimit(resource.RLIMIT_NPROC)
    uid = os.getuid()
    used = _user_threads(uid)
    note = "threads of this user's processes"
    if uid == 0:
        note += "; not enforced for root"
    out.append(Limit("processes (ulimit -u)", soft, used, "processes", judge(used, soft) if uid else "ok",
                     "raise with `ulimit -u N`" + (f" (hard limit {hard})" if hard is not None else ""), note))
    return out


def _cgroup_limit() -> Limit:
    """How a job's whole process tree is ended here: a cgroup v2 per job, or the executor as subreaper."""
    how = detect()
    hint = ("for a cgroup per job: a cgroup2 hierarchy and a delegated group (root, or "
            "`systemd-run --user -p Delegate=yes ...`); `limits: enforce` also needs the memory and cpu "
            "controllers there")
    if how.mode == "cgroup":
        verdict: Verdict = "ok" if how.controllers >= {"memory", "cpu"} else "low"
        return Limit("cgroup v2 (job tree kill: cgroup)", None, None, "", verdict,
                     "" if verdict == "ok" else hint,
                     f"each job in its own cgroup, ended with cgroup.kill; {how.why}")
    return Limit("cgroup v2 (job tree kill: subreaper)", None, None, "", "low", hint,
                 f"executors are child subreapers: what a job leaves is caught and killed; {how.why}")


def _job_starts_limit() -> Limit | None:
    """In cgroup mode: whether moving into a job's group waits for the kernel (no `favordynmods`)."""
    how = detect()
    if how.mode != "cgroup" or how.base is None:
        return None
    found = mount_favors(how.base)
    if found is None:
        return None
    point, favor = found
    name = "cgroup job starts (favordynmods)"
    if favor:
        return Limit(name, None, None, "", "ok", "", "the cgroup2 mount favors group changes: a job's start "
                                                    "moves it into its group without waiting")
    return Limit(name, None, None, "", "low",
                 f"as root: `mount -o remount,favordynmods {point}` (Linux 6.0 or later, until the next boot), "
                 "or a kernel built with CONFIG_CGROUP_FAVOR_DYNMODS=y",
                 "an executor moves into a job's group to start it; without favordynmods a move after a quiet "
                 "moment waits for an RCU grace period (about 8 ms seen on Linux 6.18), and the executor's "
                 f"other jobs wait with it. {_kept_warm(warm_interval(how.base))}")


def _kept_warm(every: float) -> str:
    """What executors do about it, by their keep-warm interval (jobtree.warm_interval)."""
    if not every:
        return f"${WARM_ENV}=0: executors do not keep moves fast, every start after a quiet moment waits"
    return (f"While jobs run, and for {WARM_IDLE:g} s after an executor starts or its last job ends, executors "
            f"write into their own group every {every * 1000:g} ms (${WARM_ENV}) to keep moves fast; the first "
            "start after a longer idle moment still waits")


def _runs_limit(queue_bytes: Limit) -> Limit:
    runs = sorted({o.run_id for o in scan_objects()})
    fit = None if queue_bytes.limit is None else len(runs) + max(
        0, (queue_bytes.limit - (queue_bytes.used or 0)) // run_queue_bytes())
    return Limit("wloadctl runs holding IPC objects", fit, len(runs), "runs", judge(len(runs), fit, 1),
                 "`wloadctl cleanup` removes those of crashed runs; more room: raise `ulimit -q`",
                 "limit: the runs the queue bytes left would allow" + (f"; runs: {', '.join(runs[:10])}"
                                                                       if runs else ""))


def probe() -> list[Limit]:
    """Every limit that matters to wloadctl on this host, measured now."""
    queues = _queue_limits()
    starts = _job_starts_limit()
    return [*queues, _shm_limit(), *_process_limits(), _cgroup_limit(), *([starts] if starts else []),
            _runs_limit(queues[0])]
