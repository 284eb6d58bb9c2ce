"""A screen that reads one of the client's readers now and every second, off the UI thread, and shows it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from textual import work
from textual.screen import Screen

REFRESH = 1.0
"""Seconds between readings (the scheduler publishes about once a second; the journal is read as often)."""


class ReadingScreen(Screen[None]):
    """A screen with a client of its own, opened at its first reading and closed with the screen, that calls the
    client's `READER` every REFRESH seconds in a worker thread and hands what it read to `_show` on the UI thread
    (`EMPTY` when the client has no such reader: a run whose scheduler publishes none)."""

    READER: ClassVar[str]
    """The client method that reads what the screen shows."""
    EMPTY: ClassVar[Any] = None
    """What `_show` gets from a client without that reader."""
    _show: Callable[[Any], None]
    """Shows a reading, on the UI thread: each screen's own method."""

    def __init__(self) -> None:
        super().__init__()
        self._client: Any = None

    def on_mount(self) -> None:
        """Read now and every REFRESH seconds."""
        self._read()
        self.set_interval(REFRESH, self._read)

    def on_unmount(self) -> None:
        """Release the client (and the journal it holds)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    @work(thread=True, exclusive=True, group="reading", exit_on_error=False)
    def _read(self) -> None:
        if self._client is None:
            self._client = self.app.open_client()  # type: ignore[attr-defined]
        reader = getattr(self._client, self.READER, None)
        data = reader() if reader is not None else self.EMPTY
        self.app.call_from_thread(self._show, data)

