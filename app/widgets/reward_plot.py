"""A metric plot widget: raw curve faint behind its debiased-EMA smoothing, x by step or time, drawn in braille.
Also draws several runs overlaid in the colours the compare screen assigns; the drawing itself is in braille.py."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence

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
    low, high = math.inf, -math.inf
    for value in values:
        average = smoothing * average + (1 - smoothing) * value
        weight = smoothing * weight + (1 - smoothing)
        # A weighted mean lies within the values it averages; rounding can push it a hair outside, which on a
        # constant series made a cliff of 1e-14 fill the whole plot.
        if math.isfinite(value):
            low, high = min(low, value), max(high, value)
        out.append(min(max(average / weight, low), high) if low <= high else average / weight)
    return out


@dataclass
class Curve:
    label: str
    xs: list[float]
    ys: list[float]
    colour: str  # a theme variable name such as "series-1"
    run: str = ""  # the run it belongs to, where several are overlaid ("" on a single run's plots)
    band: Optional[tuple[list[float], list[float]]] = None  # (low, high) around ys: a group's mean ± std


@dataclass
class PlotView:
    """How a plot draws its curves: smoothing, x label, log-scale y, the x span shown and the cursor's x."""

    smoothing: float = 0.6
    x_label: str = "step"
    log_y: bool = False
    x_range: Optional[tuple[float, float]] = None
    cursor_x: Optional[float] = None
    legend: bool = True  # False where the screen names each run's colour itself (compare): none over the curves
    # x where a resumed run's later segments began; (x, colour variable) in the colour of one of several runs
    markers: tuple[float | tuple[float, str], ...] = ()


def curve_stats(curve: Curve, x_range: Optional[tuple[float, float]] = None) -> Optional[tuple[float, float, float]]:
    """(last, min, max) of the raw values inside the x range, or None when it has none."""
    values = [y for x, y in zip(curve.xs, curve.ys)
              if (x_range is None or x_range[0] <= x <= x_range[1]) and math.isfinite(y)]
    return (values[-1], min(values), max(values)) if values else None


def value_at(curve: Curve, x: float) -> Optional[float]:
    """The raw value at the last point at or before x (what a cursor at x reads); None past the curve's end."""
    index = bisect.bisect_right(curve.xs, x) - 1
    return curve.ys[index] if 0 <= index and x <= curve.xs[-1] else None


class RewardPlot(Widget):
    """One panel; `draw` replaces its curves. The figure is rebuilt only when the curves, size or theme change.
    Its title line carries last/min/max of the raw values (one curve) and the cursor's readout."""

    DEFAULT_CSS = "RewardPlot { height: 1fr; }"

    def __init__(self, title: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.plot_title = title
        self._curves: list[Curve] = []
        self.view = PlotView()
        self._version = 0
        self._rendered: tuple = ((), None)

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.refresh())

    @property
    def curves(self) -> list[Curve]:
        return list(self._curves)

    def draw(self, curves: Sequence[Curve], smoothing: float, x_label: str = "step",
             view: Optional[PlotView] = None) -> None:
        self._curves = list(curves)
        self.view = replace(view or PlotView(), smoothing=smoothing, x_label=x_label)
        self._version += 1
        self.refresh()

    def render(self) -> Text:
        if not self._version:
            return Text(f"{self.plot_title}\n(loading…)", justify="center")
        key = (self.size, self._version, self.app.theme, self.plot_title)
        if self._rendered[0] != key:
            self._rendered = (key, self._build())
        return self._rendered[1]

    def export_figure(self) -> Text:
        """The drawing as a file gets it: where several runs share the plot, with the legend naming them (on screen
        the compare view names them above the plots, which a plot's own SVG or PNG does not carry)."""
        if len(self._curves) < 2 or self.view.legend or not self._version:
            return self.render()
        shown = self.view
        self.view = replace(shown, legend=True)
        try:
            return self._build()
        finally:
            self.view = shown

    def _style(self, variable: str) -> Style:
        value = self.app.theme_variables.get(variable) or self.app.theme_variables.get("primary", "#4ea1ff")
        return Style(color=Color.parse(value).rich_color)

    def title_text(self, width: int = 0) -> Text:
        """Title on the left (its tail kept when short of room); on the right last/min/max of the one curve, or
        what the cursor reads when it is on."""
        view = self.view
        right = Text()
        if view.cursor_x is not None:  # the readout takes the place of the statistics while the cursor is on
            right.append(f"@{fmt(view.cursor_x)}", style="bold")
            for curve in self._curves:
                name = f" {curve.label[:12]}" if len(self._curves) > 1 else ""
                right.append(f"{name} {fmt(value_at(curve, view.cursor_x))}", style=self._style(curve.colour))
        elif len(self._curves) == 1:
            stats = curve_stats(self._curves[0], view.x_range)
            if stats:
                # The title comes first: on a narrow plot the statistics shrink to the last value, then go.
                for wording in (f"last {fmt(stats[0])} min {fmt(stats[1])} max {fmt(stats[2])}",
                                f"last {fmt(stats[0])}", ""):
                    if not width or len(self.plot_title) + len(wording) + 2 <= width:
                        break
                right.append(wording, style="dim")
        title = self.plot_title
        room = (width or 10_000) - right.cell_len - 2
        if len(title) > room:
            title = "…" + title[-max(1, room - 1):] if room > 8 else title[:max(1, room)]
        text = Text(title, style="bold")
        if right:
            text.append(" " * max(2, (width or 0) - len(title) - right.cell_len))
            text.append_text(right)
        return text

    def _build(self) -> Text:
        series: list[Series] = []
        view = self.view
        overlaid = len(self._curves) > 1
        show_raw = view.smoothing > 0 and not overlaid
        for curve in self._curves:
            if curve.band is not None:  # the spread first, faint, so the mean line draws over it
                style = self._style(curve.colour) + Style(dim=True)
                series.append(Series(curve.xs, curve.band[1], style, band_low=curve.band[0]))
            if show_raw:
                series.append(Series(curve.xs, curve.ys, self._style("raw-curve")))
            label = None
            if overlaid and view.legend:
                stats = curve_stats(curve, view.x_range)
                label = curve.label + (f" {fmt(stats[0])} [{fmt(stats[1])}–{fmt(stats[2])}]" if stats else "")
            series.append(Series(curve.xs, debiased_ema(curve.ys, view.smoothing), self._style(curve.colour), label))
        return render_plot(series, self.size.width, self.size.height, self.title_text(self.size.width), view.x_label,
                           log_y=view.log_y, x_range=view.x_range, cursor_x=view.cursor_x,
                           integer_x=view.x_label == "step", x_unit=short_unit(view.x_label),
                           markers=[m if not isinstance(m, tuple) else (m[0], self._style(m[1]) + Style(dim=True))
                                    for m in view.markers])


def short_unit(x_label: str) -> str:
    """The x unit in a few letters, shown where the whole axis label has no room (narrow plots)."""
    return "min" if x_label.startswith("minutes") else ""


def fmt(value: Optional[float]) -> str:
    """Compact number for titles and readouts."""
    if value is None or not math.isfinite(value):
        return "–"
    if value != 0 and (abs(value) >= 1e4 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.4g}"
