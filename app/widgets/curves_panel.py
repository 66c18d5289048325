"""The curves view: a metric picker (glob or regex filter + checkboxes) beside a grid of RewardPlots, one run or
several overlaid (compare). It asks for data with a message (keys, points wanted) and the screen's worker answers
with `show_series`; log-y, cursor, x zoom and the choices a person made are kept here (and remembered per run)."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, SelectionList, Static

from app.screens.loaders import Series
from app.widgets.metric_filter import metric_matcher
from app.widgets.reward_plot import Curve, PlotView, RewardPlot
from themes.settings import load_settings, save_setting

SMOOTHING_STEP = 0.1
MAX_PLOTS = 12
# Live runs redraw their plots at most this often: each redraw rebuilds every plot, and a run writing a step a
# second would otherwise keep a core busy.
LIVE_REFRESH_S = 2.0
SETTINGS_KEY = "curves"  # settings.json: {"curves": {"<workspace>#<run id>": {...choices...}}}
MAX_REMEMBERED = 300
SINGLE = 0  # the run id under which a one-run panel keeps its series


def points_for_width(grid_width: int) -> int:
    """Points worth fetching per curve for a plot grid this wide: two per braille column of one plot."""
    return max(50, 2 * (grid_width // 2 - 8))


def segment_starts(segments: Sequence[dict[str, Any]]) -> list[tuple[int, float]]:
    """(start step, start time) of every segment after a run's first: where it was resumed."""
    return [(int(s.get("start_step") or 0), float(s.get("started_at") or 0.0)) for s in segments[1:]
            if isinstance(s, dict)]


def plot_id(key: str) -> str:
    return "plot-" + re.sub(r"[^A-Za-z0-9_-]", "_", key)


@dataclass
class RunLine:
    """One run drawn in the panel: its id, the label in legends and its theme colour variable."""

    run_id: int
    label: str
    colour: str


def load_choices(remember_as: Optional[str]) -> dict[str, Any]:
    if not remember_as:
        return {}
    saved = (load_settings().get(SETTINGS_KEY) or {}).get(remember_as)
    return saved if isinstance(saved, dict) else {}


def save_choices(remember_as: Optional[str], choices: dict[str, Any]) -> None:
    if not remember_as:
        return
    remembered = dict(load_settings().get(SETTINGS_KEY) or {})
    remembered.pop(remember_as, None)
    remembered[remember_as] = choices  # newest last: the oldest are dropped beyond MAX_REMEMBERED
    save_setting(SETTINGS_KEY, dict(list(remembered.items())[-MAX_REMEMBERED:]))


@dataclass
class ZoomSeriesLoaded(Message):
    """A screen worker's answer to a zoom's Wanted: {key: Series or {run id: Series}} for that step range."""

    series: dict[str, Any]
    step_range: tuple[int, int]


