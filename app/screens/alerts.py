"""Alerts: the app's watcher reads run statuses and latest metrics, feeds core.alerts and, when a rule fires, rings
the terminal bell, shows a toast and asks the terminal for a desktop notification (OSC 9 / OSC 777). The alerts
screen lists what fired and edits the rules, which are kept in the settings file (config dir)."""

from __future__ import annotations

import os
import time
from typing import Any, Optional

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from app.screens.base import KrlScreen
from app.screens.dialogs import PromptScreen
from app.widgets.format import theme_colour
from app.widgets.key_bar import KeyBar
from core.alerts import DEFAULT_RULES, Alert, AlertState, parse_rule, parse_rules
from themes.settings import load_settings, save_setting

RULES_KEY = "alert_rules"
MAX_KEPT = 500
ACTIVE = ("queued", "running", "stopping")
FIRST_CHECK_S = 1.5


def saved_rules() -> list[str]:
    rules = load_settings().get(RULES_KEY)
    return [str(r) for r in rules] if isinstance(rules, list) else list(DEFAULT_RULES)


def desktop_escape(title: str, body: str, environ: Optional[dict[str, str]] = None) -> str:
    """The escape sequence asking this terminal for a desktop notification: OSC 777 where rxvt-style terminals
    (foot, urxvt, VTE, Ghostty) understand it, OSC 9 otherwise (iTerm2, WezTerm, Windows Terminal, kitty);
    terminals that know neither ignore it. Control characters are stripped from the text."""
    env = os.environ if environ is None else environ

    def clean(text: str) -> str:
        return "".join(c for c in text if c.isprintable() and c != ";")[:200]

    term = env.get("TERM", "")
    if "rxvt" in term or "foot" in term or env.get("VTE_VERSION") or "ghostty" in term:
        return f"\x1b]777;notify;{clean(title)};{clean(body)}\x07"
    return f"\x1b]9;{clean(title)}: {clean(body)}\x07"


class AlertWatcher:
    """Owned by the app: one cheap probe a tick (Registry.data_version), a read only when something committed."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.fired: list[Alert] = []
        self.names: dict[int, str] = {}  # run id -> its name now: a fired alert follows its run through a rename
        self.errors: list[str] = []
        self.state = AlertState([])
        self._data_version: Optional[int] = None
        self._list_version: Optional[int] = None
        self.set_rules(saved_rules())

    def set_rules(self, texts: list[str]) -> None:
        rules, self.errors = parse_rules(texts)
        self.state = AlertState(rules)
        self._data_version = self._list_version = None  # observe everything afresh (nothing fires on that)

    def start(self) -> None:
        # The first read (every run's status) waits until the first paint is out of the way.
        self.app.set_timer(FIRST_CHECK_S if self.app.live else 0.01, self.check)
        if self.app.live and self.app.refresh_s:
            self.app.set_interval(self.app.refresh_s, self.check)

    def check(self) -> None:
        self.app.run_worker(self._check, thread=True, exclusive=True, group="alerts", exit_on_error=False)

    def _check(self) -> None:
        reg = self.app.registry("alerts")
        version = reg.data_version()
        if version == self._data_version:
            return
        self._data_version = version
        list_version = reg.runs_list_version()
        columns = ("name", "status", "summary")
        # Every run when the list changed (a status moved); otherwise only active runs' metrics can have moved.
        runs = reg.list_runs(columns=columns) if list_version != self._list_version else \
            reg.list_runs(status=ACTIVE, columns=columns)
        self._list_version = list_version
        now = time.time()
        fired = []
        for run in runs:
            last = (run.get("summary") or {}).get("last") or {}
            self.names[run["id"]] = run["name"]
            fired += self.state.observe(run["id"], run["name"], run["status"], last, now)
        if fired:
            self.app.call_from_thread(self.ring, fired)

    def shown(self, alert: Alert) -> tuple[str, str]:
        """(run name, message) of a fired alert under the run's name now, the old one kept in brackets."""
        name = self.names.get(alert.run_id, alert.run_name)
        if name == alert.run_name:
            return name, alert.message
        message = alert.message
        if message.startswith(alert.run_name):
            message = name + message[len(alert.run_name):]
        return f"{name} (was {alert.run_name})", message

    def ring(self, alerts: list[Alert]) -> None:
        self.fired = (self.fired + alerts)[-MAX_KEPT:]
        self.app.bell()
        for alert in alerts:
            self.app.notify(alert.message, title="alert", severity=alert.severity, timeout=10)
        driver = getattr(self.app, "_driver", None)
        if driver is not None and not self.app.is_headless:
            body = alerts[0].message + (f" (+{len(alerts) - 1} more)" if len(alerts) > 1 else "")
            driver.write(desktop_escape("kernelrl", body))
        for screen in self.app.screen_stack:
            if isinstance(screen, AlertsScreen):
                screen.fill()


