"""The help screen: every key of the screen it was opened from, plus the global ones, read from the
bindings themselves so the list can never go stale."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

KEY_NAMES = {"question_mark": "?", "slash": "/", "right_square_bracket": "]", "left_square_bracket": "[",
             "space": "space", "escape": "esc", "enter": "enter"}


def key_label(key: str) -> str:
    return ", ".join(KEY_NAMES.get(k.strip(), k.strip()) for k in key.split(","))


def bindings_table(title: str, bindings) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold", min_width=10)
    table.add_column()
    for binding in bindings:
        if isinstance(binding, Binding) and binding.description:
            table.add_row(key_label(binding.key), binding.description)
    return table


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close", id="help.close")]

    def __init__(self, origin: Screen) -> None:
        super().__init__()
        self.origin = origin

    def compose(self) -> ComposeResult:
        from rich.console import Group

        name = type(self.origin).__name__.replace("Screen", "") or "screen"
        with VerticalScroll(classes="dialog", id="help-box"):
            yield Static(Group(
                bindings_table(f"{name} keys", self.origin.BINDINGS),
                Text(""),
                bindings_table("everywhere", self.app.BINDINGS),
                Text("\nctrl+p opens the command palette: every action, runs by name, themes.", style="italic"),
            ))
