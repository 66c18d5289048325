"""Status truth for runs, decided by whoever reads: reconcile() marks runs whose job vanished or stopped beating,
escalates stops past their grace, and starts queued runs when their GPUs are free. No daemon needs to be alive."""

from __future__ import annotations

import os
import signal
import sqlite3
import time

from typing import Any, Optional, Sequence

from core.identity import pid_matches, run_is_local, run_process_alive
from core.registry import Registry
from core.run_status import ACTIVE_STATUSES, TERMINAL_STATUSES, RunStatus
from core.segments import close_segment, last_segment
from core.gpus import detect_gpus, lingering_gpus
from core.runlogs import error_from_log
from core.spawn import child_exit_code, kill_orphans, signal_run, spawn_queued


HEARTBEAT_LIMIT_S = 60.0


STARTUP_GRACE_S = 180.0  # before a job's first own heartbeat (imports, model load on a busy machine)


STOP_GRACE_S = 30.0


def heartbeat_limit_s() -> float:
    return float(os.environ.get("KRL_HEARTBEAT_LIMIT_S") or HEARTBEAT_LIMIT_S)


def startup_grace_s() -> float:
    return float(os.environ.get("KRL_STARTUP_GRACE_S") or STARTUP_GRACE_S)


def stop_grace_s() -> float:
    return float(os.environ.get("KRL_STOP_GRACE_S") or STOP_GRACE_S)


def _now() -> float:
    return time.time()


def _diagnose(registry: Registry, row: dict[str, Any], limit_s: float) -> Optional[tuple[str, str, dict[str, Any], bool]]:
    """What an active run's status should become, or None when it is healthy: (status, message, extra columns,
    whether its process group must be SIGKILLed first). Has no side effects."""
    status = row["status"]
    if status not in (RunStatus.RUNNING, RunStatus.STOPPING):
        return None
    segment = last_segment(row)
    stop_requested = segment.get("stop_requested_at") is not None or status == RunStatus.STOPPING
    local = run_is_local(row)
    exit_code = child_exit_code(row["id"], row.get("pid")) if local else None
    alive = exit_code is None and local and pid_matches(row.get("pid"), row.get("pid_start_time"))
    now = _now()
    if local and row.get("pid") and not alive:
        fields: dict[str, Any] = {"ended_at": now}
        if exit_code is not None:
            fields["exit_code"] = exit_code
        if stop_requested:
            how = f"exit code {exit_code}" if exit_code is not None else "its process is gone"
            return RunStatus.STOPPED, f"ended during stop without a final status ({how})", fields, False
        fields["error"] = error_from_log(registry, row["name"])
        if exit_code is not None and exit_code > 0:
            return RunStatus.FAILED, f"exited with code {exit_code}", fields, False
        if exit_code is not None and exit_code < 0:
            return RunStatus.CRASHED, f"killed by signal {-exit_code} without a final status", fields, False
        if exit_code == 0:
            return RunStatus.CRASHED, "exited (code 0) without a final status", fields, False
        return RunStatus.CRASHED, f"process {row['pid']} is gone without a final status", fields, False
    if stop_requested and alive:
        grace = segment.get("stop_grace_s")
        grace = stop_grace_s() if grace is None else float(grace)
        requested = segment.get("stop_requested_at") or now
        if now - requested > grace:
            return RunStatus.STOPPED, f"killed with SIGKILL after a {grace:g}s grace period (no final checkpoint)", \
                {"ended_at": now}, True
        return None
    overdue = _heartbeat_overdue(row, limit_s, now)
    if overdue is not None:
        silent_s, limit_s = overdue
        where = f" (process {row['pid']} is still alive: `krl runs stop --force {row['name']}` kills it)" if alive else ""
        return RunStatus.CRASHED, f"no heartbeat for {silent_s:.0f}s (limit {limit_s:g}s){where}", \
            {"ended_at": now, "error": error_from_log(registry, row["name"])}, False
    return None


def _heartbeat_overdue(row: dict[str, Any], limit_s: float, now: float) -> Optional[tuple[float, float]]:
    """(seconds without a heartbeat, the limit that applied) when a running job's heartbeat is overdue, else None."""
    segment = last_segment(row)
    reference = max(row.get("heartbeat_at") or 0.0, segment.get("started_at") or 0.0, row.get("started_at") or 0.0)
    if segment.get("started_at") and (row.get("heartbeat_at") or 0.0) <= segment["started_at"]:
        limit_s = max(limit_s, startup_grace_s())  # the job has not beaten yet: it may still be importing
    if reference and now - reference > limit_s:
        return now - reference, limit_s
    return None


