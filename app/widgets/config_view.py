"""A run's resolved config as dotted `key = value` lines, with the keys the run overrode highlighted.
The overrides come from core.config via the run detail screen's worker."""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text
from textual.widgets import Static

from app.screens.loaders import flatten
from app.widgets.format import theme_colour


class ConfigView(Static):
    def show(self, config: dict[str, Any], overrides: dict[str, Any]) -> None:
        flat = flatten(config or {})
        width = max((len(k) for k in flat), default=0)
        accent, muted = theme_colour(self.app, "accent"), theme_colour(self.app, "foreground-muted")
        text = Text()
        if overrides:
            text.append(f"{len(overrides)} key(s) differ from the preset (marked ●)\n\n", style=muted)
        for key, value in flat.items():
            overridden = key in overrides
            text.append("● " if overridden else "  ", style=accent)
            text.append(key.ljust(width), style=f"bold {accent}" if overridden else "")
            text.append(" = ")
            text.append(json.dumps(value) if not isinstance(value, str) else value,
                        style=f"bold {accent}" if overridden else "")
            text.append("\n")
        self.update(text if flat else Text("(no config recorded)", style="italic"))
