"""One run in depth, as tabs: Curves, Trajectories, Problems, Config, Checkpoints, Logs, System, Distributions (and
Cluster, on a Ray cluster or service). Each tab loads on first view in a thread; a 1 s tick refreshes what is shown."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Optional

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Input, Select, Static, TabbedContent, TabPane

from app.screens.base import KrlScreen
from app.widgets.key_bar import KeyBar
from app.screens.focus import leave_text_box
from app.screens.loaders import (TrajectoryFilter, config_overrides, default_curve_keys, load_series,
                                 load_trajectories)
from app.screens.messages import (ActionDone, CheckpointsLoaded, ConfigLoaded, LogLines, ProblemsLoaded,
                                  RunHeaderLoaded, SeriesLoaded, TrajectoriesLoaded)
from app.screens.run_commands import run_command
from app.widgets.config_view import ConfigView
from app.screens.view_data import Distributions, distributions, load_series_range
from app.widgets.curves_panel import SMOOTHING_STEP, CurvesPanel, ZoomSeriesLoaded
from app.widgets.distributions import HistogramView
from app.widgets.sparkline import sparkline_text
from app.widgets.system_panel import HostPanel
from app.widgets.cluster_panel import ClusterPanel
from app.widgets.format import STATUS_COLOUR, fmt_float, fmt_speedup, fmt_steps, status_glyph, theme_colour
from app.widgets.log_tail import LogTail

RECOVERY_EVENT_KINDS = ("retry", "checkpoint", "resume", "status")  # shown under the Checkpoints tab
CHECKPOINT_COLUMNS = ("step", "name", "state path", "sampler path")
EVENT_COLUMNS = ("time", "kind", "message")
TABS = ("curves", "trajectories", "problems", "config", "checkpoints", "logs", "system", "distributions")
OUTCOMES = [("all outcomes", "all"), ("solved", "solved"), ("never solved", "unsolved"), ("hack", "hack")] + \
    [(f"solved at turn {k}", f"turn:{k}") for k in range(8)]
ORDERS = [("by return", "return"), ("by step", "step"), ("by speedup", "speedup")]
LOG_TAIL_BYTES = 256 * 1024
# The widget that takes focus when a tab opens (so its keys work at once) and when esc leaves a text box.
TAB_HOME = {"curves": "#metric-list", "trajectories": "#traj-table", "problems": "#problems-table",
            "config": "#config-scroll", "checkpoints": "#checkpoints-table", "logs": "#log-tail",
            "system": "#system-curves #metric-list", "distributions": "#best-table", "cluster": "#cluster-table"}
PLOT_TABS = ("curves", "system")
# Bindings that only mean something on some tabs: the key bar shows them there alone.
TAB_ONLY_KEYS = {"run.x_axis": PLOT_TABS, "run.smooth_more": PLOT_TABS, "run.smooth_less": PLOT_TABS,
                 "run.log_y": PLOT_TABS, "run.cursor_next": PLOT_TABS, "run.cursor_prev": PLOT_TABS,
                 "run.zoom_in": PLOT_TABS, "run.zoom_out": PLOT_TABS, "run.zoom_reset": PLOT_TABS,
                 "run.search": ("curves", "trajectories", "logs", "system")}
HOST_SAMPLE_S = 2.0


@dataclass
class HostSampled(Message):
    sample: Any  # core.system_metrics.HostSample


@dataclass
class ClusterSnapshotLoaded(Message):
    snapshot: Optional[dict[str, Any]]  # core.cluster_snapshot's cluster.json; None before the job wrote one
    where: str


@dataclass
class DistributionsLoaded(Message):
    data: Distributions


def parse_step_range(text: str) -> tuple[Optional[int], Optional[int]]:
    """'10-20' → (10, 20); '10-' → (10, None); '-20' → (None, 20); '15' → (15, 15); '' → (None, None)."""
    text = text.strip()
    if not text:
        return None, None
    if "-" not in text:
        value = int(text)
        return value, value
    low, high = text.split("-", 1)
    return (int(low) if low.strip() else None), (int(high) if high.strip() else None)


def fill_measured(table: DataTable, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """Rows with columns as wide as their widest cell, measured here: two tables filled in one message left the
    measuring to DataTable's idle pass, which a busy screen may not reach before it paints (cells cut at header width)."""
    widths = [max([len(label)] + [len(str(row[index])) for row in rows]) for index, label in enumerate(columns)]
    table.clear(columns=True)
    for label, width in zip(columns, widths):
        table.add_column(label, width=width)
    for row in rows:
        table.add_row(*row)


