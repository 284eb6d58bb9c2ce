"""One job: what it is, why it is in its state, its attempts, its log followed live."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Log, Static

from tui.labels import SHORT, clip_id, fit_title, fmt_clock, fmt_duration
from tui.screens.operator import OperatorScreen
from tui.toasts import fit_when_shown
from tui.widgets.cut import CutLines
from tui.widgets.keys_footer import KeysFooter
from tui.widgets.tones import state_style, tone_classes
from wloadctl.client import node_label
from wloadctl.core.states import ACTIVE, TERMINAL, JobState, SlaTier
from wloadctl.errors import WloadError
from wloadctl.jobdef import CONSOLE_JOBS, brief_lines
from wloadctl.logview import Shown

WHY_EVERY = 2.0
"""Seconds between the detail's questions of `why` while its job has not ended."""
_ENDED = frozenset(int(s) for s in TERMINAL)
TAIL_BYTES = 64 * 1024
"""How much of a log is read when it is first shown."""
LOG_LINES = 2000
"""Lines the log view keeps."""


class JobDetailScreen(OperatorScreen):
    """The detail of one job; the verbs act on it."""

    CSS_PATH = "job_detail.tcss"
    TOAST_PANE = "#log"
    """The pane the toasts stand in (tui/toasts.py)."""
    COMPONENT_CLASSES = tone_classes()
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("f", "follow", "Follow", tooltip="follow the log as it grows (or stop)"),
        # (one footer entry for both, so that the footer holds every verb at 80 columns; help names each)
        Binding("left_square_bracket", "attempt(-1)", "Attempt", key_display="[]",
                tooltip="the log of the attempt before ([) or after (])"),
        Binding("right_square_bracket", "attempt(1)", "", key_display="]", show=False),
        Binding("w", "refresh_why", "Refresh why", show=False),
        *OperatorScreen.VERB_BINDINGS,
    ]

    def __init__(self, job: str) -> None:
        super().__init__()
        self.job = job
        """The job shown."""
        self.attempt: int | None = None
        """The attempt whose log is shown (None: the latest)."""
        self.follow = True
        """Keep reading the log as it grows."""
        self.why: dict[str, Any] | None = None
        """The last `why` answer."""
        self.history: dict[str, Any] | None = None
        """The last history answer."""
        self.definition: list[str] | None = None
        """What the job is (its description, command, where the plan writes it), read once."""
        self._seen = -1
        self._log_path: Path | None = None
        self._log_pos = 0
        self._log_note = ""
        self._log_text = Shown(raw=False)

    def compose(self) -> ComposeResult:
        """Facts above, log below."""
        yield Static(id="title")
        with VerticalScroll(id="facts-box") as box:
            box.border_title = "job"
            yield Static(id="facts")
        log = Log(max_lines=LOG_LINES, id="log", auto_scroll=True)
        log.border_title = "log"
        yield log
        yield KeysFooter()

    def on_mount(self) -> None:
        """Load what the journal knows and follow the job."""
        self.watch(self.app, "jobs_version", self._jobs_changed, init=False)
        self.set_interval(0.5, self._poll_log)
        self.set_interval(WHY_EVERY, self._tick)
        self._jobs_changed()
        self.query_one("#facts-box").focus()

    def on_screen_resume(self) -> None:
        """The toasts already up keep to this screen's room for them."""
        fit_when_shown(self)

    def on_resize(self) -> None:
        """Cut the title's id anew for the new width."""
        self._show()

    def selected_jobs(self) -> list[str]:
        """This job."""
        return [self.job]

    def action_back(self) -> None:
        """Back to the table."""
        self.dismiss()

    # -- facts -----------------------------------------------------------------------

    def _jobs_changed(self, _version: int = 0) -> None:
        model = self.console.model
        if model is None or self.job not in model.index:
            return
        i = model.index[self.job]
        changed = model.touched_at.get(i, 0)
        if changed != self._seen:
            self._seen = changed
            self.fetch()
            if self.attempt is None:
                self._log_path = None  # a new attempt has a new log file
        self._show()

    def _tick(self) -> None:
        """What the job waits for changes with its upstreams and the clock, not only with its own moves: `why`
        is asked again while it has not ended, and the times shown (took, a deadline's countdown) move on."""
        model = self.console.model
        if model is not None and self.job in model.index and model.state[model.index[self.job]] not in _ENDED:
            self.fetch_why()  # (its history moves with the job itself: asked again when it does)
        self._show()

    @work(thread=True, exclusive=True, group="detail-why", exit_on_error=False)
    def fetch_why(self) -> None:
        """Ask `why` alone."""
        app = self.console
        try:
            with app.client_lock:
                why: dict[str, Any] = app.action_client().why(self.job)
        except WloadError as e:
            why = {"reasons": [f"cannot ask: {e.one_line()}"], "verbs": []}
        app.call_from_thread(self._fetched, why, self.history)

    @work(thread=True, exclusive=True, group="detail", exit_on_error=False)
    def fetch(self) -> None:
        """Ask `why` and the history (the live scheduler answers, else the journal)."""
        app = self.console
        why: dict[str, Any] | None
        hist: dict[str, Any] | None
        try:
            with app.client_lock:
                client = app.action_client()
                hist = client.history(self.job)
                why = client.why(self.job)
                if self.definition is None:
                    self.definition = _definition(client, self.job)  # (once: a run's plan does not change)
        except WloadError as e:
            why, hist = (
                {"reasons": [f"cannot ask: {e.one_line()}"], "verbs": []},
                self.history,
            )
        app.call_from_thread(self._fetched, why, hist)

    def _fetched(self, why: dict[str, Any] | None, hist: dict[str, Any] | None) -> None:
        self.why, self.history = why, hist
        self._show()

    def action_refresh_why(self) -> None:
        """Ask again now."""
        self.fetch()

    def _show(self) -> None:
        app = self.console
        model, dag = app.model, app.dag
        if model is None or dag is None:
            return
        i = model.index[self.job]
        model.ensure([i])
        st = JobState(model.state[i])
        now = app.clock()
        facts = f"  tier {SlaTier(model.tier[i]).label}  attempt {model.attempt[i]}"
        code = model.last_exit(i)
        if code is not None:
            facts += f"  exit {code}"
        more = ""
        if model.executor[i] >= 0 and model.attempt[i]:
            where = node_label(model.executor[i])
            more = f"  {'agent' if where.startswith('a') else 'executor'} {where}"
        # The state, attempt and exit always show: a long id is cut in its middle to leave them room. Where
        # the job runs shows when it fits whole; a title still too long is cut, marked `~`.
        width = self.size.width or self.app.size.width
        room = width - 3 - len(st.name) - len(facts)
        title = Text(no_wrap=True, overflow="crop")
        title.append(f" {clip_id(self.job, max(room, 12))}  ", "bold")
        title.append(st.name, state_style(self, st))
        title.append(facts + (more if title.cell_len + len(facts) + len(more) <= width else ""))
        self.query_one("#title", Static).update(CutLines(title))
        lines: list[str] = []
        took = fmt_duration(model.duration(i, now))
        ended = model.ended[i]
        if ended is None and st == JobState.RETRY_WAIT:
            ended = model.stopped.get(i)  # (its attempt ended; the job waits to run again)
        lines.append(
            f"started {fmt_clock(model.started[i]) or '-'}  "
            f"ended {fmt_clock(ended) or '-'}"
            f"  took {took or '-'}"
            + ("  (critical path)" if i in model.critical else "")
        )
        if i in model.deadline:
            left = model.deadline[i] - now
            lines.append(
                f"deadline {model.deadline_text[i]} at {fmt_clock(model.deadline[i])} "
                + (
                    f"(in {fmt_duration(left)})"
                    if left >= 0
                    else f"(passed {fmt_duration(-left)} ago)"
                )
            )
        known = self.job in dag
        ups = dag.upstream_of(self.job) if known else []
        downs = dag.downstream_of(self.job) if known else []
        lines.append(f"depends on ({len(ups)}): " + _states(ups, model))
        lines.append(f"dependents ({len(downs)}): " + _states(downs, model))
        lines.append("")
        lines.append("why:")
        why = self.why
        if why is None:
            lines.append("  asking...")
        else:
            # The reasons are sentences whose end says most (when a retry comes, what a job waits for): they
            # wrap to the box, where an id too long for it is cut.
            room = self.query_one("#facts", Static).size.width - 1  # (-1: the box's scrollbar, once it shows)
            for r in why.get("reasons", []) or ["(no reason given)"]:
                lines.extend(_wrapped(f"  {r}", room))
            verbs = why.get("verbs", [])
            lines.extend(_wrapped(f"  verbs that apply: {', '.join(verbs) if verbs else 'none'}", room))
        hist = self.history
        if hist:
            lines.append("")
            lines.append("transitions (attempt, time, from -> to, reason):")
            for t in hist.get("transitions", [])[-12:]:
                extra = f"  {t['reason']}" if t.get("reason") else ""
                code = (
                    f" exit {t['exit_code']}" if t.get("exit_code") is not None else ""
                )
                lines.append(
                    f"  #{t['attempt']} {fmt_clock(t['ts'])} "
                    f"{t['from']} -> {t['to']}{code}{extra}"
                )
            acts = hist.get("actions", [])
            if acts:
                lines.append("operator actions:")
                for a in acts[-8:]:
                    ok = "applied" if a["applied"] else "refused"
                    why_txt = f" ({a['reason']})" if a.get("reason") else ""
                    lines.append(
                        f"  {fmt_clock(a['ts'])} {a['user']} {a['verb']}{why_txt}: "
                        f"{ok}, {a['outcome']}"
                    )
        # What the job is, last: what became of it (why, its attempts) is what a detail opens for.
        lines.append("")
        lines.append("what it is:")
        lines.extend(self.definition or ["  reading the plan..."])
        # (a line too long for the box, a long id's, is cut marked `~`: the box scrolls down, not across)
        self.query_one("#facts", Static).update(CutLines(Text("\n".join(lines))))
        shown = self.attempt or model.attempt[i]
        log = self.query_one("#log", Log)
        width = log.outer_size.width
        log.border_title = fit_title(
            f"log attempt {shown} of {model.attempt[i]}"
            if shown
            else _no_log(self.job, st, ups),
            width,
        )
        log.border_subtitle = fit_title(
            ("following" if self.follow else "paused (f)")
            + (f"  {self._log_note}" if self._log_note else ""),
            width,
        )

    # -- log -------------------------------------------------------------------------

    def action_follow(self) -> None:
        """Pause or resume following the log."""
        self.follow = not self.follow
        self.query_one("#log", Log).auto_scroll = self.follow
        self._show()

    def action_attempt(self, step: int) -> None:
        """Show the log of an earlier or later attempt."""
        model = self.console.model
        if model is None:
            return
        latest = model.attempt[model.index[self.job]]
        if latest <= 0:
            return
        cur = self.attempt or latest
        new = max(1, min(latest, cur + step))
        self.attempt = None if new == latest else new
        self._log_path = None
        self._show()

    @work(thread=True, exclusive=True, group="log-path", exit_on_error=False)
    def _find_log(self, attempt: int | None) -> None:
        app = self.console
        try:
            with app.client_lock:
                path: Path | None = app.action_client().log_file(self.job, attempt)
            note = ""
        except WloadError as e:
            path, note = None, e.one_line()
        app.call_from_thread(self._log_found, path, note)

    def _log_found(self, path: Path | None, note: str) -> None:
        log = self.query_one("#log", Log)
        log.clear()
        self._log_path, self._log_pos, self._log_note = path, 0, note
        self._log_text = Shown(raw=False)
        if path is None:
            log.write_line(note or "no log")
        self._poll_log()
        self._show()

    def _poll_log(self) -> None:
        """Read what the log gained since the last look (a stat when nothing did)."""
        if self._log_path is None:
            model = self.console.model
            if (
                model is not None
                and model.attempt[model.index[self.job]] > 0
                and not self._log_note
            ):
                self._log_note = "..."
                self._find_log(self.attempt)
            return
        if not self.follow and self._log_pos:
            return
        try:
            size = os.stat(self._log_path).st_size
        except OSError:
            return
        if size < self._log_pos:
            self._log_pos = 0
            self._log_text = Shown(raw=False)
            self.query_one("#log", Log).clear()
        if size == self._log_pos:
            if self._attempt_over():
                # The last bytes of an attempt that ends in a return or in half a character are shown now:
                # nothing will come to finish them.
                if rest := self._log_text.end_text():
                    self.query_one("#log", Log).write(rest)
            return
        first = not self._log_pos
        with open(self._log_path, "rb") as f:
            start = self._log_pos or max(0, size - TAIL_BYTES)
            f.seek(start)
            data = f.read(size - start)
        self._log_pos = size
        note = ""
        if first:
            data, cut = log_tail(data, start)
            if cut:
                attempt = f" --attempt {self.attempt}" if self.attempt is not None else ""
                note = (f"[... {fmt_bytes(cut)} of earlier output left out: "
                        f"`wloadctl logs {self.job}{attempt}` has it all]\n")
        # Read as UTF-8 (a byte that is not shows as U+FFFD), escape sequences shown, not obeyed, as
        # `wloadctl logs` shows them; a character cut in two by the end of a read waits for the next one.
        text = self._log_text.text(data).expandtabs()
        self.query_one("#log", Log).write(note + text)

    def _attempt_over(self) -> bool:
        """Whether the attempt whose log is shown has ended (its log will not grow)."""
        model = self.console.model
        if self.attempt is not None or model is None:
            return True
        return JobState(model.state[model.index[self.job]]) not in ACTIVE


