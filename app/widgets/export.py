"""Export what a view shows: each plot as an SVG of its own drawing, the plotted series as one CSV (raw and smoothed
values, by run and x), and the whole screen as an SVG through Textual's screenshot. PNG is not offered."""

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
        figure = plot.render()
        console = Console(record=True, width=max(20, plot.size.width), file=io.StringIO(), color_system="truecolor")
        console.print(figure)
        path = folder / f"{stem}-{safe_stem(plot.plot_title)}.svg"
        path.write_text(console.export_svg(title=plot.plot_title))
        paths.append(path)
    return paths


def export_view(app, plots: Sequence[RewardPlot], name: str, run_name: str = "") -> list[Path]:
    """Screen SVG + one SVG per plot + the series CSV under <workspace>/exports; returns the files written."""
    folder = export_folder(app.workspace)
    stem = f"{safe_stem(name)}-{stamp()}"
    written = [Path(app.save_screenshot(filename=f"{stem}-screen.svg", path=str(folder)))]
    if plots:
        written += write_plot_svgs(folder, stem, plots)
        csv_path = folder / f"{stem}-series.csv"
        write_series_csv(csv_path, plots, run_name)
        written.append(csv_path)
    return written
