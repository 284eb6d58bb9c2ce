"""The timeline screen: the run as it stood at any moment, DAG and SLA panes following, read-only."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Static

from tui.idlist import IdList
from tui.labels import SHORT, clip
from tui.scrub import Scrub
from tui.sla import sla_view
from tui.view_model import JobsModel
from tui.widgets.dag_view import DagView
from tui.widgets.keys_footer import KeysFooter
from tui.widgets.sla_panel import SlaPanel
from wloadctl.core.states import JobState

_NAMES = [s.name for s in JobState]


SIDE_BY_SIDE = 120
"""Columns from which the DAG and SLA panes stand side by side (the SLA pane takes 64 of them)."""


class TimelineScreen(Screen[None]):
    """Step through the journal by event or by minute; Escape returns to the live run."""

    CSS_PATH = "timeline.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        # < and > as the footer shows them, and the same keys unshifted (, and .) as less to type.
        Binding("left,less_than_sign,comma", "event(-1)", "Event back", key_display="<"),
        Binding("right,greater_than_sign,full_stop", "event(1)", "Event on", key_display=">"),
        Binding("shift+left,left_square_bracket", "minute(-1)", "Minute back", key_display="["),
        Binding("shift+right,right_square_bracket", "minute(1)", "Minute on", key_display="]"),
        Binding("home", "start", "Start", show=False),
        Binding("end", "end", "Now", show=False),
        Binding("escape,L", "live", "Live", key_display="esc"),
    ]

    def __init__(self, job: str | None = None) -> None:
        super().__init__()
        self.job = job
        """The job the DAG centres on (the main table's cursor)."""
        self.scrub = Scrub()
        """Where on the timeline the screen is."""
        self.model: JobsModel | None = None
        """The jobs as they stood at the moment shown."""
        self._client: Any = None
        self._when: tuple[str, list[int]] | None = None  # (the moment, its counts)

    def compose(self) -> ComposeResult:
        """A line saying when, the DAG and SLA panes, the footer."""
        yield Static("reading the journal...", id="when")
        with Horizontal(id="past"):
            dag = DagView(id="dag")
            dag.border_title = "dag (past)"
            yield dag
            sla = SlaPanel(id="sla")
            sla.border_title = "sla (past)"
            yield sla
        yield KeysFooter()

    def on_mount(self) -> None:
        """Read the run's moments, then show the latest."""
        self._load()

    def on_resize(self) -> None:
        """Side by side where both panes fit, else the SLA pane below the DAG."""
        self.set_class(self.size.width < SIDE_BY_SIDE, "-narrow")
        self._retitle()

    def on_unmount(self) -> None:
        """Release the journal."""
        if self._client is not None:
            self._client.close()
            self._client = None

    @work(thread=True, exclusive=True, group="timeline", exit_on_error=False)
    def _load(self) -> None:
        self._client = self.app.open_client()  # type: ignore[attr-defined]
        moments = list(self._client.timeline())
        self.app.call_from_thread(self._loaded, moments)

    def _loaded(self, moments: list[float]) -> None:
        self.scrub = Scrub(moments)
        self.scrub.to_end()
        self._rebuild()

    @work(thread=True, exclusive=True, group="timeline-rows", exit_on_error=False)
    def _rebuild(self) -> None:
        at = self.scrub.at
        rows = self._client.job_rows_at(at) if self._client is not None else []
        self.app.call_from_thread(self._show, at, rows)

    def _show(self, at: float, rows: list[tuple]) -> None:
        live: JobsModel | None = getattr(self.app, "model", None)
        if live is None:
            return
        # Ids kept as the id list's bytes share them (jobs the run adds later are not shared).
        past = JobsModel(live.ids.copy() if isinstance(live.ids, IdList) else list(live.ids), bytearray(live.tier))
        past.deadline, past.deadline_text, past.critical = live.deadline, live.deadline_text, live.critical
        past.load_rows(rows)
        self.model = past
        dag = getattr(self.app, "dag", None)
        if dag is not None:
            self.query_one(DagView).show(dag, past, self.job)
        self.query_one(SlaPanel).show(sla_view(past, at), at)
        n = len(self.scrub.moments)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
        self._when = (f"TIMELINE (read-only)  as of {stamp}  event {self.scrub.index()} of {n}", list(past.counts))
        self._retitle()

    def _retitle(self) -> None:
        """The moment shown and its counts per state, on one line where they fit, else on two.

        At 80 columns one line was cut before the counts, the figures that say what the moment was.
        """
        if self._when is None:
            return
        head, counts = self._when
        room = self.size.width - 2  # the line's padding
        full = "  ".join(f"{_NAMES[s]} {c}" for s, c in enumerate(counts) if c)
        if len(head) + 5 + len(full) <= room:
            text = f"{head}  |  {full}"
        else:
            short = "  ".join(f"{SHORT[JobState(s)]} {c}" for s, c in enumerate(counts) if c)
            text = f"{head}\n{full if len(full) <= room else clip(short, room)}"
        self.query_one("#when", Static).update(text)

    def action_event(self, step: int) -> None:
        """One event back or on."""
        self.scrub.by_event(step)
        self._rebuild()

    def action_minute(self, step: int) -> None:
        """One minute back or on."""
        self.scrub.by_minute(step)
        self._rebuild()

    def action_start(self) -> None:
        """Before the first event."""
        self.scrub.to_start()
        self._rebuild()

    def action_end(self) -> None:
        """The latest event."""
        self.scrub.to_end()
        self._rebuild()

    def action_live(self) -> None:
        """Back to the live run."""
        self.dismiss(None)
