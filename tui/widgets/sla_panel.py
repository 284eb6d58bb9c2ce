"""SLA tiers: per tier done/running/failed/late, next deadline, jobs at risk."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.labels import SHORT, fmt_clock, fmt_duration
from tui.sla import SlaView
from tui.widgets.cut import cut_lines
from tui.widgets.tones import TONE_CSS, state_style, tone_classes, tone_style

RISK_WHY = {"blocked: needs an operator": "blocked", "deadline close": "close"}
"""Short reasons: the pane is narrow, the job's name and deadline come first."""


class SlaPanel(Widget, can_focus=True):
    """The late and at-risk jobs first (named), then one line per SLA tier."""

    DEFAULT_CSS = (
        "SlaPanel { height: auto; text-wrap: nowrap; text-overflow: clip; }\n"
        + TONE_CSS.format(cls="SlaPanel")
    )
    COMPONENT_CLASSES = tone_classes()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: SlaView | None = None
        """The figures."""
        self.now = 0.0
        """Their time."""

    def show(self, view: SlaView, now: float) -> None:
        """Take fresh figures and repaint."""
        self.view, self.now = view, now
        self.refresh()

    def _danger(self, out: Text, v: SlaView) -> None:
        """The late and at-risk jobs, first and one a line, name before reason: a short pane
        (80x24) still names them."""
        for d in v.late[:3]:
            out.append("late: ", tone_style(self, "bad"))
            out.append(f"{d.job} was due {fmt_clock(d.at)[:5]} ")
            out.append(SHORT[d.state], state_style(self, d.state))
            out.append("\n")
        if len(v.late) > 3:
            out.append(f"late: ... {len(v.late) - 3} more\n", tone_style(self, "bad"))
        for d in v.at_risk[:5]:
            out.append("at risk: ", tone_style(self, "warn"))
            out.append(
                f"{d.job} due {fmt_clock(d.at)[:5]} ({fmt_duration(d.at - self.now)}) "
            )
            out.append(SHORT[d.state], state_style(self, d.state))
            out.append(f" {RISK_WHY.get(d.why, d.why)}\n")
        if len(v.at_risk) > 5:
            out.append(f"at risk: ... {len(v.at_risk) - 5} more\n", tone_style(self, "warn"))
        out.rstrip()

    def render(self) -> Text:
        """The tier table and the jobs in danger."""
        out = Text(no_wrap=True, overflow="crop")
        v = self.view
        if v is None:
            out.append("loading...")
            return out
        self._danger(out, v)
        if v.at_risk or v.late:
            out.append("\n")
        out.append("TIER     DONE      RUN FAIL LATE RISK  NEXT DEADLINE")
        for t in v.tiers:
            out.append(
                f"\n{t.tier.label:<8} {f'{t.done}/{t.total}':<9} {t.running:>3} "
            )
            out.append(f"{t.failed:>4}", tone_style(self, "bad") if t.failed else "")
            out.append(" ")
            out.append(f"{t.late:>4}", tone_style(self, "bad") if t.late else "")
            out.append(" ")
            out.append(f"{t.at_risk:>4}", tone_style(self, "warn") if t.at_risk else "")
            if t.next_due is not None:
                left = fmt_duration(t.next_due.at - self.now)
                due = fmt_clock(t.next_due.at)[:5]
                # The time first: a narrow pane cuts the job's id, not when it is due.
                out.append(f"  {due} in {left} {t.next_due.job}")
        if not v.at_risk and not v.late and any(t.next_due for t in v.tiers):
            out.append("\nevery deadline on track", tone_style(self, "ok"))
        elif not any(t.next_due for t in v.tiers) and not v.late and not v.at_risk:
            out.append("\nno open deadline")
        return cut_lines(out, self.size.width)  # (a job's id too long for the pane: cut, marked)
