"""The `?` help: every key (read from the bindings), filter syntax, the state legend."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.binding import Binding as B
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.commands import VERB_HELP, VIEW_COMMANDS
from tui.filters import STATE_GROUPS, TROUBLE
from tui.impact import EFFECT, VERB_KEYS
from tui.labels import TINY, legend

FILTER_HELP = (
    "/ filter: words separated by spaces, e.g.  load_* state:failed,held "
    "tier:critical\n"
    "  a word with * ? [ is a glob on the job id; other text matches anywhere "
    "in the id\n"
    "  state: (s:) takes state names, short labels or groups: "
    + ", ".join(STATE_GROUPS)
    + "\n"
    "  tier: (t:) takes critical, high, standard, low; an empty filter shows every job\n"
    "  sla: takes risk, late (the jobs the SLA pane names; with state:, either shows)\n"
    "  ! shows the trouble: " + TROUBLE
)


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
        out.append((keys, b.description))
    return out


def help_text(app_bindings: Iterable[BindingType] = (), runs_first: bool = False) -> str:
    """The whole help, generated from the screens' bindings and the state tables.

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
    sections: list[tuple[str, list[BindingType]]] = [
        ("Moving in the job table (vim keys and arrows)", list(JobTable.BINDINGS)),
        ("Main screen", list(MainScreen.BINDINGS)),
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
    lines: list[str] = []
    if runs_first:
        lines.append(runs[0])
        lines.extend(f"  {k:<16} {d}" for k, d in _keys(runs[1]))
        lines.append("")
    lines += [
        "Operator verbs: on the marked jobs, or the one under the cursor. Each shows "
        "its impact",
        "(jobs, downstream, critical, deadlines) and asks; kill, set-ok, skip and "
        "rerun need y.",
    ]
    for verb, key in VERB_KEYS.items():
        lines.append(f"  {key:<16} {verb}: the jobs {EFFECT[verb]}")
    lines.append(
        f"  {'':<16} not in a read-only console; each lands in the run's audit trail"
    )
    lines.append("")
    for title, bindings in sections:
        lines.append(title)
        lines.extend(f"  {k:<16} {d}" for k, d in _keys(bindings))
        lines.append("")
    lines.append(FILTER_HELP)
    lines.append("")
    lines.append(": command line")
    lines.extend(f"  {h}" for h in [*VERB_HELP.values(), *VIEW_COMMANDS.values()])
    lines.append("")
    lines.append("States (label, name, meaning; -> where it can go; verbs that apply)")
    for e in legend():
        lines.append(f"  {e.short:<8}{e.state.name:<16}{e.meaning} (narrow header: {TINY[e.state]})")
        lines.append(
            f"  {'':<24}-> {', '.join(e.leads_to) or '(final)'}; "
            f"verbs: {', '.join(e.verbs) or 'none'}"
        )
    lines.append("")
    lines.append(
        "Marks: * after a job id = on the critical path; "
        "+ before a row = marked (space)"
    )
    if not runs_first:
        lines.append("")
        lines.append(runs[0])
        lines.extend(f"  {k:<16} {d}" for k, d in _keys(runs[1]))
    return "\n".join(lines)


class HelpScreen(ModalScreen[None]):
    """Keys, filter syntax and the legend, scrollable with j/k."""

    CSS_PATH = "help.tcss"
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
            yield Static(help_text(self.app_bindings, self.runs_first), markup=False)

    def action_scroll(self, lines: int) -> None:
        """Scroll the text."""
        self.query_one("#help", VerticalScroll).scroll_relative(y=lines, animate=False)

    def action_close(self) -> None:
        """Back to where the operator was."""
        self.dismiss(None)
