"""Opening the workspace for commands that only read it: no ./runs is created, and a missing workspace is met with
what to run first."""

from __future__ import annotations

from pathlib import Path

from core.errors import KrlError
from core.registry import Registry, workspace_path

FIRST_STEPS = ("`krl demo` records a demo run and opens it; `krl train demo --detach` starts a training run; "
               "`krl -w FOLDER` reads another workspace")


def no_workspace_line(path: Path | None = None) -> str:
    """The sentence a read-only command says where there is no workspace yet."""
    return f"no workspace yet at {path or workspace_path()}. {FIRST_STEPS}."


def open_for_reading() -> Registry | None:
    """The registry, or None where the workspace does not exist yet (nothing is created)."""
    return Registry.open_existing()


def require_for_reading() -> Registry:
    """The registry; a missing workspace is a user error (exit 2) that says what to run first."""
    reg = Registry.open_existing()
    if reg is None:
        raise KrlError(no_workspace_line())
    return reg
