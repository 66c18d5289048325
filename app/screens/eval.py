"""Evaluation screens: an eval run's headline numbers, its per-problem grid (problem x sample/turn, coloured by
verdict, speedup in the cell), the distribution of speedups, any sample opened in the trajectory inspector; and
B-against-A compare with paired bootstrap intervals. Also starts evaluations of a run's checkpoint."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Static

from app.screens.base import KrlScreen
from app.widgets.feedback_panel import VERDICT_COLOUR
from app.widgets.format import theme_colour
from app.widgets.key_bar import KeyBar

HEADLINE = (("pass@1", "pass@1"), ("fast_1 kb", "fast_p/eager/kernelbench/1"),
            ("fast_1 best", "fast_p/eager/best_of_n/1"), ("fast_1.5 kb", "fast_p/eager/kernelbench/1.5"),
            ("geomean", "geomean_speedup/eager"), ("compile", "compile_rate"), ("correct", "correct_rate"),
            ("hack", "hack_rate"), ("sol", "sol_fraction_mean"))
SHORT_VERDICT = {"wrong_output": "wrong", "shape_mismatch": "shape", "format_error": "format",
                 "compile_error": "compile", "runtime_error": "runtime", "timeout": "timeout", "crashed": "crash",
                 "hack_detected": "hack"}
HISTOGRAM_BINS = (0.0, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0, math.inf)
BAR_WIDTH = 40


@dataclass
class EvalLoaded(Message):
    summary: Optional[dict[str, Any]]
    records: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


@dataclass
class EvalCompared(Message):
    result: Optional[dict[str, Any]]
    error: str = ""


def speedup_histogram(speedups: list[float]) -> list[tuple[str, int]]:
    """(bin label, count) over HISTOGRAM_BINS: the distribution of correct samples' speedups."""
    rows = []
    for low, high in zip(HISTOGRAM_BINS, HISTOGRAM_BINS[1:]):
        label = f"{low:g}–{high:g}x" if high != math.inf else f"≥{low:g}x"
        rows.append((label, sum(1 for s in speedups if low <= s < high)))
    return rows


def grid_cell(record: Optional[dict[str, Any]]) -> tuple[str, str]:
    """(text, theme variable) of one grid cell: the speedup of a correct turn, else the verdict in short."""
    if record is None:
        return "", "foreground"
    verdict = record["verdict"]
    if verdict == "correct":
        text = f"{record['speedup']:.2f}x" if record.get("speedup") is not None else "ok"
    else:
        text = SHORT_VERDICT.get(verdict, verdict)
    return text, VERDICT_COLOUR.get(verdict, "foreground")


