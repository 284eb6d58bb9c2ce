"""The `?` help: every key (read from the bindings), filter syntax, the state legend."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.binding import Binding as B
from textual.containers import VerticalScroll
from textual.geometry import Size
from textual.screen import ModalScreen
from textual.widget import Widget

from tui.commands import VERB_HELP, VIEW_COMMANDS
from tui.filters import STATE_GROUPS, TROUBLE
from tui.impact import EFFECT, VERB_KEYS
from tui.labels import TINY, legend
from tui.toasts import fit_when_shown
from tui.widgets.keys_footer import KeysFooter

KEY = 16
"""Columns of the key column (a description starts after it and a blank)."""
HANG = 4
"""Indent of a list item's wrapped lines beyond the item's own."""
NBSP = "\xa0"
"""Joins words that a wrap must not part (textwrap breaks at ASCII whitespace only)."""


@dataclass(frozen=True)
class Entry:
    """One paragraph of the help: a lead (indent, key) on its first line, text wrapped after it."""

    text: str
    """The words, wrapped at the screen's width."""
    lead: str = ""
    """What the first line starts with: an indent, or an indent and a key padded to its column."""
    hang: int | None = None
    """Columns the wrapped lines are indented by (None: the lead's width, so they align with the text)."""


BLANK = Entry("")


def _key(key: str, text: str) -> Entry:
    """A key and what it does: the text stands in a column after the keys, and wraps there."""
    return Entry(text, f"  {key:<{KEY}} ")


def _item(text: str) -> Entry:
    """A list item: wrapped lines indented beneath its text."""
    return Entry(text, "  ", 2 + HANG)


FILTER_HELP = [
    Entry("/ filter: words separated by spaces, e.g.  load_*\xa0state:failed,held\xa0tier:critical", hang=2 + HANG),
    _item("a word with * ? [ is a glob on the job id; other text matches anywhere in the id"),
    _item("state: (s:) takes state names, short labels or groups: " + ", ".join(STATE_GROUPS)),
    _item("tier: (t:) takes critical, high, standard, low; an empty filter shows every job"),
    _item("sla: takes risk, late (the jobs the SLA pane names; with state:, either shows)"),
    _item("! shows the trouble: " + TROUBLE),
]
"""The filter syntax."""


def _keys(bindings: list[BindingType]) -> list[tuple[str, str]]:
    out = []
    for b in bindings:
        if (
            not isinstance(b, Binding)
            or not b.description
            or b.action.startswith("verb(")
        ):
            continue
        keys = b.key_display or ", ".join(
            k.replace("question_mark", "?").replace("slash", "/").replace("colon", ":")
            for k in b.key.split(",")
        )
        out.append((keys, b.tooltip or b.description))  # (the tooltip: what a short footer word stands for)
    return out


def help_entries(app_bindings: Iterable[BindingType] = (), runs_first: bool = False) -> list[Entry]:
    """The whole help as paragraphs, generated from the screens' bindings and the state tables.

    Args:
        app_bindings: the app's own bindings (keys that work anywhere); the app passes them,
            so this screen never imports the app that shows it.
        runs_first: asked on the list of runs: its keys come first.
    """
    from tui.screens.job_detail import JobDetailScreen
    from tui.screens.main import MainScreen
    from tui.screens.runs import RunsScreen, RunsTable
    from tui.widgets.job_table import JobTable

    runs: tuple[str, list[BindingType]] = (
        "Runs list (`wloadctl console` without a plan: every run; enter opens one)",
        [B("j", "", "Down / up", key_display="j, down / k, up"),
         *(b for b in RunsTable.BINDINGS if isinstance(b, Binding) and b.key in ("g", "G", "ctrl+d", "ctrl+u")),
         *RunsScreen.BINDINGS],
    )
    # The table's keys work on the main screen: a main-screen binding of the same action (there for the footer,
    # such as `spc Mark`) is listed once, under the table.
    table_actions = {b.action for b in JobTable.BINDINGS if isinstance(b, Binding)}
    sections: list[tuple[str, list[BindingType]]] = [
        ("Moving in the job table (vim keys and arrows)", list(JobTable.BINDINGS)),
        ("Main screen", [b for b in MainScreen.BINDINGS
                         if not (isinstance(b, Binding) and b.action in table_actions)]),
        ("Job detail (enter on a job)", list(JobDetailScreen.BINDINGS)),
        (
            "Anywhere",
            [
                *app_bindings,
                B("tab", "", "Next pane"),
                B("ctrl+p", "", "Command palette"),
                B("escape", "", "Back / close"),
            ],
        ),
    ]
    runs_list = [Entry(runs[0]), *(_key(k, d) for k, d in _keys(runs[1]))]
    out: list[Entry] = []
    if runs_first:
        out += [*runs_list, BLANK]
    out.append(
        Entry(
            "Operator verbs: on the marked jobs, or the one under the cursor. Each shows its impact "
            "(jobs, downstream, critical, deadlines) and asks; kill, set-ok, skip and rerun need y. "
            "A read-only console has none; each verb lands in the run's audit trail."
        )
    )
    out += [_key(key, f"{verb}: the jobs {EFFECT[verb]}") for verb, key in VERB_KEYS.items()]
    out.append(BLANK)
    for title, bindings in sections:
        out += [Entry(title), *(_key(k, d) for k, d in _keys(bindings)), BLANK]
    out += [*FILTER_HELP, BLANK]
    out.append(Entry(": command line"))
    out += [_item(h) for h in [*VERB_HELP.values(), *VIEW_COMMANDS.values()]]
    out.append(BLANK)
    out.append(Entry("States (label, name, meaning; -> where it can go; verbs that apply)"))
    for e in legend():
        out.append(Entry(f"{e.meaning} (narrow\xa0header:\xa0{TINY[e.state]})", f"  {e.short:<8}{e.state.name:<16}"))
        out.append(
            Entry(
                f"-> {', '.join(e.leads_to) or '(final)'}; verbs: {', '.join(e.verbs) or 'none'}",
                " " * 26,
                26 + 3,
            )
        )
    out.append(BLANK)
    out.append(Entry("Marks: * after a job id = on the critical path; + before a row = marked (space)"))
    if not runs_first:
        out += [BLANK, *runs_list]
    return out


