"""The console app: app-wide bindings, the screens, the feed and the run's model."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.command import CommandPalette
from textual.notifications import Notification, Notify
from textual.reactive import var
from textual.screen import Screen
from textual.scrollbar import ScrollBar, ScrollBarRender

from tui.feed import POLL, Client, Feed
from tui.messages import (
    JobsChanged,
    LiveStatus,
    LoadStep,
    ModelLoaded,
    Note,
    NoteAdded,
    RunInfo,
    RunInfoChanged,
    StatusChanged,
)
from tui.runs_view import RunLike
from tui.screens.main import MainScreen
from tui.screens.runs import RunSource, RunsScreen
from tui.supervise import SchedulerSupervisor
from tui.toasts import guard_toasts, make_room, toast_area
from tui.view_model import JobsModel
from wloadctl.client import RunClient
from wloadctl.core.dag import Dag


class AsciiScrollBarRender(ScrollBarRender):
    """Scrollbars of spaces only: SSH terminals may lack the eighth-block glyphs."""

    VERTICAL_BARS = [" "] * 8
    HORIZONTAL_BARS = [" "] * 8


class AsciiCommandPalette(CommandPalette):
    """Textual's command palette without its emoji search icon."""

    def on_mount(self) -> None:
        """Replace the icon by an ASCII prompt."""
        for icon in self.query("SearchIcon"):
            icon.icon = ">"  # type: ignore[attr-defined]


