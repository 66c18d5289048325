"""CLI command `krl demo [--headless]`: a replay run of recorded model answers over the built-in problems,
scored by the real evaluator, started through the process manager and watched in the TUI (or summarised)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

EXIT_DEMO_FAILED = 3


def demo_workspace() -> Path:
    """The workspace a bare `krl` opens ($KRL_WORKSPACE, --workspace, else ./runs): after `make demo`, typing `krl`
    in the same folder shows the demo run."""
    from core.registry import workspace_path

    return workspace_path()


def open_hint(workspace: Path) -> str:
    """The exact command that opens `workspace` in the TUI from the current folder."""
    from core.registry import workspace_path

    same = not os.environ.get("KRL_WORKSPACE") and Path(workspace).resolve() == workspace_path().resolve()
    return "open it in the TUI: krl" if same else f"open it in the TUI: krl --workspace {workspace}"


def summarise(reg: Any, run_id: int) -> dict[str, Any]:
    """Steps, verdict counts, solve rate and best speedups of a finished (or stopped) run."""
    run = reg.get_run(run_id)
    verdicts: dict[str, int] = {}
    trajectories = reg.trajectories(run_id, order="step", limit=1_000_000)
    for trajectory in trajectories:
        for turn in reg.trajectory_turns(trajectory["id"]):
            verdict = turn.get("verdict") or "none"
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
    solved = sum(1 for t in trajectories if t["solved"])
    problems = reg.problem_summary(run_id)
    return {
        "name": run["name"], "status": run["status"], "workspace": str(reg.workspace),
        "steps": (run["last_step"] + 1) if run.get("last_step") is not None else 0,
        "trajectories": len(trajectories), "turns": sum(verdicts.values()), "verdicts": dict(sorted(verdicts.items())),
        "solve_rate": round(solved / len(trajectories), 4) if trajectories else 0.0,
        "best_speedups": {p["problem_id"]: p["best_speedup"] for p in problems if p["best_speedup"] is not None},
        "problems_solved": sum(1 for p in problems if p["solved"]),
        "problems": len(problems), "error": run.get("error"),
    }


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True)
    console.print(f"[b]demo run {summary['name']}[/b]: {summary['status']} · {summary['steps']} steps · "
                  f"{summary['trajectories']} trajectories · {summary['turns']} turns · "
                  f"solve rate {summary['solve_rate']:.0%} · {summary['problems_solved']}/{summary['problems']} "
                  "problems solved at least once")
    table = Table(title="verdicts (all turns)", title_justify="left")
    table.add_column("verdict")
    table.add_column("turns", justify="right")
    for verdict, count in summary["verdicts"].items():
        table.add_row(verdict, str(count))
    console.print(table)
    if summary["best_speedups"]:
        speedups = Table(title="best speedup per problem (correct kernels)", title_justify="left")
        speedups.add_column("problem")
        speedups.add_column("speedup", justify="right")
        for problem, value in sorted(summary["best_speedups"].items(), key=lambda kv: -kv[1]):
            speedups.add_row(problem, f"{value:.2f}x")
        console.print(speedups)
    if summary.get("error"):
        console.print(f"[red]error:[/red] {summary['error']}")
    console.print(open_hint(Path(summary["workspace"])))


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        headless: bool = typer.Option(False, "--headless", help="Run in the foreground without the TUI and print a summary."),
        overrides: Optional[List[str]] = typer.Argument(None, help="Config overrides for the demo preset (key=value)."),
        name: Optional[str] = typer.Option(None, "--name", help="Run name (default: demo, demo-2, …)."),
        as_json: bool = typer.Option(False, "--json", help="With --headless: print the summary as JSON to stdout."),
    ) -> None:
        """Replay recorded multi-turn answers over the built-in problems through the real evaluator
        (GPU when present, CPU otherwise): no API key, model download or GPU needed. Recorded data is labelled so."""
        from core import procman
        from core.config import load_config
        from core.registry import Registry

        workspace = demo_workspace()
        workspace.mkdir(parents=True, exist_ok=True)
        config = load_config("demo", list(overrides or []))
        reg = Registry.for_workspace(workspace)
        try:
            if headless:
                def echo(line: str) -> None:
                    sys.stderr.write(line if line.endswith("\n") else line + "\n")

                run = procman.start_run(config, name=name, preset="demo", detach=False, registry=reg,
                                        on_line=None if as_json else echo)
                summary = summarise(reg, run["id"])
                if as_json:
                    typer.echo(json.dumps(summary, indent=2))
                else:
                    _print_summary(summary)
                if summary["status"] != "finished":
                    raise typer.Exit(EXIT_DEMO_FAILED)
                return
            run = procman.start_run(config, name=name, preset="demo", detach=True, registry=reg)
        finally:
            reg.close()
        from app.tui import run_tui

        os.environ["KRL_WORKSPACE"] = str(workspace)
        run_tui(workspace=workspace, open_run=run["name"])
