"""One-line prompts at the bottom: the `/` filter and the `:` command line."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingsMap, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.validation import ValidationResult, Validator
from textual.widgets import Input, Static

from tui.toasts import fit_when_shown, move_above
from tui.widgets.keys_footer import KeysFooter


class ParseValidator(Validator):
    """Accepts what a parser accepts; its error message is the failure description."""

    def __init__(
        self, parse: Callable[[str], object], allow_empty: bool = True
    ) -> None:
        super().__init__()
        self.parse = parse
        self.allow_empty = allow_empty

    def validate(self, value: str) -> ValidationResult:
        """Run the parser."""
        if not value.strip() and self.allow_empty:
            return self.success()
        try:
            self.parse(value)
        except ValueError as e:
            return self.failure(str(e))
        return self.success()


INPUT_KEYS = BindingsMap(Input.BINDINGS)
"""The input line's own keys (enter, backspace, arrows...), to replay typed-ahead keys with."""


class PromptScreen(ModalScreen[str | None]):
    """A validated input line; returns the text on Enter when valid, None on escape.

    Keys typed straight after the `/` or `:` that opened it (a paste, fast typing over SSH)
    reach the console before the line is there to take them: `type_ahead` keeps them and
    types them into the line once it is mounted, in the order they came.
    """

    CSS_PATH = "dialogs.tcss"
    TOAST_ABOVE = "#prompt"
    """The toasts stand above the prompt, not over it (tui/toasts.py)."""
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        label: str,
        value: str,
        parse: Callable[[str], object],
        hint: str,
        allow_empty: bool = True,
    ) -> None:
        super().__init__()
        self.label = label
        """Shown before the input (`/` or `:`)."""
        self.value = value
        """Initial text."""
        self.parse = parse
        """Validates the text."""
        self.hint = hint
        """Shown under the input while it is valid."""
        self.allow_empty = allow_empty
        """Whether empty text is accepted (it clears a filter)."""
        self._early: list[events.Key | events.Paste] = []
        self._ready = False
        self._done = False

    def compose(self) -> ComposeResult:
        """The line."""
        with Vertical(id="prompt"):
            yield Input(
                self.value,
                placeholder=self.hint,
                id="line",
                validators=[ParseValidator(self.parse, self.allow_empty)],
                validate_on=["changed", "submitted"],
            )
            yield Static(self.hint, id="hint", markup=False)
        # Its own footer: the screen's below would offer keys that type into the line here.
        yield KeysFooter()

    async def on_mount(self) -> None:
        """Label the line, focus it and type into it the keys that came before it."""
        self.query_one("#prompt").border_title = self.label
        line = self.query_one(Input)
        line.focus()
        while self._early and not self._done:
            await self._type(self._early.pop(0))
        self._ready = True

    def on_resize(self) -> None:
        """Once laid out, the toasts move above the prompt and keep to the room there."""
        self._toasts_above()

    def _toasts_above(self) -> None:
        self.call_after_refresh(move_above, self, self.query_one("#prompt"))
        fit_when_shown(self)

    async def type_ahead(self, event: events.Key | events.Paste) -> bool:
        """Take a key that reached the console but not the line; False: leave it to the bindings.

        Before the line is mounted every key and paste is kept for it; afterwards a printable
        key or a paste that went round it is typed in, and other keys are left to the bindings (the
        focused line's own, such as enter, apply wherever the key came from).
        """
        if self._done:
            return True  # the prompt returned: what is typed after it is not for the screen below
        if not self._ready:
            self._early.append(event)
            return True
        line = self.query_one(Input)
        if isinstance(event, events.Paste) or event.is_printable or not line.has_focus:
            await self._type(event)
            return True
        return False

    async def _type(self, event: events.Key | events.Paste) -> None:
        line = self.query_one(Input)
        if isinstance(event, events.Paste):
            if event.text:
                line.insert_text_at_cursor(event.text.splitlines()[0])  # one line, as the line itself takes a paste
        elif event.is_printable and event.character is not None:
            line.insert_text_at_cursor(event.character)
        elif event.key == "escape":
            self.action_cancel()
        else:
            for binding in INPUT_KEYS.key_to_bindings.get(event.key, []):
                await line.run_action(binding.action)

    def on_input_changed(self, event: Input.Changed) -> None:
        """Say what is wrong while typing."""
        hint = self.query_one("#hint", Static)
        if event.validation_result is not None and not event.validation_result.is_valid:
            hint.update("; ".join(event.validation_result.failure_descriptions))
            hint.add_class("-error")
        else:
            hint.update(self.hint)
            hint.remove_class("-error")
        # The hint takes as many lines as its words need: the prompt grows or shrinks, its toasts follow.
        self._toasts_above()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Return valid text; keep the prompt open on invalid text."""
        event.stop()
        if event.validation_result is not None and not event.validation_result.is_valid:
            self.app.bell()
            return
        self._done = True
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        """Leave without a change."""
        self._done = True
        self.dismiss(None)
