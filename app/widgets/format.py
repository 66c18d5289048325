"""Small formatting helpers shared by the widgets: numbers, durations, status glyphs and colours.
Colours are theme variable names, resolved against the running app's theme by the caller."""

from __future__ import annotations

from typing import Optional

from core.progress import steps_done

# Theme variable per run status; `text-muted` for the settled ones.
STATUS_COLOUR = {"queued": "secondary", "running": "success", "stopping": "warning", "stopped": "foreground-muted",
                 "finished": "primary", "failed": "error", "crashed": "error"}
STATUS_GLYPH = {"queued": "◌", "stopping": "◍", "stopped": "■", "finished": "✔", "failed": "✖", "crashed": "✖"}
# A running run's glyph turns a quarter each time its heartbeat or step moves: liveness without a timer.
LIVE_GLYPHS = ("◐", "◓", "◑", "◒")


def status_glyph(status: str, tick: int = 0) -> str:
    return LIVE_GLYPHS[tick % 4] if status == "running" else STATUS_GLYPH.get(status, "?")


def fmt_float(value: Optional[float], digits: int = 2) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1000 or (value and abs(value) < 10 ** -digits):
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}"


def printable(text: object) -> str:
    """Text safe to print to a terminal: control characters (escape sequences, bells) shown as \\xNN escapes,
    line breaks and tabs kept. Run names, notes, errors and tags come from a registry that anything can write."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode("ascii") for c in text)


def fmt_steps(row: dict) -> str:
    """Progress as steps done / total (finished samples / total for an evaluation; core.progress counts them).
    The one definition the CLI and the TUI show."""
    done = steps_done(row)
    total = row.get("total_steps")
    return f"{'–' if done is None else done}/{'?' if total is None else total}"


def runtime_ms(value: object) -> Optional[float]:
    """A runtime in ms from an EvalResult field: the evaluator writes timing statistics ({"median_ms", …}); older
    records hold a bare number."""
    if isinstance(value, dict):
        value = value.get("median_ms")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fmt_duration(seconds: Optional[float]) -> str:
    if seconds is None or seconds < 0:
        return "–"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def fmt_speedup(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.2f}x"


def theme_colour(app, variable: str, fallback: str = "white") -> str:
    """A theme variable's colour ('$success' → '#2ecc71') for Rich styles built in code. Translucent
    variables are composited over the background, since Rich styles have no alpha."""
    from textual.color import Color

    variables = app.theme_variables
    value = variables.get(variable) or fallback
    try:
        colour = Color.parse(value)
    except Exception:
        return fallback
    if colour.a < 1:
        colour = Color.parse(variables.get("background", "#000000")) + colour
    return colour.hex6
