"""The runs screen: every run in the workspace, live. Filter as you type, sort, group by tag or config key, show
config columns, select runs to compare, and start/stop/resume/fork/delete/tag/rename/annotate runs through
core.procman and the registry, all from the keyboard."""

from __future__ import annotations

import re
import shlex
import threading
from dataclasses import dataclass
from typing import Any, Optional

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, Static

from app.screens.base import KrlScreen
from app.widgets.key_bar import KeyBar
from app.screens.dialogs import ConfirmScreen, PromptScreen
from app.screens.loaders import RunRow, load_runs, load_sparklines, refresh_active
from app.screens.messages import ActionDone, RunsLoaded, SparksLoaded
from app.screens.run_commands import run_command
from app.widgets.run_table import SORT_KEYS, RunTable, elapsed_s
from themes.settings import load_settings, save_setting

SPARK_ROWS = 60  # sparklines are read for the first rows on screen only
ACTIVE = ("queued", "running", "stopping")
CONFIG_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
NO_GROUP = "(none)"


@dataclass
class ConfigValuesLoaded(Message):
    values: dict[int, dict[str, Any]]


def group_label(row: RunRow, group_by: str, config_values: dict[int, dict[str, Any]]) -> str:
    """The group a run falls in: its set of tags (group_by 'tag': a run tagged a and b is in "a + b", not hidden
    under a alone; a run is drawn once) or its value of a dotted config key."""
    if group_by == "tag":
        return f"tag {' + '.join(sorted(row.tags))}" if row.tags else f"tag {NO_GROUP}"
    value = config_values.get(row.id, {}).get(group_by)
    return f"{group_by} = {NO_GROUP if value is None else value}"


def group_rows(rows: list[RunRow], group_by: str, config_values: dict[int, dict[str, Any]]) -> tuple[list[RunRow], list[str]]:
    """Rows ordered by group (groups by label, '(none)' last; the given order kept inside each), and their labels."""
    labels = {row.id: group_label(row, group_by, config_values) for row in rows}
    ordered = sorted(rows, key=lambda r: (labels[r.id].endswith(NO_GROUP), labels[r.id]))
    return ordered, [labels[r.id] for r in ordered]


def row_matches(row: RunRow, terms: list[str]) -> bool:
    haystack = " ".join([row.name, row.status, row.kind, row.model, row.backend, row.preset, *row.tags]).lower()
    return all(term in haystack for term in terms)


def sort_rows(rows: list[RunRow], key: str, reverse: bool, now: float) -> list[RunRow]:
    def value(row: RunRow):
        v = {"created": row.created_at, "name": row.name, "status": row.status, "step": row.step,
             "reward": row.reward, "correct": row.correct, "best": row.best_speedup,
             "elapsed": elapsed_s(row, now)}[key]
        return (v is None, v if v is not None else 0)

    # Missing values go last in both directions.
    present = [r for r in rows if not value(r)[0]]
    missing = [r for r in rows if value(r)[0]]
    default_desc = key in ("created", "reward", "correct", "best", "step", "elapsed")
    return sorted(present, key=lambda r: value(r)[1], reverse=default_desc != reverse) + missing


