"""The trajectory inspector: one episode's turns, each with its kernel (or diff to the turn before), verdict,
the feedback as the model got it, reward breakdown, return/advantage and thinking. Steps through turns and
jumps to the previous/next trajectory of the same problem."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Static

from app.screens.base import KrlScreen
from app.widgets.key_bar import KeyBar
from app.screens.loaders import TrajectoryDetail, load_trajectory
from app.screens.messages import TrajectoryLoaded
from app.widgets.feedback_panel import VERDICT_COLOUR, FeedbackPanel
from app.widgets.format import fmt_float, fmt_speedup, theme_colour
from app.widgets.kernel_diff import MODES, KernelView, kernel_language


class TrajectoryScreen(KrlScreen):
    # Below 110 columns the three panes stack (themes/app.tcss), so the inspector stays usable at 80x24.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    BINDINGS = [
        Binding("escape", "back", "Back", id="traj.back"),
        Binding("right,l", "turn(1)", "Next turn", id="traj.next_turn"),
        Binding("left,h", "turn(-1)", "Prev turn", id="traj.prev_turn"),
        Binding("v", "cycle_view", "Code/diff/split", id="traj.view"),
        Binding("p", "show_prompt", "Full prompt", id="traj.prompt"),
        Binding("right_square_bracket", "neighbour(1)", "Next of problem", id="traj.next_trajectory"),
        Binding("left_square_bracket", "neighbour(-1)", "Prev of problem", id="traj.prev_trajectory"),
    ]

    def __init__(self, trajectory_id: int, detail: Optional[TrajectoryDetail] = None) -> None:
        super().__init__()
        self.trajectory_id = trajectory_id
        self.detail: Optional[TrajectoryDetail] = None
        self._preloaded = detail
        self.turn_index = 0
        self.mode = "code"

    def compose(self) -> ComposeResult:
        yield Static(id="traj-header")
        with Horizontal(id="traj-body"):
            yield DataTable(id="turn-list", cursor_type="row")
            yield KernelView(id="kernel-view")
            yield FeedbackPanel(id="feedback-panel")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#turn-list", DataTable).add_columns("turn", "verdict", "score")
        self.query_one(KernelView).border_title = "kernel"
        if self._preloaded is not None:  # read before the screen was pushed: fill it before its first paint
            detail, self._preloaded = self._preloaded, None
            self.on_trajectory_loaded(TrajectoryLoaded(detail))
        else:
            self.load(self.trajectory_id)

    # ---------------------------------------------------------------- workers

    @work(thread=True, exclusive=True, group="trajectory", exit_on_error=False)
    def load(self, trajectory_id: int, direction: int = 0) -> None:
        from core.errors import KrlError

        reg = self.app.registry("trajectory")
        try:
            if direction:
                neighbour = reg.neighbour_trajectory(trajectory_id, direction)
                if neighbour is None:
                    word = "next" if direction > 0 else "previous"
                    self.post_message(TrajectoryLoaded(None, f"no {word} trajectory for this problem"))
                    return
                trajectory_id = neighbour
            self.post_message(TrajectoryLoaded(load_trajectory(reg, trajectory_id)))
        except KrlError as exc:
            self.post_message(TrajectoryLoaded(None, str(exc)))

    def on_trajectory_loaded(self, message: TrajectoryLoaded) -> None:
        if message.detail is None:
            self.notify(message.error, severity="warning")
            return
        self.detail = message.detail
        self.trajectory_id = message.detail.trajectory["id"]
        self.turn_index = 0
        table = self.query_one("#turn-list", DataTable)
        table.clear()
        for turn in self.detail.turns:
            verdict = turn.get("verdict") or "–"
            table.add_row(turn["turn"], Text(verdict, style=theme_colour(self.app, VERDICT_COLOUR.get(verdict, "foreground"))),
                          fmt_float(turn.get("step_score"), 2), key=str(turn["turn"]))
        self._render_header()
        self._show_turn()

    # ---------------------------------------------------------------- rendering

    def _render_header(self) -> None:
        t = self.detail.trajectory
        # Turns are numbered from 0 here as in the trajectory table, the Problems tab, `krl watch`, `krl evals` and
        # every export: one base everywhere, so a turn number copied from one reads the same in the others.
        outcome = (f"solved at turn {t['solved_at_turn']}" if t["solved"] else "never solved")
        colour = theme_colour(self.app, "success" if t["solved"] else "warning")
        text = Text.assemble(
            (t["problem_id"], "bold"), f"  run {self.detail.run_name} · step {t['step']} · group {t['group_index']} ",
            f"sample {t['sample_index']} · {t['n_turns']} turns · return {fmt_float(t['total_return'], 3)} · ",
            (outcome, colour), f" · best {fmt_speedup(t['best_speedup'])}", f" · id {t['id']}")
        if t["hack"]:
            text.append("  HACK", style=f"bold {theme_colour(self.app, 'error')}")
        if self.detail.backend == "replay":
            text.append("  RECORDED REPLAY DATA", style=f"bold reverse {theme_colour(self.app, 'warning')}")
        self.query_one("#traj-header", Static).update(text)

    def _show_turn(self) -> None:
        if not self.detail or not self.detail.turns:
            return
        turns = self.detail.turns
        self.turn_index = max(0, min(self.turn_index, len(turns) - 1))
        turn = turns[self.turn_index]
        previous = turns[self.turn_index - 1].get("kernel") if self.turn_index > 0 else None
        language = "cuda" if kernel_language(turn.get("kernel") or "") == "cuda" else "python"
        view = self.query_one(KernelView)
        view.border_title = f"turn {turn['turn']} of 0–{len(turns) - 1} · {language} kernel (run backend {self.detail.kernel_language})"
        view.show(turn.get("kernel") or "", previous, language, self.mode)
        self.query_one(FeedbackPanel).show(turn)
        table = self.query_one("#turn-list", DataTable)
        if table.cursor_row != self.turn_index:
            table.move_cursor(row=self.turn_index, animate=False)

    @on(DataTable.RowHighlighted, "#turn-list")
    def _turn_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.cursor_row != self.turn_index:
            self.turn_index = event.cursor_row
            self._show_turn()

    # ---------------------------------------------------------------- actions

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_turn(self, delta: int) -> None:
        self.turn_index += delta
        self._show_turn()

    def action_show_prompt(self) -> None:
        """The whole prompt the model saw at this turn (system, problem, earlier attempts and their feedback) and its
        full response, in a scrollable view."""
        from app.screens.dialogs import TextScreen

        if not self.detail or not self.detail.turns:
            return
        turn = self.detail.turns[self.turn_index]
        self.app.push_screen(TextScreen(f"turn {turn['turn']}: the prompt the model saw, then its response",
                                        f"{turn.get('prompt') or '(no prompt stored)'}\n\n"
                                        f"──────── response ────────\n{turn.get('response') or ''}"))

    def action_cycle_view(self) -> None:
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]
        self.query_one(KernelView).set_mode(self.mode)

    def action_neighbour(self, direction: int) -> None:
        self.load(self.trajectory_id, direction)