class EvalScreen(KrlScreen):
    BINDINGS = [
        Binding("escape", "back", "Back", id="eval.back"),
        Binding("enter", "open_sample", "Open sample", id="eval.open"),
        Binding("c", "compare", "Compare with…", id="eval.compare"),
        Binding("r", "reload", "Reload", id="eval.reload"),
        Binding("o", "run_detail", "Run details", id="eval.run_detail"),
    ]

    def __init__(self, run: int | str) -> None:
        super().__init__()
        self.run = run
        self.summary: Optional[dict[str, Any]] = None
        self.cells: dict[tuple[int, int], int] = {}  # (row, column) -> trajectory id

    def compose(self) -> ComposeResult:
        yield Static(id="eval-header")
        yield DataTable(id="eval-grid", cursor_type="cell", zebra_stripes=True)
        yield Static("speedups of correct turns (against PyTorch eager)", classes="section-title")
        yield Static(id="eval-distribution")
        yield KeyBar()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="eval", exit_on_error=False)
    def load(self) -> None:
        from core.errors import KrlError
        from core.evaluation import eval_records, eval_summary

        reg = self.app.registry("eval")
        try:
            summary = eval_summary(reg, self.run)
            self.post_message(EvalLoaded(summary, eval_records(reg, reg.get_run(summary["name"])["id"])))
        except KrlError as exc:
            self.post_message(EvalLoaded(None, error=str(exc)))

    def on_eval_loaded(self, message: EvalLoaded) -> None:
        if message.summary is None:
            self.query_one("#eval-header", Static).update(message.error)
            return
        self.summary = summary = message.summary
        scores = summary["scores"]
        numbers = "  ".join(f"[b]{label}[/b] {scores[key]:.3f}" for label, key in HEADLINE if key in scores)
        self.query_one("#eval-header", Static).update(
            f"[b]{summary['name']}[/b] · {summary['status']} · {summary['model']} via {summary['backend']} on "
            f"{summary['problem_set']} · {summary['samples_done']}/{summary['problems_total'] * summary['samples']} "
            f"samples × {summary['turns']} turn(s)\n{numbers}")
        self._fill_grid(summary, message.records)
        speedups = [r["speedup"] for r in message.records if r["verdict"] == "correct" and r.get("speedup")]
        histogram = speedup_histogram(speedups)
        most = max((count for _, count in histogram), default=0) or 1
        self.query_one("#eval-distribution", Static).update("\n".join(
            f"{label:>10} {'█' * round(BAR_WIDTH * count / most)} {count}" for label, count in histogram))

    def _fill_grid(self, summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
        table = self.query_one("#eval-grid", DataTable)
        table.clear(columns=True)
        samples, turns = summary["samples"], summary["turns"]
        table.add_columns("problem", *[f"s{s}·t{t}" for s in range(samples) for t in range(turns)])
        by_key = {(r["problem_id"], r["sample"], r["turn"]): r for r in records}
        self.cells = {}
        for row_index, pid in enumerate(sorted({r["problem_id"] for r in records})):
            cells: list[Any] = [pid]
            for column, (sample, turn) in enumerate(((s, t) for s in range(samples) for t in range(turns)), start=1):
                record = by_key.get((pid, sample, turn))
                text, colour = grid_cell(record)
                cells.append(Text(text, style=theme_colour(self.app, colour)))
                if record is not None and record.get("trajectory_id") is not None:
                    self.cells[(row_index, column)] = record["trajectory_id"]
            table.add_row(*cells, key=pid)

    def action_open_sample(self) -> None:
        from app.screens.trajectory import TrajectoryScreen

        coordinate = self.query_one("#eval-grid", DataTable).cursor_coordinate
        trajectory_id = self.cells.get((coordinate.row, coordinate.column)) or next(
            (tid for (row, _), tid in sorted(self.cells.items()) if row == coordinate.row), None)
        if trajectory_id is not None:
            self.app.push_screen(TrajectoryScreen(trajectory_id))

    @on(DataTable.CellSelected, "#eval-grid")
    def _cell_selected(self) -> None:
        self.action_open_sample()

    def action_compare(self) -> None:
        """Pick the evaluation to compare against from a list (it becomes A, this one B)."""
        if self.summary:
            self._load_compare_choices(self.summary["name"])

    @work(thread=True, exclusive=True, group="eval-compare-choices", exit_on_error=False)
    def _load_compare_choices(self, this: str) -> None:
        rows = self.app.registry("eval").list_runs(kind="eval", columns=("name", "status", "model", "problem_set"))
        choices = [(f"{r['name']}  ·  {r['status']} · {r.get('model') or '?'} · {r.get('problem_set') or '?'}",
                    r["name"]) for r in rows if r["name"] != this]
        self.app.call_from_thread(self._pick_other, this, choices)

    def _pick_other(self, this: str, choices: list[tuple[str, str]]) -> None:
        from app.screens.dialogs import PickScreen

        if not choices:
            self.notify("no other evaluation in this workspace to compare with", severity="warning")
            return

        def answered(other: Optional[str]) -> None:
            if other:
                self.app.push_screen(EvalCompareScreen(other, this))

        self.app.push_screen(PickScreen(f"Compare {this} (B) against which evaluation (A)?", choices), answered)

    def action_reload(self) -> None:
        self.load()

    def action_run_detail(self) -> None:
        """The evaluation as a run: logs, config, events, trajectories (through the app: the run screen itself
        opens evaluations, so importing it here would be a circle)."""
        self.app.open_run_detail(self.run, tab="logs")

    def action_back(self) -> None:
        self.app.pop_screen()


class EvalCompareScreen(KrlScreen):
    """B against A: stamp warnings, the per-problem table, and the paired intervals."""

    BINDINGS = [Binding("escape", "back", "Back", id="eval_compare.back")]

    def __init__(self, a: str, b: str) -> None:
        super().__init__()
        self.a, self.b = a, b

    def compose(self) -> ComposeResult:
        yield Static(id="eval-compare-header")
        yield DataTable(id="eval-compare-table", cursor_type="row", zebra_stripes=True)
        yield KeyBar()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="eval-compare", exit_on_error=False)
    def load(self) -> None:
        from core.errors import KrlError
        from core.evaluation import compare_evals

        try:
            self.post_message(EvalCompared(compare_evals(self.app.registry("eval"), self.a, self.b, force=True)))
        except KrlError as exc:
            self.post_message(EvalCompared(None, str(exc)))

    def on_eval_compared(self, message: EvalCompared) -> None:
        header = self.query_one("#eval-compare-header", Static)
        if message.result is None:
            header.update(message.error)
            return
        result = message.result
        lines = [f"[b]{result['b']}[/b] against [b]{result['a']}[/b] on {result['shared_problems']} shared problems"]
        if result.get("partial"):
            lines.append("[b]PARTIAL: not every sample is evaluated:[/b] " + "; ".join(
                f"{name} ({state})" for name, state in result["partial"].items())
                + f"; {len(result['unfinished_problems'])} unfinished problem(s) left out")
        if result["stamp_differences"]:
            lines.append("[b]WARNING: made differently, not comparable:[/b] " + "; ".join(
                f"{k}: {v[0]!r} vs {v[1]!r}" for k, v in result["stamp_differences"].items()))
        fast = result["fast_1"]
        if fast["difference"] is not None:
            lines.append(f"fast_1 (KernelBench): {fast['a']:.3f} → {fast['b']:.3f}, Δ {fast['difference']:+.3f} "
                         f"[95% CI {fast['low']:+.3f}, {fast['high']:+.3f}]")
        geo = result["geomean_speedup"]
        if geo.get("ratio") is not None:
            lines.append(f"geomean speedup B/A on {geo['n_problems']} problems both solved: {geo['ratio']:.3f} "
                         f"[95% CI {geo['ratio_low']:.3f}, {geo['ratio_high']:.3f}]")
        header.update("\n".join(lines))
        table = self.query_one("#eval-compare-table", DataTable)
        table.clear(columns=True)
        table.add_columns("problem", "A solved", "B solved", "A best", "B best")
        for row in result["problems"]:
            table.add_row(row["problem_id"], "yes" if row["a_solved"] else "no", "yes" if row["b_solved"] else "no",
                          _speed(row["a_best_speedup"]), _speed(row["b_best_speedup"]))

    def action_back(self) -> None:
        self.app.pop_screen()


