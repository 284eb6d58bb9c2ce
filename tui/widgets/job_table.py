"""The job table: a Line API widget rendering only the visible rows of 100,000 jobs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from tui.labels import SHORT, TONE, clip, clip_id, pad
from tui.view_model import SORT_HEADINGS, JobsModel, job_row

TONES = ("ok", "bad", "run", "warn", "idle")


@dataclass(frozen=True)
class Column:
    """One column of the table at the current width."""

    key: str
    """Sort key it stands for ("" when it cannot sort)."""
    title: str
    """Header text."""
    width: int
    """Characters."""
    right: bool = False
    """Right-aligned (numbers)."""


INFO_ROOM = 16
"""Columns INFO keeps however long the ids are (when the table is wide enough to have it)."""
INFO_WIDE = 40
"""Columns INFO keeps on a wide table before the ids longer than ID_CUT are cut."""
ID_CUT = 48
"""Columns of an id a table 100 columns wide or more always has room for (INFO takes the rest)."""


def columns_for(width: int, id_width: int) -> list[Column]:
    """The columns fitting `width`: the id takes what it needs (its critical-path mark too), the info
    the rest. A long id shows whole once the table is wide enough to leave INFO its INFO_WIDE columns
    as well (a 73-character id from 160 columns on); narrower, it is cut in its middle, marked `~`."""
    wide = width >= 130
    cols = [
        Column("state", SORT_HEADINGS["state"], 15 if wide else 7),
        Column("id", SORT_HEADINGS["id"], 0),
        Column("tier", SORT_HEADINGS["tier"], 4),
        Column("attempt", SORT_HEADINGS["attempt"], 3, True),
        Column("start", SORT_HEADINGS["start"], 8),
        Column("duration", SORT_HEADINGS["duration"], 6, True),
        Column("executor", SORT_HEADINGS["executor"], 2, True),
    ]
    fixed = 2 + sum(c.width + 1 for c in cols if c.key != "id")
    room = max(8, width - fixed)
    # A long id is shortened (with ~) before INFO loses its room: the exit status, the holder and the
    # retry timer of every job are worth more than the middle of one id.
    want = max(id_width + 1, 12)  # (+1: the `*` of a job on the critical path)
    cap = max(ID_CUT, room - INFO_WIDE - 1) if width >= 100 else room
    idw = max(8, min(room, want, cap, max(12, room - INFO_ROOM - 1)))
    cols[1] = Column("id", SORT_HEADINGS["id"], idw)
    info = width - fixed - idw - 1
    if info >= 8:
        cols.append(Column("", "INFO", info))
    return cols


def _position(order: Sequence[int], i: int) -> int:
    """Where job i is in `order` (-1: not shown)."""
    try:
        return order.index(i)
    except ValueError:
        return -1


class JobTable(Widget, can_focus=True):
    """Jobs in display order; a cursor row, marked rows, a header naming the sort."""

    DEFAULT_CSS = """
    JobTable { height: 1fr; }
    JobTable > .job-table--header { text-style: bold; }
    JobTable > .job-table--cursor { background: $accent 40%; text-style: bold; }
    JobTable:focus > .job-table--cursor { background: $accent; color: $text; }
    JobTable > .job-table--marked { text-style: bold underline; }
    JobTable > .job-table--tone-ok { color: $success; }
    JobTable > .job-table--tone-bad { color: $error; text-style: bold; }
    JobTable > .job-table--tone-run { color: $primary; }
    JobTable > .job-table--tone-warn { color: $warning; }
    JobTable > .job-table--tone-idle { color: $text-muted; }
    JobTable > .job-table--critical { text-style: bold; }
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "job-table--header",
        "job-table--cursor",
        "job-table--marked",
        "job-table--critical",
        *(f"job-table--tone-{t}" for t in TONES),
    }

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j,down", "move(1)", "Down", show=False),
        Binding("k,up", "move(-1)", "Up", show=False),
        Binding("ctrl+d,pagedown", "page(1)", "Page down", show=False),
        Binding("ctrl+u,pageup", "page(-1)", "Page up", show=False),
        Binding("g,home", "jump(0)", "Top", show=False),
        Binding("G,end", "jump(-1)", "Bottom", show=False),
        Binding("space", "mark", "Mark", show=False),
        Binding("enter", "open", "Detail", show=False),
    ]

    class Highlighted(Message):
        """The cursor moved to another job."""

        def __init__(self, table: JobTable, job: str | None) -> None:
            super().__init__()
            self.table = table
            """The table."""
            self.job = job
            """The job under the cursor (None when the table is empty)."""

        def can_replace(self, message: Message) -> bool:
            """Only where the cursor ends up matters."""
            return (
                isinstance(message, JobTable.Highlighted)
                and message.table is self.table
            )

    class MarksChanged(Message):
        """Jobs were marked or unmarked (the screen's title counts them)."""

        def __init__(self, table: JobTable) -> None:
            super().__init__()
            self.table = table
            """The table."""

    class Opened(Message):
        """Enter was pressed on a job."""

        def __init__(self, job: str) -> None:
            super().__init__()
            self.job = job
            """The job."""

    def __init__(self, clock: Callable[[], float], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.clock = clock
        """The time, for running durations."""
        self.model: JobsModel | None = None
        """The jobs; None until the run is loaded."""
        self.order: Sequence[int] = []
        """Job indices in display order."""
        self.cursor = 0
        """Position of the cursor in `order`."""
        self.top = 0
        """Position of the first visible row in `order`."""
        self.marks: set[int] = set()
        """Marked job indices (space)."""
        self.sort_key = "plan"
        """The sort column, for the header."""
        self.reverse = False
        """Whether the sort is descending."""
        self._id_width = 12
        self._last_job: str | None = None

    # -- data ------------------------------------------------------------------------

    def set_rows(self, model: JobsModel, order: Sequence[int]) -> None:
        """Show `order`, keeping the cursor on its job when that job is still shown."""
        keep = self.current_job
        if model is not self.model:
            # Long ids are rare: a sample sets the column width without a full pass.
            self._id_width = max((len(j) for j in model.ids[:5000]), default=12)
        self.model = model
        self.order = order
        if keep is not None and keep in model.index:
            k = model.index[keep]
            try:
                self.cursor = order.index(k)
            except ValueError:
                self.cursor = min(self.cursor, max(0, len(order) - 1))
        else:
            self.cursor = min(self.cursor, max(0, len(order) - 1))
        self._scroll_to_cursor()
        self.refresh()
        self._announce()

    @property
    def current_job(self) -> str | None:
        """The job under the cursor."""
        if self.model is None or not self.order or self.cursor >= len(self.order):
            return None
        return self.model.ids[self.order[self.cursor]]

    def selection(self) -> list[str]:
        """The marked jobs in display order, or the job under the cursor if none is."""
        if self.model is None:
            return []
        if self.marks:
            pos = {i: _position(self.order, i) for i in self.marks}
            shown = [self.model.ids[i] for i in sorted((i for i in pos if pos[i] >= 0), key=pos.__getitem__)]
            hidden = sorted(i for i in pos if pos[i] < 0)
            return shown + [self.model.ids[i] for i in hidden]
        job = self.current_job
        return [job] if job else []

    def clear_marks(self) -> None:
        """Forget the marks (after an action used them)."""
        self.marks.clear()
        self.refresh()
        self.post_message(self.MarksChanged(self))

    def hidden_marks(self) -> int:
        """How many marked jobs the filter hides (a verb acts on them all the same)."""
        marks, order = self.marks, self.order
        if len(marks) <= 16 or isinstance(order, range):
            return sum(1 for i in marks if i not in order)
        shown = set(order)  # (one pass, where a search of the order per mark would be one each)
        return sum(1 for i in marks if i not in shown)

    def select_job(self, job: str) -> bool:
        """Move the cursor to `job` if it is shown."""
        if self.model is None or job not in self.model.index:
            return False
        try:
            self.cursor = self.order.index(self.model.index[job])
        except ValueError:
            return False
        self._scroll_to_cursor()
        self.refresh()
        self._announce()
        return True

    # -- movement --------------------------------------------------------------------

    @property
    def _visible(self) -> int:
        return max(1, self.size.height - 1)

    def _scroll_to_cursor(self) -> None:
        vis = self._visible
        if self.cursor < self.top:
            self.top = self.cursor
        elif self.cursor >= self.top + vis:
            self.top = self.cursor - vis + 1
        self.top = max(0, min(self.top, max(0, len(self.order) - vis)))

    def _announce(self) -> None:
        job = self.current_job
        if job != self._last_job:
            self._last_job = job
            self.post_message(self.Highlighted(self, job))
        self.border_subtitle = (
            f"{self.cursor + 1 if self.order else 0}/{len(self.order)}"
        )

    def _goto(self, pos: int) -> None:
        if not self.order:
            return
        self.cursor = max(0, min(pos, len(self.order) - 1))
        self._scroll_to_cursor()
        self.refresh()
        self._announce()

    def action_move(self, step: int) -> None:
        """Move the cursor by `step` rows."""
        self._goto(self.cursor + step)

    def action_page(self, pages: int) -> None:
        """Move the cursor by whole screens."""
        self._goto(self.cursor + pages * self._visible)

    def action_jump(self, pos: int) -> None:
        """Go to the first row (0) or the last (-1)."""
        self._goto(len(self.order) - 1 if pos < 0 else pos)

    def action_mark(self) -> None:
        """Mark or unmark the job under the cursor, then step down (as in k9s)."""
        if self.model is None or not self.order:
            return
        i = self.order[self.cursor]
        self.marks.symmetric_difference_update({i})
        self.action_move(1)
        self.refresh()
        self.post_message(self.MarksChanged(self))

    def action_open(self) -> None:
        """Open the job under the cursor."""
        job = self.current_job
        if job is not None:
            self.post_message(self.Opened(job))

    def on_resize(self, _event: events.Resize) -> None:
        """Keep the cursor visible when the table shrinks."""
        self._scroll_to_cursor()

    def on_click(self, event: events.Click) -> None:
        """Put the cursor on the clicked row."""
        if event.y >= 1:
            self._goto(self.top + event.y - 1)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        """Scroll the rows under the mouse."""
        self._goto(self.cursor + 3)
        event.stop()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        """Scroll the rows under the mouse."""
        self._goto(self.cursor - 3)
        event.stop()

    # -- rendering -------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        """Read the rows on screen first, in one go (a big run's rows are read when shown)."""
        if self.model is not None and self.model.known is not None:
            end = min(len(self.order), self.top + self.size.height)
            self.model.ensure(self.order[k] for k in range(self.top, end))
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        """Render one line: the header at y=0, then the visible rows."""
        width = self.size.width
        base = self.rich_style
        cols = columns_for(width, self._id_width)
        if y == 0:
            return self._header(cols, width, base)
        pos = self.top + y - 1
        if self.model is None:
            text = "loading the run..." if y == 1 else ""
            return Strip([Segment(text.ljust(width), base)], width)
        if pos >= len(self.order):
            if pos == 0 and y == 1:
                text = "  no job matches the filter (esc clears it)"
                return Strip([Segment(text.ljust(width)[:width], base)], width)
            return Strip.blank(width, base)
        return self._row(pos, cols, width, base)

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(name, partial=True)

    def _header(self, cols: list[Column], width: int, base: Style) -> Strip:
        style = base + self._style("job-table--header")
        parts = ["  "]
        for c in cols:
            title = c.title
            if c.key and c.key == self.sort_key:
                # The arrow stays when the column is narrow (ATT, TIER, EX): a letter goes.
                title = title[: max(0, c.width - 1)] + ("v" if self.reverse else "^")
            parts.append(
                (title.rjust(c.width) if c.right else title.ljust(c.width))[: c.width]
                + " "
            )
        text = "".join(parts)[:width].ljust(width)
        return Strip([Segment(text, style)], width)

    def _row(self, pos: int, cols: list[Column], width: int, base: Style) -> Strip:
        assert self.model is not None
        i = self.order[pos]
        row = job_row(self.model, i, self.clock())
        is_cursor = pos == self.cursor
        marked = i in self.marks
        style = base
        if is_cursor:
            style = style + self._style("job-table--cursor")
        if marked:
            style = style + self._style("job-table--marked")
        # On the cursor row the state keeps the row's colours: under NO_COLOR a grey
        # label on the grey cursor bar would vanish, and the word carries the meaning.
        tone = (
            style
            if is_cursor
            else style + self._style(f"job-table--tone-{TONE[row.state]}")
        )
        wide = cols[0].width > 7
        label = row.state.name if wide else SHORT[row.state]
        crit = i in self.model.critical
        cells = {
            "state": label,
            "id": row.job + ("*" if crit and cols[1].width > len(row.job) else ""),
            "tier": row.tier,
            "attempt": row.attempt,
            "start": row.start,
            "duration": row.duration,
            "executor": row.executor,
            "": row.info,
        }
        segs = [Segment((">" if is_cursor else " ") + ("+" if marked else " "), style)]
        for c in cols:
            cut = clip_id if c.key == "id" else clip
            text = cut(cells[c.key], c.width)
            text = pad(text, c.width, c.right)
            seg_style = tone if c.key == "state" else style
            if c.key == "id" and crit:
                seg_style = seg_style + self._style("job-table--critical")
            segs.append(Segment(text, seg_style))
            segs.append(Segment(" ", style))
        strip = Strip(segs).crop(0, width)
        return strip.extend_cell_length(width, style)
