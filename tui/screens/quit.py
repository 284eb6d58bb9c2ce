"""Leaving the console: detach (the run goes on) or stop the run and wait for it."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from tui.toasts import fit_when_shown
from tui.widgets.keys_footer import KeysFooter


class QuitScreen(ModalScreen[str | None]):
    """Asks what becomes of a live run: "detach", "stop", or None to stay."""

    CSS_PATH = "dialogs.tcss"
    AUTO_FOCUS = ""
    TOAST_BELOW = "#dialog"
    """The toasts stand below the dialog (tui/toasts.py)."""
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
        held: Sequence[str] | None = (),
    ) -> None:
        super().__init__()
        self.scheduler_pid = scheduler_pid
        """The live scheduler."""
        self.state_dir = state_dir
        """The run's state directory (named in the command that attaches again)."""
        self.running = list(running)
        """Ids of the jobs running now (a stop kills them)."""
        self.held = None if held is None else list(held)
        """Those of them a stop holds until released (idempotent: false); None: not known."""

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
                f"s  stop the run: {stop_text(self.running, self.held)}\n"
                "n  stay in the console\n\n"
                f"{running_text(self.running)[0].upper()}{running_text(self.running)[1:]}.",
                id="question",
                markup=False,
            )
        # Its own footer: the main screen's, seen through the backdrop, would offer its keys.
        yield KeysFooter()

    def on_screen_resume(self) -> None:
        """The toasts already up keep to this screen's room for them."""
        fit_when_shown(self)

    def on_resize(self) -> None:
        """Fit the footer to the terminal's height once the question is laid out."""
        self.call_after_refresh(self._fit_footer)

    def _fit_footer(self) -> None:
        """A terminal too short for the whole question gives the footer's row to it: the question names
        its keys too, and says what they do."""
        needed = self.query_one("#question").outer_size.height + 2  # (the dialog's border)
        self.query_one(Footer).display = needed < self.size.height

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


def stop_text(running: Sequence[str], held: Sequence[str] | None) -> str:
    """What a stop does to the run and to the jobs running now (`held`: those of them it holds)."""
    if not running:
        return "the scheduler stops its executors; the run can be resumed"
    return f"KILLS the {len(running)} running job(s); {resume_text(running, held)}"


NAMED_HELD = 5
"""Held jobs named after a stop (the rest are cut to "..."), as `wloadctl run` names them."""


def resume_text(running: Sequence[str], held: Sequence[str] | None) -> str:
    """What a resume does with the running jobs a stop kills: runs them again from the start, but for those
    that may not run twice (idempotent: false), held until an operator releases them. Said as `wloadctl run`
    says it of a run it stopped (wloadctl/cli_run.py).

    Args:
        running: the jobs the stop kills.
        held: those of them it holds; None when the console does not know which (an older run's shape).
    """
    if held is None:
        return ("a resume runs them again from the start, except any that may not run twice "
                "(idempotent: false, held until released)")
    if not held:
        return "a resume runs them again from the start"
    names = f"{', '.join(held[:NAMED_HELD])}{' ...' if len(held) > NAMED_HELD else ''}"
    note = f"({names} idempotent: false, held until released)"
    again = len(running) - len(held)
    if again <= 0:
        return f"a resume runs none of them again {note}"
    return f"a resume runs {again} of them again from the start {note}"


def stopped_line(killed: Sequence[str], held: Sequence[str] | None, where: str) -> str:
    """What the console says once it stopped the run: the jobs it killed, which of them a resume runs again
    and which it holds (`held`), and how to resume (`where`: the run's --state-dir option)."""
    said = f"; it killed {running_text(killed)}; {resume_text(killed, held)}" if killed else ""
    return f"run stopped{said}; resume it with `wloadctl console {where}`"


def held_by_stop(once: Collection[int] | None, index: Mapping[str, int], running: Sequence[str]) -> list[str] | None:
    """The running jobs a stop of the run holds for an operator, not runs again: those that may not run
    twice (`once`: their indices; None when not known, and so is the answer)."""
    if once is None:
        return None
    return [j for j in running if index.get(j, -1) in once]


STOP_REASON = "stopped from the console (q, s)"
"""The reason a stop from the console is journaled with (under the console user's name)."""


class StoppingScreen(ModalScreen[None]):
    """Stops the scheduler (SIGTERM) and exits the console once it is gone."""

    CSS_PATH = "dialogs.tcss"
    AUTO_FOCUS = ""
    TOAST_BELOW = "#dialog"
    """The toasts stand below the dialog (tui/toasts.py)."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "app.exit('stop-timeout')", "Leave now", priority=True)
    ]

    def __init__(self, running: Sequence[str] = (), held: Sequence[str] | None = ()) -> None:
        super().__init__()
        self.running = list(running)
        """Ids of the jobs that ran when the stop was chosen (the stop kills them)."""
        self.held = None if held is None else list(held)
        """Those of them the stop holds until released (idempotent: false); None: not known."""

    def compose(self) -> ComposeResult:
        """The wait."""
        with Vertical(id="dialog") as box:
            box.border_title = "stopping"
            killed = (
                f"\nIt kills {running_text(self.running)}; {resume_text(self.running, self.held)}."
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
        yield KeysFooter()

    def on_screen_resume(self) -> None:
        """The toasts already up keep to this screen's room for them."""
        fit_when_shown(self)

    def on_mount(self) -> None:
        """Start stopping."""
        self._stop()

    @work(thread=True, exit_on_error=False)
    def _stop(self) -> None:
        sup = getattr(self.app, "supervisor", None)
        ok = sup.stop(timeout=30.0, reason=STOP_REASON) if sup is not None else True
        self.app.call_from_thread(self.app.exit, "stopped" if ok else "stop-timeout")
