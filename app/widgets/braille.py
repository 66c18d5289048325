"""Line charts drawn with braille dots into a rich Text: title, y and x ticks, axes, legend, one colour per series.
Pure function of its inputs (no widget), vectorised with numpy so a 1,000-point plot builds in about a millisecond."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from rich.style import Style
from rich.text import Text

# Bit of each dot in a braille cell, indexed [row within cell (0 top..3)][column within cell (0..1)].
_DOT_BITS = np.array([[0x01, 0x08], [0x02, 0x10], [0x04, 0x20], [0x40, 0x80]], dtype=np.uint8)
_BRAILLE = [chr(0x2800 + i) for i in range(256)]
_BRAILLE[0] = " "
AXIS_STYLE = Style(dim=True)
TITLE_STYLE = Style(bold=True)


@dataclass
class Series:
    """One line: points (xs, ys) drawn in `style`; `label` shows in the legend when set."""

    xs: Sequence[float]
    ys: Sequence[float]
    style: Style
    label: str | None = None
    band_low: Sequence[float] | None = None  # set: the area between band_low and ys is filled (a band), no line


def nice_ticks(low: float, high: float, most: int) -> list[float]:
    """Round values (1, 2 or 5 × 10^k apart) inside [low, high]: the finest spacing giving at most most+1 ticks."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low or most < 1:
        return [low] if math.isfinite(low) else []
    exponent = math.floor(math.log10((high - low) / most))
    for step in (m * 10.0 ** e for e in (exponent, exponent + 1, exponent + 2) for m in (1, 2, 5)):
        first = math.ceil(low / step - 1e-9)
        count = math.floor(high / step + 1e-9) - first + 1
        if count <= most + 1:
            return [0.0 if first + i == 0 else (first + i) * step for i in range(count)]
    return [low]


def _decimals(step: float) -> int:
    """Decimals that resolve a tick spacing of 1, 2 or 5 × 10^k (at most 6)."""
    return min(6, max(0, -math.floor(math.log10(step) + 1e-9))) if step > 0 else 0


def tick_label(value: float, step: float) -> str:
    """Short label for a tick: as few digits as the spacing needs, k/M/G/T suffixes for large values."""
    size = abs(value)
    if size >= 1e15 or (0 < size < 1e-4):
        return f"{value:.1e}"
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if size >= max(scale, 1e4):
            return f"{value / scale:.{min(3, _decimals(step / scale))}f}{suffix}"
    return f"{value:.{_decimals(step)}f}"


def _finite(series: Series) -> tuple[np.ndarray, np.ndarray]:
    xs = np.asarray(series.xs, dtype=np.float64)
    ys = np.asarray(series.ys, dtype=np.float64)
    n = min(len(xs), len(ys))
    xs, ys = xs[:n], ys[:n]
    keep = np.isfinite(xs) & np.isfinite(ys)
    return xs[keep], ys[keep]


def _range(values: list[np.ndarray]) -> tuple[float, float]:
    low = min(float(v.min()) for v in values)
    high = max(float(v.max()) for v in values)
    if high - low <= 1e-9 * max(abs(low), abs(high)):  # a flat line (to rounding) sits in the middle of the plot
        low = high = (low + high) / 2
        pad = abs(low) * 0.1 or 0.5
        return low - pad, high + pad
    return low, high


