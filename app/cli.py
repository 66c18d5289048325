"""The `krl` command line: a typer app whose commands live in app/commands/, one module per area.
Command modules import only typer and the standard library at top level so `krl --help` stays fast."""

from __future__ import annotations

import os
import sqlite3
import sys
from typing import Optional

import typer
import typer.main

from app.commands import cache, check, demo, doctor, eval as eval_cmd, problems, rag, runs, serve, train

app = typer.Typer(
    name="krl",
    help="kernelrl: run, watch and compare RL training runs that teach LLMs to write GPU kernels.\n\n"
    "Exit codes: 0 success, 1 internal error, 2 user error (bad input, unknown run, missing setting), "
    "3 a run the command waited on failed or crashed.",
    no_args_is_help=False,
    invoke_without_command=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)


@app.callback()
def _global(
    ctx: typer.Context,
    workspace: Optional[str] = typer.Option(
        None, "--workspace", "-w", envvar="KRL_WORKSPACE", help="Workspace folder holding the registry and run folders (default: ./runs)."
    ),
    theme: Optional[str] = typer.Option(None, "--theme", help="TUI theme (remembered)."),
) -> None:
    if workspace:
        os.environ["KRL_WORKSPACE"] = workspace
    if ctx.invoked_subcommand is None:
        from app.commands.workspace import no_workspace_line
        from app.tui import run_tui
        from core.errors import KrlError
        from core.registry import workspace_path

        if not workspace_path().exists():
            # Opening the TUI is looking, not starting: no ./runs is made behind the user's back (issue 26 item
            # 17). An empty folder is consent: the TUI then opens on it, ready for `n`.
            raise KrlError(f"{no_workspace_line()}; or `mkdir {workspace_path().name}` and run `krl` again to "
                           "start one from the TUI (key n).")

        run_tui(theme=theme)


for module in (problems, check, train, eval_cmd, runs, demo, rag, doctor, cache, serve):
    module.register(app)


# What SQLite (and the sqlite3 module decoding a text cell) say about a damaged database file.
DAMAGE_SIGNS = ("malformed", "file is not a database", "Could not decode")


def _click_error_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(ClickException classes, UsageError classes): typer raises those of the click it vendors (typer._click),
    older typers those of the `click` package; both are checked."""
    import importlib

    errors, usage = [], []
    for module_name in ("typer._click.exceptions", "click.exceptions"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        errors.append(module.ClickException)
        usage.append(module.UsageError)
    return tuple(errors), tuple(usage)


def plain_flags(command) -> None:
    """Flags take no value, so `--help` shows none for them (typer labels every option with its type, `<bool>`
    included): an empty metavar on every flag, the help option too, in every subcommand."""
    context = command.context_class(command)
    for param in [*command.params, command.get_help_option(context)]:
        if param is not None and getattr(param, "is_flag", False) and not getattr(param, "count", False):
            param.metavar = ""
    for child in (getattr(command, "commands", None) or {}).values():
        plain_flags(child)


def main() -> None:
    """Console-script entry: user errors print one line and exit 2, usage errors print typer's usage message and
    exit 2, never a traceback."""
    from core.errors import KrlError

    try:
        command = typer.main.get_command(app)
        plain_flags(command)
        # Without standalone mode click returns a command's exit code instead of raising it.
        code = command(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except KrlError as exc:
        from app.widgets.format import printable

        typer.echo(f"error: {printable(exc)}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except sqlite3.DatabaseError as exc:
        # Opening checks the registry; a damaged page is only found when a query reads it. Other database errors
        # (a lock held past the busy timeout, an I/O error) are not the user's and keep their traceback.
        if not any(sign in str(exc) for sign in DAMAGE_SIGNS):
            raise
        from app.widgets.format import printable
        from core.registry import REGISTRY_FILENAME, registry_damaged_error, workspace_path

        typer.echo(f"error: {printable(registry_damaged_error(workspace_path() / REGISTRY_FILENAME, exc))}", err=True)
        sys.exit(2)
    except Exception as exc:
        click_errors, usage_errors = _click_error_types()
        if isinstance(exc, click_errors):
            exc.show()
            sys.exit(2 if isinstance(exc, usage_errors) else exc.exit_code)
        raise


if __name__ == "__main__":
    main()
