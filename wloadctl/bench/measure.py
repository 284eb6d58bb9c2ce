"""Measuring tools: process memory from /proc, an RSS sampler, the machine."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_STATUS_FIELD = re.compile(rb"^(VmRSS|VmHWM):\s+(\d+) kB", re.M)


def memory_kib(pid: int | str = "self") -> tuple[int, int] | None:
    """Resident set size and its high-water mark of a process, in KiB.

    Args:
        pid: a process id, or `self`.

    Returns:
        (VmRSS, VmHWM), or None when the process is gone (or a zombie).
    """
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            found = dict(_STATUS_FIELD.findall(f.read()))
    except OSError:
        return None
    if b"VmRSS" not in found or b"VmHWM" not in found:
        return None
    return int(found[b"VmRSS"]), int(found[b"VmHWM"])


def reset_peak() -> bool:
    """Reset this process's VmHWM to its current RSS, so a phase's own peak can be read.

    Returns:
        False on kernels or sandboxes that refuse it (the peak then covers
        every earlier phase too, and the report says so).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class RssSampler:
    """Polls a process's VmRSS/VmHWM from a thread while it runs."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        """The process watched."""
        self.interval = interval
        """Seconds between samples."""
        self.samples: list[tuple[float, int, int]] = []
        """(time.time(), VmRSS KiB, VmHWM KiB) per sample."""
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._poll, name=f"rss-{pid}", daemon=True
        )

    def start(self) -> RssSampler:
        """Start polling; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and wait for the thread."""
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.is_set():
            m = memory_kib(self.pid)
            if m is None:
                return
            self.samples.append((time.time(), m[0], m[1]))
            self._stop.wait(self.interval)

    def peak_until(self, until: float | None) -> int:
        """Largest RSS (KiB) sampled at or before `until` (all samples when None)."""
        vals = [rss for t, rss, _ in self.samples if until is None or t <= until]
        return max(vals, default=0)

    def last_hwm(self) -> int:
        """The process's own high-water mark at the last sample (KiB)."""
        return self.samples[-1][2] if self.samples else 0


def file_create_micros(directory: Path, count: int = 200) -> float:
    """Microseconds to create (and close) one empty file in `directory`, over `count` new files.

    Every shell job's attempt log is a new file: on some filesystems (ext4 without a
    journal shortly after many deletions) creating one costs as much as starting a
    process. The files are left in place for the caller's cleanup.
    """
    directory.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for k in range(count):
        os.close(os.open(directory / f"f{k}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
    return (time.perf_counter() - t0) / count * 1e6


def _version(argv: list[str]) -> str:
    exe = shutil.which(argv[0])
    if exe is None:
        return "not installed"
    try:
        out = subprocess.run(
            [exe, *argv[1:]], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (
        (out.stdout or out.stderr).strip().splitlines()[0]
        if (out.stdout or out.stderr)
        else "unknown"
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_mib() -> int:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def dask_version() -> str | None:
    """The installed dask's version, or None when dask is not installed."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - always there on 3.11
        return None
    try:
        return version("dask")
    except PackageNotFoundError:
        return None


def source_revision() -> dict[str, Any]:
    """The git commit of the wloadctl being measured, and whether its tree had changes."""
    import wloadctl

    root = Path(wloadctl.__file__).resolve().parent.parent
    git = shutil.which("git")
    if git is None or not (root / ".git").exists():
        return {"commit": "unknown", "dirty": None}
    try:
        head = subprocess.run(
            [git, "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        status = subprocess.run(
            [git, "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": "unknown", "dirty": None}
    return {
        "commit": head.stdout.strip() or "unknown",
        "dirty": bool(status.stdout.strip()),
    }


def machine_info() -> dict[str, Any]:
    """The machine and software measured: cores, Python, platform, tools, load."""
    from wloadctl import __version__

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    return {
        "cores": os.cpu_count() or 0,
        "usable_cores": usable,
        "cpu": _cpu_model(),
        "memory_mib": _mem_total_mib(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "kernel": platform.release(),
        "wloadctl": __version__,
        "source": source_revision(),
        "ninja": _version(["ninja", "--version"]),
        "make": _version(["make", "--version"]),
        "dask": dask_version() or "not installed",
        "job_tree": job_tree_info(),
        "load_average_start": list(os.getloadavg()),
    }


def job_tree_info() -> str:
    """How the executors contain each job here, and whether moving a job into its cgroup waits for the kernel:
    the shell and workflow figures depend on it (see WARM_EVERY in wloadctl.procs.jobtree)."""
    from wloadctl.procs.jobtree import WARM_ENV, detect, mount_favors, warm_interval

    how = detect()
    if how.mode != "cgroup" or how.base is None:
        return f"subreaper ({how.why})"
    found = mount_favors(how.base)
    favor = found is not None and found[1]
    every = warm_interval(how.base)
    if every:
        moves = f"kept warm by a write every {every * 1000:g} ms"
    elif favor:
        moves = "fast by themselves"
    else:
        moves = f"not kept warm (${WARM_ENV}=0)"
    return f"cgroup per job; {'favordynmods' if favor else 'no favordynmods'}; moves {moves}"
