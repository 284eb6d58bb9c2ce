"""The confirmation of a verb: shows its impact, returns the request to send or None."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from tui.impact import Impact
from tui.toasts import fit_when_shown
from tui.widgets.keys_footer import KeysFooter


@dataclass(frozen=True)
class ActionRequest:
    """What the operator confirmed."""

    verb: str
    """The verb."""
    jobs: tuple[str, ...]
    """The jobs it applies to."""
    downstream: bool = False
    """Rerun the downstream too."""
    reason: str = ""
    """Why, for the audit trail."""
    names: tuple[str, ...] = ()
    """The ids and globs the operator typed, sent instead of `jobs` when given (as the CLI sends them)."""


class ImpactBox(VerticalScroll, can_focus=False):
    """The impact, scrolled by the mouse wheel: tab goes straight to the reason field."""


class ConfirmScreen(ModalScreen[ActionRequest | None]):
    """Impact, a reason field, y / n; destructive verbs never confirm on bare Enter."""

    CSS_PATH = "dialogs.tcss"
    AUTO_FOCUS = ""  # keys y/n/d act at once; tab reaches the reason field
    TOAST_BELOW = "#dialog"
    """The toasts stand below the dialog (tui/toasts.py)."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "confirm", "Yes"),
        Binding("n,escape", "cancel", "No"),
        Binding("enter", "enter", "Confirm", show=False),
        Binding("d", "toggle_downstream", "Downstream"),
    ]

    def __init__(
        self, impact: Impact, recompute: Callable[[bool], Impact] | None = None
    ) -> None:
        super().__init__()
        self.impact = impact
        """The impact shown (recomputed when the downstream choice changes)."""
        self.recompute = recompute
        """Computes the impact again for a new downstream choice."""
        self.keys_text = ""
        """The keys line as shown."""

    def compose(self) -> ComposeResult:
        """The dialog."""
        with Vertical(id="dialog") as box:
            box.border_title = f"{self.impact.verb} - confirm"
            # The impact scrolls within what the screen leaves: the reason field and the keys stay in view.
            with ImpactBox(id="impact-box"):
                yield Static(id="impact", markup=False)
            # Not selected on focus: an operator back in the field to add to the reason would
            # replace it all with the first key.
            yield Input(
                placeholder="reason, for the audit trail (optional)",
                id="reason",
                select_on_focus=False,
            )
            yield Static(id="keys")
        # Its own footer: the screen's below, seen through the backdrop, would offer its keys.
        yield KeysFooter()

    def on_mount(self) -> None:
        """Fill the dialog."""
        self._show()

    def on_screen_resume(self) -> None:
        """The toasts already up keep to this screen's room for them."""
        fit_when_shown(self)

    def on_resize(self, _event: events.Resize) -> None:
        """Fit the impact to the terminal's height again."""
        self._fit()

    def on_descendant_focus(self, _event: events.DescendantFocus) -> None:
        """The keys line says what the keys do now (in the reason field, they type)."""
        self._show()

    def on_descendant_blur(self, _event: events.DescendantBlur) -> None:
        """Out of the reason field: the keys act again."""
        self.call_after_refresh(self._show)

    def _fit(self) -> None:
        # Rows the dialog takes besides the impact: its border, the reason field and its margin, and the
        # keys (with their margin, and as many lines as they wrap to in the dialog's width); the footer
        # takes the screen's last row.
        keys = self.keys_text
        inner = max(1, min(self.app.size.width, 84) - 4)
        key_rows = max(1, -(-len(keys) // inner))
        room = self.app.size.height - (2 + 4 + 1 + key_rows) - 1
        self.query_one("#impact-box").styles.max_height = max(1, room)

    def _show(self) -> None:
        imp = self.impact
        body = imp.lines()
        if imp.verb == "rerun":
            body.append(
                f"[{'x' if imp.downstream else ' '}] "
                "with everything downstream (d switches)"
            )
        self.query_one("#impact", Static).update("\n".join(body))
        box = self.query_one("#dialog")
        box.set_class(imp.destructive, "-destructive")
        keys = []
        asked = "request " if imp.second else ""
        if isinstance(self.focused, Input):
            # Typing the reason: y, n and d are letters of it, enter is what goes on.
            if imp.applies and imp.destructive:
                keys.append(f"enter: keep the reason, then y: {asked}{imp.verb} {len(imp.applies)} job(s)")
            elif imp.applies:
                keys.append(f"enter: {asked}{imp.verb} {len(imp.applies)} job(s)")
            keys.append("esc: cancel")
        else:
            if imp.applies:
                keys.append(f"y: {asked}{imp.verb} {len(imp.applies)} job(s)")
            keys.append("n/esc: cancel")
            if imp.verb == "rerun":
                keys.append("d: downstream")
            keys.append("tab: reason")
            if imp.destructive:
                keys.append("(enter does not confirm)")
        self.keys_text = "  ".join(keys)
        self.query_one("#keys", Static).update(self.keys_text)
        self._fit()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The downstream switch exists for rerun only."""
        if action == "toggle_downstream":
            return self.impact.verb == "rerun"
        return True

    def action_toggle_downstream(self) -> None:
        """Rerun with or without the downstream jobs; the impact is worked out again."""
        if self.recompute is not None and self.impact.verb == "rerun":
            self.impact = self.recompute(not self.impact.downstream)
            self._show()

    def action_confirm(self) -> None:
        """Send it (when it applies to some job)."""
        if not self.impact.applies:
            self.dismiss(None)
            return
        reason = self.query_one("#reason", Input).value.strip()
        self.dismiss(
            ActionRequest(
                self.impact.verb,
                tuple(self.impact.applies),
                self.impact.downstream,
                reason,
            )
        )

    def action_enter(self) -> None:
        """Enter confirms harmless verbs only."""
        if self.impact.destructive:
            self.notify(
                f"{self.impact.verb} is destructive: press y to confirm",
                severity="warning",
            )
        else:
            self.action_confirm()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the reason field confirms harmless verbs; a destructive one keeps
        the reason and leaves the field, so that y confirms it."""
        event.stop()
        if self.impact.destructive:
            # y typed in the field is text, so leaving it is the only way on to y.
            self.set_focus(None)
            self.notify(
                f"reason kept: press y to {self.impact.verb}, n to cancel",
                severity="warning",
            )
        else:
            self.action_confirm()

    def action_cancel(self) -> None:
        """Do nothing."""
        self.dismiss(None)


class SettleScreen(ModalScreen[bool]):
    """The confirmation of an approve or a reject of what waits for one: what it does, y / n."""

    CSS_PATH = "dialogs.tcss"
    TOAST_BELOW = "#dialog"
    """The toasts stand below the dialog (tui/toasts.py)."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, verb: str, key: str, lines: list[str]) -> None:
        super().__init__()
        self.verb = verb
        """approve or reject."""
        self.key = key
        """The request id or the job id."""
        self.lines = lines
        """What it does."""

    def compose(self) -> ComposeResult:
        """The dialog."""
        with Vertical(id="dialog") as box:
            box.border_title = f"{self.verb} {self.key} - confirm"
            yield Static("\n".join(self.lines), id="impact", markup=False)
            yield Static(f"y: {self.verb} {self.key}  n/esc: cancel", id="keys", markup=False)
        yield KeysFooter()

    def on_screen_resume(self) -> None:
        """The toasts already up keep to this screen's room for them."""
        fit_when_shown(self)

    def action_answer(self, yes: bool) -> None:
        """Send it (y) or not."""
        self.dismiss(yes)
