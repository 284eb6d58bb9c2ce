"""What the transport's handles share: a name, a `with` block that closes them, and removal by name.

A queue or segment handle (`mq.MessageQueue`, `segment.Segment` and their memory twins) is `Named`;
a layout over one segment (arena, boards, tail ring) is a `segment.OnSegment`. Both close at the end
of a `with` block.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Self

from wloadctl.errors import TransportError


class Closing(ABC):
    """A handle that a `with` block closes on leaving."""

    @abstractmethod
    def close(self) -> None:
        """Let go of what this handle holds; idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Named(Closing):
    """A handle on an object known by name (a POSIX name, or the memory twin's registry key)."""

    _name: str

    @property
    def name(self) -> str:
        """The object's name."""
        return self._name


def unlink_posix(name: str, unlink: Callable[[str], object],
                 error: Callable[[str, str, BaseException], TransportError]) -> bool:
    """Remove a POSIX queue or segment by name with `unlink` (posix_ipc's function for its kind).

    Args:
        name: The object's name.
        unlink: `posix_ipc.unlink_message_queue` or `posix_ipc.unlink_shared_memory`.
        error: The kind's wording of a failure (name, action, exception).

    Returns:
        True if it existed, False if it did not.

    Raises:
        TransportError: If it exists but may not be removed by this user.
    """
    import posix_ipc  # (here, not at the top: the memory twins import this module, and no posix_ipc)

    try:
        unlink(name)
    except posix_ipc.ExistentialError:
        return False
    except (posix_ipc.Error, OSError) as exc:
        raise error(name, "unlink", exc) from None
    return True