def _definition(client: Any, job: str) -> list[str]:
    """The lines of what the job is; a big run's plan is not loaded for them (see CONSOLE_JOBS)."""
    n = len(client.ids())
    if n > CONSOLE_JOBS:
        return [f"  command:     (the plan has {n:,} jobs: `wloadctl show {job}` reads it)"]
    try:
        return brief_lines(client.definition(job))
    except WloadError as e:
        return [f"  command:     cannot read the plan: {e.one_line()}"]


def log_tail(data: bytes, start: int, lines: int = LOG_LINES - 1) -> tuple[bytes, int]:
    """The part of a log's tail the view shows: whole lines only, no more than it keeps.

    Args:
        data: the log's bytes from offset `start` to its end.
        start: where `data` starts in the log.
        lines: lines the view has room for.

    Returns:
        (the bytes to show, bytes of the log before them that are left out).
    """
    cut = start
    if start:
        # The read began mid-line: the view starts at the next line.
        nl = data.find(b"\n")
        skip = nl + 1 if nl >= 0 else len(data)
        data, cut = data[skip:], cut + skip
    # More lines than the view keeps: it would drop the first silently.
    ends = data.count(b"\n") - (1 if data.endswith(b"\n") else 0)
    if ends >= lines:
        at = -1
        for _ in range(ends - lines + 1):
            at = data.index(b"\n", at + 1)
        data, cut = data[at + 1:], cut + at + 1
    return data, cut


