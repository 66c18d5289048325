"""Dataclass messages that screen workers post back to the UI thread with what they read from the registry.
Runs refreshes may replace each other in the queue (only the newest matters)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from textual.message import Message

from app.screens.loaders import RunRow, Series, TrajectoryDetail


@dataclass
class RunsLoaded(Message):
    rows: list[RunRow]
    changed: bool = True  # False: nothing new in the registry, only clocks moved

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunsLoaded)


@dataclass
class SparksLoaded(Message):
    sparks: dict[int, tuple[list[float], list[float]]]


@dataclass
class RunHeaderLoaded(Message):
    run: dict[str, Any]
    metric_keys: list[str]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunHeaderLoaded)


@dataclass
class SeriesLoaded(Message):
    series: dict[str, Series]
    total_points: int = 0


@dataclass
class TableLoaded(Message):
    """Rows for one table of a screen. Each table has its own subclass, so a screen's handlers dispatch by type."""

    rows: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)


class TrajectoriesLoaded(TableLoaded):
    """A page of the run detail's trajectories (extra: problems, offset, total)."""


class ProblemsLoaded(TableLoaded):
    """The run detail's per-problem summary."""


class CheckpointsLoaded(TableLoaded):
    """The run detail's checkpoints."""


class ComparedRunsLoaded(TableLoaded):
    """The compared runs (extra: metric keys, config diff)."""


@dataclass
class ConfigLoaded(Message):
    config: dict[str, Any]
    overrides: dict[str, Any]


@dataclass
class LogLines(Message):
    lines: list[str]
    reset: bool = False


@dataclass
class TrajectoryLoaded(Message):
    detail: Optional[TrajectoryDetail]
    error: str = ""


@dataclass
class ActionDone(Message):
    """A procman/registry action finished in a worker: say so, and refresh. (A failed one raises instead, and takes
    the one error route: app/screens/base.py.)"""

    text: str