def _pending_starts(registry: Registry, rows: Sequence[dict[str, Any]],
                    detected: list) -> list[tuple[dict[str, Any], list]]:
    """Queued runs that can start now with their GPU assignment, in creation order."""
    queued = sorted((r for r in rows if r["status"] == RunStatus.QUEUED), key=lambda r: r["id"])
    if not queued:
        return []
    held = {g for row in rows if row["status"] in (RunStatus.RUNNING, RunStatus.STOPPING)
            for g in (row.get("gpus") or [])}
    if any(int(r.get("gpus_requested") or 0) > 0 for r in queued):
        held |= lingering_gpus(registry)
    free = [g for g in detected if g not in held]
    starts, blocked = [], False
    for row in queued:
        need = int(row.get("gpus_requested") or 0)
        if need == 0:
            starts.append((row, []))
        elif not blocked and need <= len(free):
            starts.append((row, free[:need]))
            free = free[need:]
        else:
            blocked = True  # FIFO: later GPU runs wait behind this one
    return starts


HUNG_WRITER_WAIT_S = 5.0  # how long reconcile waits for the write lock while a job with an overdue heartbeat lives


def reconcile(registry: Registry, heartbeat_limit: float | None = None) -> list[dict[str, Any]]:
    """Make every active run's status true and start queued runs whose GPUs are free.
    Returns the changes made: [{"name", "from", "to", "message"}]. Safe to call from any number of readers at once."""
    limit_s = heartbeat_limit_s() if heartbeat_limit is None else float(heartbeat_limit)
    if registry.read_only:
        return []  # a registry opened for browsing: statuses are shown as recorded
    rows = registry.list_runs(status=ACTIVE_STATUSES)
    if not rows:
        return []
    detected = detect_gpus()
    # A read-only pass first: most calls (TUI refreshes) find nothing to do and take no write lock.
    if not any(_diagnose(registry, row, limit_s) for row in rows) and not _pending_starts(registry, rows, detected):
        return []
    # A job stopped or hung inside its step's write transaction holds the registry's write lock for good, and its
    # heartbeat is overdue. With such a job about, the lock is waited for briefly (a healthy writer holds it for
    # milliseconds); when it stays taken, those jobs are killed, their lock goes with them, and the changes are made.
    now = _now()
    hung = [row for row in rows if row["status"] == RunStatus.RUNNING and run_is_local(row)
            and pid_matches(row.get("pid"), row.get("pid_start_time")) and _heartbeat_overdue(row, limit_s, now)]
    if not hung:
        return _apply_changes(registry, limit_s, detected)
    try:
        return _apply_changes(registry, limit_s, detected, busy_timeout_s=HUNG_WRITER_WAIT_S)
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
    for row in hung:
        signal_run(row, signal.SIGKILL)
    notes = {row["id"]: "killed: the registry's write lock stayed taken while its heartbeat was overdue" for row in hung}
    return _apply_changes(registry, limit_s, detected, notes=notes)


def _apply_changes(registry: Registry, limit_s: float, detected: list, busy_timeout_s: float | None = None,
                   notes: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """reconcile's write pass, in one transaction; `notes` are added to the messages of those run ids."""
    changes: list[dict[str, Any]] = []
    with registry.transaction(busy_timeout_s):
        rows = registry.list_runs(status=ACTIVE_STATUSES)
        for row in rows:
            verdict = _diagnose(registry, row, limit_s)
            if verdict is None:
                continue
            status, message, fields, kill = verdict
            if notes and row["id"] in notes:
                message = f"{notes[row['id']]}; {message}"
            if kill:
                signal_run(row, signal.SIGKILL)
            if status != RunStatus.CRASHED or not run_process_alive(row):
                orphans = kill_orphans(registry, row)
                if orphans:
                    message += f"; killed {orphans} leftover process(es) of its group"
            fields["segments"] = close_segment(row, status, message)
            # The status is re-read under the write lock: a job that wrote its final status wins.
            if registry.compare_and_set_status(row["id"], (row["status"],), status, message, **fields):
                changes.append({"name": row["name"], "from": row["status"], "to": status, "message": message})
        rows = registry.list_runs(status=ACTIVE_STATUSES)
        for row, gpus in _pending_starts(registry, rows, detected):
            changes.append(spawn_queued(registry, row, gpus, detected))
    return changes


def close_ended_segment(registry: Registry, row: dict[str, Any]) -> None:
    """Record how the current segment ended when the job wrote the final status itself."""
    segment = last_segment(row)
    if segment and segment.get("ended_at") is None and row["status"] in TERMINAL_STATUSES:
        registry.update_run(row["id"], segments=close_segment(row, row["status"]))