def wrap_entries(entries: Iterable[Entry], width: int | None = None) -> list[str]:
    """The help's lines at `width` columns: each paragraph wrapped at word boundaries, its wrapped lines
    indented under its text (a key's description stays in its column). None: one line a paragraph.
    A no-break space (U+00A0) holds words together (an example, a parenthesis) and shows as a blank.

    On a screen too narrow for a column of keys the wrapped lines keep a small indent instead, so the
    text keeps most of the width.
    """
    lines: list[str] = []
    for e in entries:
        if width is None or not e.text:
            lines.append((e.lead + e.text).rstrip().replace(NBSP, " "))
            continue
        hang = len(e.lead) if e.hang is None else e.hang
        if width - hang < 24:
            hang = min(hang, HANG)
        lead = e.lead if width - len(e.lead) >= 24 else e.lead.rstrip() + " "
        wrapped = textwrap.wrap(
            e.text,
            width,
            initial_indent=lead,
            subsequent_indent=" " * hang,
            break_on_hyphens=False,
        )
        lines += [line.replace(NBSP, " ") for line in wrapped] or [lead.rstrip()]
    return lines


class HelpText(Widget):
    """The help's paragraphs, wrapped at word boundaries to the width it is given."""

    DEFAULT_CSS = "HelpText { height: auto; }"

    def __init__(self, entries: list[Entry], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.entries = entries
        """The paragraphs."""
        self._wrapped: tuple[int, list[str]] = (-1, [])

    def lines(self, width: int) -> list[str]:
        """The lines at `width` columns (wrapped once per width)."""
        if self._wrapped[0] != width:
            self._wrapped = (width, wrap_entries(self.entries, max(1, width)))
        return self._wrapped[1]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """As many rows as the text wraps to in `width`."""
        return len(self.lines(width))

    def render(self) -> Text:
        """The wrapped text."""
        return Text("\n".join(self.lines(self.size.width)), no_wrap=True, overflow="crop")


class HelpScreen(ModalScreen[None]):
    """Keys, filter syntax and the legend, scrollable with j/k."""

    CSS_PATH = "help.tcss"
    TOAST_PANE = "#help"
    """The toasts stand inside the help's box (tui/toasts.py)."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "close", "Close"),
        Binding("j,down", "scroll(1)", "Down", show=False),
        Binding("k,up", "scroll(-1)", "Up", show=False),
        Binding("ctrl+d,pagedown,space", "scroll(10)", "Page down", show=False),
        Binding("ctrl+u,pageup", "scroll(-10)", "Page up", show=False),
    ]

    def __init__(self, app_bindings: Iterable[BindingType] = (), runs_first: bool = False) -> None:
        super().__init__()
        self.app_bindings = list(app_bindings)
        """The app's own bindings, listed under "Anywhere"."""
        self.runs_first = runs_first
        """Asked on the list of runs: its keys come first."""

    def compose(self) -> ComposeResult:
        """The help text."""
        with VerticalScroll(id="help") as box:
            box.border_title = "help - esc closes"
            yield HelpText(help_entries(self.app_bindings, self.runs_first))
        # Its own footer: the screen below's would show keys that do nothing here.
        yield KeysFooter()

    def on_screen_resume(self) -> None:
        """The toasts already up keep to this screen's room for them."""
        fit_when_shown(self)

    def action_scroll(self, lines: int) -> None:
        """Scroll the text."""
        self.query_one("#help", VerticalScroll).scroll_relative(y=lines, animate=False)

    def action_close(self) -> None:
        """Back to where the operator was."""
        self.dismiss(None)
