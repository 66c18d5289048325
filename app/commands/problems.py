"""CLI commands: `krl problems ls` lists a problem set, `krl problems show` prints one problem.
Top-level imports stay light: heavy modules are imported inside the commands."""

from __future__ import annotations

import json

import typer

problems_app = typer.Typer(help="Problem sets: builtin, kernelbench/levelN (needs KERNELBENCH_ROOT), or a path.")


@problems_app.command("ls")
def list_problems(
    problem_set: str = typer.Option("builtin", "--set", "-s", help="builtin | kernelbench/level1 | PATH (comma-separated for several)."),
    level: int = typer.Option(0, "--level", "-l", help="Only problems of this level (0: all)."),
    tag: str = typer.Option("", "--tag", "-t", help="Only problems with this op tag (activation, matmul, conv, …)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
) -> None:
    """List the problems of a set with id, level, tags and hash."""
    from core.problems import load_problem_set

    problems = [p for p in load_problem_set(problem_set)
                if (not level or p.level == level) and (not tag or tag in p.tags)]
    if as_json:
        typer.echo(json.dumps([p.summary() for p in problems], indent=2))
        return
    from rich.box import HEAVY_HEAD
    from rich.console import Console

    from app.commands.tables import Column, fitted_table

    # Ids stay whole; at a narrow width hash, name and tags go first (issue 26 item 8).
    columns = [Column("id", whole=True), Column("level", whole=True), Column("name", drop=8), Column("tags", drop=7),
               Column("hash", drop=9)]
    console = Console(stderr=True)
    cells = [[p.id, str(p.level), p.name, ",".join(p.tags), p.hash] for p in problems]
    console.print(fitted_table(columns, cells, console.width - 2, box=HEAVY_HEAD,
                               title=f"{problem_set}: {len(problems)} problems"))


@problems_app.command("show")
def show_problem(
    problem: str = typer.Argument(..., help="A problem id (builtin/relu, kernelbench/level1/19) or a file path."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (summary plus source) to stdout."),
) -> None:
    """Print one problem's metadata (stderr) and reference source (stdout: highlighted on a terminal, plain and
    whole when redirected, so `krl problems show ID > ref.py` gives a runnable file)."""
    from core.problems import resolve_problem

    found = resolve_problem(problem)
    if as_json:
        typer.echo(json.dumps({**found.summary(), "source": found.source}, indent=2))
        return
    import sys

    from rich.console import Console
    from rich.syntax import Syntax

    console = Console(stderr=True)
    console.print(f"[bold]{found.id}[/]  level {found.level}  tags {','.join(found.tags) or '-'}  hash {found.hash}")
    if found.gpu_sizes:
        console.print(f"gpu sizes: {found.gpu_sizes}")
    if not sys.stdout.isatty():
        typer.echo(found.source.rstrip("\n"))  # plain: no padding, no cut lines, no escape codes
        return
    # On a terminal long lines wrap rather than being cut.
    Console().print(Syntax(found.source, "python", word_wrap=True))


def register(app: typer.Typer) -> None:
    app.add_typer(problems_app, name="problems")