def widen_to(table: DataTable, rows: list[tuple]) -> None:
    """Each column at least as wide as its widest cell in `rows`, measured here (see fill_measured); DataTable's idle
    pass can still widen a column for rows added later."""
    for column, cells in zip(table.ordered_columns, zip(*rows)):
        column.content_width = max([column.content_width] + [len(str(cell)) for cell in cells])


class RunDetailScreen(KrlScreen):
    # Below 110 columns the metric picker narrows so two plots abreast keep whole titles (issue 26 item 9).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    BINDINGS = [
        Binding("escape", "back", "Back", id="run.back"),
        Binding("1", "tab('curves')", "Curves", show=False, id="run.tab_curves"),
        Binding("2", "tab('trajectories')", "Trajectories", show=False, id="run.tab_trajectories"),
        Binding("3", "tab('problems')", "Problems", show=False, id="run.tab_problems"),
        Binding("4", "tab('config')", "Config", show=False, id="run.tab_config"),
        Binding("5", "tab('checkpoints')", "Checkpoints", show=False, id="run.tab_checkpoints"),
        Binding("6", "tab('logs')", "Logs", show=False, id="run.tab_logs"),
        Binding("7", "tab('system')", "System", show=False, id="run.tab_system"),
        Binding("8", "tab('distributions')", "Distributions", show=False, id="run.tab_distributions"),
        Binding("9", "tab('cluster')", "Cluster", show=False, id="run.tab_cluster"),
        Binding("x", "toggle_x", "x: step/time", id="run.x_axis"),
        Binding("right_square_bracket", "smoothing(1)", "Smoother", id="run.smooth_more"),
        Binding("left_square_bracket", "smoothing(-1)", "Rougher", show=False, id="run.smooth_less"),
        Binding("y", "log_y", "Log y", id="run.log_y"),
        Binding("full_stop", "cursor(1)", "Cursor →", id="run.cursor_next"),
        Binding("comma", "cursor(-1)", "Cursor ←", show=False, id="run.cursor_prev"),
        Binding("plus,equals_sign", "zoom(0.5)", "Zoom x", id="run.zoom_in"),
        Binding("minus", "zoom(2)", "Unzoom", show=False, id="run.zoom_out"),
        Binding("0", "zoom(0)", "Reset zoom", show=False, id="run.zoom_reset"),
        Binding("e", "export", "Export", id="run.export"),
        Binding("slash", "search", "Search/filter", id="run.search"),
        Binding("s", "stop", "Stop run", show=False, id="run.stop"),
        Binding("r", "resume", "Resume run", show=False, id="run.resume"),
        Binding("v", "evaluate", "Evaluate / eval grid", id="run.evaluate"),
    ]

    def __init__(self, run: int | str, tab: str = "curves", preload: Optional[tuple] = None) -> None:
        super().__init__()
        self._preload = preload  # (run, metric keys, default series) read before the screen was pushed
        self.run_ref = run
        self.initial_tab = tab if tab in TABS else "curves"
        self.run: Optional[dict[str, Any]] = None
        self.metric_keys: list[str] = []
        self._loaded_tabs: set[str] = set()
        self._built_tabs: set[str] = set()
        self._tab_ready: set[str] = set()
        self._last_step: Any = object()
        self._data_version: Optional[int] = None
        self._log_offset = 0
        self.traj_filter = TrajectoryFilter()
        self._trajectories_total = 0
        self._host_sampler: Any = None
        self.distributions: Optional[Distributions] = None

    @property
    def run_id(self) -> Optional[int]:
        return self.run["id"] if self.run else None

    def compose(self) -> ComposeResult:
        yield Static(id="run-header")
        # Only the first tab's widgets are built now; the others on first view (opening a run stays fast).
        with TabbedContent(initial=self.initial_tab, id="run-tabs"):
            for number, tab in enumerate(TABS, 1):
                with TabPane(f"{number} {tab.capitalize()}", id=tab):
                    if tab == self.initial_tab:
                        yield from self._tab_widgets(tab)
        yield KeyBar()

    def _tab_widgets(self, tab: str) -> list:
        if tab == "curves":
            return [CurvesPanel(id="curves-panel")]
        if tab == "trajectories":
            return [Horizontal(Select([], prompt="all problems", id="traj-problem", allow_blank=True),
                               Select(OUTCOMES, value="all", id="traj-outcome", allow_blank=False),
                               Input(placeholder="steps e.g. 10-20", id="traj-steps"),
                               Select(ORDERS, value="return", id="traj-order", allow_blank=False),
                               id="traj-filters", classes="filter-bar"),
                    Static(id="traj-count", classes="table-status"),
                    DataTable(id="traj-table", cursor_type="row", zebra_stripes=True)]
        if tab == "problems":
            return [DataTable(id="problems-table", cursor_type="row", zebra_stripes=True)]
        if tab == "config":
            return [VerticalScroll(ConfigView(id="config-view"), id="config-scroll")]
        if tab == "checkpoints":
            return [DataTable(id="checkpoints-table", cursor_type="row", zebra_stripes=True),
                    Static("events · retries, checkpoints kept or restored, resumes", classes="section-title"),
                    DataTable(id="events-table", cursor_type="row", zebra_stripes=True)]
        if tab == "system":
            return [HostPanel(id="host-panel"), CurvesPanel(only=r"^system/", id="system-curves")]
        if tab == "distributions":
            return [Horizontal(HistogramView(id="hist-return"), HistogramView(colour="secondary", id="hist-speedup"),
                               id="hist-row"),
                    Static("best correct kernel per problem over the steps · enter opens its trajectory",
                           classes="section-title"),
                    DataTable(id="best-table", cursor_type="row", zebra_stripes=True)]
        return [Input(placeholder="search the log", id="log-search"), LogTail(id="log-tail")]

    def _build_tab(self, tab: str) -> None:
        pane = self.query_one(f"#{tab}", TabPane)
        if tab in self._built_tabs:
            return
        self._built_tabs.add(tab)
        if not pane.children:
            pane.mount_all(self._tab_widgets(tab))
        self.call_after_refresh(self._setup_tab, tab)

    def _setup_tab(self, tab: str) -> None:
        if tab == "trajectories":
            self.query_one("#traj-table", DataTable).add_columns(
                "id", "step", "group", "sample", "problem", "turns", "return", "solved", "at turn", "speedup", "hack")
        elif tab == "problems":
            self.query_one("#problems-table", DataTable).add_columns(
                "problem", "attempts", "solved", "solve rate", "best speedup", "hacks", "mean return",
                "mean solve turn")
        elif tab == "checkpoints":
            self.query_one("#checkpoints-table", DataTable).add_columns(*CHECKPOINT_COLUMNS)
            self.query_one("#events-table", DataTable).add_columns(*EVENT_COLUMNS)
        elif tab == "system" and self.run is not None:
            self.query_one("#system-curves", CurvesPanel).set_keys(self.metric_keys, [])
        self._tab_ready.add(tab)
        if self.run is not None:
            self._load_tab(tab, force=True)
        if self.query_one(TabbedContent).active == tab:
            self._focus_tab(tab)

    def _focus_tab(self, tab: str) -> None:
        """Focus the tab's main widget once it is laid out (a widget in a pane shown this frame cannot take it)."""
        home = self.query(TAB_HOME.get(tab, "#none"))
        if home:
            self.call_after_refresh(home.first().focus)

    def shown_bindings(self) -> list[Binding]:
        """The key bar's keys: those of the tab on screen."""
        tabs = self.query(TabbedContent)
        active = (tabs.first().active if tabs else "") or self.initial_tab
        return [b for b in self.BINDINGS if active in TAB_ONLY_KEYS.get(b.id, (active,))]

    def on_mount(self) -> None:
        self._build_tab(self.initial_tab)
        if self._preload is not None:  # fill the curves before the first paint
            run, keys, series = self._preload
            self._preload = None
            self.query_one("#curves-panel", CurvesPanel).show_series(series)
            self.on_run_header_loaded(RunHeaderLoaded(run, keys))
        self.load_header()
        if self.app.live and self.app.refresh_s:
            self.set_interval(self.app.refresh_s, self._tick)
            self.set_interval(self.app.refresh_s, self._tick_logs)
            self.set_interval(HOST_SAMPLE_S, self._tick_host)
            self.set_interval(self.app.refresh_s, self._tick_cluster)

    def _tick(self) -> None:
        if self.app.screen is self:  # a trajectory screen on top: nothing here is visible
            self.load_header()

    def on_screen_resume(self) -> None:
        if self.run is not None:
            self.load_header()

    def _tick_host(self) -> None:
        if self.app.screen is self and "system" in self._tab_ready and self.query_one(TabbedContent).active == "system":
            self.sample_host()

    def _tick_cluster(self) -> None:
        if self.app.screen is self and "cluster" in self._tab_ready and self.query_one(TabbedContent).active == "cluster":
            self.load_cluster()

    def on_unmount(self) -> None:
        if self._host_sampler is not None:
            self._host_sampler.close()

    def _tick_logs(self) -> None:
        if self.app.screen is self and self.run is not None and "logs" in self._tab_ready and self.query_one(TabbedContent).active == "logs":
            self.tail_logs()

    # ---------------------------------------------------------------- workers

    @work(thread=True, exclusive=True, group="detail-header", exit_on_error=False)
    def load_header(self) -> None:
        reg = self.app.registry("detail-header")
        # The data version moves only when another connection commits: a quiet run costs one probe a tick.
        version = reg.data_version()
        if self.run is not None and version == self._data_version:
            return
        self._data_version = version
        # An unknown run raises KrlError: the one error route shows it (app/screens/base.py).
        run = reg.get_run(self.run_ref if self.run is None else self.run["id"])
        keys = reg.metric_keys(run["id"]) if run.get("last_step") != self._last_step else self.metric_keys
        self.post_message(RunHeaderLoaded(run, keys))

    @work(thread=True, group="detail-series", exit_on_error=False)
    def load_curves(self, keys: list[str], max_points: int, step_range: Optional[tuple[int, int]] = None) -> None:
        if self.run_id is None:
            return
        reg = self.app.registry("series")
        if step_range is not None:
            self.post_message(ZoomSeriesLoaded(load_series_range(reg, self.run_id, keys, max_points, step_range),
                                               step_range))
            return
        self.post_message(SeriesLoaded(load_series(reg, self.run_id, keys, max_points)))

    @work(thread=True, exclusive=True, group="detail-trajectories", exit_on_error=False)
    def load_trajectory_rows(self, offset: int = 0) -> None:
        """The first page (offset 0, replacing the table) or the next one (appended when the cursor reaches the
        end of what is loaded)."""
        reg = self.app.registry("detail")
        rows, total = load_trajectories(reg, self.run_id, self.traj_filter, offset=offset)
        problems = [p["problem_id"] for p in reg.problem_summary(self.run_id)] if offset == 0 else None
        # How many the run has in all, so a filter reads "5 match of 56", not "5 of 5".
        in_run = reg.count_trajectories(self.run_id) if offset == 0 else None
        self.post_message(TrajectoriesLoaded(rows, {"problems": problems, "offset": offset, "total": total,
                                                    "in_run": in_run}))

    @work(thread=True, exclusive=True, group="detail-problems", exit_on_error=False)
    def load_problems(self) -> None:
        self.post_message(ProblemsLoaded(self.app.registry("detail").problem_summary(self.run_id)))

    @work(thread=True, exclusive=True, group="detail-checkpoints", exit_on_error=False)
    def load_checkpoints(self) -> None:
        registry = self.app.registry("detail")
        events = [e for e in registry.events(self.run_id, limit=100_000) if e["kind"] in RECOVERY_EVENT_KINDS]
        self.post_message(CheckpointsLoaded(registry.checkpoints(self.run_id), {"events": events[-200:]}))

    @work(thread=True, exclusive=True, group="detail-config", exit_on_error=False)
    def load_config(self) -> None:
        self.post_message(ConfigLoaded(self.run.get("config") or {}, config_overrides(self.run)))

    @work(thread=True, exclusive=True, group="detail-host", exit_on_error=False)
    def sample_host(self) -> None:
        """The machine the TUI runs on, now (CPU since the previous sample)."""
        from core.system_metrics import HostSampler

        if self._host_sampler is None:
            self._host_sampler = HostSampler()
        self.post_message(HostSampled(self._host_sampler.sample()))

    @work(thread=True, exclusive=True, group="detail-distributions", exit_on_error=False)
    def load_distributions(self) -> None:
        self.post_message(DistributionsLoaded(distributions(
            self.app.registry("detail").trajectory_outcomes(self.run_id), columns=max(10, (self.size.width - 20) // 2))))

    @work(thread=True, exclusive=True, group="detail-cluster", exit_on_error=False)
    def load_cluster(self) -> None:
        from core.cluster_snapshot import read_snapshot

        run_dir = self.app.registry("detail").run_dir(self.run["name"])
        self.post_message(ClusterSnapshotLoaded(read_snapshot(run_dir), str(run_dir)))

    @work(thread=True, exclusive=True, group="detail-logs", exit_on_error=False)
    def tail_logs(self) -> None:
        """Read what the log gained since last time (the last LOG_TAIL_BYTES on first read)."""
        path = self.app.registry("detail").run_dir(self.run["name"]) / "logs.log"
        try:
            size = os.path.getsize(path)
        except OSError:
            if self._log_offset == 0:
                self.post_message(LogLines([f"(no log yet at {path})"], reset=True))
                self._log_offset = -1
            return
        reset = self._log_offset <= 0 or size < self._log_offset
        start = max(0, size - LOG_TAIL_BYTES) if reset else self._log_offset
        if size == start:
            return
        with open(path, "rb") as handle:
            handle.seek(start)
            data = handle.read(size - start)
        # Keep a partial last line for the next read.
        cut = data.rfind(b"\n") + 1
        if cut == 0 and not reset:
            return
        chunk = data[:cut] if cut else data
        self._log_offset = start + len(chunk)
        lines = chunk.decode("utf-8", "replace").splitlines()
        if reset and start > 0:
            lines = lines[1:]
        self.post_message(LogLines(lines, reset=reset))

    @work(thread=True, group="control", exit_on_error=False)
    def control(self, verb: str, **kwargs) -> None:
        # A failure raises and takes the one error route (app/screens/base.py).
        run_command(verb)(self.app.registry("control"), self.run["name"], **kwargs)
        self.post_message(ActionDone(f"{self.run['name']}: {verb} requested"))

    # ---------------------------------------------------------------- messages

    def on_run_header_loaded(self, message: RunHeaderLoaded) -> None:
        first = self.run is None
        self.run = message.run
        self.metric_keys = message.metric_keys
        self._render_header()
        step_moved = message.run.get("last_step") != self._last_step
        self._last_step = message.run.get("last_step")
        panels = self.query(CurvesPanel)
        for panel in panels:
            panel.set_segments(message.run.get("segments") or [])  # resumes marked on the curves
        if first:
            self._add_cluster_tab()
            for panel in panels:
                panel.remember(self._remember_as(panel))
                panel.set_keys(self.metric_keys, default_curve_keys(self.metric_keys))
            self._load_tab(self.query_one(TabbedContent).active or self.initial_tab)
            return
        if step_moved:
            for panel in panels:
                panel.set_keys(self.metric_keys, default_curve_keys(self.metric_keys))
                panel.refresh_data()
            active = self.query_one(TabbedContent).active
            if active in ("trajectories", "problems", "checkpoints", "distributions"):
                self._load_tab(active, force=True)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """`9` (Cluster) exists only for a run that has the tab; help and the key bar leave it out otherwise."""
        if action == "tab" and parameters and parameters[0] == "cluster":
            return bool(self.is_mounted and self.query("#cluster"))
        return True

    def _add_cluster_tab(self) -> None:
        """A Cluster tab for a run that evaluates on a Ray cluster or a service; a local run has none (its
        evaluator's machine is the System tab's)."""
        from core.run_evaluator import remote_address

        if remote_address((self.run.get("config") or {}).get("eval") or {}) and not self.query("#cluster"):
            self.query_one(TabbedContent).add_pane(TabPane("9 Cluster", ClusterPanel(id="cluster-panel"), id="cluster"))

    def _remember_as(self, panel: CurvesPanel) -> str:
        """Where a panel's choices are remembered: per workspace, run id and panel."""
        return f"{self.app.workspace}#{self.run['id']}#{panel.id}"

    def _render_header(self) -> None:
        run = self.run
        colour = theme_colour(self.app, STATUS_COLOUR.get(run["status"], "foreground"))
        step = fmt_steps(run)
        text = Text.assemble((run["name"], "bold"), "  ",
                             (f"{status_glyph(run['status'], 0)} {run['status']}", colour),
                             f"  step {step}",
                             f"  · {run.get('backend') or '?'} · {run.get('model') or '?'}",
                             f" · preset {run.get('preset') or '–'}",
                             f" · best {fmt_speedup((run.get('summary') or {}).get('best_speedup'))}")
        if run.get("backend") == "replay":
            text.append("  RECORDED REPLAY DATA (no live model)", style=f"bold reverse {theme_colour(self.app, 'warning')}")
        failed = bool(run.get("error")) and run["status"] in ("failed", "crashed")
        if failed:
            text.append(f"\n{run['error'].strip().splitlines()[-1][:200]}", style=theme_colour(self.app, "error"))
        self.query_one("#run-header", Static).set_class(failed, "-error")
        if text != getattr(self, "_header_text", None):  # an unchanged header must not re-layout the screen
            self._header_text = text
            self.query_one("#run-header", Static).update(text)

    def on_series_loaded(self, message: SeriesLoaded) -> None:
        for panel in self.query(CurvesPanel):
            panel.show_series(message.series)

    @on(CurvesPanel.Wanted)
    def _curves_wanted(self, message: CurvesPanel.Wanted) -> None:
        self.load_curves(message.keys, message.max_points, message.step_range)

    def on_zoom_series_loaded(self, message: ZoomSeriesLoaded) -> None:
        for panel in self.query(CurvesPanel):
            panel.show_series(message.series, message.step_range)

    def on_trajectories_loaded(self, message: TrajectoriesLoaded) -> None:
        if "trajectories" in self._tab_ready:
            self._fill_trajectories(message.rows, message.extra)

    def on_problems_loaded(self, message: ProblemsLoaded) -> None:
        if "problems" in self._tab_ready:
            table = self.query_one("#problems-table", DataTable)
            table.clear()
            for row in message.rows:
                table.add_row(row["problem_id"], row["attempts"], row["solved"], f"{(row['solve_rate'] or 0):.0%}",
                              fmt_speedup(row["best_speedup"]), row["hacks"], fmt_float(row["mean_return"], 3),
                              fmt_float(row["mean_solved_turn"], 1), key=row["problem_id"])

    def on_checkpoints_loaded(self, message: CheckpointsLoaded) -> None:
        if "checkpoints" in self._tab_ready:
            fill_measured(self.query_one("#checkpoints-table", DataTable), CHECKPOINT_COLUMNS,
                          [(row["step"], row["name"], row.get("state_path") or "–", row.get("sampler_path") or "–")
                           for row in message.rows])
            fill_measured(self.query_one("#events-table", DataTable), EVENT_COLUMNS,
                          [(time.strftime("%m-%d %H:%M:%S", time.localtime(row["time"])), row["kind"], row["message"])
                           for row in reversed(message.extra.get("events", []))])  # newest first

    def _fill_trajectories(self, rows: list[dict[str, Any]], extra: dict[str, Any]) -> None:
        table = self.query_one("#traj-table", DataTable)
        offset, total = extra.get("offset", 0), extra.get("total", len(rows))
        if offset == 0:
            self._set_problem_options(extra.get("problems") or [])
            table.clear()
        elif offset != table.row_count:
            return  # a page for a table that has been refilled since it was asked for
        yes = theme_colour(self.app, "success")
        bad = theme_colour(self.app, "error")
        cells = [(row["id"], row["step"], row["group_index"], row["sample_index"], row["problem_id"], row["n_turns"],
                  fmt_float(row["total_return"], 3), Text("yes", style=yes) if row["solved"] else "no",
                  "–" if row["solved_at_turn"] is None else row["solved_at_turn"], fmt_speedup(row["best_speedup"]),
                  Text("HACK", style=bad) if row["hack"] else "") for row in rows]
        for row, cell in zip(rows, cells):
            table.add_row(*cell, key=str(row["id"]))
        if offset == 0:  # the first page measured here: left to DataTable's idle pass, the problem column was
            widen_to(table, cells)  # sometimes painted at its header's width (builtin/matmul cut to "builtin")
        self._trajectories_total = total
        if extra.get("in_run") is not None:
            self._trajectories_in_run = extra["in_run"]
        in_run = getattr(self, "_trajectories_in_run", total)
        more = " · the next page loads when the cursor reaches the end" if table.row_count < total else ""
        matching = f"{total:,} match the filter of {in_run:,} in the run" if total != in_run else f"{total:,} in the run"
        self.query_one("#traj-count", Static).update(f"{table.row_count:,} shown · {matching}{more}")

    def _set_problem_options(self, problems: list[str]) -> None:
        select = self.query_one("#traj-problem", Select)
        options = [(p, p) for p in problems]
        with select.prevent(Select.Changed):
            if getattr(self, "_problem_options", None) != options:
                self._problem_options = options
                select.set_options(options)
            wanted = self.traj_filter.problem_id if self.traj_filter.problem_id in problems else Select.NULL
            if select.value != wanted:
                select.value = wanted

    @on(DataTable.RowHighlighted, "#traj-table")
    def _maybe_next_page(self, event: DataTable.RowHighlighted) -> None:
        table = event.data_table
        if event.cursor_row >= table.row_count - 1 and table.row_count < self._trajectories_total:
            self.load_trajectory_rows(offset=table.row_count)

    def on_host_sampled(self, message: HostSampled) -> None:
        for panel in self.query(HostPanel):
            panel.show(message.sample, socket.gethostname())

    def on_cluster_snapshot_loaded(self, message: ClusterSnapshotLoaded) -> None:
        for panel in self.query(ClusterPanel):
            panel.show(message.snapshot, self.app.clock(), message.where)

    def on_distributions_loaded(self, message: DistributionsLoaded) -> None:
        if "distributions" not in self._tab_ready:
            return
        data = self.distributions = message.data
        self.query_one("#hist-return", HistogramView).show(data.reward)
        self.query_one("#hist-speedup", HistogramView).show(data.speedup)
        table = self.query_one("#best-table", DataTable)
        # Fixed widths: measured while the rows arrive, the columns could settle narrower than their content.
        table.clear(columns=True)
        table.add_column("problem", width=max([7] + [len(r.problem_id) for r in data.problems]))
        for header, width in (("best speedup", 12), ("at step", 7), ("solved", 7), ("best so far, step by step", 40)):
            table.add_column(header, width=width)
        for row in data.problems:
            progress = [v if v is not None else 0.0 for v in row.over_time]
            table.add_row(row.problem_id, fmt_speedup(row.best_speedup),
                          "–" if row.best_step is None else row.best_step, f"{row.solved}/{row.attempts}",
                          sparkline_text(progress, min(40, max(8, len(progress)))),
                          key=f"{row.problem_id}\t{row.trajectory_id or ''}")

    @on(DataTable.RowSelected, "#best-table")
    def _open_best(self, event: DataTable.RowSelected) -> None:
        trajectory_id = str(event.row_key.value).split("\t", 1)[1]
        if trajectory_id:
            self.app.open_trajectory(int(trajectory_id))
        else:
            self.notify("no correct kernel for this problem yet", severity="warning")

    def on_config_loaded(self, message: ConfigLoaded) -> None:
        for view in self.query(ConfigView):
            view.show(message.config, message.overrides)

    def on_log_lines(self, message: LogLines) -> None:
        if not self.query(LogTail):
            return
        tail = self.query_one(LogTail)
        if message.reset:
            tail.clear()
            tail._all.clear()
        tail.append_lines(message.lines)

    def on_action_done(self, message: ActionDone) -> None:
        self.notify(message.text, severity="information")
        self._data_version = None
        self.load_header()

    # ---------------------------------------------------------------- tabs and filters

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        tab = event.pane.id
        for bar in self.query(KeyBar):
            bar.redraw()
        if tab in self._tab_ready:
            self._focus_tab(tab)
        if tab not in self._built_tabs:
            self._build_tab(tab)
            if tab in PLOT_TABS and self.run is not None:
                self.call_after_refresh(self._panel_ready, tab)
        elif self.run is not None:
            self._load_tab(tab)

    def _load_tab(self, tab: str, force: bool = False) -> None:
        if tab not in self._tab_ready:
            self._build_tab(tab)  # loads once its widgets exist
            return
        if tab in self._loaded_tabs and not force and tab not in ("logs", "cluster"):
            return
        self._loaded_tabs.add(tab)
        if tab == "trajectories":
            self.load_trajectory_rows()
        elif tab == "problems":
            self.load_problems()
        elif tab == "checkpoints":
            self.load_checkpoints()
        elif tab == "config":
            self.load_config()
        elif tab == "logs":
            self.tail_logs()
        elif tab == "system":
            self.sample_host()
        elif tab == "distributions":
            self.load_distributions()
        elif tab == "cluster":
            self.load_cluster()

    def _panel_ready(self, tab: str) -> None:
        panel = self.query_one("#curves-panel" if tab == "curves" else "#system-curves", CurvesPanel)
        panel.remember(self._remember_as(panel))
        panel.set_keys(self.metric_keys, default_curve_keys(self.metric_keys))

    def active_panel(self) -> Optional[CurvesPanel]:
        """The plots on screen: the Curves or the System tab's."""
        active = self.query_one(TabbedContent).active
        if active not in PLOT_TABS:
            return None
        panels = self.query("#curves-panel" if active == "curves" else "#system-curves")
        return panels.first(CurvesPanel) if panels else None

    @on(Select.Changed, "#traj-problem")
    @on(Select.Changed, "#traj-outcome")
    @on(Select.Changed, "#traj-order")
    def _traj_select_changed(self, event: Select.Changed) -> None:
        value = None if event.value is Select.NULL else event.value
        if event.select.id == "traj-problem":
            self.traj_filter.problem_id = value
        elif event.select.id == "traj-outcome":
            self.traj_filter.outcome = None if value in (None, "all") else value
        else:
            self.traj_filter.order = value or "return"
        if self.run is not None:
            self.load_trajectory_rows()

    @on(Input.Changed, "#traj-steps")
    def _steps_changed(self, event: Input.Changed) -> None:
        try:
            self.traj_filter.step_min, self.traj_filter.step_max = parse_step_range(event.value)
            event.input.remove_class("-invalid")
        except ValueError:
            event.input.add_class("-invalid")
            return
        if self.run is not None:
            self.load_trajectory_rows()

    @on(Input.Changed, "#log-search")
    def _log_search(self, event: Input.Changed) -> None:
        self.query_one(LogTail).set_search(event.value)

    @on(DataTable.RowSelected, "#traj-table")
    def _open_trajectory(self, event: DataTable.RowSelected) -> None:
        self.app.open_trajectory(int(event.row_key.value))

    @on(DataTable.RowSelected, "#problems-table")
    def _problem_chosen(self, event: DataTable.RowSelected) -> None:
        self.traj_filter.problem_id = str(event.row_key.value)
        self.query_one(TabbedContent).active = "trajectories"
        if "trajectories" in self._tab_ready:
            self.load_trajectory_rows()

    # ---------------------------------------------------------------- actions

    def action_back(self) -> None:
        active = self.query_one(TabbedContent).active
        home = self.query(TAB_HOME.get(active, "#none"))
        if not leave_text_box(self, home.first() if home else None):
            self.app.pop_screen()

    def action_tab(self, tab: str) -> None:
        if not self.query(f"#{tab}"):
            return  # the Cluster tab of a run that has none
        # Drop focus first: a focused widget left in the hidden pane would be focused again, and TabbedContent
        # switches to the pane of whatever gets focus.
        self.set_focus(None)
        self.query_one(TabbedContent).active = tab

    def action_toggle_x(self) -> None:
        if panel := self.active_panel():
            panel.toggle_x_axis()

    def action_smoothing(self, direction: int) -> None:
        if panel := self.active_panel():
            panel.adjust_smoothing(direction * SMOOTHING_STEP)

    def action_log_y(self) -> None:
        if panel := self.active_panel():
            panel.toggle_log_y()

    def action_cursor(self, direction: int) -> None:
        if panel := self.active_panel():
            panel.move_cursor(direction)

    def action_zoom(self, factor: float) -> None:
        if panel := self.active_panel():
            panel.zoom(factor)

    def action_export(self) -> None:
        """SVG of the screen and of each plot on it, CSV of the plotted series (<workspace>/exports)."""
        from app.widgets.export import export_view

        panel = self.active_panel()
        name = f"{self.run['name'] if self.run else 'run'}-{self.query_one(TabbedContent).active}"
        try:
            written = export_view(self.app, panel.plots() if panel else [], name,
                                  run_name=self.run["name"] if self.run else "")
        except OSError as exc:
            self.notify(f"export failed: {exc}", severity="error")
            return
        self.last_export = written
        self.notify(f"exported {len(written)} files to {written[0].parent}")

    def action_search(self) -> None:
        active = self.query_one(TabbedContent).active
        target = {"logs": "#log-search", "curves": "#curves-panel #metric-filter", "trajectories": "#traj-steps",
                  "system": "#system-curves #metric-filter"}.get(active)
        if target and self.query(target):
            self.query_one(target).focus()

    def action_stop(self) -> None:
        if self.run and self.run["status"] in ("queued", "running", "stopping"):
            self.control("stop", wait=False)

    def action_resume(self) -> None:
        if self.run and self.run["status"] in ("stopped", "failed", "crashed"):
            self.control("resume", detach=True)

    def action_evaluate(self) -> None:
        from app.screens.eval import evaluate_from_run_detail

        evaluate_from_run_detail(self)
