"""The one route for background errors: any thread worker of a screen (or of the app) that ends in an exception
is shown to the user, instead of the view silently staying empty (harlequin's single Worker.StateChanged handler)."""

from __future__ import annotations

from textual.dom import DOMNode
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from app.widgets.format import printable


def worker_error_text(worker: Worker) -> str:
    """What the user reads: a user error's own message; for a bug, its type and message (the traceback goes to
    the Textual log)."""
    from core.errors import KrlError

    error = worker.error
    if isinstance(error, KrlError):
        return printable(error)
    return printable(f"{worker.group or worker.name or 'loading'} failed: {type(error).__name__}: {error}")


def report_worker_error(node: DOMNode, event: Worker.StateChanged) -> None:
    if event.state != WorkerState.ERROR or event.worker.error is None:
        return
    node.log.error(event.worker, event.worker.error)
    node.app.notify(worker_error_text(event.worker), title="error", severity="error", timeout=15)


class KrlScreen(Screen):
    """Base of kernelrl's screens: routes every worker failure to one place."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report_worker_error(self, event)
