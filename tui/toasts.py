"""Textual's toasts in the console: a guard against a toast that hangs it, and room for them in a pane.

Textual (8.2) gives a toast the time its notification has left when the toast is made, just after
its screen's toast rack found the notification not expired yet (each screen shown makes toasts of
the notifications still up). Made between the two, the time is negative, and a timer of negative
interval loops without ever yielding: the console stops answering keys, Ctrl-C included. Guarded,
such a toast's timer waits `LEAST_WAIT` and the toast goes.

The toasts stand where they cover no border: inside a screen's lowest pane (app.tcss), below a dialog,
above a prompt line (`toast_area`). Textual's rack of toasts cannot scroll (it is hidden, so it never
learns its size): a stack taller than its room would cover the borders above it, so the oldest toasts
go before a new one would not fit (`make_room`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.widget import Widget

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


TOAST_WIDTH = 60
"""A toast's width in columns (app.tcss), its bar and padding included."""
TOAST_FRAME = 3
"""Columns of a toast that its text does not use: the bar on its left and a blank either side."""


class Toasted(Protocol):
    """What `make_room` reads of a notification."""

    message: str
    title: str


T = TypeVar("T", bound=Toasted)


def toast_rows(message: str, title: str = "", screen_width: int = 80) -> int:
    """Rows a toast takes on a screen `screen_width` wide: its lines as wrapped (app.tcss sets no gap).

    Args:
        message: the notification's text.
        title: its title (a line of its own), if any.
        screen_width: the terminal's width (a narrow one makes the toast narrower, its text longer).
    """
    width = max(10, min(TOAST_WIDTH, screen_width - 4) - TOAST_FRAME)
    lines = [*([title] if title else []), *(message.splitlines() or [""])]
    return sum(max(1, len(textwrap.wrap(line, width, break_on_hyphens=False))) for line in lines)


def make_room(up: Sequence[T], new: Toasted | None, room: int, screen_width: int = 80) -> list[T]:
    """The oldest of the notifications `up` (oldest first) to take down so that the rest and `new` fit in
    `room` rows. The newest shows however big it is: what just happened is what the operator needs.

    Args:
        up: the notifications shown now, oldest first.
        new: the one about to be shown; None: the newest of `up` is the one that stays.
        room: rows the toasts may take.
        screen_width: the terminal's width.
    """
    rows = [toast_rows(n.message, n.title, screen_width) for n in up]
    need = sum(rows) + (toast_rows(new.message, new.title, screen_width) if new is not None else 0)
    out: list[T] = []
    for n, r in zip(up if new is not None else up[:-1], rows, strict=False):
        if need <= room:
            break
        out.append(n)
        need -= r
    return out


ABOVE_ROWS = 3
"""Rows the toasts may take above a prompt line (what is under them is the screen below's)."""


def toast_area(screen: Screen[Any]) -> tuple[int, int] | None:
    """The rows (first, last) the toasts of `screen` may take, as the screen names them:

    - `TOAST_PANE`: inside that pane, whose bottom border is above the footer (app.tcss sets the
      toasts just above it);
    - `TOAST_BELOW`: between that dialog and the footer;
    - `TOAST_ABOVE`: the few rows above that box at the screen's bottom (a prompt line; the screen
      moves its toasts there, see `move_above`).

    None when the screen names none (its toasts stack as app.tcss sets them), or before its layout.
    """
    for attr in ("TOAST_PANE", "TOAST_BELOW", "TOAST_ABOVE"):
        selector = getattr(screen, attr, "")
        if not selector:
            continue
        region = screen.query_one(selector).region
        if not region.height:
            return None
        if attr == "TOAST_ABOVE":
            return max(0, region.y - ABOVE_ROWS), region.y - 1
        return region.y + 1 if attr == "TOAST_PANE" else region.bottom, screen.size.height - 3
    return None


def move_above(screen: Screen[Any], box: Widget) -> None:
    """Stand the toasts of `screen` just above `box` (at the screen's bottom), not over it."""
    from textual.widgets._toast import ToastRack

    if box.region.height:
        for rack in screen.query(ToastRack):
            rack.styles.margin = (0, 1, screen.size.height - box.region.y, 1)


def fit_when_shown(screen: Screen[Any]) -> None:
    """Once `screen` is laid out, take down the oldest toasts already up that its room does not hold (the
    console's `fit_toasts`; a test's app has none)."""
    fit = getattr(screen.app, "fit_toasts", None)
    if fit is not None:
        screen.call_after_refresh(fit)
