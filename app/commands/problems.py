"""CLI commands: `krl problems ls` lists a problem set.
Top-level imports stay light: heavy modules are imported inside the commands."""

from __future__ import annotations

import json
from typing import Optional

import typer

problems_app = typer.Typer(help="Problem sets: builtin, kernelbench/levelN (needs KERNELBENCH_ROOT), or a path.")


@problems_app.command("ls")
def list_problems(
    problem_set: str = typer.Option("builtin", "--set", "-s", help="builtin | kernelbench/level1 | PATH (comma-separated for several)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
) -> None:
    """List the problems of a set with id, level, tags and hash."""
    from core.problems import load_problem_set

    problems = load_problem_set(problem_set)
    if as_json:
        typer.echo(json.dumps([p.summary() for p in problems], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{problem_set}: {len(problems)} problems")
    for column in ("id", "level", "tags", "hash"):
        table.add_column(column)
    for p in problems:
        table.add_row(p.id, str(p.level), ",".join(p.tags), p.hash)
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(problems_app, name="problems")