def _line_dots(px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every dot on the straight segments joining consecutive points (integer dot coordinates)."""
    if len(px) < 2:
        return px, py
    dx, dy = np.diff(px), np.diff(py)
    steps = np.maximum(np.abs(dx), np.abs(dy))
    counts = np.maximum(steps, 1)
    segment = np.repeat(np.arange(len(dx)), counts)
    offsets = np.arange(len(segment)) - np.repeat(np.cumsum(counts) - counts, counts)
    fraction = offsets / counts[segment]
    xs = np.rint(px[segment] + dx[segment] * fraction).astype(np.int64)
    ys = np.rint(py[segment] + dy[segment] * fraction).astype(np.int64)
    return np.append(xs, px[-1]), np.append(ys, py[-1])


def _band_dots(px: np.ndarray, top: np.ndarray, bottom: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every dot between two curves over the same x dots (a filled band), column by column."""
    columns = np.arange(int(px.min()), int(px.max()) + 1)
    upper = np.rint(np.interp(columns, px, top)).astype(np.int64)
    lower = np.rint(np.interp(columns, px, bottom)).astype(np.int64)
    spans = [np.arange(min(a, b), max(a, b) + 1) for a, b in zip(upper, lower)]
    xs = np.repeat(columns, [len(span) for span in spans])
    return xs, np.concatenate(spans) if spans else np.array([], dtype=np.int64)


def _view(xy: tuple[np.ndarray, np.ndarray], x_range: tuple[float, float] | None,
          log_y: bool) -> tuple[np.ndarray, np.ndarray]:
    """The points inside the x range, with y as log10 (only positive values) for a log-scale plot."""
    xs, ys = xy
    keep = np.ones(len(xs), dtype=bool)
    if x_range is not None:
        keep &= (xs >= x_range[0]) & (xs <= x_range[1])
    if log_y:
        keep &= ys > 0
    xs, ys = xs[keep], ys[keep]
    return xs, (np.log10(ys) if log_y else ys)


def render_plot(series: Sequence[Series], width: int, height: int, title: str | Text = "", x_label: str = "",
                empty_note: str = "no data yet", log_y: bool = False, x_range: tuple[float, float] | None = None,
                cursor_x: float | None = None, integer_x: bool = False, x_unit: str = "",
                markers: Sequence[float | tuple[float, Style]] = ()) -> Text:
    """The whole plot as `height` lines of `width` cells. Later series draw over earlier ones.
    log_y: y on a log10 scale (points <= 0 left out); x_range: only that span of x; cursor_x: a vertical marker.
    integer_x: x is a count (steps), so its ticks are whole numbers. x_unit: a short form of x_label, kept on a
    plot too narrow for the whole label (the rightmost tick labels give way to it). markers: x values marked by a
    dotted vertical line where no curve is drawn (where a resumed run's new segment began); an (x, style) pair draws
    its line in that style (the run's colour, where several runs share a plot)."""
    width, height = max(width, 12), max(height, 5)
    out = Text(no_wrap=True, overflow="crop")
    heading = title if isinstance(title, Text) else Text(title[:width].center(width).rstrip(), TITLE_STYLE)
    heading.truncate(width)
    out.append_text(heading)
    out.append("\n")
    points = [(_view(_finite(s), x_range, log_y), s) for s in series]
    lows = {id(s): _view(_finite(Series(s.xs, s.band_low, s.style)), x_range, log_y)[1] for s in series
            if s.band_low is not None}
    points = [(xy, s) for xy, s in points if len(xy[0])]
    canvas_rows = height - 3  # title above; axis line and tick labels below
    if not points:
        blank = [" " * width] * canvas_rows
        blank[canvas_rows // 2] = f"({empty_note})".center(width)[:width]
        out.append("\n".join(line.rstrip() for line in blank) + "\n\n", AXIS_STYLE)
        return out
    x_low, x_high = _range([xy[0] for xy, _ in points])
    if x_range is not None and x_range[1] > x_range[0]:
        x_low, x_high = x_range
    y_low, y_high = _range([xy[1] for xy, _ in points] + [low for low in lows.values() if len(low)])
    y_ticks = nice_ticks(y_low, y_high, max(2, canvas_rows // 2))
    if log_y:  # decades where the range spans two or more, labelled by their value
        decades = [v for v in y_ticks if float(v).is_integer()]
        y_ticks = decades if len(decades) >= 2 else y_ticks
        y_labels = [f"{10.0 ** v:.3g}" for v in y_ticks]
    else:
        y_step = y_ticks[1] - y_ticks[0] if len(y_ticks) > 1 else abs(y_high - y_low) or 1.0
        y_labels = [tick_label(v, y_step) for v in y_ticks]
    margin = max(len(label) for label in y_labels) + 1
    columns = width - margin - 2  # axis column, one blank on the right
    if columns < 4:
        return heading
    dots_x, dots_y = 2 * columns, 4 * canvas_rows

    def to_dot_x(values: np.ndarray) -> np.ndarray:
        return np.rint((values - x_low) / (x_high - x_low) * (dots_x - 1)).astype(np.int64)

    def to_dot_y(values: np.ndarray) -> np.ndarray:
        return np.rint((y_high - values) / (y_high - y_low) * (dots_y - 1)).astype(np.int64)

    cells = np.zeros((canvas_rows, columns), dtype=np.uint8)
    owner = np.full((canvas_rows, columns), -1, dtype=np.int64)
    styles = []
    for index, ((xs, ys), one) in enumerate(points):
        if id(one) in lows and len(lows[id(one)]) == len(ys):
            px, py = _band_dots(to_dot_x(xs), to_dot_y(ys), to_dot_y(lows[id(one)]))
        else:
            px, py = _line_dots(to_dot_x(xs), to_dot_y(ys))
        rows, cols = py // 4, px // 2
        np.bitwise_or.at(cells, (rows, cols), _DOT_BITS[py % 4, px % 2])
        owner[rows, cols] = index
        styles.append(one.style)

    styles.append(AXIS_STYLE)  # the cursor line and segment markers, where no series is drawn
    axis_index = len(points)
    marker_styles: dict[Style, int] = {}
    for marker in markers:
        at, style = marker if isinstance(marker, tuple) else (marker, None)
        if x_low < at <= x_high:
            index = axis_index
            if style is not None:
                if style not in marker_styles:
                    styles.append(style)
                    marker_styles[style] = len(styles) - 1
                index = marker_styles[style]
            dot = int(to_dot_x(np.array([at]))[0])
            column = cells[:, dot // 2]
            empty = column == 0
            column[empty] = 0x05 if dot % 2 == 0 else 0x28  # two dots of four: dotted, unlike the cursor
            owner[:, dot // 2] = np.where(empty, index, owner[:, dot // 2])
    if cursor_x is not None and x_low <= cursor_x <= x_high:
        dot = int(to_dot_x(np.array([cursor_x]))[0])
        column = cells[:, dot // 2]  # a view: writing it writes the canvas
        column[column == 0] = 0x47 if dot % 2 == 0 else 0xB8  # the left or the right dot column of the cell
        owner[:, dot // 2] = np.where(owner[:, dot // 2] < 0, axis_index, owner[:, dot // 2])

    # Which canvas row each y tick labels.
    tick_rows = {int(to_dot_y(np.array([v]))[0]) // 4: label for v, label in zip(y_ticks, y_labels)}
    legend = [(s.label, s.style) for _, s in points if s.label]
    for row in range(canvas_rows):
        label = tick_rows.get(row)
        out.append((label or "").rjust(margin - 1) + (" ┤" if label else " │"), AXIS_STYLE)
        line = cells[row]
        owners = owner[row]
        start = 0
        while start < columns:  # one span per run of cells drawn by the same series
            end = start + 1
            while end < columns and owners[end] == owners[start]:
                end += 1
            chunk = "".join(_BRAILLE[b] for b in line[start:end])
            out.append(chunk, styles[owners[start]] if owners[start] >= 0 else None)
            start = end
        if row < len(legend):  # legend at the top right, over the canvas
            name, style = legend[row]
            tag = f" ▬ {name[:max(1, columns // 2)]} "
            out.right_crop(len(tag))
            out.append(tag, style)
        out.append("\n")

    x_ticks = nice_ticks(x_low, x_high, max(1, columns // 12))
    if integer_x:  # no step 2.5: whole ticks only
        x_ticks = [t for t in x_ticks if float(t).is_integer()] or [float(round(x_low))]
    x_step = x_ticks[1] - x_ticks[0] if len(x_ticks) > 1 else abs(x_high - x_low) or 1.0
    axis = ["─"] * columns
    labels = [" "] * (columns + margin + 2)
    for value in x_ticks:
        column = int(to_dot_x(np.array([value]))[0]) // 2
        axis[column] = "┬"
        text = tick_label(value, x_step)
        begin = min(max(0, margin + 1 + column - len(text) // 2), len(labels) - len(text))
        if all(c == " " for c in labels[max(0, begin - 1):begin + len(text) + 1]):
            labels[begin:begin + len(text)] = text
    out.append(" " * (margin - 1) + " └" + "".join(axis) + "\n", AXIS_STYLE)
    tick_line = "".join(labels).rstrip()
    if x_label and len(tick_line) + len(x_label) + 2 <= width:
        tick_line = tick_line.ljust(width - len(x_label)) + x_label
    elif x_unit:
        while tick_line and len(tick_line) + len(x_unit) + 2 > width:  # drop whole tick labels, never cut one
            tick_line = tick_line[:tick_line.rstrip().rfind(" ") + 1].rstrip() if " " in tick_line.strip() else ""
        tick_line = tick_line.ljust(width - len(x_unit)) + x_unit
    out.append(tick_line, AXIS_STYLE)
    return out