class RunsScreen(KrlScreen):
    BINDINGS = [
        Binding("enter", "open", "Open", id="runs.open"),
        Binding("n", "new", "New", id="runs.new"),
        Binding("s", "stop", "Stop", id="runs.stop"),
        Binding("r", "resume", "Resume", id="runs.resume"),
        Binding("f", "fork", "Fork", id="runs.fork"),
        Binding("d", "delete", "Delete", id="runs.delete"),
        Binding("space", "toggle_select", "Select", id="runs.select"),
        Binding("c", "compare", "Compare", id="runs.compare"),
        Binding("l", "logs", "Logs", id="runs.logs"),
        Binding("t", "tag", "Tag", id="runs.tag"),
        Binding("N", "notes", "Notes", id="runs.notes"),
        Binding("R", "rename", "Rename", show=False, id="runs.rename"),
        Binding("g", "group", "Group", id="runs.group"),
        Binding("C", "config_columns", "Columns", id="runs.columns"),
        Binding("slash", "filter", "Filter", id="runs.filter"),
        Binding("o", "sort", "Sort", id="runs.sort"),
        Binding("O", "reverse_sort", "Reverse sort", show=False, id="runs.sort_reverse"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="runs.clear_filter"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[RunRow] = []
        self.sparks: dict[int, tuple[list[float], list[float]]] = {}
        self._spark_versions: dict[int, Optional[int]] = {}
        self.selected: set[int] = set()
        self.ticks: dict[int, int] = {}
        self._beats: dict[int, tuple] = {}
        self.sort_key, self.sort_reverse = "created", False
        self.filter_text = ""
        self._data_version: Optional[int] = None
        self._runs_list_version: Optional[int] = None
        self._tick_lock = threading.Lock()
        self.loaded = threading.Event()  # set after the first rows arrive (tests, benchmarks)
        settings = load_settings()
        self.config_columns: list[str] = [k for k in settings.get("runs_config_columns") or [] if CONFIG_KEY_RE.match(str(k))]
        self.group_by: str = str(settings.get("runs_group_by") or "")
        self.config_values: dict[int, dict[str, Any]] = {}
        self._config_values_for: tuple = ()

    def compose(self) -> ComposeResult:
        yield Static(id="runs-title")
        yield Input(placeholder="filter runs: name, status, model, backend, tag…", id="runs-filter")
        yield RunTable(id="runs-table")
        yield Static(id="runs-empty")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one(RunTable).set_config_columns(self.config_columns)
        self.query_one(RunTable).focus()
        self.refresh_runs(force=True)
        if self.app.live and self.app.refresh_s:
            self.set_interval(self.app.refresh_s, self._tick)

    def _tick(self) -> None:
        # Under another screen nobody sees the table: skip, and catch up on resume.
        if self.app.screen is self:
            self.refresh_runs()

    def on_screen_resume(self) -> None:
        if self.rows:
            self.refresh_runs()

    # ---------------------------------------------------------------- workers

    @work(thread=True, exclusive=True, group="runs-refresh", exit_on_error=False)
    def refresh_runs(self, force: bool = False) -> None:
        # A tick skips while the previous one still reads, rather than pile up. A forced refresh (after an action of
        # this screen) waits for it instead: that read may have begun before the action committed, and skipped, the
        # list kept showing the old state until the next tick, forever without one (a rename done while the
        # refresh that the prompt's closing started was reading, under a loaded test run).
        if not self._tick_lock.acquire(blocking=force):
            return
        try:
            if self.app.reconcile_runs and (force or any(r.status in ACTIVE for r in self.rows)):
                _reconcile(self.app.registry("reconcile"))
            reg = self.app.registry("runs")
            # The data version moves only when another connection commits: an idle workspace costs one probe.
            version = reg.data_version()
            if force or version != self._data_version:
                self._data_version = version
                # A full read only when the list itself changed (a run created, deleted, renamed, tagged or
                # changing status, in any process); otherwise only the active runs' progress is re-read, which
                # stays cheap with thousands of finished runs.
                list_version = reg.runs_list_version()
                if force or not self.rows or list_version != self._runs_list_version:
                    self._runs_list_version = list_version
                    self.post_message(RunsLoaded(load_runs(reg), changed=True))
                else:
                    self.post_message(RunsLoaded(refresh_active(reg, self.rows), changed=True))
            elif any(r.status in ("running", "stopping") for r in self.rows):
                self.post_message(RunsLoaded(self.rows, changed=False))  # elapsed clocks move
        finally:
            self._tick_lock.release()

    @work(thread=True, exclusive=True, group="runs-sparks", exit_on_error=False)
    def load_sparks(self, rows: list[RunRow]) -> None:
        self.post_message(SparksLoaded(load_sparklines(self.app.registry("sparks"), rows)))

    @work(thread=True, group="control", exit_on_error=False)
    def control(self, verb: str, name: str, **kwargs) -> None:
        # A failure raises and takes the one error route (app/screens/base.py).
        run_command(verb)(self.app.registry("control"), name, **kwargs)
        past = {"stop": "stopping", "resume": "resumed", "fork": "forked", "delete": "deleted",
                "rename": "renamed"}.get(verb, verb)
        self.post_message(ActionDone(f"{name}: {past}"))

    def config_keys_needed(self) -> list[str]:
        return list(dict.fromkeys(self.config_columns + ([self.group_by] if self.group_by not in ("", "tag") else [])))

    @work(thread=True, exclusive=True, group="runs-config", exit_on_error=False)
    def load_config_values(self, run_ids: list[int], keys: list[str]) -> None:
        self.post_message(ConfigValuesLoaded(self.app.registry("runs-config").config_values(run_ids, keys)))

    @work(thread=True, group="control", exit_on_error=False)
    def set_notes(self, run_id: int, notes: str) -> None:
        self.app.registry("control").set_notes(run_id, notes)
        self.post_message(ActionDone("notes saved"))

    @work(thread=True, group="control", exit_on_error=False)
    def edit_notes(self, run_id: int, name: str) -> None:
        """Read the run's notes (not among the table's columns), then ask for the new text."""
        notes = self.app.registry("control").get_run(run_id).get("notes") or ""

        def answered(text: Optional[str]) -> None:
            if text is not None:
                self.set_notes(run_id, text)

        self.app.call_from_thread(self.app.push_screen, PromptScreen(f"Notes for {name}", value=notes), answered)

    @work(thread=True, group="control", exit_on_error=False)
    def change_tags(self, run_id: int, add: list[str], remove: list[str]) -> None:
        reg = self.app.registry("control")
        if add:
            reg.add_tags(run_id, add)
        if remove:
            reg.remove_tags(run_id, remove)
        self.post_message(ActionDone(f"tags: {' '.join(reg.get_run(run_id)['tags']) or '(none)'}"))

    # ---------------------------------------------------------------- messages

    def on_runs_loaded(self, message: RunsLoaded) -> None:
        if message.changed:
            for row in message.rows:
                beat = (row.heartbeat_at, row.step, row.status)
                if row.id in self._beats and self._beats[row.id] != beat:
                    self.ticks[row.id] = self.ticks.get(row.id, 0) + 1
                self._beats[row.id] = beat
            self.rows = message.rows
            self.selected &= {r.id for r in self.rows}
            if len(self.app.known_runs) != len(self.rows):
                self.app.known_runs = [r.name for r in self.rows]
        self._render_table()
        self.loaded.set()

    def on_config_values_loaded(self, message: ConfigValuesLoaded) -> None:
        self.config_values = message.values
        self._render_table()

    def on_sparks_loaded(self, message: SparksLoaded) -> None:
        self.sparks.update(message.sparks)
        self._render_table()

    def on_action_done(self, message: ActionDone) -> None:
        self.notify(message.text, severity="information", timeout=3)
        self.refresh_runs(force=True)

    # ---------------------------------------------------------------- rendering

    def visible_rows(self) -> list[RunRow]:
        terms = self.filter_text.lower().split()
        rows = [r for r in self.rows if row_matches(r, terms)] if terms else self.rows
        return sort_rows(rows, self.sort_key, self.sort_reverse, self.app.clock())

    def _show_empty_hint(self, shown: list) -> None:
        """Below an empty table, what to do next: start a run, or clear a filter that hides them all."""
        hint = self.query_one("#runs-empty", Static)
        if not self.rows:
            hint.update("[b]No runs in this workspace yet.[/b]\n  n  new run (the form starts from what this machine "
                        "can run)\n  or in a shell: [b]krl demo[/b] (a recorded run through the real evaluator, no "
                        "GPU or key needed)\n  ?  every key")
        elif not shown:
            hint.update(f"No run matches the filter {self.filter_text!r}: esc on the table clears it "
                        f"({len(self.rows)} run(s) in all).")
        hint.display = not shown

    def _render_table(self) -> None:
        rows = self.visible_rows()
        table = self.query_one(RunTable)
        keys = self.config_keys_needed()
        wanted = (tuple(keys), tuple(r.id for r in self.rows))
        if keys and wanted != self._config_values_for:
            self._config_values_for = wanted
            self.load_config_values([r.id for r in self.rows], keys)
        groups = None
        if self.group_by:
            rows, groups = group_rows(rows, self.group_by, self.config_values)
        table.show(rows, self.sparks, self.selected, self.ticks, self.app.clock(), self.config_values, groups)
        self._show_empty_hint(rows)
        stale = [r for r in rows[:SPARK_ROWS] if self._spark_versions.get(r.id, -2) != r.step]
        if stale:
            for r in stale:
                self._spark_versions[r.id] = r.step
            self.load_sparks(stale)
        running = sum(r.status == "running" for r in self.rows)
        queued = sum(r.status == "queued" for r in self.rows)
        arrow = "↑" if self.sort_reverse else "↓"
        parts = [self.app.workspace_label, f"{len(self.rows)} runs",
                 f"{running} running", f"{queued} queued", f"sort: {self.sort_key} {arrow}"]
        if self.filter_text:
            parts.append(f"filter: {self.filter_text!r} ({len(rows)} shown)")
        if self.group_by:
            parts.append(f"group: {self.group_by}")
        if self.selected:
            parts.append(f"{len(self.selected)} selected")
        self.query_one("#runs-title", Static).update(Text.assemble(("kernelrl  ", "bold"), "  ·  ".join(parts)))

    # ---------------------------------------------------------------- filter / sort / select

    def action_filter(self) -> None:
        box = self.query_one("#runs-filter", Input)
        box.display = True
        # Focus after this key is fully handled, so the "/" itself is not typed into the box.
        self.call_after_refresh(box.focus)

    def action_clear_filter(self) -> None:
        box = self.query_one("#runs-filter", Input)
        box.value = ""
        box.display = False
        self.query_one(RunTable).focus()

    @on(Input.Changed, "#runs-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self._render_table()

    @on(Input.Submitted, "#runs-filter")
    def _filter_submitted(self) -> None:
        self.query_one(RunTable).focus()
        if not self.filter_text:
            self.query_one("#runs-filter").display = False

    def action_sort(self) -> None:
        self.sort_key = SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)]
        self._render_table()

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._render_table()

    @on(RunTable.HeaderSelected)
    def _header_clicked(self, event: RunTable.HeaderSelected) -> None:
        key = event.column
        if key in SORT_KEYS:
            self.sort_reverse = not self.sort_reverse if key == self.sort_key else False
            self.sort_key = key
            self._render_table()

    def action_toggle_select(self) -> None:
        run_id = self.current_run_id()
        if run_id is None:
            return
        self.selected ^= {run_id}
        self._render_table()

    # ---------------------------------------------------------------- actions

    def current_run_id(self) -> Optional[int]:
        return self.query_one(RunTable).current_run_id

    def current_row(self) -> Optional[RunRow]:
        run_id = self.current_run_id()
        return next((r for r in self.rows if r.id == run_id), None)

    @on(RunTable.RowSelected)
    def _row_selected(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        row = self.current_row()
        if row:
            self.app.open_run_detail(row.id)

    def action_logs(self) -> None:
        row = self.current_row()
        if row:
            self.app.open_run_detail(row.id, tab="logs")

    def action_new(self) -> None:
        self.app.open_new_run()

    def action_compare(self) -> None:
        chosen = [r.id for r in self.rows if r.id in self.selected]
        if not 2 <= len(chosen) <= 8:
            self.notify("select 2–8 runs with space, then press c", severity="warning")
            return
        groups: dict[str, list[int]] = {}
        if self.group_by:  # grouped runs compare as groups: each group's mean ± std (b in compare toggles)
            for row in self.rows:
                if row.id in chosen:
                    groups.setdefault(group_label(row, self.group_by, self.config_values), []).append(row.id)
        self.app.open_compare(chosen, groups or None)

    def action_stop(self) -> None:
        row = self.current_row()
        if row is None:
            return
        if row.status not in ACTIVE:
            self.notify(f"{row.name} is {row.status}; nothing to stop", severity="warning")
            return
        self.notify(f"stopping {row.name}…")
        # wait=False: signal and return; reconcile() escalates to SIGKILL after the grace period.
        self.control("stop", row.name, wait=False)

    def action_resume(self) -> None:
        row = self.current_row()
        if row is None:
            return
        if row.status not in ("stopped", "failed", "crashed"):
            self.notify(f"{row.name} is {row.status}; only stopped, failed or crashed runs resume",
                        severity="warning")
            return
        self.control("resume", row.name, detach=True)

    def action_fork(self) -> None:
        row = self.current_row()
        if row is None:
            return

        def answered(text: Optional[str]) -> None:
            if not text:
                return
            words = shlex.split(text)
            self.control("fork", row.name, new_name=words[0], overrides=words[1:])

        self.app.push_screen(PromptScreen(f"Fork {row.name}: new name, then overrides (key=value …)",
                                          placeholder=f"{row.name}-fork optim.lr=1e-5"), answered)

    def action_delete(self) -> None:
        row = self.current_row()
        if row is None:
            return
        if row.status in ("running", "stopping"):  # refused before asking, as procman would after: a live job
            # would keep writing to what is deleted (a queued run has no job yet and can go).
            self.notify(f"{row.name} is {row.status}: stop it first with s, then delete it with d.",
                        severity="warning")
            return

        def answered(yes: Optional[bool]) -> None:
            if yes:
                self.control("delete", row.name)

        self.app.push_screen(ConfirmScreen(f"Delete run {row.name} and all its data?"), answered)

    def action_notes(self) -> None:
        row = self.current_row()
        if row is not None:
            self.edit_notes(row.id, row.name)

    def action_rename(self) -> None:
        row = self.current_row()
        if row is None:
            return

        def answered(text: Optional[str]) -> None:
            if text and text.strip() and text.strip() != row.name:
                self.control("rename", row.name, new_name=text.strip())

        self.app.push_screen(PromptScreen(f"Rename {row.name} (its folder moves too)", value=row.name), answered)

    def action_group(self) -> None:
        def answered(text: Optional[str]) -> None:
            if text is None:
                return
            text = text.strip()
            if text and text != "tag" and not CONFIG_KEY_RE.match(text):
                self.notify(f"'{text}' is neither 'tag' nor a dotted config key", severity="error")
                return
            self.group_by = text
            save_setting("runs_group_by", text)
            self._config_values_for = ()
            self._render_table()

        self.app.push_screen(PromptScreen("Group runs by: tag, or a dotted config key (empty: no groups)",
                                          placeholder="optim.lr", value=self.group_by), answered)

    def action_config_columns(self) -> None:
        def answered(text: Optional[str]) -> None:
            if text is None:
                return
            keys = text.split()
            bad = [k for k in keys if not CONFIG_KEY_RE.match(k)]
            if bad:
                self.notify(f"not a dotted config key: {', '.join(bad)}", severity="error")
                return
            self.config_columns = keys
            save_setting("runs_config_columns", keys)
            self.query_one(RunTable).set_config_columns(keys)
            self._config_values_for = ()
            self._render_table()

        self.app.push_screen(PromptScreen("Config columns: dotted keys, space-separated (empty: none)",
                                          placeholder="optim.lr dataset.group_size max_turns",
                                          value=" ".join(self.config_columns)), answered)

    def action_tag(self) -> None:
        row = self.current_row()
        if row is None:
            return

        def answered(text: Optional[str]) -> None:
            if text is None:
                return
            words = text.split()
            self.change_tags(row.id, [w for w in words if not w.startswith("-")],
                             [w[1:] for w in words if w.startswith("-") and len(w) > 1])

        self.app.push_screen(PromptScreen(f"Tags for {row.name} (word adds, -word removes)",
                                          value=" ".join(row.tags)), answered)


def _reconcile(reg) -> None:
    try:
        from core import procman
    except ImportError:
        return
    procman.reconcile(reg)
