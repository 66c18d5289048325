"""A run's segments: one record per time a job ran it (start, resume), stored as a JSON list in `runs.segments`.
The one place that knows a segment's 13 keys and how a segment is opened, asked to stop and closed."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Sequence


@dataclass
class Segment:
    """One run of a job: who ran it (pid, its start time, host, GPUs), from which step, and how it ended."""

    index: int
    started_at: float
    pid: Optional[int]
    pid_start_time: Optional[float]
    host: Optional[str]
    gpus: list = field(default_factory=list)
    start_step: int = 0
    checkpoint: Optional[dict[str, Any]] = None  # {"step", "name"} the segment resumed from
    ended_at: Optional[float] = None
    end_status: Optional[str] = None
    stop_requested_at: Optional[float] = None
    stop_grace_s: Optional[float] = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def copy_segments(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's segments as new dicts, safe to change before writing them back."""
    return [dict(s) for s in (row.get("segments") or [])]


def last_segment(row: dict[str, Any]) -> dict[str, Any]:
    segments = row.get("segments") or []
    return segments[-1] if segments else {}


def open_segment(row: dict[str, Any], identity: dict[str, Any], gpus: Sequence = (), start_step: int = 0,
                 checkpoint: Optional[dict[str, Any]] = None, note: str = "", now: Optional[float] = None
                 ) -> list[dict[str, Any]]:
    """The run's segments with a new one appended for the process `identity` (pid, pid_start_time, host)."""
    segments = copy_segments(row)
    segments.append(Segment(index=len(segments), started_at=time.time() if now is None else now,
                            pid=identity["pid"], pid_start_time=identity["pid_start_time"], host=identity["host"],
                            gpus=list(gpus), start_step=start_step, checkpoint=checkpoint, note=note).to_dict())
    return segments


def close_segment(row: dict[str, Any], status: str, note: str = "") -> list[dict[str, Any]]:
    """The run's segments with the open last one marked ended now with `status` (unchanged when none is open)."""
    segments = copy_segments(row)
    if segments and segments[-1].get("ended_at") is None:
        segments[-1]["ended_at"] = time.time()
        segments[-1]["end_status"] = str(status)
        if note:
            segments[-1]["note"] = note
    return segments


def request_segment_stop(row: dict[str, Any], grace_s: float) -> list[dict[str, Any]]:
    """The run's segments with the stop request (time and grace period) recorded on the last one, once."""
    segments = copy_segments(row)
    if segments and segments[-1].get("stop_requested_at") is None:
        segments[-1]["stop_requested_at"] = time.time()
        segments[-1]["stop_grace_s"] = grace_s
    return segments
