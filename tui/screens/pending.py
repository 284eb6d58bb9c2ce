"""The approvals screen: requests waiting for a second person, and jobs waiting for confirmation; approve or reject."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.cells import cell_len
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Static

from tui.impact import VERB_KEYS, impact, is_moot
from tui.labels import clip
from tui.messages import Note
from tui.screens.confirm import SettleScreen
from tui.screens.reading import ReadingScreen
from tui.toasts import fit_when_shown
from tui.view_model import JobsModel
from tui.widgets.keys_footer import KeysFooter
from wloadctl.core.foureyes import request_words
from wloadctl.errors import WloadError

COLUMNS = (" ", "ID", "VERB", "JOBS", "ASKED BY", "AT", "REASON")
"""The table's columns (the first holds the `>` of the row under the cursor, as in the job table)."""


def pending_rows(data: dict[str, Any], model: JobsModel | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """(key, cells) per request and per job waiting for confirmation; the key is what approve takes.

    A request whose jobs all left the states its verb applies to (see is_moot) says so in its VERB.
    """
    rows: list[tuple[str, tuple[str, ...]]] = []
    for r in data.get("requests") or []:
        verb = str(r["verb"])
        if model is not None and is_moot(verb, r["jobs"], model):
            verb += " (moot: jobs ended)"
        asked = request_words(r, "(whole run)").removeprefix(str(r["verb"])).strip()
        rows.append((str(r["id"]), (" ", str(r["id"]), verb, asked,
                                    str(r["user"]), time.strftime("%H:%M:%S", time.localtime(r["ts"])),
                                    str(r["reason"]))))
    for job in data.get("confirm") or []:
        rows.append((str(job), (" ", "-", "confirm", str(job), "-", "-", "waits for confirmation before it starts")))
    return rows


def fit_reasons(rows: list[tuple[str, tuple[str, ...]]], width: int) -> list[tuple[str, tuple[str, ...]]]:
    """The rows with each REASON (the last column) cut, marked `~`, to the room the other columns leave it in a
    table `width` columns wide, as the job table cuts its cells (a DataTable pads each column a blank either side).

    Args:
        rows: (key, cells) as pending_rows gives them.
        width: the table's columns inside its border (0 or less: not laid out yet, the rows stay whole).

    Returns:
        The rows, their reasons cut where they would not fit.
    """
    if width <= 0 or not rows:
        return rows
    others = sum(max(cell_len(COLUMNS[c]), *(cell_len(cells[c]) for _, cells in rows)) + 2
                 for c in range(len(COLUMNS) - 1))
    # (the heading keeps its width however narrow the table: below that the table scrolls, as it did)
    room = max(cell_len(COLUMNS[-1]), width - others - 2)
    return [(key, (*cells[:-1], clip(cells[-1], room))) for key, cells in rows]


class PendingScreen(ReadingScreen):
    """What waits for an operator's approve; `a` approves the row under the cursor, `r` rejects a request;
    j/k move as everywhere else."""

    READER = "pending"
    TOAST_PANE = "#pending"
    """The toasts stand inside the table's box (tui/toasts.py)."""
    EMPTY: ClassVar[dict[str, Any]] = {"requests": (), "confirm": ()}

    CSS_PATH = "pending.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "settle('approve')", "Approve"),
        Binding("r", "settle('reject')", "Reject"),
        Binding("j", "move(1)", "Down", show=False),
        Binding("k", "move(-1)", "Up", show=False),
        Binding("escape,A", "close", "Back", key_display="esc"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, Any] | None = None
        """The latest reading (requests and confirmation jobs)."""
        self.keys: list[str] = []
        """Row keys in table order (request ids and job ids)."""
        self.rows: list[tuple[str, tuple[str, ...]]] = []
        """The rows shown (a request that became moot is shown again)."""
        self._width = 0

    def compose(self) -> ComposeResult:
        """A line of help, the table, the footer."""
        # The note above the table: the table is the lowest pane, where the toasts stand (below it, they
        # covered the note).
        yield Static("a request is approved by someone other than who asked for it; "
                     "a job waiting for confirmation, by any admin", id="pending-note")
        table: DataTable[str] = DataTable(id="pending", cursor_type="row", zebra_stripes=True)
        table.border_title = "waiting for approve"
        yield table
        yield KeysFooter()

    def on_mount(self) -> None:
        """Columns, then read now and every second."""
        self.query_one(DataTable).add_columns(*COLUMNS)
        super().on_mount()

    def on_screen_resume(self) -> None:
        """The toasts already up keep to this screen's room for them."""
        fit_when_shown(self)

    def _show(self, data: dict[str, Any]) -> None:
        first = self.data is None
        self.data = data
        table = self.query_one(DataTable)
        rows = pending_rows(data, getattr(self.app, "model", None))
        keys = [k for k, _ in rows]
        width = table.scrollable_content_region.width
        if keys == self.keys and rows == self.rows and width == self._width and not first:
            return  # (the first reading always shows: an empty one must still say that nothing waits)
        self.rows, self._width = rows, width
        row = table.cursor_row
        # The columns too: a DataTable's column keeps the width of the widest cell it ever held.
        table.clear(columns=True)
        table.add_columns(*COLUMNS)
        for key, cells in fit_reasons(rows, width):
            table.add_row(*cells, key=key)
        self.keys = keys
        if keys:
            table.move_cursor(row=min(row, len(keys) - 1))
        self._mark()
        table.border_title = f"waiting for approve ({len(keys)})" if keys else "nothing waits for approve"

    def on_resize(self) -> None:
        """The reasons are cut to the new width."""
        if self.data is not None:
            self.call_after_refresh(self._show, self.data)

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        """The `>` follows the cursor."""
        self._mark()

    def _mark(self) -> None:
        table = self.query_one(DataTable)
        for n in range(table.row_count):
            mark = ">" if n == table.cursor_row else " "
            if table.get_cell_at(Coordinate(n, 0)) != mark:
                table.update_cell_at(Coordinate(n, 0), mark)

    def action_settle(self, verb: str) -> None:
        """Approve or reject the row under the cursor, once the operator confirms it (y)."""
        if getattr(self.app, "readonly", False):
            self.notify("read-only console: no actions", severity="warning")
            return
        table = self.query_one(DataTable)
        if not self.keys:
            self.notify("nothing waits for approve", severity="warning")
            return
        key = self.keys[min(table.cursor_row, len(self.keys) - 1)]
        if verb == "reject" and key in (self.data or {}).get("confirm", []):
            self.notify("a job waiting for confirmation is approved or skipped, not rejected", severity="warning")
            return

        def chosen(yes: bool | None) -> None:
            if yes:
                self._send(verb, key)

        self.app.push_screen(SettleScreen(verb, key, self._settle_lines(verb, key)), chosen)

    def _settle_lines(self, verb: str, key: str) -> list[str]:
        """What approving or rejecting the row does, in the words of the other verbs' dialogs."""
        data = self.data or {}
        request = next((r for r in data.get("requests") or [] if str(r["id"]) == key), None)
        if request is None:  # a job waiting for confirmation
            return [f"{verb} {key}: the job waits for confirmation; approved, it may start now"]
        jobs = list(request["jobs"])
        what = request_words(request, "(whole run)")
        lines = [f"{verb} request {key}: {what}, asked by {request['user']}"
                 + (f" ({request['reason']})" if request.get("reason") else "")]
        if verb == "reject":
            return [*lines, "the request is dropped: nothing is done to the jobs"]
        app: Any = self.app
        model, dag = getattr(app, "model", None), getattr(app, "dag", None)
        known = [model.index[j] for j in jobs if model is not None and j in model.index]
        if model is not None and dag is not None and known and request["verb"] in VERB_KEYS:
            lines += impact(request["verb"], known, model, dag, bool(request.get("downstream"))).lines()
        return lines

    @work(thread=True, group="control", exit_on_error=False)
    def _send(self, verb: str, key: str) -> None:
        app: Any = self.app
        try:
            with app.client_lock:
                reply = app.action_client().control(verb, [key])
        except WloadError as e:
            reply = {"ok": False, "error": e.one_line()}
        except Exception as e:  # a failed action is the operator's to see, not a crash of the console
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        app.call_from_thread(self._reported, verb, key, reply)

    def _reported(self, verb: str, key: str, reply: dict[str, Any]) -> None:
        app: Any = self.app
        refused = [r for r in reply.get("results", []) if not r[1]]
        if reply.get("error"):
            text, level = f"{verb} {key} failed: {reply['error']}", "error"
        elif refused:
            text, level = f"{verb} {key}: {refused[0][2]}", "warning"
        else:
            done = [r[2] for r in reply.get("results", []) if r[1]]
            text, level = f"{verb} {key}: " + (reply.get("message") or (done[0] if done else "done")), "information"
        app.add_note(Note(text, level, app.clock(), ("action",)))
        feed = getattr(app, "feed", None)
        if feed is not None:
            feed.wake.set()
        self._read()

    def action_move(self, step: int) -> None:
        """The cursor a row down or up (j/k, as in the job table)."""
        table = self.query_one(DataTable)
        if step > 0:
            table.action_cursor_down()
        else:
            table.action_cursor_up()

    def action_close(self) -> None:
        """Back to the jobs."""
        self.dismiss(None)
