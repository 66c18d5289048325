"""The help screen: every key of the screen it was opened from, plus the global ones, read from the
bindings themselves so the list can never go stale."""

from __future__ import annotations

import re
import unicodedata

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from app.widgets.key_bar import KEY_NAMES


def _one_key(key: str) -> str:
    if key in KEY_NAMES:
        return KEY_NAMES[key]
    try:  # Textual names printable keys after their Unicode names: equals_sign is "=", question_mark "?"
        char = unicodedata.lookup(key.replace("_", " ").upper())
    except KeyError:
        return key
    # Names of control characters and space ("escape", "space") stay words.
    return char if char.isprintable() and not char.isspace() else key


def key_label(key: str) -> str:
    return ", ".join(_one_key(k.strip()) for k in key.split(","))


def screen_title(screen: Screen) -> str:
    """'RunDetailScreen' as a person says it: 'Run detail'."""
    name = type(screen).__name__.removesuffix("Screen") or "Screen"
    words = re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()
    return words[:1].upper() + words[1:]


def _available(screen, binding: Binding) -> bool:
    """False for a key the screen disables where it has nothing to do (Screen.check_action)."""
    if screen is None:
        return True
    try:
        from textual.actions import parse

        _, name, parameters = parse(binding.action)
        return screen.check_action(name, parameters) is not False
    except Exception:  # noqa: BLE001 - an unparsable action is listed as before
        return True


def bindings_text(title: str, bindings, screen=None) -> Text:
    text = Text(f"{title}\n", style="bold")
    for binding in bindings:
        if isinstance(binding, Binding) and binding.description and _available(screen, binding):
            text.append(f"  {key_label(binding.key):<12}", style="bold")
            text.append(f"{binding.description}\n")
    return text


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close", id="help.close")]

    def __init__(self, origin: Screen) -> None:
        super().__init__()
        self.origin = origin

    def compose(self) -> ComposeResult:
        text = bindings_text(f"{screen_title(self.origin)} keys", self.origin.BINDINGS, self.origin)
        text.append("\n")
        text.append_text(bindings_text("everywhere", self.app.BINDINGS))
        text.append("\nctrl+p opens the command palette: every action, runs by name, themes.", style="italic")
        text.append("\nesc in a text box leaves the box; esc again leaves the screen.", style="italic")
        with VerticalScroll(classes="dialog", id="help-box"):
            yield Static(text)
