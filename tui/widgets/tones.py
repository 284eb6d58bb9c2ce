"""Shared colour meanings: one CSS class per state tone, resolved to Rich styles."""

from __future__ import annotations

from rich.style import Style
from textual.widget import Widget

from tui.labels import TONE
from wloadctl.core.states import JobState

TONES = ("ok", "bad", "run", "warn", "idle")
"""The tones of states (view_model.TONE) and of health."""

TONE_CSS = "\n".join(
    f"{{cls}} > .tone-{t} {{{{ {rule} }}}}"
    for t, rule in (
        ("ok", "color: $success;"),
        ("bad", "color: $error; text-style: bold;"),
        ("run", "color: $primary;"),
        ("warn", "color: $warning;"),
        ("idle", "color: $text-muted;"),
    )
)
"""CSS template giving each tone its colour; format with cls=the widget's type name."""

HEALTH_TONE = {"alive": "ok", "suspect": "warn", "dead": "bad"}
"""Tones of executor health."""


def tone_classes() -> set[str]:
    """The component class names of the tones."""
    return {f"tone-{t}" for t in TONES}


def tone_style(widget: Widget, tone: str) -> Style:
    """The Rich style of a tone in `widget`."""
    return widget.get_component_rich_style(f"tone-{tone}", partial=True)


def state_style(widget: Widget, state: JobState) -> Style:
    """The Rich style of a job state in `widget`."""
    return tone_style(widget, TONE[state])
