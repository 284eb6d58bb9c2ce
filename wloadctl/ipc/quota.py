"""How big a run's queues are: shapes chosen from the kernel's limits so that dozens of runs fit one user.

Linux charges a queue's whole capacity against its owner's RLIMIT_MSGQUEUE (`ulimit -q`,
819,200 bytes by default) when it is created. Two queues of 10 x 8 KiB a run let four runs
live side by side; a run's request and response queues are therefore sized from the quota
the kernel reports, so that RUNS_GOAL runs fit it, and no larger than the run can use
(a ten-job plan never has more than ten tasks in flight). Messages only carry fixed-size
records (payloads are in shared memory), so a smaller message means fewer records a
message, never a job that cannot be sent. Small and medium runs take a fiftieth of the quota,
runs of more than BIG_RUN jobs a twentieth, where fewer, larger turns pay for themselves.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

from wloadctl.ipc import DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_MAX_MESSAGES
from wloadctl.ipc import protocol as P
from wloadctl.ipc.mq import MSG_HEADER, TREE_NODE, queue_charge

RUNS_GOAL = 50
"""Runs of up to BIG_RUN jobs one user's quota holds at once: their queues get 1/RUNS_GOAL of it."""
RUNS_FLOOR = 20
"""Runs of any size one user's quota holds at once: a larger run's queues get 1/RUNS_FLOOR of it."""
BIG_RUN = 20_000
"""Jobs above which a run's queues get the larger share. Each scheduler turn commits what the
response queue held, so its capacity sets the jobs a turn settles: at 100,000 no-op jobs the
scheduler spends about 3.3 CPU seconds with 10 x 8 KiB queues, 4.1 with a twentieth of the default
quota and 6.5 with a fiftieth (`wloadctl bench --only e2e` on a loaded 2-core host)."""
SLOT_OVERHEAD = MSG_HEADER + TREE_NODE
"""Bytes the kernel charges per message slot beside its text."""
QUEUE_MESSAGES = 2
"""Messages a small queue holds: one being read while the next is written."""
MIN_MESSAGE = 256
"""Smallest message worth a queue (11 task or 5 result records); a tighter quota fits fewer runs."""
LARGEST_RUN = 1 << 30
"""Task ids a run's queues are sized for when the run cannot count them in advance (an agent's node)."""
MQUEUE_SYSCTL = Path("/proc/sys/fs/mqueue")
"""Where the kernel shows its per-queue caps."""


@dataclass(frozen=True, slots=True)
class QueueShape:
    """Capacity of one queue."""

    messages: int
    """Messages it holds."""
    size: int
    """Bytes a message."""

    @property
    def charge(self) -> int:
        """Bytes of `ulimit -q` the queue takes while any handle to it is open."""
        return queue_charge(self.messages, self.size)


def _read_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


@dataclass(frozen=True, slots=True)
class KernelLimits:
    """The queue limits the kernel reports for this user."""

    quota: int | None
    """Soft RLIMIT_MSGQUEUE in bytes (None: unlimited)."""
    hard: int | None
    """Hard RLIMIT_MSGQUEUE in bytes (None: unlimited): how far `ulimit -q` may raise it."""
    msg_max: int
    """Messages a queue may hold without privileges (fs.mqueue.msg_max)."""
    msgsize_max: int
    """Bytes a message may have without privileges (fs.mqueue.msgsize_max)."""

    @classmethod
    def read(cls) -> KernelLimits:
        """The limits of this process, now."""
        soft, hard = resource.getrlimit(resource.RLIMIT_MSGQUEUE)
        inf = resource.RLIM_INFINITY
        return cls(None if soft == inf else soft, None if hard == inf else hard,
                   _read_int(MQUEUE_SYSCTL / "msg_max", DEFAULT_MAX_MESSAGES),
                   _read_int(MQUEUE_SYSCTL / "msgsize_max", DEFAULT_MAX_MESSAGE_SIZE))


@dataclass(frozen=True, slots=True)
class RunShapes:
    """The queues of one run."""

    request: QueueShape
    """Task records, scheduler to executors."""
    response: QueueShape
    """Result records, executors to scheduler."""
    @property
    def charge(self) -> int:
        """Bytes of `ulimit -q` the run's queues take (operator verbs come over a socket: no queue)."""
        return self.request.charge + self.response.charge


def queue_budget(limits: KernelLimits, n_jobs: int = 0) -> int:
    """Bytes the request and response queues of a run of `n_jobs` jobs may take together."""
    most = 2 * queue_charge(min(limits.msg_max, DEFAULT_MAX_MESSAGES),
                            min(limits.msgsize_max, DEFAULT_MAX_MESSAGE_SIZE))
    if limits.quota is None:
        return most
    runs = RUNS_FLOOR if n_jobs > BIG_RUN else RUNS_GOAL
    share = limits.quota // runs
    return max(2 * queue_charge(1, MIN_MESSAGE), min(most, share))


def _shape(budget: int, limits: KernelLimits, record: int, records: int) -> QueueShape:
    """The queue of at most `budget` bytes that carries `records` fixed-size records best.

    Two messages when the budget allows them (one being read while the next is written),
    as large as the budget, the kernel's cap and the run's records allow; a generous budget
    then buys more messages, up to the kernel's cap and what the run can fill.
    """
    cap_n = min(limits.msg_max, DEFAULT_MAX_MESSAGES)
    cap_size = min(limits.msgsize_max, DEFAULT_MAX_MESSAGE_SIZE)
    one = P.HEADER.size + record
    need = P.HEADER.size + max(1, records) * record
    first = min(QUEUE_MESSAGES, cap_n)
    if budget // first - SLOT_OVERHEAD < min(MIN_MESSAGE, need):
        first = 1
    size = max(one, min(cap_size, need, budget // first - SLOT_OVERHEAD))
    fill = -(-max(1, records) // ((size - P.HEADER.size) // record))
    return QueueShape(max(first, min(cap_n, budget // (size + SLOT_OVERHEAD), fill)), size)


def run_shapes(n_jobs: int, limits: KernelLimits | None = None) -> RunShapes:
    """The queues a run of `n_jobs` task ids takes under the kernel's limits.

    Args:
        n_jobs: Task ids the run may have in flight at most (its board's capacity).
        limits: The kernel's limits (read now by default).

    Returns:
        The request and response shapes; their charge is at most 1/RUNS_GOAL of the
        quota, or 1/RUNS_FLOOR for a run of more than BIG_RUN jobs (above a floor of two small queues).
    """
    limits = limits or KernelLimits.read()
    half = queue_budget(limits, n_jobs) // 2
    # A job in flight has up to two records on their way back (started, exited).
    return RunShapes(_shape(half, limits, P.TASK.size, n_jobs),
                     _shape(half, limits, P.RESULT.size, 2 * n_jobs))


def most_charge(limits: KernelLimits | None = None) -> int:
    """Bytes of `ulimit -q` the largest run takes under these limits (what a new run must find free)."""
    limits = limits or KernelLimits.read()
    return run_shapes(LARGEST_RUN, limits).charge
