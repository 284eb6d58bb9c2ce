"""POSIX shared memory over posix_ipc: naming, create/open (mapped), close, unlink."""

from __future__ import annotations

import errno
import mmap
import os
from typing import Self

import posix_ipc

from wloadctl.errors import TransportError
from wloadctl.ipc import SegmentBackend, SegmentLike
from wloadctl.ipc.handles import Closing, Named, unlink_posix
from wloadctl.ipc.naming import object_name

_CLEANUP_HINT = (
    "a crashed run may have left it; remove stale ones with `wloadctl cleanup`"
)


def segment_name(run_id: str, role: str) -> str:
    """The POSIX name of a run's segment, e.g. `/wloadctl.1000.eod-20240131.board`.

    Raises:
        TransportError: If the run id or role cannot be part of a name.
    """
    return object_name(run_id, role)


def _error(name: str, action: str, exc: BaseException) -> TransportError:
    if isinstance(exc, posix_ipc.ExistentialError):
        if action == "create":
            return TransportError(
                f"cannot create shared memory {name}: it already exists",
                hint=_CLEANUP_HINT,
            )
        return TransportError(
            f"cannot {action} shared memory {name}: it does not exist",
            hint="check the run id and that its scheduler is running",
        )
    if isinstance(exc, posix_ipc.PermissionsError):
        return TransportError(
            f"cannot {action} shared memory {name}: permission denied",
            hint="segments are private (0600) to the user who created them",
        )
    return TransportError(
        f"cannot {action} shared memory {name}: {exc}",
        hint="check free space in /dev/shm (df -h /dev/shm)",
    )


SHM_DIR = "/dev/shm"
"""Where Linux keeps POSIX shared memory (a tmpfs): its free space bounds every run's segments."""


def shm_free() -> int:
    """Bytes free in /dev/shm now (0 when it cannot be read)."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def mib(n: int) -> str:
    """Bytes as MiB for a message, e.g. `20.1 MiB`."""
    return f"{n / (1 << 20):.1f} MiB"


class Segment(Named):
    """A mapped POSIX shared-memory segment; `buf` is the mmap itself.

    The mmap is handed out rather than a memoryview of it, because an mmap cannot be
    closed while any memoryview of it is alive.
    """

    def __init__(self, name: str, mm: mmap.mmap, fd: int = -1) -> None:
        """Wrap a mapping; use `create` or `open` instead."""
        self._name = name
        self._mm: mmap.mmap | None = mm
        self._size = len(mm)
        self._fd = fd
        """The segment's descriptor, kept to reserve memory as the segment fills."""
        self._reserved = 0
        """Bytes from the start backed by memory already."""

    @classmethod
    def create(cls, name: str, size: int, reserve: int | None = None) -> Segment:
        """Create, size and map a new segment, private to this user (mode 0600).

        The first `reserve` bytes (all by default) are backed by memory at once: a segment of
        /dev/shm is sparse, and touching a page a full /dev/shm cannot give kills the process
        (SIGBUS) where a reservation merely fails.

        Args:
            name: A POSIX name (see `segment_name`).
            size: Size in bytes, more than 0; the memory reads as zeros.
            reserve: Bytes to back now (the rest with `reserve` as it is used).

        Raises:
            TransportError: If the name exists, or the segment cannot be made or backed.
        """
        if size <= 0:
            raise TransportError(f"cannot create shared memory {name} of {size} bytes")
        try:
            shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
        except (posix_ipc.Error, OSError, ValueError) as exc:
            raise _error(name, "create", exc) from None
        try:
            mm = mmap.mmap(shm.fd, size)
        except OSError as exc:
            shm.close_fd()
            posix_ipc.unlink_shared_memory(name)
            raise _error(name, "map", exc) from None
        seg = cls(name, mm, os.dup(shm.fd))
        shm.close_fd()
        want = size if reserve is None else min(size, reserve)
        if not seg.reserve(want):
            seg.close()
            posix_ipc.unlink_shared_memory(name)
            raise TransportError(f"no space left in {SHM_DIR} for shared memory {name}: it needs {mib(want)}, "
                                 f"{mib(shm_free())} free", hint=f"free space in {SHM_DIR} (df -h {SHM_DIR})")
        return seg

    def reserve(self, upto: int) -> bool:
        """Back the segment's first `upto` bytes with memory; False when /dev/shm has no room for them.

        Raises:
            TransportError: The reservation failed for another reason.
        """
        if upto <= self._reserved or self._fd < 0:
            return True
        try:
            os.posix_fallocate(self._fd, self._reserved, upto - self._reserved)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.ENOMEM):
                return False
            raise _error(self._name, "reserve memory for", exc) from None
        self._reserved = upto
        return True

    @classmethod
    def open(cls, name: str) -> Segment:
        """Open and map an existing segment, read-write, at its full size.

        Raises:
            TransportError: If it does not exist, is empty, or cannot be mapped.
        """
        try:
            shm = posix_ipc.SharedMemory(name)
        except (posix_ipc.Error, OSError, ValueError) as exc:
            raise _error(name, "open", exc) from None
        try:
            if shm.size <= 0:
                raise TransportError(
                    f"shared memory {name} is empty",
                    hint="its creator has not finished making it, or crashed doing so",
                )
            mm = mmap.mmap(shm.fd, shm.size)
            fd = os.dup(shm.fd)
        except OSError as exc:
            raise _error(name, "map", exc) from None
        finally:
            shm.close_fd()
        return cls(name, mm, fd)

    @property
    def size(self) -> int:
        """Size in bytes."""
        return self._size

    @property
    def buf(self) -> mmap.mmap:
        """The mapping.

        Raises:
            TransportError: If the segment was closed.
        """
        if self._mm is None:
            raise TransportError(f"shared memory {self._name} is closed")
        return self._mm

    def close(self) -> None:
        """Unmap this handle. Idempotent."""
        mm, self._mm = self._mm, None
        if mm is not None:
            mm.close()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def unlink(self) -> None:
        """Remove the segment's name; mappings stay valid. A missing name is fine."""
        unlink_segment(self._name)

    def __repr__(self) -> str:
        return f"Segment({self._name!r}, {self._size})"


def unlink_segment(name: str) -> bool:
    """Remove a segment by name.

    Returns:
        True if it existed, False if it did not.

    Raises:
        TransportError: If it exists but may not be removed by this user.
    """
    return unlink_posix(name, posix_ipc.unlink_shared_memory, _error)


class OnSegment(Closing):
    """A layout over one segment (the payload arena, the boards, the tail ring): `create` makes the segment and
    writes the layout's identity, `open` attaches to one, and the constructor checks that identity."""

    _segment: SegmentLike

    def __init__(self, segment: SegmentLike) -> None:
        """Attach to a segment that holds this layout (subclasses check its identity)."""
        self._segment = segment

    @classmethod
    def open(cls, name: str, *, backend: SegmentBackend = Segment) -> Self:
        """Attach to an existing segment of this layout (executors, readers, or a scheduler taking over).

        Raises:
            TransportError: If it does not exist or does not hold this layout.
        """
        segment = backend.open(name)
        try:
            return cls(segment)
        except TransportError:
            segment.close()
            raise

    @property
    def segment(self) -> SegmentLike:
        """The underlying segment."""
        return self._segment

    @property
    def name(self) -> str:
        """The segment's name."""
        return self._segment.name

    def close(self) -> None:
        """Unmap the segment. Idempotent."""
        self._segment.close()

    def unlink(self) -> None:
        """Remove the segment's name."""
        self._segment.unlink()
