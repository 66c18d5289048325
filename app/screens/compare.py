"""Compare 2–8 runs: one metric overlaid with a stable colour per run, and a config diff of only the keys
that differ. Colours follow run id order, so the same selection always draws the same way."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Select, Static

from app.screens.base import KrlScreen
from app.widgets.key_bar import KeyBar
from app.screens.loaders import compare_configs, default_curve_keys, load_series
from app.screens.messages import SeriesLoaded, TableLoaded
from app.widgets.format import theme_colour
from app.widgets.reward_plot import Curve, RewardPlot

MAX_RUNS = 8


class CompareScreen(KrlScreen):
    BINDINGS = [
        Binding("escape", "back", "Back", id="compare.back"),
        Binding("m", "next_metric", "Next metric", id="compare.metric"),
        Binding("x", "toggle_x", "x: step/time", id="compare.x_axis"),
        Binding("right_square_bracket", "smoothing(1)", "Smoother", id="compare.smooth_more"),
        Binding("left_square_bracket", "smoothing(-1)", "Rougher", id="compare.smooth_less"),
    ]

    def __init__(self, run_ids: list[int]) -> None:
        super().__init__()
        self.run_ids = sorted(run_ids)[:MAX_RUNS]
        self.runs: list[dict[str, Any]] = []
        self.keys: list[str] = []
        self.metric = ""
        self.smoothing = 0.6
        self.x_axis = "step"
        self._series: dict[int, Any] = {}

    def compose(self) -> ComposeResult:
        yield Static(id="compare-legend")
        with Horizontal(id="compare-top"):
            yield Select([], prompt="metric", id="compare-metric", allow_blank=True)
            yield Static(id="compare-status")
        yield RewardPlot(id="compare-plot")
        yield Static("config: keys that differ", classes="section-title")
        yield DataTable(id="config-diff", zebra_stripes=True)
        yield KeyBar()

    def on_mount(self) -> None:
        self.load_runs()

    def colour_of(self, run_id: int) -> str:
        return f"series-{self.run_ids.index(run_id) + 1}"

    # ---------------------------------------------------------------- workers

    @work(thread=True, exclusive=True, group="compare-runs", exit_on_error=False)
    def load_runs(self) -> None:
        reg = self.app.registry("compare")
        runs = [reg.get_run(run_id) for run_id in self.run_ids]
        keys = sorted(set().union(*(reg.metric_keys(r["id"]) for r in runs)))
        self.post_message(TableLoaded("runs", runs, {"keys": keys, "diff": compare_configs([r["config"] for r in runs])}))

    @work(thread=True, exclusive=True, group="compare-series", exit_on_error=False)
    def load_metric(self, key: str, max_points: int) -> None:
        reg = self.app.registry("compare")
        series = {str(run_id): load_series(reg, run_id, [key], max_points)[key] for run_id in self.run_ids}
        self.post_message(SeriesLoaded(series))

    # ---------------------------------------------------------------- messages

    def on_table_loaded(self, message: TableLoaded) -> None:
        self.runs = message.rows
        self.keys = message.extra["keys"]
        legend = Text()
        for run in self.runs:
            legend.append("━━ ", style=theme_colour(self.app, self.colour_of(run["id"])))
            legend.append(f"{run['name']} ({run['status']})   ")
        self.query_one("#compare-legend", Static).update(legend)
        select = self.query_one("#compare-metric", Select)
        defaults = default_curve_keys(self.keys, 1)
        with select.prevent(Select.Changed):
            select.set_options([(k, k) for k in self.keys])
            if defaults:
                select.value = defaults[0]
        self._choose(defaults[0] if defaults else "")
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

    def on_series_loaded(self, message: SeriesLoaded) -> None:
        self._series = {int(k): v for k, v in message.series.items()}
        self._draw()

    # ---------------------------------------------------------------- drawing

    def _choose(self, key: str) -> None:
        self.metric = key
        plot = self.query_one(RewardPlot)
        plot.plot_title = key
        if key:
            self.load_metric(key, max(50, plot.size.width or 100))
        self._status()

    def _draw(self) -> None:
        curves = []
        for run in self.runs:
            series = self._series.get(run["id"])
            if series is None:
                continue
            if self.x_axis == "time" and series.wall_times:
                xs = [(w - series.wall_times[0]) / 60 for w in series.wall_times]
            else:
                xs = list(series.steps)
            curves.append(Curve(run["name"], xs, series.values, self.colour_of(run["id"])))
        self.query_one(RewardPlot).draw(curves, self.smoothing, "minutes since start" if self.x_axis == "time" else "step")
        self._status()

    def _status(self) -> None:
        self.query_one("#compare-status", Static).update(
            f"  {len(self.run_ids)} runs · smoothing {self.smoothing:.2f} · x: {self.x_axis} · m next metric")

    @on(Select.Changed, "#compare-metric")
    def _metric_changed(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL:
            self._choose(str(event.value))

    # ---------------------------------------------------------------- actions

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_next_metric(self) -> None:
        if self.keys:
            index = (self.keys.index(self.metric) + 1) % len(self.keys) if self.metric in self.keys else 0
            select = self.query_one("#compare-metric", Select)
            with select.prevent(Select.Changed):
                select.value = self.keys[index]
            self._choose(self.keys[index])

    def action_toggle_x(self) -> None:
        self.x_axis = "time" if self.x_axis == "step" else "step"
        self._draw()

    def action_smoothing(self, direction: int) -> None:
        self.smoothing = round(min(0.99, max(0.0, self.smoothing + 0.1 * direction)), 2)
        self._draw()
