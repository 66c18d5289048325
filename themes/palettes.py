"""The kernelrl themes (dark, light, high-contrast) as Textual `Theme` objects, plus extra variables.
Widgets read colours from theme variables only; `series-1..8` give compare plots stable, distinct colours."""

from __future__ import annotations

from textual.theme import Theme

# Eight categorical colours per theme: compare views colour run k with series-(k+1), so a run keeps its colour.
_SERIES_DARK = ("#4ea1ff", "#ff9f43", "#2ecc71", "#ff6b81", "#a29bfe", "#feca57", "#48dbfb", "#c8d6e5")
_SERIES_LIGHT = ("#1f5fbf", "#c25e00", "#1e7b3a", "#b8203f", "#5f3dc4", "#8a6d00", "#00788a", "#4a4a4a")
_SERIES_CONTRAST = ("#00ffff", "#ffff00", "#00ff00", "#ff00ff", "#ffffff", "#ff8800", "#88aaff", "#ff5555")


def _series(colours: tuple[str, ...]) -> dict[str, str]:
    return {f"series-{i + 1}": colour for i, colour in enumerate(colours)}


KRL_DARK = Theme(
    name="krl-dark", primary="#4ea1ff", secondary="#a29bfe", accent="#feca57", warning="#ff9f43",
    error="#ff5c6c", success="#2ecc71", foreground="#d8dee9", background="#14171c", surface="#1b1f26",
    panel="#232833", dark=True, variables={**_series(_SERIES_DARK), "raw-curve": "#4a5566"},
)
KRL_LIGHT = Theme(
    name="krl-light", primary="#1f5fbf", secondary="#5f3dc4", accent="#8a6d00", warning="#c25e00",
    error="#b8203f", success="#1e7b3a", foreground="#1d232b", background="#fafafa", surface="#f0f1f4",
    panel="#e2e5ea", dark=False, variables={**_series(_SERIES_LIGHT), "raw-curve": "#b8bec8"},
)
KRL_HIGH_CONTRAST = Theme(
    name="krl-high-contrast", primary="#00ffff", secondary="#ff00ff", accent="#ffff00", warning="#ffaa00",
    error="#ff3333", success="#00ff00", foreground="#ffffff", background="#000000", surface="#000000",
    panel="#1a1a1a", dark=True, luminosity_spread=0.25, text_alpha=1.0,
    variables={**_series(_SERIES_CONTRAST), "raw-curve": "#777777"},
)

THEMES = (KRL_DARK, KRL_LIGHT, KRL_HIGH_CONTRAST)
DEFAULT_THEME = KRL_DARK.name
# Short names accepted by --theme.
ALIASES = {"dark": "krl-dark", "light": "krl-light", "high-contrast": "krl-high-contrast", "contrast": "krl-high-contrast"}

# Defaults for the extra variables, so Textual's own themes (also selectable) still resolve them.
VARIABLE_DEFAULTS = {**_series(_SERIES_DARK), "raw-curve": "#666666"}
