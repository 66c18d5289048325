"""How far a run has got, counted the same way by every face (CLI tables, JSON, TUI): steps done for a training run,
finished samples for an evaluation (whose samples finish out of order, so its highest step says nothing)."""

from __future__ import annotations

from typing import Any, Optional


def steps_done(row: dict[str, Any]) -> Optional[int]:
    """Steps (training) or samples (evaluation) finished; None before the first one."""
    if row.get("kind") == "eval":
        done = ((row.get("summary") or {}).get("eval") or {}).get("samples_done")
        if done is not None:
            return int(done)
    last_step = row.get("last_step")
    return None if last_step is None else int(last_step) + 1
