"""A metric plot widget: raw curve faint behind its debiased-EMA smoothing, x by step or time, drawn in braille.
Also draws several runs overlaid in the colours the compare screen assigns; the drawing itself is in braille.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.widget import Widget

from app.widgets.braille import Series, render_plot


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


class RewardPlot(Widget):
    """One panel; `draw` replaces its curves. The figure is rebuilt only when the curves, size or theme change."""

    DEFAULT_CSS = "RewardPlot { height: 1fr; }"

    def __init__(self, title: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.plot_title = title
        self._curves: list[Curve] = []
        self._smoothing = 0.6
        self._x_label = "step"
        self._version = 0
        self._rendered: tuple = ((), None)

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.refresh())

    def draw(self, curves: Sequence[Curve], smoothing: float, x_label: str = "step") -> None:
        self._curves, self._smoothing, self._x_label = list(curves), smoothing, x_label
        self._version += 1
        self.refresh()

    def render(self) -> Text:
        if not self._version:
            return Text(f"{self.plot_title}\n(loading…)", justify="center")
        key = (self.size, self._version, self.app.theme, self.plot_title)
        if self._rendered[0] != key:
            self._rendered = (key, self._build())
        return self._rendered[1]

    def _style(self, variable: str) -> Style:
        value = self.app.theme_variables.get(variable) or self.app.theme_variables.get("primary", "#4ea1ff")
        return Style(color=Color.parse(value).rich_color)

    def _build(self) -> Text:
        series: list[Series] = []
        overlaid = len(self._curves) > 1
        show_raw = self._smoothing > 0 and not overlaid
        for curve in self._curves:
            if show_raw:
                series.append(Series(curve.xs, curve.ys, self._style("raw-curve")))
            series.append(Series(curve.xs, debiased_ema(curve.ys, self._smoothing), self._style(curve.colour),
                                 curve.label if overlaid else None))
        return render_plot(series, self.size.width, self.size.height, self.plot_title, self._x_label)
