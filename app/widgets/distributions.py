"""A per-step histogram drawn as a shaded grid (TensorBoard's distributions, in characters): one column per step
bucket, one row per value bin, darker where more trajectories fell; each column is scaled to its own peak."""

from __future__ import annotations

from typing import Optional

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.widget import Widget

from app.screens.view_data import StepHistogram

SHADES = " ░▒▓█"
# What the shades mean, printed under every histogram: each step column is scaled to its own peak.
# The shade is round(count / peak * 4), at least 1: boundaries at 3/8, 5/8 and 7/8 of the peak.
SHADE_LEGEND = "share of the step's busiest bin: ░ <⅜  ▒ <⅝  ▓ <⅞  █ ≥⅞"


def histogram_text(hist: StepHistogram, width: int, colour: Optional[Style] = None) -> Text:
    """Title, then one line per bin (highest values on top) with its lower edge, then the step axis."""
    out = Text(no_wrap=True, overflow="crop")
    out.append(f"{hist.title}  ({hist.total} values)\n", style="bold")
    if not hist.counts:
        out.append("(no values yet)\n", style="dim")
        return out
    labels = [f"{edge:.3g}" + ("x" if hist.log2 else "") for edge in hist.edges[:-1]]
    margin = max(len(label) for label in labels) + 1
    columns = len(hist.steps)
    cell = max(1, min(4, (width - margin - 2) // max(1, columns)))
    peaks = [max(hist.counts[b][c] for b in range(len(hist.counts))) or 1 for c in range(columns)]
    for bin_index in reversed(range(len(hist.counts))):
        out.append(labels[bin_index].rjust(margin - 1) + " │", style="dim")
        row = hist.counts[bin_index]
        line = "".join(SHADES[0 if row[c] == 0 else max(1, round(row[c] / peaks[c] * 4))] * cell
                       for c in range(columns))
        out.append(line, style=colour)
        out.append("\n")
    out.append(" " * (margin - 1) + " └" + "─" * (cell * columns) + "\n", style="dim")
    first, last = hist.steps[0][0], hist.steps[-1][1]
    axis = f"step {first}"
    end = f"{last}"
    gap = max(1, cell * columns - len(axis) - len(end) + 2)
    out.append(" " * margin + axis + " " * gap + end + "\n", style="dim")
    out.append(" " * margin + SHADE_LEGEND, style="dim")
    return out


class HistogramView(Widget):
    """One StepHistogram, redrawn when its data, size or theme change."""

    DEFAULT_CSS = "HistogramView { height: 1fr; }"

    def __init__(self, colour: str = "primary", **kwargs) -> None:
        super().__init__(**kwargs)
        self.hist: Optional[StepHistogram] = None
        self.colour = colour

    def show(self, hist: StepHistogram) -> None:
        self.hist = hist
        self.refresh()

    def render(self) -> Text:
        if self.hist is None:
            return Text("(loading…)", style="dim")
        value = self.app.theme_variables.get(self.colour) or "#4ea1ff"
        return histogram_text(self.hist, self.size.width, Style(color=Color.parse(value).rich_color))
