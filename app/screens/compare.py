"""Compare 2–8 runs: a grid of plots with every run overlaid on each (a stable colour per run), the same metric
filter, log-y, cursor, zoom and export as a run's curves, and a config diff of only the keys that differ.
Colours follow run id order, so the same selection always draws the same way."""

from __future__ import annotations

from typing import Any, Optional

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from app.screens.base import KrlScreen
from app.screens.focus import leave_text_box
from app.screens.loaders import compare_configs, default_curve_keys
from app.screens.messages import ComparedRunsLoaded, SeriesLoaded
from app.screens.view_data import load_series_range
from app.widgets.curves_panel import SMOOTHING_STEP, CurvesPanel, RunLine, ZoomSeriesLoaded
from app.widgets.format import theme_colour
from app.widgets.key_bar import KeyBar

MAX_RUNS = 8


class CompareScreen(KrlScreen):
    # Below 110 columns the metric picker narrows so two plots abreast keep whole titles (issue 26 item 9).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    BINDINGS = [
        Binding("escape", "back", "Back", id="compare.back"),
        Binding("slash", "search", "Filter metrics", id="compare.search"),
        Binding("x", "toggle_x", "x: step/time", id="compare.x_axis"),
        Binding("right_square_bracket", "smoothing(1)", "Smoother", id="compare.smooth_more"),
        Binding("left_square_bracket", "smoothing(-1)", "Rougher", show=False, id="compare.smooth_less"),
        Binding("y", "log_y", "Log y", id="compare.log_y"),
        Binding("full_stop", "cursor(1)", "Cursor →", id="compare.cursor_next"),
        Binding("comma", "cursor(-1)", "Cursor ←", show=False, id="compare.cursor_prev"),
        Binding("plus,equals_sign", "zoom(0.5)", "Zoom x", id="compare.zoom_in"),
        Binding("minus", "zoom(2)", "Unzoom", show=False, id="compare.zoom_out"),
        Binding("0", "zoom(0)", "Reset zoom", show=False, id="compare.zoom_reset"),
        Binding("e", "export", "Export", id="compare.export"),
        Binding("b", "bands", "Groups: mean ± std", id="compare.bands"),
    ]

    def __init__(self, run_ids: list[int], groups: Optional[dict[str, list[int]]] = None) -> None:
        super().__init__()
        self.run_ids = sorted(run_ids)[:MAX_RUNS]
        # The runs table's groups among these runs; one with 2+ runs draws as its mean ± std (b: runs again).
        self.groups = {label: [i for i in ids if i in self.run_ids] for label, ids in (groups or {}).items()}
        self.groups = {label: ids for label, ids in self.groups.items() if ids}
        self.runs: list[dict[str, Any]] = []
        self.keys: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static(id="compare-legend")
        yield CurvesPanel(id="compare-curves")
        yield Static("config: keys that differ", classes="section-title")
        yield DataTable(id="config-diff", zebra_stripes=True)
        yield KeyBar()

    def on_mount(self) -> None:
        self.load_runs()

    def colour_of(self, run_id: int) -> str:
        return f"series-{self.run_ids.index(run_id) + 1}"

    @property
    def panel(self) -> CurvesPanel:
        return self.query_one("#compare-curves", CurvesPanel)

    # ---------------------------------------------------------------- workers

    @work(thread=True, exclusive=True, group="compare-runs", exit_on_error=False)
    def load_runs(self) -> None:
        reg = self.app.registry("compare")
        runs = [reg.get_run(run_id) for run_id in self.run_ids]
        keys = sorted(set().union(*(reg.metric_keys(r["id"]) for r in runs)))
        self.post_message(ComparedRunsLoaded(runs, {"keys": keys, "diff": compare_configs([r["config"] for r in runs])}))

    @work(thread=True, group="compare-series", exit_on_error=False)
    def load_metrics(self, keys: list[str], max_points: int, step_range: Optional[tuple[int, int]] = None) -> None:
        reg = self.app.registry("compare")
        per_run = {run_id: load_series_range(reg, run_id, keys, max_points, step_range) for run_id in self.run_ids}
        series = {key: {run_id: per_run[run_id][key] for run_id in self.run_ids} for key in keys}
        self.post_message(SeriesLoaded(series) if step_range is None else ZoomSeriesLoaded(series, step_range))

    # ---------------------------------------------------------------- messages

    def on_compared_runs_loaded(self, message: ComparedRunsLoaded) -> None:
        self.runs = message.rows
        self.keys = message.extra["keys"]
        panel = self.panel
        panel.runs = [RunLine(run["id"], run["name"], self.colour_of(run["id"])) for run in self.runs]
        panel.groups = self.groups
        panel.bands = any(len(ids) > 1 for ids in self.groups.values())
        panel.set_run_segments({run["id"]: run.get("segments") or [] for run in self.runs})
        self._show_legend()
        panel.remember(f"{self.app.workspace}#compare#{','.join(map(str, self.run_ids))}")
        panel.set_keys(self.keys, default_curve_keys(self.keys, 4))
        table = self.query_one("#config-diff", DataTable)
        table.clear(columns=True)
        table.add_column("key", key="key")
        for run in self.runs:
            table.add_column(Text(run["name"], style=theme_colour(self.app, self.colour_of(run["id"]))), key=str(run["id"]))
        diff = message.extra["diff"]
        if not diff:
            table.add_row("(configs are identical)", *["" for _ in self.runs])
        for key, values in diff.items():
            table.add_row(key, *[("–" if v is None else str(v)) for v in values])
        self.query_one("#compare-curves #metric-list").focus()

    @on(CurvesPanel.Wanted)
    def _wanted(self, message: CurvesPanel.Wanted) -> None:
        self.load_metrics(message.keys, message.max_points, message.step_range)

    def on_series_loaded(self, message: SeriesLoaded) -> None:
        self.panel.show_series(message.series)

    def on_zoom_series_loaded(self, message: ZoomSeriesLoaded) -> None:
        self.panel.show_series(message.series, message.step_range)

    # ---------------------------------------------------------------- actions

    def action_back(self) -> None:
        if not leave_text_box(self, self.query_one("#compare-curves #metric-list")):
            self.app.pop_screen()

    def action_search(self) -> None:
        self.query_one("#compare-curves #metric-filter").focus()

    def action_toggle_x(self) -> None:
        self.panel.toggle_x_axis()

    def action_smoothing(self, direction: int) -> None:
        self.panel.adjust_smoothing(direction * SMOOTHING_STEP)

    def action_log_y(self) -> None:
        self.panel.toggle_log_y()

    def action_cursor(self, direction: int) -> None:
        self.panel.move_cursor(direction)

    def action_zoom(self, factor: float) -> None:
        self.panel.zoom(factor)

    def _show_legend(self) -> None:
        """Each run's colour and name, or with bands on each group's (the colour of its first run)."""
        legend = Text()
        if self.panel.bands:
            names = {run["id"]: run["name"] for run in self.runs}
            for label, ids in self.groups.items():
                legend.append("━━ ", style=theme_colour(self.app, self.colour_of(ids[0])))
                legend.append(f"{label}: mean ± std of {', '.join(names.get(i, str(i)) for i in ids)}   ")
        else:
            for run in self.runs:
                legend.append("━━ ", style=theme_colour(self.app, self.colour_of(run["id"])))
                legend.append(f"{run['name']} ({run['status']})   ")
        if self.panel.run_segments:
            legend.append("┊ dotted: where a run was resumed", style="dim")
        self.query_one("#compare-legend", Static).update(legend)

    def action_bands(self) -> None:
        if not any(len(ids) > 1 for ids in self.groups.values()):
            self.notify("no group of 2+ runs here: group the runs table first (g), select runs, then c",
                        severity="warning")
            return
        self.panel.bands = not self.panel.bands
        self._show_legend()
        self.panel.refresh_plots()

    def action_export(self) -> None:
        from app.widgets.export import export_view

        try:
            self.last_export = export_view(self.app, self.panel.plots(), "compare-" + "-".join(r["name"] for r in self.runs))
        except OSError as exc:
            self.notify(f"export failed: {exc}", severity="error")
            return
        self.notify(f"exported {len(self.last_export)} files to {self.last_export[0].parent}")