guard_toasts()  # (before any toast: a toast shown as it expires would hang the console, see tui/toasts.py)

ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end the console as a detach (see ConsoleApp._catch_ending_signals)."""
APPROVALS_EVERY = 2.0
"""Seconds between counts of what waits for an approve (a journal read)."""


class ConsoleApp(App[str]):
    """The operations console: one run, or the list of every run and the run opened from it."""

    CSS_PATH = "app.tcss"
    TITLE = "wloadctl console"
    MODES: ClassVar[dict[str, Any]] = {
        "main": MainScreen,
        "runs": RunsScreen,
    }  # a mode (not the default screen) loads its screen's own .tcss
    DEFAULT_MODE = "main"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit_console", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?", show=False),
        Binding("ctrl+c", "quit_console", "Quit", show=False, priority=True),
    ]

    jobs_version: var[int] = var(0, init=False)
    """Bumped when jobs changed; screens watch it (a var: the app never repaints)."""
    status_version: var[int] = var(0, init=False)
    """Bumped at each reading of the scheduler and executors."""
    notes_version: var[int] = var(0, init=False)
    """Bumped when a note was added."""

    def __init__(
        self,
        state_dir: Path | None,
        *,
        supervisor: SchedulerSupervisor | None = None,
        readonly: bool = False,
        open_client: Callable[[], Client] | None = None,
        clock: Callable[[], float] = time.time,
        poll: float = POLL,
        runs_source: RunSource | None = None,
        runs_root: str = "",
        client_for: Callable[[Path, str | None], Client] | None = None,
    ) -> None:
        if state_dir is None:
            # No run given: the run list comes first. (App.__init__ reads the mode from the instance; Textual
            # declares it a ClassVar, but a class-wide change would reach every console made afterwards.)
            self.DEFAULT_MODE = "runs"  # type: ignore[misc]
        super().__init__()
        self.state_dir = state_dir
        """The run's state directory (None until one is opened from the run list)."""
        self.runs_source = runs_source
        """Reads every run under the root (None: a console of one run, without a run list)."""
        self.runs_root = runs_root
        """The root the run list reads, as shown in its header."""
        self.client_for: Callable[[Path, str | None], Client] = client_for or (
            lambda state_dir, run_id: RunClient(state_dir, run_id=run_id)
        )
        """Opens a client of a run of a state directory, by its id (None: the latest)."""
        self.run_id: str | None = None
        """The run shown, when it was opened from the run list (None: the latest of `state_dir`)."""
        self.poll = poll
        """Seconds between the feed's readings."""
        self._feed_serial = 0
        self.supervisor = supervisor
        """Keeps the scheduler running; None in a read-only console."""
        self.readonly = readonly
        """No operator action is allowed."""
        self.readonly_asked = readonly
        """The console was started read-only (every run opened from the list is then)."""
        self.open_client: Callable[[], Client] = open_client or (
            lambda: self.client_for(self.state_dir, self.run_id)  # type: ignore[arg-type]
        )
        """Opens a client of the run (the feed and the actions each get their own)."""
        self.clock = clock
        """The time (frozen in snapshot tests)."""
        self.info: RunInfo | None = None
        """The run's identity, once loaded."""
        self.model: JobsModel | None = None
        """Every job's state, once loaded; changed only on this thread."""
        self.dag: Dag | None = None
        """The plan's graph, once loaded."""
        self.status: LiveStatus | None = None
        """The latest reading of the live side."""
        self.load_step = ""
        """What the feed is loading, until the model is there."""
        self.notes: list[Note] = []
        """Events for the operator, oldest first."""
        self.feed = Feed(self.open_client, self._feed_post(), supervisor, clock, poll)
        """The live feed (of the run shown)."""
        self.client_lock = threading.Lock()
        """Serialises the actions' client (one journal connection)."""
        self._action_client: Client | None = None
        self.loaded = threading.Event()
        """Set once the model is loaded and a first status came (tests wait on it)."""
        self.allowed: frozenset[str] | None = None
        """Verbs this user's role allows in the run (None until known: the scheduler still judges)."""
        self.role = ""
        """This user's role in the run, once known."""
        self.four_eyes: frozenset[str] = frozenset()
        """Verbs the run makes need a second person's approve (a request is filed, not applied), once known."""
        self.four_eyes_jobs: dict[str, frozenset[str]] = {}
        """Verb -> the jobs whose own `four_eyes:` name it (a verb reaching one files a request), once known."""
        self.approvals = 0
        """Requests and confirmation jobs waiting for an operator's approve (the header's hint; `A` lists them)."""
        self.ended_by = ""
        """The signal that ended the console (SIGTERM, SIGHUP), if one did."""
        self.stopped_running: list[str] = []
        """Jobs that were running when the operator stopped the run (the stop killed them)."""
        self.stopped_held: list[str] | None = []
        """Those of them the stop held until released (idempotent: false); None: not known."""
        self._signals_caught = False

    def _post(self, message: Any) -> None:
        try:
            self.post_message(message)
        except RuntimeError:
            pass  # the event loop closed under the feed: the console is exiting

    def _feed_post(self) -> Callable[[Any], None]:
        """Where a new feed posts: what an older feed (of a run left) still posts is dropped."""
        self._feed_serial += 1
        serial = self._feed_serial

        def post(message: Any) -> None:
            if serial == self._feed_serial:
                self._post(message)

        return post

    def on_mount(self) -> None:
        """Start the feed (when a run is shown); ASCII scrollbars everywhere."""
        ScrollBar.renderer = AsciiScrollBarRender
        if self.state_dir is not None:
            self._follow()
            self._learn_role()
        self.set_interval(APPROVALS_EVERY, self._count_approvals)
        self._catch_ending_signals()

    def _catch_ending_signals(self) -> None:
        """SIGTERM and SIGHUP (an administrator's kill, an SSH session gone) end the console as a detach: the
        run goes on, and the terminal gets its screen and modes back (a process killed outright leaves it in
        the console's alternate screen, keys unechoed)."""
        try:
            loop = asyncio.get_running_loop()
            for sig in ENDING_SIGNALS:
                loop.add_signal_handler(sig, self._ended_by_signal, sig)
        except (RuntimeError, NotImplementedError, ValueError):
            return  # not the main thread's loop (a test's), or no signals here
        self._signals_caught = True

    def _ended_by_signal(self, sig: int) -> None:
        self.ended_by = signal.Signals(sig).name
        self.exit("detach")

    # -- the run list --------------------------------------------------------------

    def open_run(self, run: RunLike) -> None:
        """Show a run of the list: a fresh feed and main screen; the list stays behind esc.

        A run its state directory has a later one of is shown read-only: verbs and a resume
        belong to the latest run.
        """
        self.feed.stop()
        with self.client_lock:
            if self._action_client is not None:
                self._action_client.close()
                self._action_client = None
        self._release_model()
        self.state_dir, self.run_id = Path(run.state_dir), run.run
        self.readonly = self.readonly_asked or not run.latest
        self.supervisor = None  # attached from the list: the console neither starts nor stops it
        self.info = self.model = self.dag = self.status = None
        self.load_step, self.notes = "", []
        self.loaded.clear()
        self.role, self.allowed = "", None  # learned anew: a role is per run
        self.four_eyes = frozenset()
        self.four_eyes_jobs = {}
        self.feed = Feed(self.open_client, self._feed_post(), None, self.clock, self.poll)
        self._follow()
        self._learn_role()
        # The main screen of the run shown before (if any) goes: a new one starts empty.
        if self.current_mode == "main":
            self.switch_mode("runs")
        self.remove_mode("main")
        self.add_mode("main", MainScreen)
        self.switch_mode("main")

    def action_runs(self) -> None:
        """Back to the run list (a console of one run has none)."""
        if self.runs_source is not None and self.current_mode != "runs":
            self.switch_mode("runs")

    @work(thread=True, exclusive=True, group="role", exit_on_error=False)
    def _learn_role(self) -> None:
        """Ask who this user is in the run, so the verbs the role does not allow are greyed."""
        try:
            with self.client_lock:
                me = self.action_client().whoami()
        except Exception:
            return  # a console that cannot learn its role still works: the scheduler judges each verb
        self.role = str(me.get("role", ""))
        self.allowed = frozenset(me.get("verbs", ()))
        self.four_eyes = frozenset(me.get("four_eyes", ()))
        jobs = me.get("four_eyes_jobs")
        self.four_eyes_jobs = {str(v): frozenset(map(str, ids)) for v, ids in jobs.items()} \
            if isinstance(jobs, dict) else {}
        self.call_from_thread(self.screen.refresh_bindings)

    @work(thread=True, exclusive=True, group="approvals", exit_on_error=False)
    def _count_approvals(self) -> None:
        """Count what waits for an approve (from the journal) for the header's hint."""
        if self.state_dir is None or self.model is None:
            return
        with self.client_lock:
            reader = getattr(self.action_client(), "pending", None)
            data = reader() if reader is not None else None
        if data is not None:
            self.call_from_thread(self._set_approvals, data)
        elif self.approvals:
            self.call_from_thread(self._set_approvals, {"requests": [], "confirm": []})

    def _set_approvals(self, data: dict[str, Any]) -> None:
        """Count what waits (on this thread: the model's states are read). A request whose jobs have all
        left the states its verb applies to is moot: the scheduler keeps it, but its approve would do
        nothing, so it is left out of the header's count (`A` lists it as moot)."""
        from tui.impact import is_moot

        model = self.model
        live = [r for r in data["requests"] if model is None or not is_moot(r["verb"], r["jobs"], model)]
        count = len(live) + len(data["confirm"])
        if count != self.approvals:
            self.approvals = count
            self.status_version += 1

    @work(thread=True, exclusive=True, group="feed", exit_on_error=False)
    def _follow(self) -> None:
        self.feed.run()

    def on_unmount(self) -> None:
        """Stop the feed thread: the event loop waits for it before it closes."""
        self.feed.stop()
        if self._signals_caught:
            loop = asyncio.get_running_loop()
            for sig in ENDING_SIGNALS:
                loop.remove_signal_handler(sig)
            self._signals_caught = False

    def exit(
        self, result: str | None = None, return_code: int = 0, message: Any = None
    ) -> None:
        """Stop the feed, release the actions' client and the model's, and exit."""
        self.feed.stop()
        self._release_model()
        with self.client_lock:
            if self._action_client is not None:
                self._action_client.close()
                self._action_client = None
        super().exit(result, return_code, message)

    def _release_model(self) -> None:
        if self.model is not None and self.model.release is not None:
            self.model.release()

    def action_client(self) -> Client:
        """The client of operator actions (use with `client_lock` held, in a worker)."""
        if self._action_client is None:
            self._action_client = self.open_client()
        return self._action_client

    # -- feed messages -------------------------------------------------------------

    def on_model_loaded(self, message: ModelLoaded) -> None:
        """Take the model the feed built."""
        self.info, self.model, self.dag = message.info, message.model, message.dag
        self.model.grow(self.feed.take_ids())
        self.model.apply(self.feed.take())
        self.jobs_version += 1
        self._maybe_loaded()

    def on_run_info_changed(self, message: RunInfoChanged) -> None:
        """Take the run's times read again (the header's elapsed time ends at the run's end)."""
        self.info = message.info
        self.status_version += 1

    def on_load_step(self, message: LoadStep) -> None:
        """Say what is being loaded."""
        self.load_step = message.text
        self.status_version += 1

    def on_jobs_changed(self, _message: JobsChanged) -> None:
        """Apply the transitions waiting in the feed."""
        if self.model is None:
            return
        grown = self.model.grow(self.feed.take_ids())
        if self.model.apply(self.feed.take()) or grown:
            self.jobs_version += 1

    def on_status_changed(self, message: StatusChanged) -> None:
        """Keep the latest reading."""
        self.status = message.status
        self.status_version += 1
        self._maybe_loaded()

    def on_note_added(self, message: NoteAdded) -> None:
        """Show a note and keep it for the node panel."""
        self.add_note(message.note)

    def add_note(self, note: Note) -> None:
        """Keep a note and pop it up."""
        self.notes.append(note)
        del self.notes[:-50]
        self.notes_version += 1
        self.notify(note.text, severity=note.level, markup=False)  # type: ignore[arg-type]

    def on_notify(self, event: Notify) -> None:
        """Before a toast is shown (Textual shows it after this handler): when the screen has no room left
        for it, the oldest toasts go (tui/toasts.py)."""
        self.fit_toasts(event.notification)

    def fit_toasts(self, new: Notification | None = None) -> None:
        """Take down the oldest toasts that, with `new`, would not fit where the screen has them stand;
        a screen shown over toasts already up calls it once laid out (the newest stays)."""
        if not self.screen_stack:
            return  # (a notice that comes as the console starts or ends: no screen to fit it on)
        area = toast_area(self.screen)
        if area is None:
            return
        first, last = area
        for old in make_room(list(self._notifications), new, last - first + 1, self.size.width):
            self._unnotify(old)  # (the rack takes its toast down)

    def _maybe_loaded(self) -> None:
        if self.model is not None and self.status is not None:
            self.loaded.set()

    # -- app-wide actions ----------------------------------------------------------

    async def on_key(self, event: events.Key) -> None:
        """Give an opening prompt the keys typed straight after its `/` or `:` (see PromptScreen)."""
        from tui.screens.prompt import PromptScreen

        screen = self.screen
        if isinstance(screen, PromptScreen) and await screen.type_ahead(event):
            event.prevent_default()
            event.stop()

    async def on_paste(self, event: events.Paste) -> None:
        """Give an opening prompt a paste that came before its line (the line stops those it takes)."""
        from tui.screens.prompt import PromptScreen

        screen = self.screen
        if isinstance(screen, PromptScreen) and await screen.type_ahead(event):
            event.stop()

    def action_help(self) -> None:
        """Show the keys and the state legend."""
        from tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.BINDINGS, runs_first=isinstance(self.screen, RunsScreen)))

    def action_quit_console(self) -> None:
        """Quit; when the run is live, ask whether to leave it going or stop it."""
        from tui.screens.quit import QuitScreen, StoppingScreen

        live = self.status is not None and self.status.live
        if self.readonly or self.supervisor is None or not live:
            self.exit("quit")
            return
        if isinstance(self.screen, QuitScreen | StoppingScreen):
            return

        running = self.running_jobs()

        def chosen(choice: str | None) -> None:
            if choice == "detach":
                self.exit("detach")
            elif choice == "stop":
                # Named again after the stop: the jobs running when it was chosen are the ones it kills.
                self.stopped_running = self.running_jobs()
                self.stopped_held = self.held_by_stop(self.stopped_running)
                self.push_screen(StoppingScreen(self.stopped_running, self.stopped_held))

        self.push_screen(
            QuitScreen(
                self.status.scheduler_pid if self.status else None,
                self.state_dir,
                running,
                self.held_by_stop(running),
            ),
            chosen,
        )

    def held_by_stop(self, running: list[str]) -> list[str] | None:
        """Of these running jobs, those a stop of the run holds until released (None: not known)."""
        from tui.screens.quit import held_by_stop

        model = self.model
        return held_by_stop(model.once, model.index, running) if model is not None else []

    def running_jobs(self) -> list[str]:
        """Ids of the jobs running now, in plan order (what a stop of the run kills)."""
        model = self.model
        return [model.ids[i] for i in sorted(model.running)] if model is not None else []

    def action_command_palette(self) -> None:
        """Open the command palette (ctrl+p)."""
        if self.use_command_palette and not CommandPalette.is_open(self):  # type: ignore[arg-type]
            self.push_screen(
                AsciiCommandPalette(
                    id="--command-palette", placeholder="Search for commands..."
                )
            )

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The palette: the screen's own commands, then help and quit."""
        own = getattr(screen, "palette_commands", None)
        if callable(own):
            yield from own()
        yield SystemCommand("Help", "Keys and state legend", self.action_help)
        yield SystemCommand(
            "Quit", "Quit the console (asks about a live run)", self.action_quit_console
        )
