"""POSIX shared memory over posix_ipc: naming, create/open (mapped), close, unlink."""

from __future__ import annotations

import mmap
from types import TracebackType

import posix_ipc

from wloadctl.errors import TransportError
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


class Segment:
    """A mapped POSIX shared-memory segment; `buf` is the mmap itself.

    The mmap is handed out rather than a memoryview of it, because an mmap cannot be
    closed while any memoryview of it is alive.
    """

    def __init__(self, name: str, mm: mmap.mmap) -> None:
        """Wrap a mapping; use `create` or `open` instead."""
        self._name = name
        self._mm: mmap.mmap | None = mm
        self._size = len(mm)

    @classmethod
    def create(cls, name: str, size: int) -> Segment:
        """Create, size and map a new segment, private to this user (mode 0600).

        Args:
            name: A POSIX name (see `segment_name`).
            size: Size in bytes, more than 0; the memory reads as zeros.

        Raises:
            TransportError: If the name exists or the segment cannot be made.
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
            posix_ipc.unlink_shared_memory(name)
            raise _error(name, "map", exc) from None
        finally:
            # The mapping keeps the memory; the descriptor is no longer needed.
            shm.close_fd()
        return cls(name, mm)

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
        except OSError as exc:
            raise _error(name, "map", exc) from None
        finally:
            shm.close_fd()
        return cls(name, mm)

    @property
    def name(self) -> str:
        """The segment's POSIX name."""
        return self._name

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

    def unlink(self) -> None:
        """Remove the segment's name; mappings stay valid. A missing name is fine."""
        unlink_segment(self._name)

    def __enter__(self) -> Segment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Segment({self._name!r}, {self._size})"


def unlink_segment(name: str) -> bool:
    """Remove a segment by name.

    Returns:
        True if it existed, False if it did not.

    Raises:
        TransportError: If it exists but may not be removed by this user.
    """
    try:
        posix_ipc.unlink_shared_memory(name)
    except posix_ipc.ExistentialError:
        return False
    except (posix_ipc.Error, OSError) as exc:
        raise _error(name, "unlink", exc) from None
    return True
