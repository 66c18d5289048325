"""The run commands the screens offer (stop, resume, fork, delete, rename), each an explicit procman function, so
a renamed command fails here at a glance rather than when its key is pressed."""

from __future__ import annotations

from typing import Any, Callable


def run_command(verb: str) -> Callable[..., Any]:
    """procman's function for `verb`; it takes (registry, run name, **options)."""
    from core import procman  # deferred: the process manager is only needed once a command is given

    commands: dict[str, Callable[..., Any]] = {
        "stop": procman.stop_run,
        "resume": procman.resume_run,
        "fork": procman.fork_run,
        "delete": procman.delete_run,
        "rename": procman.rename_run,
    }
    return commands[verb]
