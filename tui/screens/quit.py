"""Leaving the console: detach (the run goes on) or stop the run and wait for it."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class QuitScreen(ModalScreen[str | None]):
    """Asks what becomes of a live run: "detach", "stop", or None to stay."""

    CSS_PATH = "dialogs.tcss"
    AUTO_FOCUS = ""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "choose('detach')", "Detach"),
        Binding("s", "choose('stop')", "Stop run"),
        Binding("n,escape", "choose('')", "Stay"),
    ]

    def __init__(self, scheduler_pid: int | None, state_dir: Path | None = None) -> None:
        super().__init__()
        self.scheduler_pid = scheduler_pid
        """The live scheduler."""
        self.state_dir = state_dir
        """The run's state directory (named in the command that attaches again)."""

    def compose(self) -> ComposeResult:
        """The question."""
        again = (
            f"`wloadctl console --state-dir {self.state_dir}` attaches again"
            if self.state_dir is not None
            else "`wloadctl console` lists the runs to attach to"
        )
        with Vertical(id="dialog") as box:
            box.border_title = "quit"
            yield Static(
                f"The run is live (scheduler pid {self.scheduler_pid}).\n\n"
                f"d  detach: leave the run going; {again}\n"
                "s  stop the run: the scheduler stops its executors; "
                "the run can be resumed\n"
                "n  stay in the console",
                id="question",
            )

    def action_choose(self, choice: str) -> None:
        """Answer."""
        self.dismiss(choice or None)


STOP_REASON = "stopped from the console (q, s)"
"""The reason a stop from the console is journaled with (under the console user's name)."""


class StoppingScreen(ModalScreen[None]):
    """Stops the scheduler (SIGTERM) and exits the console once it is gone."""

    CSS_PATH = "dialogs.tcss"
    AUTO_FOCUS = ""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "app.exit('stop-timeout')", "Leave now", priority=True)
    ]

    def compose(self) -> ComposeResult:
        """The wait."""
        with Vertical(id="dialog") as box:
            box.border_title = "stopping"
            yield Static(
                "Stopping the run: the scheduler stops its executors and "
                "journals what they report...\n"
                "(ctrl+c leaves without waiting)",
                id="question",
            )

    def on_mount(self) -> None:
        """Start stopping."""
        self._stop()

    @work(thread=True, exit_on_error=False)
    def _stop(self) -> None:
        sup = getattr(self.app, "supervisor", None)
        ok = sup.stop(timeout=30.0, reason=STOP_REASON) if sup is not None else True
        self.app.call_from_thread(self.app.exit, "stopped" if ok else "stop-timeout")
