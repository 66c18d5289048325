"""Where keyboard focus goes: `esc` in a text box leaves the box (to the screen's main widget) rather than the
screen, so a person filtering or typing a range never loses the view by reflex."""

from __future__ import annotations

from typing import Optional

from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, TextArea


def leave_text_box(screen: Screen, home: Optional[Widget]) -> bool:
    """If a text box has focus, move focus to `home` (or off the box) and return True; else False."""
    if not isinstance(screen.focused, (Input, TextArea)):
        return False
    if home is not None and home.focusable:
        home.focus()
    else:
        screen.set_focus(None)
    return True
