"""Opening the workspace for commands that only read it: no ./runs is created, and a missing workspace is met with
what to run first."""

from __future__ import annotations

from pathlib import Path

from core.errors import KrlError
from core.registry import Registry, workspace_path

FIRST_STEPS = ("`krl demo` records a demo run and opens it; `krl train demo --detach` starts a training run; "
               "`krl -w FOLDER` reads another workspace")


def no_workspace_line(path: Path | None = None) -> str:
    """The sentence a read-only command says where there is no workspace (or no run in it) yet."""
    path = path or workspace_path()
    if path.is_dir():
        return f"no runs yet in {path}. {FIRST_STEPS}."
    return f"no workspace yet at {path}. {FIRST_STEPS}."


def open_for_reading() -> Registry | None:
    """The registry, or None where the workspace does not exist yet (nothing is created)."""
    return Registry.open_existing()


def require_for_reading(wanted: str = "") -> Registry:
    """The registry; a missing workspace is a user error (exit 2) naming the run asked for and what to run first."""
    reg = Registry.open_existing()
    if reg is None:
        raise KrlError((f"no run '{wanted}': " if wanted else "") + no_workspace_line())
    return reg
