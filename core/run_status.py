"""A run's status as a StrEnum (stored as its string value in `runs.status`), and the groups of statuses the
registry, procman and the faces ask about."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is in its life; a job writes running/stopped/finished/failed, readers write crashed."""

    QUEUED = "queued"
    """Registered and waiting for its GPUs; reconcile() starts its job."""
    RUNNING = "running"
    """Its job is alive and beating."""
    STOPPING = "stopping"
    """Asked to stop (SIGTERM sent); the job checkpoints and writes `stopped`."""
    STOPPED = "stopped"
    """Stopped on request, after a checkpoint; resumable."""
    FINISHED = "finished"
    """Ran to its end."""
    FAILED = "failed"
    """Its job raised or exited non-zero; the error says why."""
    CRASHED = "crashed"
    """Its process vanished or stopped beating without a final status; marked by a reader."""


RUN_STATUSES = tuple(RunStatus)
ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.STOPPING)
TERMINAL_STATUSES = (RunStatus.STOPPED, RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CRASHED)
RESUMABLE_STATUSES = (RunStatus.STOPPED, RunStatus.FAILED, RunStatus.CRASHED)
# The statuses a job may take its run from when it starts (queued, or a resumed segment of an ended run).
RESTARTABLE_STATUSES = (RunStatus.QUEUED, RunStatus.STOPPED, RunStatus.FAILED, RunStatus.CRASHED, RunStatus.FINISHED)
