"""A metric plot (textual-plotext): raw curve faint behind its debiased-EMA smoothing, x by step or time.
Also draws several runs overlaid in the colours the compare screen assigns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich.text import Text
from textual.color import Color
from textual_plotext import PlotextPlot


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
            self._rendered = (key, super().render())
        return self._rendered[1]

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
