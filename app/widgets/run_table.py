"""The runs table: one row per run with a live status glyph, sparklines and a selection mark for compare.
It only renders what the runs screen hands it; updates touch changed cells instead of rebuilding."""

from __future__ import annotations

from typing import Optional, Sequence

from rich.text import Text
from textual.widgets import DataTable

from app.screens.loaders import RunRow
from app.widgets.format import STATUS_COLOUR, fmt_duration, fmt_float, fmt_speedup, status_glyph, theme_colour
from app.widgets.sparkline import sparkline_text

COLUMNS = (("sel", " "), ("name", "name"), ("status", "status"), ("kind", "kind"), ("model", "model"),
           ("backend", "backend"), ("step", "step/total"), ("reward", "reward"), ("correct", "correct"),
           ("best", "best"), ("elapsed", "elapsed"), ("gpus", "gpus"), ("tags", "tags"))
SORT_KEYS = ("created", "name", "status", "step", "reward", "correct", "best", "elapsed")


def elapsed_s(row: RunRow, now: float) -> Optional[float]:
    if row.started_at is None:
        return None
    end = row.ended_at if row.status not in ("running", "stopping") and row.ended_at else now
    return end - row.started_at


class RunTable(DataTable):
    """DataTable of RunRows keyed by run id."""

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._keys: list[str] = []
        self._cells: dict[str, tuple] = {}

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    @property
    def current_run_id(self) -> Optional[int]:
        if not self._keys or self.cursor_row < 0 or self.cursor_row >= len(self._keys):
            return None
        return int(self._keys[self.cursor_row])

    def _cells_for(self, row: RunRow, spark: tuple[list[float], list[float]], selected: bool, tick: int,
                   now: float) -> tuple:
        colour = theme_colour(self.app, STATUS_COLOUR.get(row.status, "foreground"))
        muted = theme_colour(self.app, "foreground-muted")
        step = "–" if row.step is None else str(row.step + 1)
        total = "?" if row.total_steps is None else str(row.total_steps)
        reward_spark, correct_spark = spark
        gpus = ",".join(map(str, row.gpus)) if row.gpus else (f"({row.gpus_requested})" if row.gpus_requested else "–")
        return (
            Text("●" if selected else " ", style=theme_colour(self.app, "accent")),
            Text(row.name, style="bold" if row.status == "running" else ""),
            Text(f"{status_glyph(row.status, tick)} {row.status}", style=colour),
            row.kind,
            Text(row.model[-18:], style=muted) if row.model else "",
            row.backend,
            f"{step}/{total}",
            Text.assemble(f"{fmt_float(row.reward):>6} ", (sparkline_text(reward_spark, 8), colour)),
            Text.assemble(f"{fmt_float(row.correct):>5} ", (sparkline_text(correct_spark, 8), colour)),
            fmt_speedup(row.best_speedup),
            fmt_duration(elapsed_s(row, now)),
            gpus,
            Text(" ".join(row.tags), style=muted),
        )

    def show(self, rows: Sequence[RunRow], sparks: dict[int, tuple[list[float], list[float]]], selected: set[int],
             ticks: dict[int, int], now: float) -> None:
        """Render rows in order; same row order → update only the cells that changed."""
        keys = [str(r.id) for r in rows]
        cells = {str(r.id): self._cells_for(r, sparks.get(r.id, ([], [])), r.id in selected, ticks.get(r.id, 0), now)
                 for r in rows}
        if keys == self._keys:
            for key in keys:
                old, new = self._cells.get(key), cells[key]
                if old == new:
                    continue
                for index, (column, _) in enumerate(COLUMNS):
                    if old is None or old[index] != new[index]:
                        self.update_cell(key, column, new[index])
        else:
            current = self.current_run_id
            self.clear()
            for key in keys:
                self.add_row(*cells[key], key=key)
            if current is not None and str(current) in keys:
                self.move_cursor(row=keys.index(str(current)), animate=False)
        self._keys, self._cells = keys, cells
