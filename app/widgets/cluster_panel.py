"""The Cluster tab of a run that evaluates on a Ray cluster or a `krl serve` service: the cluster's totals and one row
per node and GPU, from the snapshot the job writes to its folder (core/cluster_snapshot.py); an old one says so."""

from __future__ import annotations

import time
from typing import Any, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from app.widgets.format import fmt_duration, fmt_float, printable, theme_colour
from core.cluster_snapshot import is_stale, snapshot_age_s

COLUMNS = ("node", "device", "GPU", "util %", "state", "in flight", "done", "failures", "evals/min",
           "compile queue", "compiles/min", "note")
# Counters worth a glance when the cluster reports them (Ray driver's counters; absent through the service).
COUNTERS = (("retries", "retries"), ("actor_deaths", "actor deaths"), ("crashed_after_retry", "crashed after retry"),
            ("rejected_busy", "rejected busy"))


def _number(value: Any, digits: int = 0) -> str:
    if value is None:
        return "–"
    return str(int(value)) if digits == 0 else fmt_float(float(value), digits)


def row_cells(row: dict[str, Any]) -> tuple[str, ...]:
    """One table row's cells; a figure the evaluator does not report is '–', never a made-up zero."""
    return (printable(row.get("node") or "?"), printable(row.get("device") or "?"),
            printable(row.get("gpu_name") or "–"), _number(row.get("gpu_util_percent")), row.get("state") or "?",
            _number(row.get("in_flight")), _number(row.get("done")), _number(row.get("failures")),
            _number(row.get("evals_per_min"), 1), _number(row.get("compile_queue_depth")),
            _number(row.get("compiles_per_min"), 1), printable(row.get("why") or "")[:120])


def summary_text(snapshot: Optional[dict[str, Any]], now: float, where: str = "", warn: str = "",
                 error: str = "") -> Text:
    """The lines above the table: address and totals, when the snapshot was taken (stale or final), its error."""
    text = Text()
    if snapshot is None:
        text.append(f"no cluster snapshot yet{f' at {where}' if where else ''}: the job writes one every few seconds "
                    "once its evaluator has started", style="dim")
        return text
    totals = snapshot.get("totals") or {}
    text.append(f"{printable(snapshot.get('address') or '?')}", style="bold")
    text.append(f"  {totals.get('nodes', 0)} node(s) · {totals.get('devices', 0)} device(s), "
                f"{totals.get('ready', 0)} ready · eval queue {_number(totals.get('queue_depth'))} · "
                f"in flight {_number(totals.get('in_flight'))} · done {_number(totals.get('done'))} · "
                f"{_number(totals.get('evals_per_min'), 1)} evals/min · failures {_number(totals.get('failures'))}")
    text.append(f"\ncompile queue {_number(totals.get('compile_queue_depth'))} · "
                f"compiling {_number(totals.get('compiles_in_flight'))} · "
                f"{_number(totals.get('compiles_per_min'), 1)} compiles/min")
    if totals.get("compile_actors"):
        text.append(f" on {totals['compile_actors']} compile actor(s) (rows 'compile xN')")
    counters = snapshot.get("counters") or {}
    seen = [f"{label} {int(counters[key])}" for key, label in COUNTERS if counters.get(key) is not None]
    if seen:
        text.append(" · " + " · ".join(seen))
    taken = time.strftime("%H:%M:%S", time.localtime(float(snapshot.get("taken_at") or 0)))
    age = fmt_duration(snapshot_age_s(snapshot, now))
    text.append("\n")
    if snapshot.get("final"):
        text.append(f"final snapshot {taken} ({age} ago), written as the run's evaluator closed", style="dim")
    elif is_stale(snapshot, now):
        text.append(f"STALE: last snapshot {taken}, {age} ago: the job has stopped recording (stopped, killed or "
                    "frozen) or its evaluator does not answer", style=f"bold {warn}")
    else:
        text.append(f"snapshot {taken} ({age} ago)", style="dim")
    if snapshot.get("error"):
        text.append(f"\nthe evaluator's stats failed: {printable(snapshot['error'])}", style=error)
    return text


class ClusterPanel(Vertical):
    """Shows the latest cluster snapshot: a summary and a table of the rows."""

    DEFAULT_CSS = """
    ClusterPanel { height: 1fr; }
    ClusterPanel #cluster-summary { height: auto; padding: 0 1; background: $surface; }
    ClusterPanel #cluster-table { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot: Optional[dict[str, Any]] = None
        self._shown_rows: Optional[list[tuple[str, ...]]] = None
        self._latest: Optional[tuple] = None

    def compose(self) -> ComposeResult:
        yield Static(id="cluster-summary")
        yield DataTable(id="cluster-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        if self._latest is not None:
            self.show(*self._latest)

    def show(self, snapshot: Optional[dict[str, Any]], now: float, where: str = "") -> None:
        self._latest = (snapshot, now, where)
        if not self.is_mounted or not self.query("#cluster-table"):
            return  # on_mount shows it (a snapshot can arrive before the children are there)
        self.snapshot = snapshot
        self.query_one("#cluster-summary", Static).update(summary_text(
            snapshot, now, where, theme_colour(self.app, "warning"), theme_colour(self.app, "error")))
        rows = [row_cells(row) for row in (snapshot or {}).get("rows", [])]
        if rows == self._shown_rows:
            return  # unchanged figures: keep the table (and its cursor) as it is
        self._shown_rows = rows
        table = self.query_one("#cluster-table", DataTable)
        cursor = table.cursor_row
        table.clear()
        for cells in rows:
            table.add_row(*cells)
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1))

    def shown_rows(self) -> list[tuple[str, ...]]:
        """The table's cells as shown (for tests and exports)."""
        return list(self._shown_rows or [])
