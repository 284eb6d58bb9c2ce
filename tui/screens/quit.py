"""Leaving the console: detach (the run goes on) or stop the run and wait for it."""

from __future__ import annotations

from collections.abc import Sequence
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

    def __init__(
        self,
        scheduler_pid: int | None,
        state_dir: Path | None = None,
        running: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.scheduler_pid = scheduler_pid
        """The live scheduler."""
        self.state_dir = state_dir
        """The run's state directory (named in the command that attaches again)."""
        self.running = list(running)
        """Ids of the jobs running now (a stop kills them)."""

    def compose(self) -> ComposeResult:
        """The question."""
        again = (
            f"`wloadctl console --state-dir {self.state_dir}` attaches again"
            if self.state_dir is not None
            else "`wloadctl console` lists the runs to attach to"
        )
        with Vertical(id="dialog") as box:
            box.border_title = "quit"
            # The three answers first: on a small terminal the dialog's last lines are cut, not its keys.
            yield Static(
                f"The run is live (scheduler pid {self.scheduler_pid}).\n"
                f"d  detach: leave the run going, running jobs too; {again}\n"
                f"s  stop the run: {stop_text(len(self.running))}\n"
                "n  stay in the console\n\n"
                f"{running_text(self.running)[0].upper()}{running_text(self.running)[1:]}.",
                id="question",
                markup=False,
            )

    def action_choose(self, choice: str) -> None:
        """Answer."""
        self.dismiss(choice or None)


NAMED = 3
"""Running jobs named in the quit question (the rest are counted)."""


def running_text(running: Sequence[str]) -> str:
    """How many jobs run now, the first few by name: "2 jobs running: a, b"."""
    if not running:
        return "no job is running"
    names = ", ".join(running[:NAMED])
    more = f" and {len(running) - NAMED} more" if len(running) > NAMED else ""
    return f"{len(running)} job(s) running: {names}{more}"


def stop_text(running: int) -> str:
    """What a stop does to the run and to the jobs running now."""
    if not running:
        return "the scheduler stops its executors; the run can be resumed"
    return (
        f"KILLS the {running} running job(s); a resume runs them again "
        "from the start"
    )


STOP_REASON = "stopped from the console (q, s)"
"""The reason a stop from the console is journaled with (under the console user's name)."""


class StoppingScreen(ModalScreen[None]):
    """Stops the scheduler (SIGTERM) and exits the console once it is gone."""

    CSS_PATH = "dialogs.tcss"
    AUTO_FOCUS = ""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "app.exit('stop-timeout')", "Leave now", priority=True)
    ]

    def __init__(self, running: Sequence[str] = ()) -> None:
        super().__init__()
        self.running = list(running)
        """Ids of the jobs that ran when the stop was chosen (the stop kills them)."""

    def compose(self) -> ComposeResult:
        """The wait."""
        with Vertical(id="dialog") as box:
            box.border_title = "stopping"
            killed = (
                f"\nIt kills {running_text(self.running)}; "
                "a resume runs them again from the start."
                if self.running
                else ""
            )
            yield Static(
                "Stopping the run: the scheduler stops its executors and "
                f"journals what they report...{killed}\n"
                "(ctrl+c leaves without waiting)",
                id="question",
                markup=False,
            )

    def on_mount(self) -> None:
        """Start stopping."""
        self._stop()

    @work(thread=True, exit_on_error=False)
    def _stop(self) -> None:
        sup = getattr(self.app, "supervisor", None)
        ok = sup.stop(timeout=30.0, reason=STOP_REASON) if sup is not None else True
        self.app.call_from_thread(self.app.exit, "stopped" if ok else "stop-timeout")
