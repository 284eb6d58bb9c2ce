"""The run list: every run under the state root, live first; enter opens one, `:` switches."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Static

from tui.runs_view import COLUMNS, LIVE, RunLike, columns_fitting, find_run, host_risk, run_row
from tui.widgets.keys_footer import KeysFooter

REFRESH = 2.0
"""Seconds between readings of the run list."""

RunSource = Callable[[], Sequence[RunLike]]
"""Reads every run under the root (wloadctl.runlist.list_runs in the product, canned in tests)."""


class RunsTable(DataTable[Any]):
    """The runs, moved through with the job table's keys (vim keys and arrows)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("g", "scroll_top", "Top", show=False),
        Binding("G", "scroll_bottom", "Bottom", show=False),
        Binding("ctrl+d", "page_down", "Page down", show=False),
        Binding("ctrl+u", "page_up", "Page up", show=False),
    ]


class RunsScreen(Screen[None]):
    """Every run of the host, k9s-style: enter opens a run, esc in a run comes back here."""

    CSS_PATH = "runs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open"),
        Binding("colon", "command_line", "Cmd", key_display=":"),
        Binding("r", "reload", "Reload"),
        Binding("question_mark", "app.help", "Help", key_display="?"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[RunLike] = []
        """The runs shown, in table order."""
        self.loaded = False
        """Set once the list was read (tests wait on it)."""

    def compose(self) -> ComposeResult:
        """Header, table, footer."""
        yield Static("reading the runs...", id="runs-header")
        table: DataTable[Any] = RunsTable(id="runs", cursor_type="row", zebra_stripes=True)
        table.add_columns(*COLUMNS)
        yield table
        yield KeysFooter()

    def on_mount(self) -> None:
        """Read the list now and every few seconds."""
        self.query_one(DataTable).focus()
        self.action_reload()
        self.set_interval(REFRESH, self.action_reload)

    @property
    def source(self) -> RunSource:
        """Where the runs come from (the app's)."""
        return self.app.runs_source  # type: ignore[attr-defined,no-any-return]

    def action_reload(self) -> None:
        """Read the list again, off the event loop (journals may be slow)."""
        self._read()

    @work(thread=True, exclusive=True, group="runs", exit_on_error=False)
    def _read(self) -> None:
        runs = list(self.source())
        try:
            self.app.call_from_thread(self.show, runs)
        except RuntimeError:
            pass  # the console is exiting

    def show(self, runs: Sequence[RunLike]) -> None:
        """Show these runs, live ones first, the cursor kept on the run it was on."""
        table: DataTable[Any] = self.query_one(DataTable)
        current = self.selected()
        self.runs = sorted(runs, key=lambda r: (r.status not in LIVE, -r.started))
        risk = host_risk(self.runs)
        root = getattr(self.app, "runs_root", "")
        head = Text.assemble(("runs ", "bold"), (str(root), "dim"), "\n", risk.line())
        if risk.at_risk_runs:
            head.stylize("bold red", len(head.plain) - len(risk.line()))
        self.query_one("#runs-header", Static).update(head)
        rows = [run_row(r) for r in self.runs]
        shown = columns_fitting(rows, table.scrollable_content_region.width)
        if shown != len(table.columns):
            table.clear(columns=True)
            table.add_columns(*COLUMNS[:shown])
        else:
            table.clear()
        for r, cells in zip(self.runs, rows, strict=True):
            style = "red" if r.late else ("yellow" if r.at_risk else ("bold" if r.status in LIVE else ""))
            table.add_row(*(Text(c, style=style) for c in cells[:shown]), key=r.run)
        if current is not None:
            for k, r in enumerate(self.runs):
                if r.run == current.run:
                    table.move_cursor(row=k)
        table.border_subtitle = f"{len(self.runs)} runs"
        # An empty list says how a run comes to be in it, rather than leave a bare header row.
        table.border_title = "" if self.runs else "no runs here yet: `wloadctl console PLAN` starts one"
        self.loaded = True

    def on_resize(self) -> None:
        """The columns that fit change with the width."""
        if self.loaded:
            self.show(self.runs)

    def selected(self) -> RunLike | None:
        """The run under the cursor."""
        table: DataTable[Any] = self.query_one(DataTable)
        if not self.runs or table.cursor_row < 0 or table.cursor_row >= len(self.runs):
            return None
        return self.runs[table.cursor_row]

    def action_open(self) -> None:
        """Open the run under the cursor."""
        run = self.selected()
        if run is not None:
            self.app.open_run(run)  # type: ignore[attr-defined]

    def on_data_table_row_selected(self, _event: DataTable.RowSelected) -> None:
        """Enter (or a click) on a row opens its run."""
        self.action_open()

    def action_command_line(self) -> None:
        """`:run NAME` opens a run; `:runs` stays here; `:quit` leaves."""
        from tui.screens.prompt import PromptScreen

        self.app.push_screen(
            PromptScreen(": command", "", _check, "run NAME (plan or run id) | runs | quit", allow_empty=False),
            self._command_entered)

    def _command_entered(self, text: str | None) -> None:
        if not text:
            return
        words = text.split()
        if words[0] in ("q", "quit"):
            self.app.exit("quit")
        elif words[0] == "run" and len(words) == 2:
            run = find_run(self.runs, words[1])
            if run is None:
                self.notify(f"no run matches '{words[1]}'", severity="error")
            else:
                self.app.open_run(run)  # type: ignore[attr-defined]


def _check(text: str) -> str:
    """The prompt's validator: what the run list accepts."""
    words = text.split()
    if not words:
        raise ValueError("type a command")
    if words[0] in ("runs", "q", "quit") and len(words) == 1:
        return text
    if words[0] == "run" and len(words) == 2:
        return text
    raise ValueError("commands here: run NAME, runs, quit")
