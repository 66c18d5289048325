"""A metric plot (textual-plotext): raw curve faint behind its debiased-EMA smoothing, x by step or time.
Also draws several runs overlaid in the colours the compare screen assigns."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from rich.color import Color as RichColor
from rich.style import Style
from rich.text import Text
from textual.color import Color
from rich.text import Span as _span
from textual_plotext import PlotextPlot


_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_STYLES: dict = {}


def _sgr_colour(params: list[str]):
    """(is background, rich Color) for a 38/48 colour code, else None."""
    if len(params) == 5 and params[1] == "2" and params[0] in ("38", "48"):
        return params[0] == "48", RichColor.from_rgb(int(params[2]), int(params[3]), int(params[4]))
    if len(params) == 3 and params[1] == "5" and params[0] in ("38", "48"):
        return params[0] == "48", RichColor.from_ansi(int(params[2]))
    return None


def ansi_text(ansi: str) -> Text:
    """Text.from_ansi for plotext's output (colour codes and resets only), several times faster: plotext wraps
    every run of cells in its own codes, and rich's general decoder spent ~15 ms on one plot. Anything else
    falls back to rich's decoder."""
    text = Text()
    spans = text._spans
    plain: list[str] = []
    position = 0
    fg = bg = None
    last = 0
    for match in _SGR.finditer(ansi):
        chunk = ansi[last:match.start()]
        if chunk:
            plain.append(chunk)
            if fg is not None or bg is not None:
                style = _STYLES.get((fg, bg))
                if style is None:
                    style = _STYLES[(fg, bg)] = Style(color=fg, bgcolor=bg)
                spans.append(_span(position, position + len(chunk), style))
            position += len(chunk)
        last = match.end()
        code = match.group(1)
        if code in ("", "0"):
            fg = bg = None
            continue
        colour = _sgr_colour(code.split(";"))
        if colour is None:
            return Text.from_ansi(ansi)
        if colour[0]:
            bg = colour[1]
        else:
            fg = colour[1]
    tail = ansi[last:]
    if tail:
        plain.append(tail)
        if fg is not None or bg is not None:
            spans.append(_span(position, position + len(tail), Style(color=fg, bgcolor=bg)))
    text.plain = "".join(plain)
    return text


def debiased_ema(values: Sequence[float], smoothing: float) -> list[float]:
    """Exponential moving average divided by (1 - smoothing^t), as TensorBoard does, so early points are not
    dragged toward zero. smoothing=0 returns the values unchanged."""
    if smoothing <= 0:
        return list(values)
    smoothing = min(smoothing, 0.999)
    out, average, weight = [], 0.0, 0.0
    for value in values:
        average = smoothing * average + (1 - smoothing) * value
        weight = smoothing * weight + (1 - smoothing)
        out.append(average / weight)
    return out


@dataclass
class Curve:
    label: str
    xs: list[float]
    ys: list[float]
    colour: str  # a theme variable name such as "series-1"


def _rgb(app, variable: str) -> tuple[int, int, int]:
    value = app.theme_variables.get(variable) or app.theme_variables.get("primary", "#4ea1ff")
    return Color.parse(value).rgb


class RewardPlot(PlotextPlot):
    """One panel; `draw` replaces its curves."""

    def __init__(self, title: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.plot_title = title
        self._curves: list[Curve] = []
        self._smoothing = 0.6
        self._x_label = "step"
        self._version = 0
        self._rendered: tuple = ((), None)

    def render(self):
        # plotext rebuilds the whole figure on every call; most repaints (cursor moves, other widgets
        # refreshing) do not change the plot, so reuse the last build.
        if not self._version:
            return Text(f"{self.plot_title}\n(loading…)", justify="center")
        key = (self.size, self._version, self.app.theme)
        if self._rendered[0] != key:
            self._rendered = (key, self._build())
        return self._rendered[1]

    def _build(self) -> Text:
        """PlotextPlot.render with a faster ANSI decoder."""
        plot = self._plot
        plot.plotsize(self.size.width, self.size.height)
        plot._set_size(self.size.width, self.size.height)
        plot.theme(self._get_plotext_theme_name(self.app.theme))
        return ansi_text(plot.build())

    def on_mount(self) -> None:
        super().on_mount()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._replot())

    def draw(self, curves: Sequence[Curve], smoothing: float, x_label: str = "step") -> None:
        self._curves, self._smoothing, self._x_label = list(curves), smoothing, x_label
        self._replot()

    def _replot(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(self.plot_title)
        plt.xlabel(self._x_label)
        raw_colour = _rgb(self.app, "raw-curve")
        show_raw = self._smoothing > 0 and len(self._curves) == 1
        for curve in self._curves:
            if not curve.xs:
                continue
            if show_raw:
                plt.plot(curve.xs, curve.ys, color=raw_colour, marker="braille")
            smoothed = debiased_ema(curve.ys, self._smoothing)
            label = curve.label if len(self._curves) > 1 else None
            plt.plot(curve.xs, smoothed, color=_rgb(self.app, curve.colour), marker="braille", label=label)
        if not any(c.xs for c in self._curves):
            plt.title(f"{self.plot_title} (no data yet)")
        self._version += 1
        self.refresh()
