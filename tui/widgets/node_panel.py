"""Node health: scheduler and executors (health, heartbeat, jobs, load, memory)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.labels import clip, fmt_clock, fmt_duration
from tui.messages import LiveStatus, Note
from tui.view_model import JobsModel
from tui.widgets.cut import cut_lines
from tui.widgets.tones import HEALTH_TONE, TONE_CSS, tone_classes, tone_style


def fmt_kb(kb: int) -> str:
    """Memory in KiB as `812K`, `21.4M` or `1.2G`."""
    if kb < 1024:
        return f"{kb}K"
    if kb < 1024 * 1024:
        return f"{kb / 1024:.1f}M"
    return f"{kb / 1024 / 1024:.1f}G"


AGENT_TONE = {"ALIVE": "ok", "SUSPECT": "warn", "LOST": "bad", "STOPPED": "warn"}
"""Tone of each agent state."""


class NodePanel(Widget, can_focus=True):
    """The run's processes as the heartbeat board and the supervision see them."""

    DEFAULT_CSS = (
        "NodePanel { height: auto; text-wrap: nowrap; text-overflow: clip; }\n"
        + TONE_CSS.format(cls="NodePanel")
    )
    COMPONENT_CLASSES = tone_classes()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.status: LiveStatus | None = None
        """The last reading."""
        self.notes: list[Note] = []
        """Recent restarts and other events about processes, newest last."""
        self.model: JobsModel | None = None
        """The jobs (for the names of running jobs)."""

    def show(
        self, status: LiveStatus | None, notes: list[Note], model: JobsModel | None
    ) -> None:
        """Take a fresh reading and repaint."""
        self.status, self.notes, self.model = status, notes, model
        self.refresh()

    def restarted(self) -> dict[int, int]:
        """Restarts seen per executor slot."""
        st = self.status
        return {e.index: e.restarts for e in st.executors if e.restarts} if st else {}

    def render(self) -> Text:
        """The scheduler line, one line per executor, then recent events."""
        out = Text(no_wrap=True, overflow="crop")
        st = self.status
        if st is None:
            out.append("reading the boards...")
            return out
        out.append("scheduler ")
        over = self.model is not None and self.model.done_count() == len(self.model)
        age = fmt_duration(st.beat_age) if st.beat_age is not None else "?"
        if st.live and not st.responding:
            # As `wloadctl status` says it: the boards stay, and what they show is as of the last beat.
            out.append("NOT RESPONDING", tone_style(self, "bad"))
            out.append(f" pid {st.scheduler_pid} epoch {st.epoch} last beat {age} ago "
                       "(stopped or hung; counts are as of then)")
        elif st.live:
            out.append("LIVE", tone_style(self, "ok"))
            out.append(f" pid {st.scheduler_pid} epoch {st.epoch} beat {age}")
        elif over:
            out.append("none (the run is over)")
        else:
            out.append("DOWN", tone_style(self, "bad" if not st.error else "warn"))
        out.append(f"\nconsole: {st.supervision}")
        if st.error:
            out.append(f"\n{st.error}", tone_style(self, "bad"))
        if st.executors:
            out.append("\nEX PID     HEALTH  BEAT  RUN  LOAD MEM    DONE RST")
            for e in st.executors:
                out.append(f"\n{e.index:<2} {e.pid:<7} ")
                out.append(
                    f"{e.health:<7}",
                    tone_style(self, HEALTH_TONE.get(e.health, "warn")),
                )
                out.append(
                    f" {fmt_duration(e.beat_age):>5} {e.running:>2}/{e.slots:<2} "
                    f"{e.load1:>4.1f} "
                    f"{fmt_kb(e.rss_kb):>6} {e.jobs_done:>4} "
                )
                out.append(
                    f"{e.restarts:>3}", tone_style(self, "warn") if e.restarts else ""
                )
                if self.model is not None and e.running:
                    names = self.model.running_on(e.index)
                    if names:
                        out.append("  " + clip(", ".join(names), 40))
        elif st.live:
            out.append("\nno executor has reported yet")
        if st.broker_lost:
            out.append(f"\n{st.broker_lost}", tone_style(self, "bad"))
        if st.agents:
            out.append("\nEX AGENT        STATE    POOLS        RUN   LOAD HELD BEAT")
            for a in st.agents:
                out.append(f"\n{a.label:<2} {clip(a.name, 12):<12} ")
                out.append(f"{a.state:<8}", tone_style(self, AGENT_TONE.get(a.state, "warn")))
                age = fmt_duration(a.age) if a.age is not None else "?"
                out.append(f" {clip(a.pools, 12):<12} {a.used:>2}/{a.slots:<3} {a.load1:>4.1f} {a.held:>4} {age:>5}")
        recent = self.notes[-4:]
        if recent:
            out.append("\nrecent:")
            for n in recent:
                tone = {"error": "bad", "warning": "warn"}.get(n.level, "idle")
                out.append(f"\n{fmt_clock(n.ts)} ", "")
                out.append(n.text, tone_style(self, tone))
        return cut_lines(out, self.size.width)  # (a job's id or a note too long for the pane: cut, marked)
