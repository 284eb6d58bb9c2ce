"""The footer of every screen: whole key bindings only, those that do not fit the width left out."""

from __future__ import annotations

from textual import events
from textual.geometry import Size
from textual.widgets import Footer


class KeysFooter(Footer):
    """Textual's footer, showing only the bindings that fit whole.

    Textual's footer crops its last binding where the terminal ends (`R Reru` at 60 columns), with no
    mark of the cut. Here the bindings from the first one that would not fit whole on are hidden; the
    help screen (`?`, the first binding) names them all.
    """

    def __init__(self) -> None:
        super().__init__(compact=True, show_command_palette=False)

    async def recompose(self) -> None:
        """Fit the bindings again once they are composed (the screen's bindings changed)."""
        await super().recompose()
        self.fit_keys()

    def on_resize(self, _event: events.Resize) -> None:
        """A terminal of another width holds other bindings."""
        self.fit_keys()

    def fit_keys(self) -> None:
        """Show the bindings that fit whole in the footer's width, in order, and hide the rest."""
        width = self.size.width
        if width <= 0:
            return  # not laid out yet: the resize that lays it out fits it
        end = 0
        gap = 0  # (margins between neighbours collapse, as in Textual's horizontal layout)
        fits = True
        for key in self.children:
            margin = key.styles.margin
            wide = key.get_content_width(Size(width, 1), self.app.size) + key.styles.gutter.width
            start = end + max(gap, margin.left)
            fits = fits and start + wide <= width
            key.display = fits
            end, gap = start + wide, margin.right