class CurvesPanel(Horizontal):
    """Picker + plots. `runs` set: several runs overlaid on every plot; empty: one run."""

    @dataclass
    class Wanted(Message):
        keys: list[str]
        max_points: int
        step_range: Optional[tuple[int, int]] = None  # a zoom: only these steps, at full plot resolution

    def __init__(self, runs: Sequence[RunLine] = (), only: str = "", remember_as: Optional[str] = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.runs = list(runs)
        self.only = re.compile(only) if only else None  # a fixed key filter (the system tab: ^system/)
        self.remember_as = remember_as
        self.all_keys: list[str] = []
        self.selected: list[str] = []
        self.filter_text = ""
        self.smoothing = 0.6
        self.x_axis = "step"
        self.log_y = False
        self.x_range: Optional[tuple[float, float]] = None
        self.cursor_x: Optional[float] = None
        self._series: dict[str, dict[int, Series]] = {}
        # Series read again for the zoomed step range (a long run's overview has too few points inside a zoom).
        self._zoom_series: dict[str, dict[int, Series]] = {}
        self._zoom_for: Optional[tuple[int, int]] = None
        self._user_chose = False  # once the user picks metrics, new keys no longer change the selection
        self._restored = False
        self._last_refresh = 0.0
        self._refresh_pending = False
        self.segment_starts: list[tuple[int, float]] = []  # (start step, start time) of each resumed segment
        self.run_segments: dict[int, list[tuple[int, float]]] = {}  # the same per run, where several are overlaid
        # Groups of the runs table ({label: run ids}); with bands on, each draws as mean ± std instead of its runs.
        self.groups: dict[str, list[int]] = {}
        self.bands = False

    def compose(self) -> ComposeResult:
        with Vertical(classes="metric-picker"):
            yield Input(placeholder="filter: glob (env/*/reward*) or regex", id="metric-filter")
            yield SelectionList[str](id="metric-list")
        with Vertical(classes="plots-area"):
            yield Static(id="curve-status", classes="curve-status")
            yield VerticalScroll(id="plot-grid", classes="plot-grid")

    # ---------------------------------------------------------------- data in

    def remember(self, remember_as: str) -> None:
        """Choose where this panel's choices are kept (once the run is known), and restore them."""
        if self.remember_as == remember_as and self._restored:
            return
        self.remember_as = remember_as
        self._restored = True
        saved = load_choices(remember_as)
        if not saved:
            return
        self.smoothing = float(saved.get("smoothing", self.smoothing))
        self.x_axis = saved.get("x_axis", self.x_axis) if saved.get("x_axis") in ("step", "time") else "step"
        self.log_y = bool(saved.get("log_y", False))
        self.filter_text = str(saved.get("filter", ""))
        if isinstance(saved.get("selected"), list):
            self.selected = [str(k) for k in saved["selected"]]
            self._user_chose = True
        box = self.query_one("#metric-filter", Input)
        with box.prevent(Input.Changed):
            box.value = self.filter_text

    def set_keys(self, keys: Sequence[str], selected: Sequence[str]) -> None:
        if not self.query("#metric-list"):
            # Keys can come before this panel's children are mounted (a tab set up on idle, seen in a clean-clone
            # test run as NoMatches on #metric-filter): set them once the children are there.
            self.call_after_refresh(self.set_keys, list(keys), list(selected))
            return
        keys = [k for k in keys if self.only is None or self.only.search(k)]
        if keys == self.all_keys and (self.selected or self._user_chose):
            return
        self.all_keys = list(keys)
        if not self.selected and not self._user_chose:
            defaults = [k for k in selected if k in keys]
            self.selected = defaults if defaults or self.only is None else keys[:MAX_PLOTS]
        self._fill_list(self.filter_text)
        self._sync_plots()

    def set_segments(self, segments: Sequence[dict[str, Any]]) -> None:
        """A run's segments (its row's `segments`): every one after the first is marked on the plots."""
        starts = segment_starts(segments)
        if starts != self.segment_starts:
            self.segment_starts = starts
            if self.query("#plot-grid"):  # not before the children are mounted
                self._redraw()

    def set_run_segments(self, segments_by_run: dict[int, Sequence[dict[str, Any]]]) -> None:
        """Several runs' segments ({run id: its row's `segments`}): each resumed run's are marked in its colour."""
        self.run_segments = {run_id: starts for run_id, segments in segments_by_run.items()
                             if (starts := segment_starts(segments))}
        if self.query("#plot-grid"):
            self._redraw()

    def _origin(self, run_id: Optional[int] = None) -> Optional[float]:
        """The first logged wall time of one run (or of any run), from the series held: time x is measured from it."""
        origins = [s.wall_times[0] for per_run in self._series.values() for key, s in per_run.items()
                   if s.wall_times and (run_id is None or key == run_id)]
        return min(origins) if origins else None

    def _markers(self) -> tuple[float | tuple[float, str], ...]:
        """Segment starts in the x axis's units: the step, or minutes since the run's first logged point; where
        several runs are overlaid, each in its run's colour (its group's, when groups draw as bands)."""
        if not self.runs:
            origin = self._origin() if self.x_axis == "time" else 0.0
            if origin is None:
                return ()
            return tuple(float(step) if self.x_axis == "step" else (wall - origin) / 60
                         for step, wall in self.segment_starts)
        colours = {line.run_id: line.colour for line in self.runs}
        if self.bands and self.groups:
            for ids in self.groups.values():
                for run_id in ids:
                    colours[run_id] = colours.get(ids[0], colours.get(run_id, "primary"))
        out: list[tuple[float, str]] = []
        for run_id, starts in self.run_segments.items():
            origin = self._origin(run_id) if self.x_axis == "time" else 0.0
            if run_id not in colours or origin is None:
                continue
            out += [(float(step) if self.x_axis == "step" else (wall - origin) / 60, colours[run_id])
                    for step, wall in starts]
        return tuple(out)

    def show_series(self, series: dict[str, Any], step_range: Optional[tuple[int, int]] = None) -> None:
        """{key: Series} for a one-run panel, or {key: {run id: Series}} for several runs; `step_range`: the data
        of a zoom (kept apart from the overview, dropped when the zoom changes)."""
        store = self._series
        if step_range is not None:
            if step_range != self._zoom_for:
                return  # the zoom moved on since this was asked for
            store = self._zoom_series
        changed = set()
        for key, value in series.items():
            per_run = {SINGLE: value} if isinstance(value, Series) else value
            if store.get(key) != per_run:
                store[key] = per_run
                changed.add(key)
        if changed:
            self._redraw(only=changed)

    # ---------------------------------------------------------------- controls

    def adjust_smoothing(self, delta: float) -> None:
        self.smoothing = round(min(0.99, max(0.0, self.smoothing + delta)), 2)
        self._changed()

    def toggle_x_axis(self) -> None:
        self.x_axis = "time" if self.x_axis == "step" else "step"
        self.x_range, self.cursor_x = None, None  # both are in the old axis's units
        self._zoom_series, self._zoom_for = {}, None
        self._changed()

    def toggle_log_y(self) -> None:
        self.log_y = not self.log_y
        self._changed()

    def move_cursor(self, direction: int) -> None:
        """Step the cursor to the next/previous x where any shown curve has a point (starts at the last)."""
        xs = sorted({x for curves in self._shown_curves().values() for c in curves for x in c.xs
                     if self.x_range is None or self.x_range[0] <= x <= self.x_range[1]})
        if not xs:
            return
        if self.cursor_x is None:
            self.cursor_x = xs[-1]
        else:
            later = [x for x in xs if x > self.cursor_x] if direction > 0 else [x for x in xs if x < self.cursor_x]
            if later:
                self.cursor_x = later[0] if direction > 0 else later[-1]
        self._redraw()

    def zoom(self, factor: float) -> None:
        """factor < 1 narrows the x span around the cursor (or the middle); > 1 widens it; 0 shows everything."""
        full = self._full_x_range()
        if full is None or factor == 0:
            self.x_range = None
            self._zoom_series, self._zoom_for = {}, None
            if factor == 0:
                self.cursor_x = None
            self._redraw()
            return
        low, high = self.x_range or full
        centre = self.cursor_x if self.cursor_x is not None else (low + high) / 2
        half = (high - low) * factor / 2
        if 2 * half >= full[1] - full[0]:
            self.x_range = None
        else:
            half = max(half, 0.5 if self.x_axis == "step" else 1e-3)
            low = max(full[0], centre - half)
            high = min(full[1], low + 2 * half)
            self.x_range = (high - 2 * half if high == full[1] else low, high)
        self._zoom_series, self._zoom_for = {}, None
        if self.x_range is not None and self.x_axis == "step":
            self._zoom_for = (math.floor(self.x_range[0]), math.ceil(self.x_range[1]))
            self.post_message(self.Wanted(self.plotted(), self.plot_width(), self._zoom_for))
        self._redraw()

    def plot_width(self) -> int:
        """Points worth fetching per curve: two per braille column of one plot (plots sit two abreast)."""
        grid = self.query_one("#plot-grid")
        # Before the first layout the grid has no size; estimate from the screen (minus the metric picker).
        width = grid.size.width or max(40, self.app.size.width - 36)
        return points_for_width(width)

    def refresh_plots(self) -> None:
        """Draw the plots again from the series held (after a change of how they are drawn, such as bands)."""
        self._redraw()

    def plotted(self) -> list[str]:
        """The keys drawn: the selected ones the filter lets through (a filter narrows the plots, not only the
        picker; an invalid pattern narrows nothing), at most MAX_PLOTS."""
        try:
            matches = metric_matcher(self.filter_text)
        except ValueError:
            matches = None
        return [k for k in self.selected if matches is None or matches(k)][:MAX_PLOTS]

    def plots(self) -> list[RewardPlot]:
        return list(self.query_one("#plot-grid").query(RewardPlot))

    def choices(self) -> dict[str, Any]:
        return {"selected": self.selected, "smoothing": self.smoothing, "x_axis": self.x_axis,
                "log_y": self.log_y, "filter": self.filter_text}

    # ---------------------------------------------------------------- internals

    def _changed(self) -> None:
        save_choices(self.remember_as, self.choices())
        self._redraw()

    def _fill_list(self, pattern: str) -> None:
        try:
            matches: Callable[[str], bool] = metric_matcher(pattern)
            self.query_one("#metric-filter", Input).remove_class("-invalid")
        except ValueError:
            self.query_one("#metric-filter", Input).add_class("-invalid")
            return
        listing = self.query_one("#metric-list", SelectionList)
        with listing.prevent(SelectionList.SelectedChanged):
            listing.clear_options()
            listing.add_options([(k, k, k in self.selected) for k in self.all_keys if matches(k)])

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "metric-filter":
            event.stop()
            self.filter_text = event.value
            self._fill_list(event.value)
            save_choices(self.remember_as, self.choices())
            self._sync_plots()

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        event.stop()
        listing = event.selection_list
        visible = {str(listing.get_option_at_index(i).value) for i in range(listing.option_count)}
        chosen = set(event.selection_list.selected)
        self._user_chose = True
        # Keys hidden by the filter keep their state; visible ones follow the checkboxes.
        self.selected = [k for k in self.all_keys if k in chosen or (k in self.selected and k not in visible)]
        save_choices(self.remember_as, self.choices())
        self._sync_plots()

    def _sync_plots(self) -> None:
        grid = self.query_one("#plot-grid", VerticalScroll)
        wanted = [k for k in self.plotted() if k in self.all_keys or not self.all_keys]
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
        if not self.selected or self._refresh_pending:
            return
        wait_s = self._last_refresh + LIVE_REFRESH_S - time.monotonic()
        if wait_s > 0:
            self._refresh_pending = True
            self.set_timer(wait_s, self._refresh_now)
            return
        self._refresh_now()

    def _refresh_now(self) -> None:
        self._refresh_pending = False
        self._last_refresh = time.monotonic()
        self.post_message(self.Wanted(self.plotted(), self.plot_width()))

    def _lines(self) -> list[RunLine]:
        return self.runs or [RunLine(SINGLE, "", "primary")]

    def _xs(self, series: Series) -> list[float]:
        if self.x_axis == "time" and series.wall_times:
            start = series.wall_times[0]
            return [(w - start) / 60 for w in series.wall_times]
        return [float(s) for s in series.steps]

    def band_curves(self, key: str, per_run: dict[int, Series]) -> list[Curve]:
        """One curve per group of 2+ runs: the mean, with mean ± std as its band; lone runs as they are. By step,
        runs share their xs; by time they do not (each run's minutes since its start), so each run is interpolated
        onto common xs first. Colours are those of each group's first run."""
        from app.widgets.bands import mean_std_band, mean_std_band_resampled

        lines = {line.run_id: line for line in self._lines()}
        out = []
        for label, run_ids in self.groups.items():
            members = [i for i in run_ids if i in per_run and i in lines]
            if not members:
                continue
            band_of = mean_std_band_resampled if self.x_axis == "time" else mean_std_band
            xs, mean, std, _count = band_of([(self._xs(per_run[i]), per_run[i].values) for i in members])
            band = ([m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)]) if len(members) > 1 \
                else None
            out.append(Curve(f"{label} (n={len(members)})", xs, mean, lines[members[0]].colour, run=label, band=band))
        return out

    def _shown_curves(self) -> dict[str, list[Curve]]:
        out = {}
        for key in self.plotted():
            per_run = self._zoom_series.get(key) if self._zoom_for and self.x_range else None
            per_run = per_run or self._series.get(key)
            if per_run is None:
                continue
            if self.bands and self.groups:
                out[key] = self.band_curves(key, per_run)
                continue
            out[key] = [Curve(line.label or key, self._xs(per_run[line.run_id]), per_run[line.run_id].values,
                              line.colour, run=line.label) for line in self._lines() if line.run_id in per_run]
        return out

    def _full_x_range(self) -> Optional[tuple[float, float]]:
        xs = [x for per_run in (self._series.get(k) for k in self.plotted()) if per_run
              for line in self._lines() if line.run_id in per_run for x in self._xs(per_run[line.run_id])]
        return (min(xs), max(xs)) if xs and max(xs) > min(xs) else None

    def _redraw(self, only: set[str] | None = None) -> None:
        shown = 0
        label = "minutes since start" if self.x_axis == "time" else "step"
        view = PlotView(self.smoothing, label, self.log_y, self.x_range, self.cursor_x, legend=not self.runs,
                        markers=self._markers())
        for key, curves in self._shown_curves().items():
            shown += sum(len(c.xs) for c in curves)
            if only is not None and key not in only:
                continue
            plots = self.query_one("#plot-grid").query(f"#{plot_id(key)}")
            if plots:
                plots.first(RewardPlot).draw(curves, self.smoothing, label, view)
        plotted = len(self.plotted())
        hidden = len([k for k in self.selected if k in self.all_keys]) - plotted
        extra = f" · {hidden} selected hidden by the filter or past {MAX_PLOTS} plots" if hidden > 0 else ""
        if not self.all_keys:
            what = f"metrics matching {self.only.pattern}" if self.only else "metrics"
            self.query_one("#curve-status", Static).update(Text(f"this run has recorded no {what} (yet)"))
            return
        span = "all" if self.x_range is None else f"{self.x_range[0]:.4g}–{self.x_range[1]:.4g}"
        self.query_one("#curve-status", Static).update(Text(
            f"smoothing {self.smoothing:.2f} · x: {self.x_axis} {span} · y: {'log' if self.log_y else 'linear'} · "
            f"{len(self.selected)} of {len(self.all_keys)} metrics · {shown} points{extra}"))
