"""CLI command: `krl train CONFIG [K=V…] [--name N] [--detach] [--gpus N|auto]` starts a training run.
Foreground runs in this process (core.train.run_foreground); --detach hands the run to the process manager."""

from __future__ import annotations

import json
from typing import List, Optional

import typer


def train(
    config: str = typer.Argument(..., help="A preset (kevin, single-turn, demo) or a YAML file."),
    overrides: List[str] = typer.Argument(None, help="Dotted config overrides, e.g. dataset.batch_size=4 optim.lr=1e-5."),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="Run name (default: <preset>-<date>-<time>)."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Start in the background (queued until its GPUs are free) and return at once."),
    gpus: str = typer.Option("auto", "--gpus", help="GPUs the run needs: a number (0 runs on CPU), or auto: the "
                             "config's `gpus` where this machine has GPUs, else CPU."),
    as_json: bool = typer.Option(False, "--json", help="With --detach: print the run as JSON to stdout."),
) -> None:
    """Train a model on a problem set. Without --detach the run lives in this terminal (Ctrl-C stops it with a
    checkpoint; resume with `krl runs resume NAME`). Exit 3 when the run fails."""
    from rich.console import Console

    from core.config import list_presets, load_config
    from core.errors import KrlError

    console = Console(stderr=True, highlight=False)
    cfg = load_config(config, list(overrides or []))
    gpu_count = _gpu_count(gpus)
    if gpu_count is None:  # auto
        gpu_count = _auto_gpus(cfg.gpus, console)
    cfg = cfg.model_copy(update={"gpus": gpu_count})
    preset = config if config in list_presets() else None
    if detach:
        from core import procman
        from core.registry import Registry

        reg = Registry.for_workspace()
        row = procman.start_run(cfg, name=name, gpus=gpu_count, preset=preset, detach=True, registry=reg)
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


def _gpu_count(text: str) -> Optional[int]:
    """--gpus as a count, or None for auto; anything else is a usage error (exit 2 with the usage line)."""
    if text.strip().lower() == "auto":
        return None
    if not text.strip().isdigit():
        raise typer.BadParameter(f"expected a number of GPUs (0 or more) or auto, not '{text}'.", param_hint="'--gpus'")
    return int(text)


def _auto_gpus(wanted: int, console) -> int:
    """The GPUs a run asks for where this machine has any; else 0 (CPU), said on stderr."""
    from core.procman import detect_gpus

    if wanted and not detect_gpus():
        console.print(f"no GPU on this machine: the config asks for {wanted}; running on CPU "
                      "(pass --gpus N to wait for GPUs instead).")
        return 0
    return wanted


def register(app: typer.Typer) -> None:
    """Add `krl train` to the `krl` app."""
    app.command("train")(train)
