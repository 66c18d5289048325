"""CLI commands: train (placeholder until its issue lands).
Top-level imports stay light: heavy modules are imported inside the commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `krl` app."""
