"""The Curves tab: a metric picker (regex filter + checkboxes) beside a grid of RewardPlots.
It asks for data with a message (keys, points wanted); the screen's worker answers with `show_series`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, SelectionList, Static

from app.screens.loaders import Series
from app.widgets.reward_plot import Curve, RewardPlot

SMOOTHING_STEP = 0.1
MAX_PLOTS = 12
# Live runs redraw their plots at most this often: each redraw rebuilds every plot, and a run writing a step a
# second would otherwise keep a core busy.
LIVE_REFRESH_S = 2.0


def points_for_width(grid_width: int) -> int:
    """Points worth fetching per curve for a plot grid this wide: two per braille column of one plot."""
    return max(50, 2 * (grid_width // 2 - 8))


def plot_id(key: str) -> str:
    return "plot-" + re.sub(r"[^A-Za-z0-9_-]", "_", key)


class CurvesPanel(Horizontal):
    """Picker + plots for one run."""

    @dataclass
    class Wanted(Message):
        keys: list[str]
        max_points: int

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.all_keys: list[str] = []
        self.selected: list[str] = []
        self.smoothing = 0.6
        self.x_axis = "step"
        self._series: dict[str, Series] = {}
        self._total_points = 0
        self._user_chose = False
        self._last_refresh = 0.0
        self._refresh_pending = False  # once the user picks metrics, new keys no longer change the selection

    def compose(self) -> ComposeResult:
        with Vertical(id="metric-picker"):
            yield Input(placeholder="filter metrics (regex)", id="metric-filter")
            yield SelectionList[str](id="metric-list")
        with Vertical(id="plots-area"):
            yield Static(id="curve-status")
            yield VerticalScroll(id="plot-grid")

    # ---------------------------------------------------------------- data in

    def set_keys(self, keys: Sequence[str], selected: Sequence[str]) -> None:
        if list(keys) == self.all_keys and (self.selected or self._user_chose):
            return
        self.all_keys = list(keys)
        if not self.selected and not self._user_chose:
            self.selected = [k for k in selected if k in keys]
        self._fill_list(self.query_one("#metric-filter", Input).value)
        self._sync_plots()

    def show_series(self, series: dict[str, Series], total_points: int = 0) -> None:
        changed = {key for key, value in series.items() if self._series.get(key) != value}
        self._series.update(series)
        self._total_points = total_points
        if changed:
            self._redraw(only=changed)

    # ---------------------------------------------------------------- controls

    def adjust_smoothing(self, delta: float) -> None:
        self.smoothing = round(min(0.99, max(0.0, self.smoothing + delta)), 2)
        self._redraw()

    def toggle_x_axis(self) -> None:
        self.x_axis = "time" if self.x_axis == "step" else "step"
        self._redraw()

    def plot_width(self) -> int:
        """Points worth fetching per curve: two per braille column of one plot (plots sit two abreast)."""
        grid = self.query_one("#plot-grid")
        # Before the first layout the grid has no size; estimate from the screen (minus the metric picker).
        width = grid.size.width or max(40, self.app.size.width - 36)
        return points_for_width(width)

    # ---------------------------------------------------------------- internals

    def _fill_list(self, pattern: str) -> None:
        try:
            regex = re.compile(pattern, re.IGNORECASE)
            self.query_one("#metric-filter", Input).remove_class("-invalid")
        except re.error:
            self.query_one("#metric-filter", Input).add_class("-invalid")
            return
        listing = self.query_one("#metric-list", SelectionList)
        with listing.prevent(SelectionList.SelectedChanged):
            listing.clear_options()
            listing.add_options([(k, k, k in self.selected) for k in self.all_keys if regex.search(k)])

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "metric-filter":
            event.stop()
            self._fill_list(event.value)

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        event.stop()
        listing = event.selection_list
        visible = {str(listing.get_option_at_index(i).value) for i in range(listing.option_count)}
        chosen = set(event.selection_list.selected)
        self._user_chose = True
        # Keys hidden by the filter keep their state; visible ones follow the checkboxes.
        self.selected = [k for k in self.all_keys if k in chosen or (k in self.selected and k not in visible)]
        self._sync_plots()

    def _sync_plots(self) -> None:
        grid = self.query_one("#plot-grid", VerticalScroll)
        wanted = self.selected[:MAX_PLOTS]
        existing = {p.id: p for p in grid.query(RewardPlot)}
        wanted_ids = [plot_id(k) for k in wanted]
        for pid, plot in existing.items():
            if pid not in wanted_ids:
                plot.remove()
        missing = [k for k in wanted if plot_id(k) not in existing]
        if missing:
            grid.mount_all([RewardPlot(title=k, id=plot_id(k), classes="curve-plot") for k in missing])
        need = [k for k in wanted if k not in self._series]
        if need:
            self.post_message(self.Wanted(need, self.plot_width()))
        self._redraw()

    def refresh_data(self) -> None:
        """Ask again for every shown key (new steps arrived), at most once per LIVE_REFRESH_S."""
        import time

        if not self.selected or self._refresh_pending:
            return
        wait_s = self._last_refresh + LIVE_REFRESH_S - time.monotonic()
        if wait_s > 0:
            self._refresh_pending = True
            self.set_timer(wait_s, self._refresh_now)
            return
        self._refresh_now()

    def _refresh_now(self) -> None:
        import time

        self._refresh_pending = False
        self._last_refresh = time.monotonic()
        self.post_message(self.Wanted(self.selected[:MAX_PLOTS], self.plot_width()))

    def _redraw(self, only: set[str] | None = None) -> None:
        shown = 0
        for key in self.selected[:MAX_PLOTS]:
            series = self._series.get(key)
            if series is not None:
                shown += len(series.steps)
            if only is not None and key not in only:
                continue
            try:
                plot = self.query_one(f"#{plot_id(key)}", RewardPlot)
            except Exception:
                continue
            if series is None:
                continue
            if self.x_axis == "time" and series.wall_times:
                start = series.wall_times[0]
                xs = [(w - start) / 60 for w in series.wall_times]
                label = "minutes since start"
            else:
                xs, label = list(series.steps), "step"
            plot.draw([Curve(key, xs, series.values, "primary")], self.smoothing, label)
        extra = f" · {len(self.selected) - MAX_PLOTS} more selected (showing {MAX_PLOTS})" \
            if len(self.selected) > MAX_PLOTS else ""
        self.query_one("#curve-status", Static).update(Text(
            f"smoothing {self.smoothing:.2f} ([/] adjust) · x: {self.x_axis} (x toggles) · "
            f"{len(self.selected)} of {len(self.all_keys)} metrics · {shown} points drawn{extra}"))