def _speed(value: Optional[float]) -> str:
    return f"{value:.2f}x" if value is not None else "–"


def start_checkpoint_eval(app: Any, run_name: str, step: Optional[int], samples: Optional[int] = None) -> None:
    """Evaluate a training run's checkpoint (the last when step is None) in the background with the run's own
    settings: a detached run of kind 'eval' through procman. Called from a thread worker; notifies the result."""
    from app.commands.eval import build_eval_config
    from core import procman
    from core.errors import KrlError

    try:
        reg = app.registry("eval-start")
        config = build_eval_config(config=None, run=run_name, checkpoint=step, backend=None, model=None, replay=None,
                                   problems=None, samples=samples, turns=None, temperature=None, top_p=None,
                                   kernel_backend=None, precision=None, gpus=None, overrides=[], registry=reg)
        name = procman.unique_run_name(reg, f"eval-{run_name}")
        row = procman.start_run(config, name=name, kind="eval", detach=True, registry=reg)
        app.call_from_thread(app.notify, f"evaluating {run_name} step {config.evaluation.source_step}: "
                                         f"{row['name']} ({row['status']})")
    except KrlError as exc:
        app.call_from_thread(app.notify, str(exc), severity="error")


def evaluate_from_run_detail(screen: Any) -> None:
    """The run screen's `v`: an eval run opens its grid; for a training run it asks first (which checkpoint, how
    many samples per problem), then evaluates the selected checkpoint (checkpoints tab), else its last, in the
    background. Esc or an empty answer starts nothing."""
    run = getattr(screen, "run", None)
    if not run:
        return
    if run.get("kind") == "eval":
        screen.app.push_screen(EvalScreen(run["id"]))
        return
    step = None
    tables = screen.query("#checkpoints-table")
    if tables and tables.first().has_focus and tables.first().row_count:
        table = tables.first()
        step = int(table.get_row_at(table.cursor_row)[0])
    from app.screens.dialogs import PromptScreen

    samples = ((run.get("config") or {}).get("evaluation") or {}).get("samples")
    which = f"checkpoint of step {step}" if step is not None else "its last checkpoint"

    def answered(text: Optional[str]) -> None:
        if not text or not text.strip():
            return
        try:
            chosen = int(text.strip())
            if chosen < 1:
                raise ValueError
        except ValueError:
            screen.app.notify(f"samples per problem must be a whole number ≥ 1, not {text.strip()!r}; nothing "
                              "started", severity="error")
            return
        screen.run_worker(lambda: start_checkpoint_eval(screen.app, run["name"], step, chosen), thread=True,
                          group="eval-start", exit_on_error=False)

    screen.app.push_screen(PromptScreen(
        f"Evaluate {run['name']} ({which}) on its problems as a background run of kind 'eval'. Samples per problem "
        "(pass@k up to this)? enter starts it, esc cancels.", value=str(samples or 1)), answered)
