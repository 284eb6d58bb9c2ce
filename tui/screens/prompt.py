"""One-line prompts at the bottom: the `/` filter and the `:` command line."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.validation import ValidationResult, Validator
from textual.widgets import Input, Static


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


class PromptScreen(ModalScreen[str | None]):
    """A validated input line; returns the text on Enter when valid, None on escape."""

    CSS_PATH = "dialogs.tcss"
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

    def on_mount(self) -> None:
        """Label the line."""
        self.query_one("#prompt").border_title = self.label

    def on_input_changed(self, event: Input.Changed) -> None:
        """Say what is wrong while typing."""
        hint = self.query_one("#hint", Static)
        if event.validation_result is not None and not event.validation_result.is_valid:
            hint.update("; ".join(event.validation_result.failure_descriptions))
            hint.add_class("-error")
        else:
            hint.update(self.hint)
            hint.remove_class("-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Return valid text; keep the prompt open on invalid text."""
        event.stop()
        if event.validation_result is not None and not event.validation_result.is_valid:
            self.app.bell()
            return
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        """Leave without a change."""
        self.dismiss(None)
