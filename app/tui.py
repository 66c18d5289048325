"""The kernelrl Textual app: screen routing, global bindings, theme choice, command palette.
Screens do the work; this module wires them together and owns the per-thread registry handles."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from core.registry import Registry, workspace_path
from themes.palettes import ALIASES, DEFAULT_THEME, THEMES, VARIABLE_DEFAULTS
from themes.settings import load_settings, save_setting

# Young-generation threshold once start-up is over (CPython's default is 700).
GC_THRESHOLD_0 = 10_000
THEME_DIR = Path(__file__).resolve().parent.parent / "themes"


class KrlApp(App):
    """kernelrl's TUI. `clock` and `live` exist so tests and snapshots can freeze time and refreshes."""

    TITLE = "kernelrl"
    CSS_PATH = [str(THEME_DIR / "app.tcss")]
    BINDINGS = [
        Binding("question_mark", "help", "Help", id="app.help"),
        Binding("q", "quit", "Quit", id="app.quit"),
        Binding("ctrl+t", "cycle_theme", "Theme", show=False, id="app.theme"),
        Binding("exclamation_mark", "alerts", "Alerts", id="app.alerts"),
    ]

    def __init__(self, workspace: str | Path | None = None, theme: Optional[str] = None,
                 clock: Callable[[], float] = time.time, live: bool = True, refresh_s: float = 1.0,
                 reconcile: bool = True, open_run: Optional[str] = None, remember_theme: bool = True,
                 workspace_label: Optional[str] = None) -> None:
        super().__init__()
        self.workspace = workspace_path(workspace)
        self.workspace_label = workspace_label or _short_path(self.workspace)
        self.clock = clock
        self.live = live
        self.refresh_s = refresh_s
        self.reconcile_runs = reconcile
        self.open_run = open_run
        self.remember_theme = remember_theme
        self._registries: dict[str, Registry] = {}
        self._registry_lock = threading.Lock()
        for theme_obj in THEMES:
            self.register_theme(theme_obj)
        self.theme = resolve_theme(theme or load_settings().get("theme"))
        self.known_runs: list[str] = []  # names, for the command palette (filled by the runs screen)

    # ---------------------------------------------------------------- registry handles

    def registry(self, group: str) -> Registry:
        """One Registry per worker group, so a slow query in one group never queues another group's reads."""
        with self._registry_lock:
            reg = self._registries.get(group)
            if reg is None:
                reg = self._registries[group] = Registry.for_workspace(self.workspace)
            return reg

    def on_unmount(self) -> None:
        for reg in self._registries.values():
            try:
                reg.close()
            except Exception:
                pass

    def on_worker_state_changed(self, event) -> None:
        """The app's own workers report failures by the same route as the screens' (app/screens/base.py)."""
        from app.screens.base import report_worker_error

        report_worker_error(self, event)

    # ---------------------------------------------------------------- screens

    def get_default_screen(self) -> Screen:
        from app.screens.runs import RunsScreen

        return RunsScreen()

    def on_mount(self) -> None:
        from app.screens.alerts import AlertWatcher

        self.alert_watcher = AlertWatcher(self)  # rings and notifies when a run crashes, finishes or crosses a rule
        self.alert_watcher.start()
        if self.open_run:
            self.open_run_detail(self.open_run)
        # After the first paint, so it does not compete with it for the GIL.
        self.set_timer(1.5, self._warm_up)
        self.set_timer(1.0, self._freeze_heap)

    def _freeze_heap(self) -> None:
        """Move what start-up built (modules, Textual, the runs table) out of the collector's sight: a full
        collection otherwise walks all of it, and one landing while a screen opens cost 100-200 ms. Young
        collections are also made less frequent (most objects a frame allocates die within it)."""
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_THRESHOLD_0, *gc.get_threshold()[1:])

    @work(thread=True, group="warm-up", exit_on_error=False)
    def _warm_up(self) -> None:
        """Load the syntax lexers off the UI thread so the first trajectory opens fast."""
        from app.widgets.kernel_diff import warm_lexers

        warm_lexers()

    def open_run_detail(self, run: int | str, tab: str = "curves") -> None:
        from app.screens.run_detail import RunDetailScreen

        if tab != "curves":
            self.push_screen(RunDetailScreen(run, tab=tab))
            return
        self._open_run_loaded(run)

    @work(thread=True, exclusive=True, group="open-run", exit_on_error=False)
    def _open_run_loaded(self, run: int | str) -> None:
        """Read the run and its default curves first (a few ms, off the UI thread), then push the screen with
        them: it lays out its plots and paints once, instead of placeholders first and every plot again after."""
        from app.screens.loaders import default_curve_keys, load_series
        from app.screens.run_detail import RunDetailScreen
        from app.widgets.curves_panel import points_for_width

        preload = None
        try:
            reg = self.registry("open-run")
            row = reg.get_run(run)
            if row.get("kind") == "eval":
                # An evaluation's curves are single points: it opens on its summary, grid and histogram.
                from app.screens.eval import EvalScreen

                self.call_from_thread(self.push_screen, EvalScreen(row["id"]))
                return
            keys = reg.metric_keys(row["id"])
            # The plot grid spans the screen less the metric picker and the grid's scrollbar gutter.
            points = points_for_width(max(40, self.size.width - 36))
            preload = (row, keys, load_series(reg, row["id"], default_curve_keys(keys), points))
        except Exception:  # noqa: BLE001 - the screen reads the run itself and reports what is wrong
            preload = None
        self.call_from_thread(self.push_screen, RunDetailScreen(run, tab="curves", preload=preload))

    def open_trajectory(self, trajectory_id: int) -> None:
        """Read the trajectory first (a few ms, off the UI thread), then push its screen with the data in hand:
        the screen lays out and paints once, full, instead of empty and then again filled."""
        self._open_trajectory_loaded(trajectory_id)

    @work(thread=True, exclusive=True, group="open-trajectory", exit_on_error=False)
    def _open_trajectory_loaded(self, trajectory_id: int) -> None:
        from app.screens.loaders import load_trajectory
        from app.screens.trajectory import TrajectoryScreen

        try:
            detail = load_trajectory(self.registry("trajectory-open"), trajectory_id)
        except Exception:  # noqa: BLE001 - the screen loads it again and reports what is wrong
            detail = None
        self.call_from_thread(self.push_screen, TrajectoryScreen(trajectory_id, detail=detail))

    def open_compare(self, run_ids: list[int], groups: Optional[dict[str, list[int]]] = None) -> None:
        from app.screens.compare import CompareScreen

        self.push_screen(CompareScreen(run_ids, groups))

    def open_new_run(self) -> None:
        from app.screens.new_run import NewRunScreen

        self.push_screen(NewRunScreen())

    def action_alerts(self) -> None:
        from app.screens.alerts import AlertsScreen

        if not isinstance(self.screen, AlertsScreen):
            self.push_screen(AlertsScreen())

    def action_help(self) -> None:
        from app.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    # ---------------------------------------------------------------- theme

    def watch_theme(self, theme: str) -> None:
        if self.remember_theme and self.is_running:
            save_setting("theme", theme)

    def action_cycle_theme(self) -> None:
        names = [t.name for t in THEMES]
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.notify(f"theme: {self.theme}")

    def save_screen_svg(self) -> Optional[Path]:
        """The current screen as an SVG in <workspace>/exports; notifies the path (or why it could not)."""
        from app.widgets.export import export_folder, stamp

        try:
            path = Path(self.save_screenshot(filename=f"screen-{stamp()}.svg", path=str(export_folder(self.workspace))))
        except OSError as exc:
            self.notify(f"screenshot failed: {exc}", severity="error")
            return None
        self.notify(f"screenshot saved to {path}")
        return path

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(VARIABLE_DEFAULTS)

    # ---------------------------------------------------------------- command palette

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # Textual's own Screenshot hands the file to the driver's delivery (a Downloads folder that may not exist,
        # and no word of where it went); ours writes into the workspace's exports and says where.
        yield from (command for command in super().get_system_commands(screen) if command.title != "Screenshot")
        yield SystemCommand("Screenshot", "Save an SVG of this screen under <workspace>/exports", self.save_screen_svg)
        yield SystemCommand("New run", "Open the new-run form", self.open_new_run)
        yield SystemCommand("Help: keys", "List every key binding", self.action_help)
        for theme_obj in THEMES:
            yield SystemCommand(f"Theme: {theme_obj.name}", "Switch theme (remembered)",
                                lambda name=theme_obj.name: setattr(self, "theme", name))
        # Screen actions (stop, resume, fork, compare, …) appear under their binding descriptions.
        for binding in screen.BINDINGS:
            if isinstance(binding, Binding) and binding.description and binding.id:
                yield SystemCommand(binding.description, f"key: {binding.key}",
                                    lambda action=binding.action, s=screen: self.call_next(s.run_action, action),
                                    discover=False)
        for name in self.known_runs[:200]:
            yield SystemCommand(f"Open run: {name}", "Run detail", lambda n=name: self.open_run_detail(n),
                                discover=False)


def _short_path(path: Path) -> str:
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home):] if text.startswith(home + "/") else text


def resolve_theme(name: Optional[str]) -> str:
    if not name:
        return DEFAULT_THEME
    return ALIASES.get(name, name)


def run_tui(theme: Optional[str] = None, workspace: str | Path | None = None, open_run: Optional[str] = None,
            headless: bool = False) -> None:
    """Open the TUI on the workspace ($KRL_WORKSPACE or ./runs); an unknown --theme is a user error. An app that
    ended on an unhandled exception (Textual printed its traceback) exits with its non-zero return code."""
    from core.errors import KrlError

    names = [t.name for t in THEMES]
    if theme and resolve_theme(theme) not in names:
        from textual.theme import BUILTIN_THEMES

        if theme not in BUILTIN_THEMES:
            raise KrlError(f"unknown theme '{theme}'. Choose one of: {', '.join(list(ALIASES) + names)}.")
    app = KrlApp(workspace=workspace, theme=theme, open_run=open_run)
    if theme:
        save_setting("theme", app.theme)
    app.run(headless=headless)
    if app.return_code:
        raise SystemExit(app.return_code)
