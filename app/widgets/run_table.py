"""The runs table: one line per run with a live status glyph, sparklines and a selection mark for compare, config
columns of the user's choice and optional group header lines. Drawn with Textual's line API (only visible lines
render, fixed column widths, no per-cell measuring), so a workspace of thousands of runs paints as fast as ten."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional, Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from app.screens.loaders import RunRow
from app.widgets.format import (STATUS_COLOUR, fmt_duration, fmt_float, fmt_speedup, printable, status_glyph,
                               theme_colour)
from app.widgets.sparkline import sparkline_text

# (key, header, width)
COLUMNS = (("sel", " ", 1), ("name", "name", 24), ("status", "status", 11), ("kind", "kind", 6),
           ("model", "model", 16), ("backend", "backend", 7), ("step", "step/total", 10), ("reward", "reward", 15),
           ("correct", "correct", 15), ("best", "best", 7), ("elapsed", "elapsed", 8), ("gpus", "gpus", 5),
           ("tags", "tags", 18))
COLUMN_KEYS = tuple(c[0] for c in COLUMNS)
SORT_KEYS = ("created", "name", "status", "step", "reward", "correct", "best", "elapsed")
GAP = 2
TOTAL_WIDTH = sum(w for _, _, w in COLUMNS) + GAP * len(COLUMNS)
CONFIG_COLUMN_WIDTH = 14
# Which built-in columns give way, first to last, when the table is wider than its widget: name, status and step
# never do, then reward and best are the last to go (issue 26 item 9). The user's config columns stay.
DROP_ORDER = ("kind", "gpus", "backend", "model", "elapsed", "tags", "correct", "best", "reward")


def whole_tags(tags: Sequence[str], width: int) -> str:
    """As many whole tags as fit in width, then "+N" for the rest: a tag is never cut in the middle."""
    shown: list[str] = []
    for index, tag in enumerate(tags):
        rest = len(tags) - index - 1
        candidate = " ".join(shown + [tag])
        if len(candidate) + (len(f" +{rest}") if rest else 0) <= width:
            shown.append(tag)
            continue
        more = len(tags) - len(shown)
        return (" ".join(shown) + f" +{more}").strip() if shown else (tag[:max(1, width - 1)] + "…" if width > 1 else "")
    return " ".join(shown)


def fit_columns(columns: Sequence[tuple[str, str, int]], width: int) -> tuple[tuple[str, str, int], ...]:
    """The columns shown in `width` cells: built-in ones dropped in DROP_ORDER until the rest fits; the room left
    goes to tags, so they are not cut when there is space. width <= 0 (not laid out yet): all of them."""
    shown = list(columns)
    if width <= 0:
        return tuple(shown)

    def total() -> int:
        return sum(w for _, _, w in shown) + GAP * len(shown)

    for key in DROP_ORDER:
        if total() <= width:
            break
        shown = [c for c in shown if c[0] != key]
    spare = width - total()
    if spare > 0:
        shown = [(k, h, w + spare) if k == "tags" else (k, h, w) for k, h, w in shown]
    return tuple(shown)


def elapsed_s(row: RunRow, now: float) -> Optional[float]:
    if row.started_at is None:
        return None
    end = row.ended_at if row.status not in ("running", "stopping") and row.ended_at else now
    return end - row.started_at


class RunTable(ScrollView, can_focus=True):
    """Rows keyed by run id; the screen hands it the rows to show, in order."""

    DEFAULT_CSS = """
    RunTable { height: 1fr; }
    RunTable > .run-table--header { text-style: bold; color: $primary; background: $panel; }
    RunTable > .run-table--cursor { background: $primary 35%; }
    RunTable:focus > .run-table--cursor { background: $primary 55%; text-style: bold; }
    RunTable > .run-table--zebra { background: $surface; }
    RunTable > .run-table--group { text-style: bold; color: $accent; background: $panel; }
    """
    COMPONENT_CLASSES = {"run-table--header", "run-table--cursor", "run-table--zebra", "run-table--group"}
    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False, id="table.up"),
        Binding("down,j", "cursor(1)", "Down", show=False, id="table.down"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="table.page_up"),
        Binding("pagedown", "page(1)", "Page down", show=False, id="table.page_down"),
        Binding("home", "jump(0)", "First", show=False, id="table.first"),
        Binding("end", "jump(-1)", "Last", show=False, id="table.last"),
        Binding("enter", "select", "Open", show=False, id="table.select"),
    ]
    cursor_row: reactive[int] = reactive(0)

    @dataclass
    class RowSelected(Message):
        run_id: int

    @dataclass
    class HeaderSelected(Message):
        column: str

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._rows: list[RunRow] = []
        self._inputs: dict[int, tuple] = {}  # run id -> what its cells are drawn from
        self._cells: dict[int, list[Text]] = {}  # run id -> cells (a cache; cleared when the theme changes)
        self._strips: dict[tuple, Strip] = {}
        self.columns = COLUMNS
        self.shown_columns = COLUMNS  # what fits the widget's width (fit_columns); cells stay per column
        self._shown_index: list[int] = list(range(len(COLUMNS)))
        self._config_values: dict[int, dict] = {}
        # What each line below the header shows: a row index (>= 0) or a group header (-1 - index into _groups).
        self._lines: list[int] = []
        self._groups: list[str] = []
        self._line_of_row: list[int] = []

    def set_config_columns(self, keys: Sequence[str]) -> None:
        """Add a column per dotted config key (after the built-in ones); values come with `show`."""
        self.columns = COLUMNS + tuple((f"config:{k}", k.rsplit(".", 1)[-1], CONFIG_COLUMN_WIDTH) for k in keys)
        self._cells.clear()
        self._fit()

    def _fit(self) -> None:
        width = self.scrollable_content_region.width if self.is_mounted else 0
        shown = fit_columns(self.columns, width)
        if shown != self.shown_columns:
            self.shown_columns = shown
            keys = [c[0] for c in self.columns]
            self._shown_index = [keys.index(c[0]) for c in shown]
            self.virtual_size = Size(sum(w for _, _, w in shown) + GAP * len(shown), len(self._lines) + 1)
        self._strips.clear()
        self.refresh()

    def on_resize(self, _event: events.Resize) -> None:
        self._fit()

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._invalidate(cells=True))

    def _invalidate(self, cells: bool = False) -> None:
        if cells:
            self._cells.clear()
        self._strips.clear()
        self.refresh()

    # ---------------------------------------------------------------- data

    @property
    def row_count(self) -> int:
        return len(self._rows)

    @property
    def current_run_id(self) -> Optional[int]:
        if not self._rows:
            return None
        return self._rows[min(self.cursor_row, len(self._rows) - 1)].id

    def names(self) -> list[str]:
        return [r.name for r in self._rows]

    def cell_text(self, run_id: int, column: str) -> str:
        return self._cells_of(run_id)[[c[0] for c in self.columns].index(column)].plain

    def group_labels(self) -> list[str]:
        return list(self._groups)

    def _cells_of(self, run_id: int) -> list[Text]:
        cells = self._cells.get(run_id)
        if cells is None:
            cells = self._cells[run_id] = self._cells_for(*self._inputs[run_id])
        return cells

    def show(self, rows: Sequence[RunRow], sparks: dict[int, tuple[list[float], list[float]]], selected: set[int],
             ticks: dict[int, int], now: float, config_values: Optional[dict[int, dict]] = None,
             groups: Optional[Sequence[str]] = None) -> None:
        """Show rows in order, keeping the cursor on the same run; only changed rows are re-rendered. `groups`
        (one label per row, rows already ordered by it) puts a header line before each group."""
        current = self.current_run_id
        self._rows = list(rows)
        self._config_values = config_values or {}
        self._layout_lines(groups)
        changed = set()
        for row in self._rows:
            elapsed = fmt_duration(elapsed_s(row, now))
            extra = tuple(self._config_values.get(row.id, {}).get(c[0][7:]) for c in self.columns[len(COLUMNS):])
            inputs = (row, sparks.get(row.id), row.id in selected, ticks.get(row.id, 0), elapsed, repr(extra))
            if self._inputs.get(row.id) != inputs:
                self._inputs[row.id] = inputs
                self._cells.pop(row.id, None)  # drawn again when it is next on screen
                changed.add(row.id)
        if len(self._inputs) > 2 * len(self._rows) + 100:
            keep = {r.id for r in self._rows}
            self._inputs = {k: v for k, v in self._inputs.items() if k in keep}
            self._cells = {k: v for k, v in self._cells.items() if k in keep}
        width = sum(w for _, _, w in self.shown_columns) + GAP * len(self.shown_columns)
        self.virtual_size = Size(width, len(self._lines) + 1)
        ids = [r.id for r in self._rows]
        if current in ids:
            self.cursor_row = ids.index(current)
        else:
            self.cursor_row = min(self.cursor_row, max(0, len(ids) - 1))
        # Lines are cached by run and position: only the changed runs' lines are drawn again (a live run ticking
        # every second must not redraw the whole screen of rows).
        self._strips = {key: strip for key, strip in self._strips.items() if key[0] not in changed and key[0] != "group"} \
            if len(self._strips) < 4 * len(self._rows) + 200 else {}
        self.refresh()

    def _layout_lines(self, groups: Optional[Sequence[str]]) -> None:
        self._lines, self._groups, self._line_of_row = [], [], []
        previous = object()
        counts = Counter(groups or ())
        for index in range(len(self._rows)):
            if groups is not None and groups[index] != previous:
                previous = groups[index]
                count = counts[previous]
                self._groups.append(f"▾ {previous}  ({count} run{'s' if count != 1 else ''})")
                self._lines.append(-len(self._groups))
            self._line_of_row.append(len(self._lines))
            self._lines.append(index)

    def _cells_for(self, row: RunRow, spark, selected: bool, tick: int, elapsed: str, _extra: str = "") -> list[Text]:
        colour = theme_colour(self.app, STATUS_COLOUR.get(row.status, "foreground"))
        muted = theme_colour(self.app, "foreground-muted")
        reward_spark, correct_spark = spark or ([], [])
        step = "–" if row.done is None else str(row.done)
        total = "?" if row.total_steps is None else str(row.total_steps)
        gpus = ",".join(map(str, row.gpus)) if row.gpus else (f"({row.gpus_requested})" if row.gpus_requested else "–")
        return [
            Text("●" if selected else " ", style=theme_colour(self.app, "accent")),
            Text(printable(row.name), style="bold" if row.status == "running" else ""),
            Text(f"{status_glyph(row.status, tick)} {row.status}", style=colour),
            Text(row.kind),
            Text(row.model[-16:], style=muted),
            Text(row.backend),
            Text(f"{step}/{total}"),
            Text.assemble(f"{fmt_float(row.reward):>6} ", (sparkline_text(reward_spark, 8), colour)),
            Text.assemble(f"{fmt_float(row.correct):>6} ", (sparkline_text(correct_spark, 8), colour)),
            Text(fmt_speedup(row.best_speedup)),
            Text(elapsed),
            Text(gpus),
            Text(" ".join(row.tags), style=muted),
        ] + [Text("–" if value is None else str(value)) for value in
             (self._config_values.get(row.id, {}).get(key[7:]) for key, _h, _w in self.columns[len(COLUMNS):])]

    # ---------------------------------------------------------------- drawing

    def _line(self, cells: Sequence[Text], style: Style) -> list[Segment]:
        segments: list[Segment] = []
        console = self.app.console
        for (key, _header, width), index in zip(self.shown_columns, self._shown_index):
            cell = cells[index]
            if key == "tags" and cell.plain and self._rows:
                cell = Text(whole_tags(cell.plain.split(" "), width), style=cell.style)
            text = cell.copy()
            text.truncate(width, overflow="ellipsis", pad=True)
            text.append(" " * GAP)
            segments.extend(Segment(seg.text, style + seg.style if seg.style else style)
                            for seg in text.render(console) if seg.text)
        return segments

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        if y == 0:
            key = ("header", scroll_x, width)
            if key not in self._strips:
                style = self.get_component_rich_style("run-table--header")
                strip = Strip(self._line([Text(h) for _, h, _ in self.columns], style))
                self._strips[key] = strip.extend_cell_length(scroll_x + width, style).crop(scroll_x, scroll_x + width)
            return self._strips[key]
        line = scroll_y + y - 1
        base = self.rich_style
        if line >= len(self._lines):
            return Strip.blank(width, base)
        index = self._lines[line]
        if index < 0:  # a group header
            key = ("group", index, scroll_x, width)
            if key not in self._strips:
                style = base + self.get_component_rich_style("run-table--group")
                strip = Strip([Segment(self._groups[-1 - index], style)])
                self._strips[key] = strip.extend_cell_length(scroll_x + width, style).crop(scroll_x, scroll_x + width)
            return self._strips[key]
        row = self._rows[index]
        cursor = index == self.cursor_row
        key = (row.id, cursor, index % 2, scroll_x, width, self.has_focus)
        strip = self._strips.get(key)
        if strip is None:
            style = base
            if index % 2:
                style += self.get_component_rich_style("run-table--zebra")
            if cursor:
                style += self.get_component_rich_style("run-table--cursor")
            strip = Strip(self._line(self._cells_of(row.id), style))
            strip = strip.extend_cell_length(scroll_x + width, style).crop(scroll_x, scroll_x + width)
            self._strips[key] = strip
        return strip

    def watch_cursor_row(self, old: int, new: int) -> None:
        self.refresh()
        if self.is_mounted and self._rows:
            # Keep the cursor line visible (line 0 is the header).
            line = self._line_of_row[new] if new < len(self._line_of_row) else new
            self.scroll_to_region(Region(0, line + 1, 1, 1), animate=False, force=True, spacing=None)

    def on_focus(self) -> None:
        self._invalidate()

    def on_blur(self) -> None:
        self._invalidate()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    # ---------------------------------------------------------------- input

    def move_cursor(self, row: int) -> None:
        if self._rows:
            self.cursor_row = max(0, min(row, len(self._rows) - 1))

    def action_cursor(self, delta: int) -> None:
        self.move_cursor(self.cursor_row + delta)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor_row + direction * max(1, self.size.height - 2))

    def action_jump(self, where: int) -> None:
        self.move_cursor(len(self._rows) - 1 if where < 0 else 0)

    def action_select(self) -> None:
        if self.current_run_id is not None:
            self.post_message(self.RowSelected(self.current_run_id))

    def on_click(self, event: events.Click) -> None:
        y = event.y
        if y == 0:
            x = event.x + int(self.scroll_offset.x)
            for key, _header, width in self.shown_columns:
                if x < width + GAP:
                    self.post_message(self.HeaderSelected(key))
                    return
                x -= width + GAP
            return
        line = int(self.scroll_offset.y) + y - 1
        index = self._lines[line] if 0 <= line < len(self._lines) else -1
        if 0 <= index < len(self._rows):
            if index == self.cursor_row and event.chain >= 2:
                self.action_select()
            self.cursor_row = index
