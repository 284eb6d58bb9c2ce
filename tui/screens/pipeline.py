"""The pipeline pane: the live scheduler's queues, arena, latencies, journal, loop, executors and agents."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from tui.screens.reading import ReadingScreen
from tui.widgets.cut import CutLines
from tui.widgets.keys_footer import KeysFooter
from wloadctl.pipeview import render


class PipelineScreen(ReadingScreen):
    """What `wloadctl top` shows, refreshed every second; Escape returns to the jobs."""

    READER = "pipeline"

    CSS_PATH = "pipeline.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,P", "close", "Back", key_display="esc"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.view: dict[str, Any] | None = None
        """The latest reading."""

    def compose(self) -> ComposeResult:
        """The figures and the footer."""
        body = Static("reading the pipeline figures...", id="figures")
        body.border_title = "pipeline"
        yield body
        yield KeysFooter()

    def _show(self, view: dict[str, Any] | None) -> None:
        self.view = view
        text = "\n".join(render(view)) if view is not None else "this run publishes no pipeline figures"
        # The figures are columns: a line wider than the pane is cut (marked `~`), not wrapped onto a line of
        # its own that reads as another figure.
        self.query_one("#figures", Static).update(CutLines(Text(text)))

    def action_close(self) -> None:
        """Back to the jobs."""
        self.dismiss(None)
