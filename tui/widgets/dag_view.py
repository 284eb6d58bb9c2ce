"""The live DAG around the selected job: upstream left, downstream right."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.widget import Widget

from tui.dag_layout import DagLayout, important_job, layout, render
from tui.labels import clip, clip_id, fmt_duration
from tui.view_model import JobsModel
from tui.widgets.cut import cut_lines
from tui.widgets.tones import TONE_CSS, state_style, tone_classes, tone_style
from wloadctl.core.dag import Dag
from wloadctl.core.states import JobState

MAX_DEPTH = 4
"""Most levels shown on either side."""


def dag_title(job: str | None, width: int) -> str:
    """The pane's title naming its centre job, cut in the id's middle (`~`) to fit a border
    `width` wide: Textual would cut it at the end, with a non-ASCII ellipsis."""
    if not job:
        return "1 dag"
    if not width:
        return f"1 dag: {job}"
    return f"1 dag: {clip_id(job, width - 6 - len('1 dag: '))}"  # corners, a blank either side


def dag_info(place: int | None, total: int, expected: str, guess: bool, remaining: str, width: int) -> str:
    """The line on the centre job, said as fully as `width` columns allow: its critical-path place, its
    expected time and the time from its start to the run's end always show; the words that explain them
    go first as the pane narrows (the help explains them), and only a line too narrow even for the
    shortest is cut, marked `~`.

    Args:
        place: its place in critical-path order (1 starts first); None when unknown.
        total: jobs of the plan (what the place is out of).
        expected: its expected time, formatted.
        guess: the expected time is a default, the job having no `expected:` and no history.
        remaining: the time from its start to the end of the run along its longest path, formatted.
        width: columns the line has.
    """
    forms = (
        (f"critical-path place {place} of {total} (1 starts first), " if place else "")
        + f"expected {expected}{' (no history)' if guess else ''}, {remaining} to the end",
        (f"critical-path place {place} of {total}, " if place else "")
        + f"expected {expected}{' (no history)' if guess else ''}, {remaining} to the end",
        (f"crit-path {place}/{total}, " if place else "")
        + f"expected {expected}{' (guess)' if guess else ''}, {remaining} to end",
        (f"path {place}/{total}  " if place else "")
        + f"exp {expected}{'?' if guess else ''}  {remaining} to end",
        (f"{place}/{total} " if place else "") + f"exp {expected}{'?' if guess else ''} {remaining} to end",
    )
    for form in forms:
        if len(form) <= width:
            return form
    return clip(forms[-1], width)


class DagView(Widget, can_focus=True):
    """Columns by distance from the selected job; `+`/`-` change the levels shown."""

    DEFAULT_CSS = (
        "DagView { height: 1fr; text-wrap: nowrap; text-overflow: clip; }\n"
        "DagView > .dag--centre { text-style: bold reverse; }\n"
        "DagView > .dag--edge { color: $text-muted; }\n"
        + TONE_CSS.format(cls="DagView")
    )
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "dag--centre",
        "dag--edge",
        *tone_classes(),
    }

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.dag: Dag | None = None
        """The plan's graph."""
        self.model: JobsModel | None = None
        """The jobs' states."""
        self.job: str | None = None
        """The centre."""
        self.depth: int | None = None
        """Levels on each side; None fits them to the width."""
        self._layout: DagLayout | None = None
        self._key: tuple[object, ...] = ()
        self._place: tuple[object, int | None] = (None, None)  # (job and plan size, its critical-path place)

    def show(self, dag: Dag, model: JobsModel, job: str | None) -> None:
        """Centre on `job` (laid out again only when the centre or the size changes)."""
        self.dag, self.model, self.job = dag, model, job
        self._retitle()
        self.refresh()

    def on_resize(self) -> None:
        """Cut the title anew for the new width."""
        self._retitle()

    def _retitle(self) -> None:
        self.border_title = dag_title(self.job, self.outer_size.width)

    def levels(self) -> int:
        """Levels shown on each side at this width."""
        if self.depth is not None:
            return self.depth
        w = self.size.width
        return 1 if w < 100 else 2 if w < 160 else 3

    def change_depth(self, step: int) -> None:
        """Show more (+1) or fewer (-1) levels."""
        self.depth = max(1, min(MAX_DEPTH, self.levels() + step))
        self.refresh()

    def _state(self, job: str) -> JobState:
        assert self.model is not None
        return JobState(self.model.state[self.model.index[job]])

    def _critical(self, job: str) -> bool:
        assert self.model is not None
        return self.model.index[job] in self.model.critical

    def render(self) -> Text:
        """The layout drawn with state colours."""
        out = Text(no_wrap=True, overflow="crop")
        if (
            self.dag is None
            or self.model is None
            or self.job is None
            or self.job not in self.dag
        ):
            out.append("no job selected")
            return out
        depth = self.levels()
        height = max(1, self.size.height - 1)
        key = (self.job, depth, height, id(self.dag))
        if self._key != key or self._layout is None:
            self._layout = layout(
                self.dag,
                self.job,
                depth,
                depth,
                height,
                important_job(self._state, self._critical),
            )
            self._key = key
        lay = self._layout
        lines = render(lay, self.size.width, self._state, self._critical)
        edge = self.get_component_rich_style("dag--edge", partial=True)
        centre = self.get_component_rich_style("dag--centre", partial=True)
        for n, spans in enumerate(lines):
            if n:
                out.append("\n")
            for sp in spans:
                if sp.state is not None:
                    out.append(sp.text, state_style(self, sp.state))
                elif sp.role == "edge":
                    out.append(sp.text, edge)
                elif sp.role == "centre":
                    out.append(sp.text, centre)
                elif sp.role in ("critical", "more"):
                    out.append(
                        sp.text,
                        "bold" if sp.role == "critical" else tone_style(self, "idle"),
                    )
                else:
                    out.append(sp.text)
        more = []
        if lay.more_up:
            more.append("more upstream")
        if lay.more_down:
            more.append("more downstream")
        out.append("\n")
        i = self.model.index.get(self.job, -1)
        m = self.model
        if 0 <= i < len(m.remaining) and i < len(m.expected):
            if self._place[0] != (i, len(m.remaining)):
                self._place = ((i, len(m.remaining)), m.critical_place(i))
            info = dag_info(
                self._place[1],
                len(m.remaining),
                fmt_duration(m.expected[i]),
                m.expected_is_guess(i),
                fmt_duration(m.remaining[i]),
                self.size.width,
            )
            out.append(info + "\n", tone_style(self, "idle"))
        out.append(
            f"levels {depth} (+/-)  * critical path  [ ] selected"
            + (f"  ({', '.join(more)})" if more else ""),
            tone_style(self, "idle"),
        )
        return cut_lines(out, self.size.width)  # (a narrow pane: the legend cut, marked)
