"""A one-line key hint bar built from the screen's bindings: a cheaper stand-in for Textual's Footer,
which rebuilds a widget per key on every focus change (measurable when opening screens)."""

from __future__ import annotations

from typing import Iterable

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from app.widgets.format import theme_colour

KEY_NAMES = {"question_mark": "?", "slash": "/", "right_square_bracket": "]", "left_square_bracket": "[",
             "space": "space", "escape": "esc", "enter": "enter", "ctrl+s": "^s", "ctrl+t": "^t", "ctrl+p": "^p",
             "ctrl+e": "^e", "full_stop": ".", "comma": ",", "less_than_sign": "<", "greater_than_sign": ">",
             "plus": "+", "minus": "-", "exclamation_mark": "!"}


def key_label(key: str) -> str:
    first = key.split(",")[0].strip()
    return KEY_NAMES.get(first, first)


class KeyBar(Static):
    """Shown bindings of the screen, then the app's, then the palette hint. A screen whose keys depend on its
    state (the run detail's tabs) defines `shown_bindings()` and calls `redraw()` when that state changes."""

    DEFAULT_CSS = """
    KeyBar { dock: bottom; height: 1; background: $panel; padding: 0 1; }
    """

    def on_mount(self) -> None:
        self.redraw()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.redraw())

    def screen_bindings(self) -> Iterable[Binding]:
        chooser = getattr(self.screen, "shown_bindings", None)
        return chooser() if chooser is not None else self.screen.BINDINGS

    def redraw(self) -> None:
        key_style = f"bold {theme_colour(self.app, 'accent')}"
        text = Text(no_wrap=True, overflow="ellipsis")
        bindings = [*self.screen_bindings(), *self.app.BINDINGS, Binding("ctrl+p", "command_palette", "Palette")]
        for binding in bindings:
            if isinstance(binding, Binding) and binding.show and binding.description:
                text.append(f"{key_label(binding.key)} ", style=key_style)
                text.append(f"{binding.description}  ")
        if text != getattr(self, "_drawn", None):
            self._drawn = text
            self.update(text)
