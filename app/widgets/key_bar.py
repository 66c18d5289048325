"""A one-line key hint bar built once from the screen's bindings: a cheaper stand-in for Textual's Footer,
which rebuilds a widget per key on every focus change (measurable when opening screens)."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from app.widgets.format import theme_colour

KEY_NAMES = {"question_mark": "?", "slash": "/", "right_square_bracket": "]", "left_square_bracket": "[",
             "space": "space", "escape": "esc", "enter": "enter", "ctrl+s": "^s", "ctrl+t": "^t", "ctrl+p": "^p"}


def key_label(key: str) -> str:
    first = key.split(",")[0].strip()
    return KEY_NAMES.get(first, first)


class KeyBar(Static):
    """Shown bindings of the screen, then the app's, then the palette hint."""

    DEFAULT_CSS = """
    KeyBar { dock: bottom; height: 1; background: $panel; padding: 0 1; }
    """

    def on_mount(self) -> None:
        self._draw()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._draw())

    def _draw(self) -> None:
        key_style = f"bold {theme_colour(self.app, 'accent')}"
        text = Text(no_wrap=True, overflow="ellipsis")
        bindings = [*self.screen.BINDINGS, *self.app.BINDINGS, Binding("ctrl+p", "command_palette", "Palette")]
        for binding in bindings:
            if isinstance(binding, Binding) and binding.show and binding.description:
                text.append(f"{key_label(binding.key)} ", style=key_style)
                text.append(f"{binding.description}  ")
        self.update(text)