class AlertsScreen(KrlScreen):
    BINDINGS = [
        Binding("escape", "back", "Back", id="alerts.back"),
        Binding("a", "add_rule", "Add rule", id="alerts.add"),
        Binding("d", "delete_rule", "Delete rule", id="alerts.delete"),
        Binding("enter", "open_run", "Open run", id="alerts.open"),
    ]

    def compose(self) -> ComposeResult:
        yield Static("[b]Alerts[/b] · rules ring the bell and notify when they turn true", id="alerts-title")
        yield Static("rules (a adds, d deletes the highlighted one)", classes="section-title")
        yield DataTable(id="rules-table", cursor_type="row")
        yield Static("fired (newest first; enter opens the run)", classes="section-title")
        yield DataTable(id="fired-table", cursor_type="row", zebra_stripes=True)
        yield KeyBar()

    @property
    def watcher(self) -> AlertWatcher:
        return self.app.alert_watcher

    def on_mount(self) -> None:
        self.query_one("#rules-table", DataTable).add_columns("rule", "kind")
        self.query_one("#fired-table", DataTable).add_columns("time", "run", "rule", "what happened")
        self.fill()
        self.query_one("#fired-table").focus()

    def fill(self) -> None:
        rules = self.query_one("#rules-table", DataTable)
        rules.clear()
        for rule in self.watcher.state.rules:
            rules.add_row(rule.text, rule.kind, key=rule.text)
        for error in self.watcher.errors:
            rules.add_row(Text(error, style=theme_colour(self.app, "error")), "invalid")
        fired = self.query_one("#fired-table", DataTable)
        fired.clear()
        colours = {"error": "error", "warning": "warning", "information": "success"}
        for index, alert in reversed(list(enumerate(self.watcher.fired))):
            run_name, message = self.watcher.shown(alert)
            fired.add_row(time.strftime("%H:%M:%S", time.localtime(alert.time)), run_name, alert.rule,
                          Text(message, style=theme_colour(self.app, colours.get(alert.severity, "foreground"))),
                          key=str(index))
        if not self.watcher.fired:
            fired.add_row("", "", "", Text("nothing has fired since the TUI opened", style="dim"))

    def _save(self, texts: list[str]) -> None:
        save_setting(RULES_KEY, texts)
        self.watcher.set_rules(texts)
        self.watcher.check()
        self.fill()

    def action_add_rule(self) -> None:
        def answered(text: Optional[str]) -> None:
            if not text:
                return
            from core.errors import KrlError

            try:
                rule = parse_rule(text)
            except KrlError as exc:
                self.notify(str(exc), severity="error", timeout=8)
                return
            self._save([r.text for r in self.watcher.state.rules if r.text != rule.text] + [rule.text])
            if rule.kind == "metric":
                self._check_metric_known(rule.key)

        self.app.push_screen(PromptScreen("Alert rule: a status (crashed, failed, finished, stopped) or a metric "
                                          "expression", placeholder="env/all/reward/total > 0.5"), answered)

    @work(thread=True, group="alerts-check", exit_on_error=False)
    def _check_metric_known(self, key: str) -> None:
        """Warn when no recent run logs the rule's metric (a misspelt key would never fire), with close matches."""
        from core.errors import did_you_mean

        reg = self.app.registry("alerts-check")
        known: set[str] = set()
        for run in reg.list_runs(columns=("name",))[:50]:
            known.update(reg.metric_keys(run["id"]))
        if known and key not in known:
            self.app.call_from_thread(
                self.notify, f"no run logs a metric '{key}', so this rule cannot fire yet.{did_you_mean(key, known)}",
                severity="warning", timeout=10)

    def action_delete_rule(self) -> None:
        table = self.query_one("#rules-table", DataTable)
        if not table.row_count:
            return
        key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        self._save([r.text for r in self.watcher.state.rules if r.text != key])

    @on(DataTable.RowSelected, "#fired-table")
    def _fired_selected(self) -> None:
        self.action_open_run()

    def action_open_run(self) -> None:
        table = self.query_one("#fired-table", DataTable)
        if not self.watcher.fired or not table.row_count:
            return
        index = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        self.app.open_run_detail(self.watcher.fired[int(index)].run_id)

    def action_back(self) -> None:
        self.app.pop_screen()
