"""Export what a view shows: each plot as an SVG of its own drawing, the plotted series as one CSV (raw and smoothed
values, by run and x), each plot as a PNG of its drawing (app/widgets/png.py, labels included), and the whole screen as
an SVG through Textual's screenshot."""

from __future__ import annotations

import csv
import io
import re
import time
from pathlib import Path
from typing import Iterable, Sequence

from rich.console import Console

from app.widgets.reward_plot import RewardPlot, debiased_ema


def export_folder(workspace: Path) -> Path:
    """<workspace>/exports, created on demand."""
    folder = Path(workspace) / "exports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def safe_stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "view"


def stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def write_series_csv(path: Path, plots: Sequence[RewardPlot], run_name: str = "") -> int:
    """One row per plotted point: metric, run, x, raw value, smoothed value (as drawn). Returns the rows written.
    run_name: the run of a single run's plots (their curves carry no run of their own)."""
    rows = 0
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["metric", "run", "x", "x_label", "value", "smoothed"])
        for plot in plots:
            for curve in plot.curves:
                smoothed = debiased_ema(curve.ys, plot.view.smoothing)
                for x, y, s in zip(curve.xs, curve.ys, smoothed):
                    writer.writerow([plot.plot_title, curve.run or run_name, x, plot.view.x_label, y, s])
                    rows += 1
    return rows


def write_plot_svgs(folder: Path, stem: str, plots: Iterable[RewardPlot]) -> list[Path]:
    """Each plot's current drawing as its own SVG (the braille figure in the theme's colours)."""
    paths = []
    for plot in plots:
        figure = plot.export_figure()
        console = Console(record=True, width=max(20, plot.size.width), file=io.StringIO(), color_system="truecolor")
        console.print(figure)
        path = folder / f"{stem}-{safe_stem(plot.plot_title)}.svg"
        path.write_text(console.export_svg(title=plot.plot_title))
        paths.append(path)
    return paths


PNG_SCALE = 2


def write_plot_pngs(folder: Path, stem: str, plots: Iterable[RewardPlot], background: tuple[int, int, int],
                    foreground: tuple[int, int, int]) -> list[Path]:
    """Each plot's current drawing as a PNG at twice its pixel size: dots, axes, title, tick labels and legend in the
    theme's colours."""
    from app.widgets.png import plot_pixels, upscale, write_png

    paths = []
    for plot in plots:
        width, height, rows = upscale(*plot_pixels(plot.export_figure(), background, foreground), PNG_SCALE)
        paths.append(write_png(folder / f"{stem}-{safe_stem(plot.plot_title)}.png", width, height, rows))
    return paths


def theme_rgb(app, variable: str, fallback: tuple[int, int, int]) -> tuple[int, int, int]:
    from textual.color import Color

    try:
        colour = Color.parse(app.theme_variables.get(variable) or "")
    except Exception:
        return fallback
    return (colour.r, colour.g, colour.b)


def export_view(app, plots: Sequence[RewardPlot], name: str, run_name: str = "") -> list[Path]:
    """Screen SVG + one SVG and one PNG per plot + the series CSV under <workspace>/exports; the files written."""
    folder = export_folder(app.workspace)
    stem = f"{safe_stem(name)}-{stamp()}"
    written = [Path(app.save_screenshot(filename=f"{stem}-screen.svg", path=str(folder)))]
    if plots:
        written += write_plot_svgs(folder, stem, plots)
        written += write_plot_pngs(folder, stem, plots, theme_rgb(app, "background", (30, 30, 30)),
                                   theme_rgb(app, "foreground", (220, 220, 220)))
        csv_path = folder / f"{stem}-series.csv"
        write_series_csv(csv_path, plots, run_name)
        written.append(csv_path)
    return written
