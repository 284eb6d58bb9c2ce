"""The pipeline pane: the live scheduler's queues, arena, latencies, journal, loop, executors and agents."""

from __future__ import annotations

from typing import Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Static

from wloadctl.pipeview import render

REFRESH = 1.0
"""Seconds between readings (the scheduler publishes about once a second)."""


class PipelineScreen(Screen[None]):
    """What `wloadctl top` shows, refreshed every second; Escape returns to the jobs."""

    CSS_PATH = "pipeline.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,P", "close", "Back", key_display="esc"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.view: dict[str, Any] | None = None
        """The latest reading."""
        self._client: Any = None

    def compose(self) -> ComposeResult:
        """The figures and the footer."""
        body = Static("reading the pipeline figures...", id="figures")
        body.border_title = "pipeline"
        yield body
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        """Read now and every second."""
        self._read()
        self.set_interval(REFRESH, self._read)

    def on_unmount(self) -> None:
        """Release the journal."""
        if self._client is not None:
            self._client.close()
            self._client = None

    @work(thread=True, exclusive=True, group="pipeline", exit_on_error=False)
    def _read(self) -> None:
        if self._client is None:
            self._client = self.app.open_client()  # type: ignore[attr-defined]
        reader = getattr(self._client, "pipeline", None)
        view = reader() if reader is not None else None
        self.app.call_from_thread(self._show, view)

    def _show(self, view: dict[str, Any] | None) -> None:
        self.view = view
        text = "\n".join(render(view)) if view is not None else "this run publishes no pipeline figures"
        self.query_one("#figures", Static).update(text)

    def action_close(self) -> None:
        """Back to the jobs."""
        self.dismiss(None)
