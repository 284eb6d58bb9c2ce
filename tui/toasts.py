"""A guard on Textual's toasts: one whose notification expires as it is shown must not hang the console.

Textual (8.2) gives a toast the time its notification has left when the toast is made, just after
its screen's toast rack found the notification not expired yet (each screen shown makes toasts of
the notifications still up). Made between the two, the time is negative, and a timer of negative
interval loops without ever yielding: the console stops answering keys, Ctrl-C included. Guarded,
such a toast's timer waits `LEAST_WAIT` and the toast goes.
"""

from __future__ import annotations

from typing import Any

LEAST_WAIT = 0.05
"""The shortest time a toast's timer is set for (seconds)."""


def guard_toasts() -> bool:
    """Make every toast's timer wait at least LEAST_WAIT (once per process); False where Textual has no such
    toast to guard (another version: nothing is changed)."""
    try:
        from textual.widgets._toast import Toast
    except ImportError:
        return False
    mount = Toast.__dict__.get("_on_mount")
    if mount is None or getattr(mount, "guarded", False):
        return False

    def _on_mount(self: Any, event: Any) -> None:
        left = getattr(self, "_timeout", None)
        if isinstance(left, (int, float)) and not left > LEAST_WAIT:  # (NaN included)
            self._timeout = LEAST_WAIT
        mount(self, event)

    _on_mount.guarded = True  # type: ignore[attr-defined]
    Toast._on_mount = _on_mount  # type: ignore[method-assign,assignment]
    return True
