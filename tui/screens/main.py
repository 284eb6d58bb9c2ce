"""The main screen: header, job table, DAG, node and SLA panes; filter, sort, verbs."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, ClassVar

from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widget import Widget

from tui.commands import Command, CommandError, parse_command
from tui.filters import TROUBLE, JobFilter, parse_filter
from tui.impact import VERB_KEYS
from tui.labels import fit_title
from tui.messages import Note
from tui.run_figures import held_ids, last_activity, summarize
from tui.screens.confirm import ActionRequest
from tui.screens.operator import OperatorScreen
from tui.screens.prompt import PromptScreen
from tui.sla import CLOSE, SlaView, flagged, sla_view
from tui.view_model import DESCENDING_FIRST, SORT_KEYS, view_order
from tui.widgets.dag_view import DagView
from tui.widgets.job_table import JobTable
from tui.widgets.keys_footer import KeysFooter
from tui.widgets.node_panel import NodePanel
from tui.widgets.run_header import RunHeader
from tui.widgets.sla_panel import SlaPanel
from wloadctl.core.states import JobState, is_holding

PANES = ("dag", "nodes", "sla")
"""The lower panes, in tab order."""
NARROW = 140
"""Below this width the lower panes take turns instead of standing side by side."""
TABLE_ROWS = 5
"""Job rows the table keeps on a short terminal: the lower panes give up lines for them first."""
PANES_LEAST = 3
"""Lines the lower panes keep however short the terminal (their borders and one line)."""
REORDER_EVERY = 0.5
"""Seconds between re-sorts/re-filters of a large table while states change under it."""


class MainScreen(OperatorScreen):
    """What the night shift watches."""

    CSS_PATH = "main.tcss"
    TOAST_PANE = "#panes"
    """The pane the toasts stand in (tui/toasts.py)."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "app.help", "Help", key_display="?"),
        # (early, so a footer 80 columns wide shows it: the app's own binding would come after every verb)
        Binding("q", "app.quit_console", "Quit"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("colon", "command_line", "Cmd", key_display=":"),
        *OperatorScreen.VERB_BINDINGS,
        Binding("space", "mark", "Mark", key_display="spc"),
        Binding("escape", "back", "Clear", show=False),
        Binding("S", "cycle_sort", "Sort"),
        Binding("I", "reverse_sort", "Reverse sort", show=False),
        Binding(
            "exclamation_mark", "trouble", "Trouble only", show=False, key_display="!"
        ),
        Binding("1", "pane('dag')", "DAG pane", show=False),
        Binding("2", "pane('nodes')", "Nodes pane", show=False),
        Binding("3", "pane('sla')", "SLA pane", show=False),
        Binding("P", "pipeline", "Pipeline", show=False),
        Binding("A", "pending", "Approvals (pending requests)", show=False),
        Binding("T", "timeline", "Timeline (past states)", show=False),
        Binding(
            "plus,equals_sign",
            "depth(1)",
            "More DAG levels",
            show=False,
            key_display="+",
        ),
        Binding("minus", "depth(-1)", "Fewer DAG levels", show=False, key_display="-"),
        Binding("enter", "open", "Detail", show=False),
        Binding("tab", "next_pane(1)", "Next pane", show=False),
        Binding("shift+tab", "next_pane(-1)", "Previous pane", show=False),
        Binding("ctrl+p", "app.command_palette", "Palette", key_display="^p"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter = JobFilter()
        """What the table shows."""
        self.sort_key = "plan"
        """The sort column."""
        self.reverse = False
        """Descending sort."""
        self.active_pane = "dag"
        """The pane shown when they take turns."""
        self._order_dirty = False
        self._model_size = 0
        self._activity: tuple[int, float | None] = (-1, None)
        self._live_seen: float | None = None
        """When this console last saw the run's scheduler live (a run it sees stop ran until then, at least)."""

    def compose(self) -> ComposeResult:
        """Header, table, panes, footer."""
        yield RunHeader(id="header")
        table = JobTable(self.app_clock, id="jobs")
        table.border_title = "jobs"
        yield table
        with Horizontal(id="panes"):
            dag = DagView(id="dag")
            dag.border_title = "1 dag"
            yield dag
            nodes = NodePanel(id="nodes")
            nodes.border_title = "2 nodes"
            yield nodes
            sla = SlaPanel(id="sla")
            sla.border_title = "3 sla"
            yield sla
        yield KeysFooter()

    def app_clock(self) -> float:
        """The console's clock (frozen in snapshot tests)."""
        clock = getattr(self.app, "clock", None)
        return clock() if clock is not None else time.time()

    def on_mount(self) -> None:
        """Follow the console's data."""
        self.watch(self.app, "jobs_version", self._jobs_changed, init=False)
        self.watch(self.app, "status_version", self._status_changed, init=False)
        self.watch(self.app, "notes_version", self._status_changed, init=False)
        self.set_interval(1.0, self._tick)
        self.set_interval(REORDER_EVERY, self._reorder_if_dirty)
        self._show_pane(self.active_pane)
        if getattr(self.app, "readonly", False):
            self.query_one(RunHeader).mode = "read-only"
        if getattr(self.app, "model", None) is not None:
            self._jobs_changed()
        self._status_changed()
        self.query_one(JobTable).focus()

    # -- data ------------------------------------------------------------------------

    def _order_depends_on_state(self) -> bool:
        return bool(self.filter.states or self.filter.sla) or self.sort_key not in ("plan", "id", "tier")

    def _jobs_changed(self, _version: int = 0) -> None:
        model = self.console.model
        if model is None:
            return
        size = len(model)
        table = self.query_one(JobTable)
        if table.model is not model or size != self._model_size:
            # A new model, or jobs the run added (loop instances): the rows change.
            self._model_size = size
            self._reorder()
        elif not self._order_depends_on_state():
            table.refresh()  # same rows in the same order: only their cells changed
        elif size < 20_000:
            self._reorder()
        else:
            # Re-sorting 100,000 rows at every change would eat the UI thread: the
            # visible rows repaint now with fresh states, the order catches up soon.
            self._order_dirty = True
            table.refresh()
        self._refresh_panels()

    def _reorder(self) -> None:
        model = self.console.model
        if model is None:
            return
        self._order_dirty = False
        table = self.query_one(JobTable)
        table.sort_key, table.reverse = self.sort_key, self.reverse
        now = self.app_clock()
        flags = flagged(model, now, self.filter.sla) if self.filter.sla else frozenset()
        order = view_order(model, self.filter, self.sort_key, self.reverse, now, flags)
        table.set_rows(model, order)
        self._reorder_title()

    def _reorder_title(self) -> None:
        table = self.query_one(JobTable)
        what = (
            f"jobs  filter: {self.filter.describe()}" if self.filter.active else "jobs"
        )
        if self.sort_key != "plan" or self.reverse:
            what += f"  sort: {self.sort_key}{' desc' if self.reverse else ''}"
        if table.marks:
            # Marks the filter hides are named too: a verb acts on every marked job, shown or not.
            hidden = table.hidden_marks()
            what += f"  {len(table.marks)} marked" + (f", {hidden} hidden by the filter" if hidden else "")
        table.border_title = fit_title(what, table.outer_size.width)

    def _reorder_if_dirty(self) -> None:
        if self._order_dirty:
            self._reorder()

    def _refresh_panels(self, dag: bool = True) -> None:
        """Repaint header, SLA and node panes (and the DAG when states changed)."""
        app = self.console
        model = app.model
        if model is None:
            return
        now = self.app_clock()
        sla = sla_view(model, now)
        self._refresh_header(now, sla)
        self.query_one(SlaPanel).show(sla, now)
        self._refresh_nodes()
        if dag:
            self._refresh_dag()

    def _refresh_header(self, now: float, sla: SlaView | None = None) -> None:
        app = self.console
        model, status = app.model, app.status
        finished = model.done_count() == len(model) and not (
            status is not None and status.live
        )
        stopped_at = None
        if status is not None and status.live:
            self._live_seen = now
        if status is not None and not status.live and not finished and app.info is not None:
            # A run stopped (or crashed) is not running: its elapsed time ends when it stopped, no earlier than
            # this console saw its scheduler live (its last job's start or end may be long before).
            seen = [t for t in (self._last_activity(), self._live_seen) if t is not None]
            stopped_at = app.info.ended or (max(seen) if seen else None)
        summary = (
            summarize(model, app.info.started, now, finished, app.info.ended, stopped_at)
            if app.info
            else None
        )
        header = self.query_one(RunHeader)
        header.held = held_ids(model, 3) if is_holding(model.counts) else []
        header.approvals = getattr(app, "approvals", 0)
        sla = sla if sla is not None else sla_view(model, now)
        header.late = sum(t.late for t in sla.tiers)
        # AT_RISK as the scheduler flags it (`status` counts the same); jobs with a deadline that need an operator
        # first are counted apart: the scheduler flags none of them.
        header.at_risk = sum(1 for d in sla.at_risk if d.why == CLOSE)
        header.blocked = len(sla.at_risk) - header.at_risk
        header.show(app.info, summary, model.counts, status, now)

    def _last_activity(self) -> float | None:
        """When a job last started or stopped, worked out again only when the jobs changed."""
        model = self.console.model
        if model is None:
            return None
        if self._activity[0] != model.version:
            self._activity = (model.version, last_activity(model))
        return self._activity[1]

    def _refresh_nodes(self) -> None:
        app = self.console
        notes = [n for n in app.notes if set(n.tags) & {"scheduler", "executor"}]
        self.query_one(NodePanel).show(app.status, notes, app.model)

    def _refresh_dag(self) -> None:
        app = self.console
        if app.model is None or app.dag is None:
            return
        job = self.query_one(JobTable).current_job
        dag = self.query_one(DagView)
        dag.show(app.dag, app.model, job)

    def _status_changed(self, _version: int = 0) -> None:
        app = self.console
        if app.model is None:
            self.query_one(RunHeader).load_step = getattr(app, "load_step", "")
            self.query_one(RunHeader).show(None, None, [], app.status, self.app_clock())
            return
        # A reading of the boards changes liveness and heartbeats, not job states.
        self._refresh_header(self.app_clock())
        self._refresh_nodes()

    def _tick(self) -> None:
        """Running jobs' durations, the elapsed time and the deadlines' countdowns move without any
        transition."""
        app = self.console
        model = app.model
        if model is None:
            return
        live = app.status is not None and app.status.live
        if self.filter.sla:
            self._order_dirty = True  # a deadline coming close puts its job in the filter
        if model.counts[JobState.RUNNING] or model.counts[JobState.QUEUED] or model.counts[JobState.RETRY_WAIT]:
            # (a retry's countdown moves too)
            self.query_one(JobTable).refresh()
            self._refresh_panels(dag=False)
        elif model.done_count() < len(model):
            # Nothing runs, yet jobs wait (held, for a confirmation, for a resume): their deadlines
            # come closer and pass all the same. The SLA pane walks the jobs with a deadline only.
            self._refresh_panels(dag=False)
        elif live:
            self._refresh_header(self.app_clock())

    # -- the table -------------------------------------------------------------------

    def selected_jobs(self) -> list[str]:
        """Marked jobs, or the one under the cursor."""
        return self.query_one(JobTable).selection()

    def after_action(self, request: ActionRequest, reply: dict[str, Any]) -> None:
        """Marks are spent by an action."""
        table = self.query_one(JobTable)
        if table.marks:
            table.clear_marks()
            self._reorder()

    def action_mark(self) -> None:
        """Mark or unmark the job under the cursor (also from another pane)."""
        self.query_one(JobTable).action_mark()

    def on_job_table_marks_changed(self, _event: JobTable.MarksChanged) -> None:
        """The title counts the marks, whichever key or action changed them."""
        self._reorder_title()

    def action_open(self) -> None:
        """Open the job under the cursor."""
        job = self.query_one(JobTable).current_job
        if job is not None:
            self.open_job(job)

    def on_job_table_highlighted(self, _event: JobTable.Highlighted) -> None:
        """The DAG follows the cursor."""
        self._refresh_dag()

    def on_job_table_opened(self, event: JobTable.Opened) -> None:
        """Enter opens the job's detail."""
        self.open_job(event.job)

    def open_job(self, job: str) -> None:
        """Show one job's detail."""
        from tui.screens.job_detail import JobDetailScreen

        self.app.push_screen(JobDetailScreen(job))

    # -- panes -----------------------------------------------------------------------

    def on_resize(self) -> None:
        """Panes take turns on narrow terminals."""
        narrow = self.size.width < NARROW
        self.set_class(narrow, "-narrow")
        for p in PANES:
            self.query_one(f"#{p}").border_subtitle = "1 2 3: panes" if narrow else ""
        self.call_after_refresh(self._reorder_title)  # cut to the new width
        self.call_after_refresh(self._fit_panes)

    def _fit_panes(self) -> None:
        """On a short terminal the lower panes shrink below their usual minimum, down to PANES_LEAST, so the
        table keeps TABLE_ROWS job rows (at 60x15 their 7 lines left it 2); taller, main.tcss rules alone."""
        panes = self.query_one("#panes")
        fixed = sum(w.outer_size.height for w in (self.query_one(RunHeader), self.query_one(KeysFooter)))
        room = self.size.height - fixed - (TABLE_ROWS + 3)  # (+3: the table's border and its heading)
        least = panes.styles.base.min_height  # (main.tcss's, whatever the lines set here)
        if least is not None and room < least.value:
            panes.styles.min_height = panes.styles.max_height = max(PANES_LEAST, room)
        else:
            panes.styles.min_height = panes.styles.max_height = None  # (back to main.tcss's)

    def _show_pane(self, name: str) -> None:
        self.active_pane = name
        for p in PANES:
            self.query_one(f"#{p}").set_class(p == name, "-active")

    def action_pane(self, name: str) -> None:
        """Show a pane (on narrow terminals the others hide)."""
        self._show_pane(name)

    def action_next_pane(self, step: int) -> None:
        """Tab: table, DAG, nodes, SLA in turn; a hidden pane shows as it gets focus."""
        order = ["jobs", *PANES]
        focused = self.focused.id if self.focused is not None else None
        k = order.index(focused) if focused in order else 0
        target = order[(k + step) % len(order)]
        if target in PANES:
            self._show_pane(target)
        # A pane that was hidden takes the focus only once it is displayed.
        self.call_after_refresh(self.query_one(f"#{target}").focus)

    def on_descendant_focus(self, event: Any) -> None:
        """Tabbing onto a pane shows it."""
        widget: Widget | None = getattr(event, "widget", None)
        if widget is not None and widget.id in PANES:
            self._show_pane(str(widget.id))

    def action_pipeline(self) -> None:
        """The pipeline pane: queues, latencies, journal, per executor and agent."""
        from tui.screens.pipeline import PipelineScreen

        self.app.push_screen(PipelineScreen())

    def action_pending(self) -> None:
        """Requests waiting for a second person and jobs waiting for confirmation: approve or reject them."""
        from tui.screens.pending import PendingScreen

        self.app.push_screen(PendingScreen())

    def action_timeline(self) -> None:
        """Scrub the run's timeline, the DAG centred on the job under the cursor."""
        from tui.screens.timeline import TimelineScreen

        self.app.push_screen(TimelineScreen(self.query_one(JobTable).current_job))

    def action_depth(self, step: int) -> None:
        """More or fewer DAG levels."""
        self.query_one(DagView).change_depth(step)

    # -- filter, sort, command line ------------------------------------------------

    def action_filter(self) -> None:
        """Ask for a filter."""
        self.app.push_screen(
            PromptScreen(
                "/ filter",
                self.filter.describe(),
                parse_filter,
                "e.g. load_* state:failed,held tier:critical  (empty: all jobs)",
            ),
            self._filter_entered,
        )

    def _filter_entered(self, text: str | None) -> None:
        if text is not None:
            self.set_filter(parse_filter(text))

    def set_filter(self, flt: JobFilter) -> None:
        """Show only matching jobs."""
        self.filter = flt
        self._reorder()

    def action_trouble(self) -> None:
        """Show only jobs that need an operator (failed, held, blocked, retrying) or whose
        deadline is in danger (at risk or late, as the SLA pane names them)."""
        stuck = parse_filter(TROUBLE)
        self.set_filter(JobFilter() if self.filter == stuck else stuck)

    def action_back(self) -> None:
        """Esc: drop the marks, then the filter."""
        table = self.query_one(JobTable)
        if table.marks:
            table.clear_marks()
            self._reorder()
        elif self.filter.active:
            self.set_filter(JobFilter())
        else:
            self.app.action_runs()  # type: ignore[attr-defined]

    def action_cycle_sort(self) -> None:
        """Sort by the next column, in its first direction (DESCENDING_FIRST)."""
        self._sort_by(SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)])
        self.notify(
            f"sorted by {self.sort_key}{' desc' if self.reverse else ''}", timeout=1.5
        )

    def action_reverse_sort(self) -> None:
        """Reverse the order."""
        self.reverse = not self.reverse
        self._reorder()

    def action_command_line(self) -> None:
        """Ask for a command."""
        self.app.push_screen(
            PromptScreen(
                ": command",
                "",
                parse_command,
                "e.g. rerun load_gl --downstream | hold load_* | sort duration desc",
                allow_empty=False,
            ),
            self._command_entered,
        )

    def _command_entered(self, text: str | None) -> None:
        if not text:
            return
        try:
            self.run_command(parse_command(text))
        except CommandError as e:
            self.notify(str(e), severity="error")

    def run_command(self, cmd: Command) -> None:
        """Carry out a parsed command."""
        app = self.console
        model = app.model
        if cmd.is_verb:
            if cmd.args:
                self.ask_verb(cmd.name, [], cmd.downstream, names=cmd.args)
            else:
                self.ask_verb(cmd.name, self.selected_jobs(), cmd.downstream)
        elif cmd.name == "filter":
            self.set_filter(parse_filter(" ".join(cmd.args)))
        elif cmd.name == "sort":
            self.sort_key = cmd.args[0]
            self.reverse = len(cmd.args) > 1 and cmd.args[1] == "desc"
            self._reorder()
        elif cmd.name in ("job", "goto"):
            if model is None or cmd.args[0] not in model.index:
                raise CommandError(f"unknown job '{cmd.args[0]}'")
            if cmd.name == "job":
                self.open_job(cmd.args[0])
            elif not self.query_one(JobTable).select_job(cmd.args[0]):
                self.set_filter(JobFilter())
                self.query_one(JobTable).select_job(cmd.args[0])
        elif cmd.name == "dag":
            dag = self.query_one(DagView)
            dag.depth = int(cmd.args[0])
            dag.refresh()
            self._show_pane("dag")
        elif cmd.name in ("nodes", "sla"):
            self._show_pane(cmd.name)
        elif cmd.name == "resume":
            self._resume()
        elif cmd.name in ("runs", "run"):
            self._switch_run(cmd)
        elif cmd.name == "help":
            self.app.action_help()  # type: ignore[attr-defined]
        elif cmd.name == "quit":
            self.app.action_quit_console()  # type: ignore[attr-defined]

    def _switch_run(self, cmd: Command) -> None:
        """`:runs` goes to the run list, `:run NAME` opens another run of it."""
        app: Any = self.app
        if getattr(app, "runs_source", None) is None:
            raise CommandError("this console shows one run: start `wloadctl console` without a plan for the list")
        if cmd.name == "runs":
            app.action_runs()
            return
        from tui.runs_view import find_run

        run = find_run(list(app.runs_source()), cmd.args[0])
        if run is None:
            raise CommandError(f"no run matches '{cmd.args[0]}'")
        app.open_run(run)

    def _resume(self) -> None:
        app = self.console
        sup = getattr(app, "supervisor", None)
        if app.readonly:
            self.notify("read-only console: it does not start schedulers", severity="warning")
            return
        if sup is None:
            # Opened from the list of runs: it attaches to runs, and neither starts nor stops their schedulers.
            self.notify(f"opened from the list of runs, this console starts no scheduler: `wloadctl console "
                        f"--state-dir {app.state_dir}` resumes the run and watches it", severity="warning")
            return
        ev = sup.resume()
        app.add_note(Note(ev.text, ev.level, self.app_clock(), ("scheduler",)))

    def palette_commands(self) -> Iterable[SystemCommand]:
        """Commands offered by ctrl+p on this screen."""
        for verb in VERB_KEYS:
            if not getattr(self.app, "readonly", False):
                yield SystemCommand(
                    f"{verb.capitalize()} selected jobs",
                    f"key {VERB_KEYS[verb]}: {verb} the "
                    "marked jobs or the one under the cursor",
                    lambda v=verb: self.action_verb(v),
                )  # type: ignore[misc]
        yield SystemCommand(
            "Rerun with downstream",
            "rerun the selection and everything below it",
            lambda: self.ask_verb("rerun", self.selected_jobs(), True),
        )
        yield SystemCommand("Filter jobs", "key /", self.action_filter)
        yield SystemCommand(
            "Show trouble only",
            "key !: failed, held, blocked, retrying",
            self.action_trouble,
        )
        for key in SORT_KEYS:
            yield SystemCommand(
                f"Sort by {key}", "key S cycles", lambda k=key: self._sort_by(k)
            )  # type: ignore[misc]
        for pane in PANES:
            yield SystemCommand(
                f"Show {pane} pane",
                f"key {PANES.index(pane) + 1}",
                lambda p=pane: self._show_pane(p),
            )  # type: ignore[misc]
        if not getattr(self.app, "readonly", False):
            yield SystemCommand(
                "Resume the run",
                "start a scheduler for an interrupted run",
                self._resume,
            )

    def _sort_by(self, key: str) -> None:
        self.sort_key, self.reverse = key, key in DESCENDING_FIRST
        self._reorder()