def fmt_bytes(n: int) -> str:
    """A size in bytes, short: 812 bytes, 64 KB, 6.1 MB."""
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n / 1024 / 1024:.1f} MB"


def _wrapped(line: str, width: int) -> list[str]:
    """`line` wrapped to `width` columns at its blanks, its further lines indented two more columns under its
    first (a width not known yet, before the layout: the line whole).

    Args:
        line: the text, indented as its first line stands.
        width: the columns there are.
    """
    if width < 20:
        return [line]
    indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
    return textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False, drop_whitespace=True) or [line]


def _states(jobs: list[str], model: Any, limit: int = 8) -> str:
    parts = [
        f"{j} {SHORT[JobState(model.state[model.index[j]])]}" for j in jobs[:limit]
    ]
    more = f" ... {len(jobs) - limit} more" if len(jobs) > limit else ""
    return (", ".join(parts) or "none") + more


def _no_log(job: str, st: JobState, ups: list[str]) -> str:
    """The log pane's title for a job without an attempt: a loop's parent never runs (its
    instances `job@item`, its upstreams once expanded, have the logs); others have not run yet,
    or ended without running (skipped, cancelled, blocked, set OK)."""
    instances = sum(u.startswith(f"{job}@") for u in ups)
    if instances:
        return f"no log of its own: its {instances} instance(s) {job}@ITEM have theirs"
    if st in TERMINAL:
        return f"no log: {st.name} without running"
    return "log (not run yet)"
