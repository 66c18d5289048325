"""CLI command: `krl train CONFIG [K=V…] [--name N] [--detach] [--gpus N]` starts a training run.
Foreground runs in this process (core.train.run_foreground); --detach hands the run to the process manager."""

from __future__ import annotations

import json
from typing import List, Optional

import typer


def train(
    config: str = typer.Argument(..., help="A preset (kevin, single-turn, demo) or a YAML file."),
    overrides: List[str] = typer.Argument(None, help="Dotted config overrides, e.g. dataset.batch_size=4 optim.lr=1e-5."),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="Run name [default: <preset>-<date>-<time>]."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Start in the background (queued until its GPUs are free) and return at once."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs the run needs [default: the config's `gpus`]."),
    as_json: bool = typer.Option(False, "--json", help="With --detach: print the run as JSON to stdout."),
) -> None:
    """Train a model on a problem set. Without --detach the run lives in this terminal (Ctrl-C stops it with a
    checkpoint; resume with `krl runs resume NAME`). Exit 3 when the run fails."""
    from rich.console import Console

    from core.config import list_presets, load_config
    from core.errors import KrlError

    console = Console(stderr=True, highlight=False)
    cfg = load_config(config, list(overrides or []))
    if gpus is not None:
        if gpus < 0:
            raise KrlError(f"--gpus must be 0 or more, not {gpus}.")
        cfg = cfg.model_copy(update={"gpus": gpus})
    preset = config if config in list_presets() else None
    if detach:
        from core import procman
        from core.registry import Registry

        reg = Registry.for_workspace()
        row = procman.start_run(cfg, name=name, gpus=gpus, preset=preset, detach=True, registry=reg)
        if as_json:
            typer.echo(json.dumps(procman.run_json(reg, row), indent=2))
        where = f"pid {row['pid']}, gpus {row['gpus']}" if row["status"] == "running" else \
            f"waiting for {row['gpus_requested']} GPU(s)"
        console.print(f"{row['name']}: {row['status']} ({where}). Follow with `krl watch {row['name']}` or "
                      f"`krl logs -f {row['name']}`; stop with `krl runs stop {row['name']}`.")
        return
    from core.train import run_foreground

    result = run_foreground(cfg, name, None) or {}
    status = result.get("status") if isinstance(result, dict) else None
    if status:
        console.print(f"{result.get('name', name or '')}: {status}")
    if status in ("failed", "crashed"):
        from app.commands.runs import run_failed_error

        raise run_failed_error(result.get("name", name or ""), status)


def register(app: typer.Typer) -> None:
    """Add `krl train` to the `krl` app."""
    app.command("train")(train)
