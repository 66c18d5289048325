"""The evaluation side of one turn: verdict, the feedback text exactly as the model received it, reward
breakdown, return and advantage, the model's thinking and any retrieved examples."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from app.widgets.format import fmt_float, runtime_ms, theme_colour

VERDICT_COLOUR = {"correct": "success", "wrong_output": "warning", "shape_mismatch": "warning",
                  "format_error": "warning", "compile_error": "error", "runtime_error": "error", "timeout": "error",
                  "crashed": "error", "hack_detected": "error"}


class FeedbackPanel(VerticalScroll):
    """Fills its sections from one turn dict (a row of registry.trajectory_turns)."""

    def compose(self) -> ComposeResult:
        yield Static(id="fb-verdict")
        yield Static("feedback the model received", classes="section-title")
        yield Static(id="fb-feedback", classes="feedback-text")
        yield Static("reward", classes="section-title")
        yield Static(id="fb-reward")
        yield Static("thinking", classes="section-title")
        yield Static(id="fb-thinking", classes="thinking-text")
        yield Static("retrieved examples", classes="section-title", id="fb-retrieved-title")
        yield Static(id="fb-retrieved")

    def show(self, turn: dict[str, Any]) -> None:
        verdict = turn.get("verdict") or "–"
        colour = theme_colour(self.app, VERDICT_COLOUR.get(verdict, "foreground"))
        result = turn.get("eval_result") or {}
        verdict_text = Text.assemble(("verdict ", "bold"), (verdict, f"bold {colour}"))
        speedup = result.get("speedup")
        if speedup:
            verdict_text.append(f"   speedup {speedup:.2f}x")
        runtime = runtime_ms(result.get("kernel_runtime"))
        if runtime is not None:
            verdict_text.append(f"   kernel {fmt_float(runtime, 3)} ms")
        sol_fraction = result.get("sol_fraction")
        if isinstance(sol_fraction, (int, float)):  # how far the kernel still is from the hardware (evaluator/judging/sol.py)
            verdict_text.append(f"   {sol_fraction:.0%} of speed of light")
        self.query_one("#fb-verdict", Static).update(verdict_text)
        # Text(...) rather than markup: feedback is shown byte-for-byte as the model saw it.
        self.query_one("#fb-feedback", Static).update(Text(turn.get("feedback") or "(no feedback)"))
        table = Table.grid(padding=(0, 2))
        table.add_column()
        table.add_column(justify="right")
        for key, value in sorted((turn.get("reward_breakdown") or {}).items()):
            table.add_row(key, fmt_float(value, 3))
        table.add_row(Text("step score", style="bold"), Text(fmt_float(turn.get("step_score"), 3), style="bold"))
        table.add_row("return", fmt_float(turn.get("return_"), 3))
        table.add_row("advantage", fmt_float(turn.get("advantage"), 3))
        table.add_row("tokens in/out", f"{turn.get('tokens_in', 0)}/{turn.get('tokens_out', 0)}")
        self.query_one("#fb-reward", Static).update(table)
        self.query_one("#fb-thinking", Static).update(Text(turn.get("thought") or "(no thinking recorded)"))
        retrieved = turn.get("retrieved") or []
        self.query_one("#fb-retrieved-title").display = bool(retrieved)
        box = self.query_one("#fb-retrieved", Static)
        box.display = bool(retrieved)
        if retrieved:
            box.update(Text("\n".join(
                f"{r.get('name') or r.get('id')}  [{r.get('backend', '')}]"
                + (f"  {r['speedup']:.2f}x" if isinstance(r.get("speedup"), (int, float)) else "")
                for r in retrieved)))
