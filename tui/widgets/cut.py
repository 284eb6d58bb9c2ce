"""Lines cut to their pane's width with the cut marked `~`, never silently (ASCII: no ellipsis glyph)."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text


def cut_line(line: Text, width: int) -> Text:
    """`line` as it fits in `width` columns: whole, or cut with `~` as its last column (a width of 0 or
    less is not known yet: the line is left whole)."""
    if width <= 0 or line.cell_len <= width:
        return line
    out = line.copy()
    out.truncate(max(0, width - 1), overflow="crop")
    out.append("~")
    return out


def cut_lines(text: Text, width: int) -> Text:
    """Every line of `text` cut to `width` columns as `cut_line` cuts it."""
    if width <= 0 or all(line.cell_len <= width for line in text.split("\n")):
        return text
    out = Text("\n").join(cut_line(line, width) for line in text.split("\n", allow_blank=True))
    out.no_wrap, out.overflow = True, "crop"
    return out


class CutLines:
    """A Rich renderable of lines that never wrap: each too long for the width it is drawn in is cut
    with `~` (a Static shows it cut to its own width, whatever that width turns out to be)."""

    def __init__(self, text: Text) -> None:
        self.text = text
        """The lines, whole."""

    def __str__(self) -> str:
        return self.text.plain

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        out = cut_lines(self.text, options.max_width)
        out.no_wrap, out.overflow = True, "crop"
        yield out

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max((line.cell_len for line in self.text.split("\n")), default=0)
        return Measurement(min(1, widest), widest)
