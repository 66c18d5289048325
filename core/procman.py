"""The process manager: starts training jobs as detached processes, queues them for GPUs, stops, resumes and forks them.
Status truth comes from `reconcile()`, which every reader calls; nothing depends on a daemon being alive."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from core.errors import KrlError
from core.progress import steps_done
from core.registry import ACTIVE_STATUSES, Registry, check_run_name

# Run lifecycle
#     start_run → row `queued` → reconcile() spawns `python -m core.train <run-id> --workspace W` when its GPUs are free
#     (own session and process group, stdout/stderr appended to <ws>/<name>/logs.log, CUDA_VISIBLE_DEVICES = assigned
#     GPUs) → row `running` with pid, pid_start_time, host, command, gpus and a new entry in `segments`.
#     The job writes running/heartbeats/steps and its final status (stopped, finished, failed) itself; reconcile() marks
#     runs whose process vanished without a final status `crashed` (or `failed` when a non-zero exit code is known), runs
#     whose heartbeat is older than the limit `crashed`, and escalates stops past their grace period to SIGKILL.
#
# Process identity
#     A pid is only taken for the run when /proc/<pid>/stat shows a live (non-zombie) process whose start time equals
#     `pid_start_time` (epoch seconds, within PID_START_TOLERANCE_S), so a recycled pid is never signalled or trusted.
#
# GPUs
#     detect_gpus(): $KRL_GPUS (a count "2" or a list "0,3") › $KRL_HOST_GPUS (set by procman for jobs) ›
#     $CUDA_VISIBLE_DEVICES › /proc/driver/nvidia/gpus › `nvidia-smi -L`. Free = detected − gpus of running/stopping runs.
#     Queued runs start in creation order (strict FIFO among GPU runs; runs needing 0 GPUs never wait).
#
# Columns written here: `command` = {"argv": [...], "cwd": "..."}; `gpus` = list of GPU ids; `segments` = list of
#     {"index", "started_at", "ended_at", "end_status", "pid", "pid_start_time", "host", "gpus", "start_step",
#      "checkpoint" ({"step", "name"} or null), "stop_requested_at", "stop_grace_s", "note"}.
#
# Environment knobs: KRL_HEARTBEAT_LIMIT_S (default 60), KRL_STARTUP_GRACE_S (default 180: the limit before a job's
# first heartbeat), KRL_STOP_GRACE_S (default 30), KRL_GPUS, KRL_JOB_MODULE (the module spawned for a run, default
# core.train; tests point it at a stand-in). The job gets KRL_RUN_ID, KRL_WORKSPACE, KRL_HOST_GPUS in its environment.
#
# Public API: start_run, reconcile, stop_run, resume_run, fork_run, delete_run, rename_run, tag_run, note_run,
# wait_run, tail_log, follow_log, log_path, run_json, gpu_usage, detect_gpus, process_identity, pid_matches,
# run_process_alive. Functions taking a registry never close it.

HEARTBEAT_LIMIT_S = 60.0
STARTUP_GRACE_S = 180.0  # before a job's first own heartbeat (imports, model load on a busy machine)
STOP_GRACE_S = 30.0
PID_START_TOLERANCE_S = 1.5  # /proc/stat btime can jitter by a second between reads
ERROR_LOG_LINES = 30
TERMINAL_STATUSES = ("stopped", "finished", "failed", "crashed")
RESUMABLE_STATUSES = ("stopped", "failed", "crashed")

# Jobs spawned by this process: polling them reaps zombies and yields exact exit codes.
_CHILDREN: dict[int, subprocess.Popen] = {}
_NVIDIA_SMI_CACHE: Optional[list[int]] = None


# ---------------------------------------------------------------- settings

def heartbeat_limit_s() -> float:
    return float(os.environ.get("KRL_HEARTBEAT_LIMIT_S") or HEARTBEAT_LIMIT_S)


def startup_grace_s() -> float:
    return float(os.environ.get("KRL_STARTUP_GRACE_S") or STARTUP_GRACE_S)


def stop_grace_s() -> float:
    return float(os.environ.get("KRL_STOP_GRACE_S") or STOP_GRACE_S)


# ---------------------------------------------------------------- process identity

_BOOT_TIME_S: Optional[float] = None


def _boot_time_s() -> float:
    global _BOOT_TIME_S
    if _BOOT_TIME_S is None:
        with open("/proc/stat") as handle:
            for line in handle:
                if line.startswith("btime"):
                    _BOOT_TIME_S = float(line.split()[1])
                    break
            else:
                _BOOT_TIME_S = 0.0
    return _BOOT_TIME_S


def _proc_stat(pid: int) -> Optional[tuple[str, float]]:
    """(state letter, start time in epoch seconds) of a pid, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name may contain spaces and parentheses: fields start after the last ')'.
    fields = text[text.rindex(")") + 2:].split()
    state, start_ticks = fields[0], int(fields[19])
    return state, _boot_time_s() + start_ticks / os.sysconf("SC_CLK_TCK")


def process_start_time(pid: int) -> Optional[float]:
    """Start time (epoch seconds) of a live process, None when it does not exist."""
    if not os.path.exists("/proc/self/stat"):
        return None
    stat = _proc_stat(pid)
    return stat[1] if stat else None


def process_identity(pid: int | None = None) -> dict[str, Any]:
    """{"pid", "pid_start_time", "host"} for a process (default: this one) — what a runs row records.
    core.train's foreground mode records its own process with this."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "pid_start_time": process_start_time(pid), "host": socket.gethostname()}


def pid_matches(pid: int | None, start_time: float | None) -> bool:
    """True when `pid` is a live process that started at `start_time` (a recycled pid does not match)."""
    if not pid:
        return False
    if not os.path.exists("/proc/self/stat"):  # no procfs: liveness only
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    stat = _proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    if start_time is None:
        return True
    return abs(stat[1] - float(start_time)) <= PID_START_TOLERANCE_S


def _run_is_local(row: dict[str, Any]) -> bool:
    return not row.get("host") or row["host"] == socket.gethostname()


def run_process_alive(row: dict[str, Any]) -> bool:
    """Whether the run's recorded process is alive on this host (False for other hosts and recycled pids)."""
    return _run_is_local(row) and pid_matches(row.get("pid"), row.get("pid_start_time"))


def _other_live_process(row: dict[str, Any]) -> bool:
    """A live process of the run other than this one (a foreground run records the process that ran it)."""
    return row.get("pid") != os.getpid() and run_process_alive(row)


def _signal_run(row: dict[str, Any], sig: int) -> bool:
    """Send `sig` to the run's process group after checking its identity; False when it is not alive."""
    if not run_process_alive(row):
        return False
    pid = row["pid"]
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:  # a foreground run records the CLI process, which leads no group of its own
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _orphans(row: dict[str, Any], workspace: Path) -> list[int]:
    """Live processes left in a dead job's process group (evaluator workers after a kill -9 of the job). Only those
    whose environment carries this run's KRL_RUN_ID and workspace count, so a recycled group id is never touched."""
    pgid = row.get("pid")
    if not pgid or not _run_is_local(row) or not os.path.isdir("/proc"):
        return []
    markers = (f"KRL_RUN_ID={row['id']}".encode(), f"KRL_WORKSPACE={workspace}".encode())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                text = handle.read()
            fields = text[text.rindex(")") + 2:].split()
            if int(fields[2]) != pgid or fields[0] in ("Z", "X"):
                continue
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if all(marker in environ for marker in markers):
            found.append(int(entry))
    return found


def _kill_orphans(registry: Registry, row: dict[str, Any]) -> int:
    killed = 0
    for pid in _orphans(row, registry.workspace):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def _child_exit_code(run_id: int, pid: int | None) -> Optional[int]:
    """The exit code of a job this process spawned, once it has exited (None if unknown or still running)."""
    proc = _CHILDREN.get(run_id)
    if proc is None or proc.pid != pid:
        return None
    code = proc.poll()  # also reaps it; Popen keeps the code, so repeated calls agree
    if code is None and os.path.exists("/proc/self/stat"):
        stat = _proc_stat(proc.pid)
        if stat is None or stat[0] in ("Z", "X"):
            # A killed multi-threaded job shows as a zombie before its last thread is gone and waitpid can reap it.
            try:
                code = proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
    return code


# ---------------------------------------------------------------- GPUs

def _parse_gpu_list(text: str) -> list:
    items = [item.strip() for item in text.split(",") if item.strip()]
    return [int(item) if item.lstrip("-").isdigit() else item for item in items]


def detect_gpus() -> list:
    """GPU ids this machine offers to runs (see module docstring for the order of sources)."""
    global _NVIDIA_SMI_CACHE
    forced = os.environ.get("KRL_GPUS")
    if forced is not None and forced.strip():
        forced = forced.strip()
        if forced.isdigit():
            return list(range(int(forced)))
        return _parse_gpu_list(forced)
    for var in ("KRL_HOST_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = os.environ.get(var)
        if value is not None:
            return [g for g in _parse_gpu_list(value) if g != -1]
    nvidia = Path("/proc/driver/nvidia/gpus")
    if nvidia.is_dir():
        return list(range(len(list(nvidia.iterdir()))))
    if _NVIDIA_SMI_CACHE is None:
        _NVIDIA_SMI_CACHE = []
        if shutil.which("nvidia-smi"):
            try:
                out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
                _NVIDIA_SMI_CACHE = list(range(sum(1 for line in out.splitlines() if line.startswith("GPU "))))
            except (OSError, subprocess.SubprocessError):
                pass
    return list(_NVIDIA_SMI_CACHE)


def gpu_usage(registry: Registry) -> dict[str, Any]:
    """{"detected": [...], "held": {gpu: run name}, "free": [...]} — for `krl doctor` and the TUI. Runs still exiting
    after their final status hold their GPUs until their process is gone, as in queueing."""
    detected = detect_gpus()
    held = {}
    for row in registry.list_runs(status=("running", "stopping")):
        for gpu in row.get("gpus") or []:
            held[gpu] = row["name"]
    lingering = _lingering_gpus(registry)
    if lingering:
        for row in registry.list_runs(status=TERMINAL_STATUSES):
            for gpu in row.get("gpus") or []:
                if gpu in lingering and gpu not in held and run_process_alive(row):
                    held[gpu] = row["name"]
    return {"detected": detected, "held": held, "free": [g for g in detected if g not in held]}


# ---------------------------------------------------------------- logs

def log_path(registry: Registry, name: str) -> Path:
    return registry.run_dir(name) / "logs.log"


def _tail_file(path: Path, n: int, max_bytes: int = 1 << 20) -> list[str]:
    if n <= 0 or not path.exists():
        return []
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        block, data = 8192, b""
        while size > 0 and data.count(b"\n") <= n and len(data) < max_bytes:
            step = min(block, size)
            size -= step
            handle.seek(size)
            data = handle.read(step) + data
            block *= 2
    return data.decode("utf-8", "replace").splitlines()[-n:]


def tail_log(registry: Registry, name: str, n: int = 50) -> list[str]:
    """The last n lines of a run's logs.log (empty list when there is no log yet)."""
    row = registry.get_run(name)
    return _tail_file(log_path(registry, row["name"]), n)


def follow_log(registry: Registry, name: str, from_start: bool = True, poll_s: float = 0.5,
               should_stop: Callable[[], bool] | None = None, offset: int | None = None) -> Iterator[str]:
    """Yield a run's log lines as they are written, from the start, the current end (from_start=False) or a byte
    offset; ends once the run is no longer active and the log is drained (or when should_stop() says so).
    Reconciles while waiting, so a crashed run ends the follow too."""
    row = registry.get_run(name)
    run_id, path = row["id"], log_path(registry, row["name"])
    if offset is not None:
        position = offset
    else:
        position = 0 if from_start or not path.exists() else path.stat().st_size
    pending = b""
    last_check = 0.0
    while True:
        chunk = b""
        if path.exists():
            with open(path, "rb") as handle:
                handle.seek(position)
                chunk = handle.read()
                position += len(chunk)
        if chunk:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
            continue
        if should_stop is not None and should_stop():
            return
        now = time.monotonic()
        if now - last_check >= 1.0:
            last_check = now
            reconcile(registry)
            if registry.get_run(run_id)["status"] not in ACTIVE_STATUSES:
                if path.exists() and path.stat().st_size > position:
                    continue  # drain what the job wrote just before it ended
                if pending:
                    yield pending.decode("utf-8", "replace")
                return
        time.sleep(poll_s)


def _error_from_log(registry: Registry, name: str) -> str:
    lines = _tail_file(log_path(registry, name), ERROR_LOG_LINES)
    return "\n".join(lines)[-4000:]


# ---------------------------------------------------------------- reconcile

def _now() -> float:
    return time.time()


def _last_segment(row: dict[str, Any]) -> dict[str, Any]:
    segments = row.get("segments") or []
    return segments[-1] if segments else {}


def _finish_segment(row: dict[str, Any], status: str, note: str = "") -> list[dict[str, Any]]:
    segments = [dict(s) for s in (row.get("segments") or [])]
    if segments and segments[-1].get("ended_at") is None:
        segments[-1]["ended_at"] = _now()
        segments[-1]["end_status"] = status
        if note:
            segments[-1]["note"] = note
    return segments


def _diagnose(registry: Registry, row: dict[str, Any], limit_s: float) -> Optional[tuple[str, str, dict[str, Any], bool]]:
    """What an active run's status should become, or None when it is healthy: (status, message, extra columns,
    whether its process group must be SIGKILLed first). Has no side effects."""
    status = row["status"]
    if status not in ("running", "stopping"):
        return None
    segment = _last_segment(row)
    stop_requested = segment.get("stop_requested_at") is not None or status == "stopping"
    local = _run_is_local(row)
    exit_code = _child_exit_code(row["id"], row.get("pid")) if local else None
    alive = exit_code is None and local and pid_matches(row.get("pid"), row.get("pid_start_time"))
    now = _now()
    if local and row.get("pid") and not alive:
        fields: dict[str, Any] = {"ended_at": now}
        if exit_code is not None:
            fields["exit_code"] = exit_code
        if stop_requested:
            how = f"exit code {exit_code}" if exit_code is not None else "its process is gone"
            return "stopped", f"ended during stop without a final status ({how})", fields, False
        fields["error"] = _error_from_log(registry, row["name"])
        if exit_code is not None and exit_code > 0:
            return "failed", f"exited with code {exit_code}", fields, False
        if exit_code is not None and exit_code < 0:
            return "crashed", f"killed by signal {-exit_code} without a final status", fields, False
        if exit_code == 0:
            return "crashed", "exited (code 0) without a final status", fields, False
        return "crashed", f"process {row['pid']} is gone without a final status", fields, False
    if stop_requested and alive:
        grace = segment.get("stop_grace_s")
        grace = stop_grace_s() if grace is None else float(grace)
        requested = segment.get("stop_requested_at") or now
        if now - requested > grace:
            return "stopped", f"killed with SIGKILL after a {grace:g}s grace period (no final checkpoint)", \
                {"ended_at": now}, True
        return None
    overdue = _heartbeat_overdue(row, limit_s, now)
    if overdue is not None:
        silent_s, limit_s = overdue
        where = f" (process {row['pid']} is still alive: `krl runs stop --force {row['name']}` kills it)" if alive else ""
        return "crashed", f"no heartbeat for {silent_s:.0f}s (limit {limit_s:g}s){where}", \
            {"ended_at": now, "error": _error_from_log(registry, row["name"])}, False
    return None


def _heartbeat_overdue(row: dict[str, Any], limit_s: float, now: float) -> Optional[tuple[float, float]]:
    """(seconds without a heartbeat, the limit that applied) when a running job's heartbeat is overdue, else None."""
    segment = _last_segment(row)
    reference = max(row.get("heartbeat_at") or 0.0, segment.get("started_at") or 0.0, row.get("started_at") or 0.0)
    if segment.get("started_at") and (row.get("heartbeat_at") or 0.0) <= segment["started_at"]:
        limit_s = max(limit_s, startup_grace_s())  # the job has not beaten yet: it may still be importing
    if reference and now - reference > limit_s:
        return now - reference, limit_s
    return None


LINGER_WINDOW_S = 600.0  # how far back to look for ended runs whose process still holds its GPUs


def _lingering_gpus(registry: Registry) -> set:
    """GPUs of runs that wrote a final status but whose process is still exiting (closing evaluator workers that
    hold GPU memory). This process itself is left out: a job reconciling at its exit frees its GPUs by exiting."""
    since = _now() - LINGER_WINDOW_S
    held = set()
    for row in registry.list_runs(status=TERMINAL_STATUSES):
        if (row.get("ended_at") or row.get("heartbeat_at") or 0) < since:
            continue
        if row.get("gpus") and row.get("pid") != os.getpid() and run_process_alive(row):
            held.update(row["gpus"])
    return held


def _pending_starts(registry: Registry, rows: Sequence[dict[str, Any]],
                    detected: list) -> list[tuple[dict[str, Any], list]]:
    """Queued runs that can start now with their GPU assignment, in creation order."""
    queued = sorted((r for r in rows if r["status"] == "queued"), key=lambda r: r["id"])
    if not queued:
        return []
    held = {g for row in rows if row["status"] in ("running", "stopping") for g in (row.get("gpus") or [])}
    if any(int(r.get("gpus_requested") or 0) > 0 for r in queued):
        held |= _lingering_gpus(registry)
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
    hung = [row for row in rows if row["status"] == "running" and _run_is_local(row)
            and pid_matches(row.get("pid"), row.get("pid_start_time")) and _heartbeat_overdue(row, limit_s, now)]
    if not hung:
        return _apply_changes(registry, limit_s, detected)
    try:
        return _apply_changes(registry, limit_s, detected, busy_timeout_s=HUNG_WRITER_WAIT_S)
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
    for row in hung:
        _signal_run(row, signal.SIGKILL)
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
                _signal_run(row, signal.SIGKILL)
            if status != "crashed" or not run_process_alive(row):
                orphans = _kill_orphans(registry, row)
                if orphans:
                    message += f"; killed {orphans} leftover process(es) of its group"
            fields["segments"] = _finish_segment(row, status, message)
            # The status is re-read under the write lock: a job that wrote its final status wins.
            if registry.compare_and_set_status(row["id"], (row["status"],), status, message, **fields):
                changes.append({"name": row["name"], "from": row["status"], "to": status, "message": message})
        rows = registry.list_runs(status=ACTIVE_STATUSES)
        for row, gpus in _pending_starts(registry, rows, detected):
            changes.append(_spawn(registry, row, gpus, detected))
    return changes


# ---------------------------------------------------------------- spawning

def _job_argv(run_id: int, workspace: Path, kind: str | None = None) -> list[str]:
    # Evaluation runs execute core.evaluation, the others core.train; KRL_JOB_MODULE (tests) overrides both.
    module = os.environ.get("KRL_JOB_MODULE") or ("core.evaluation" if kind == "eval" else "core.train")
    return [sys.executable, "-m", module, str(run_id), "--workspace", str(workspace)]


def _start_step(registry: Registry, row: dict[str, Any]) -> tuple[int, Optional[dict[str, Any]]]:
    checkpoint = registry.last_checkpoint(row["id"])
    if checkpoint is not None:
        return int(checkpoint["step"]) + 1, {"step": checkpoint["step"], "name": checkpoint["name"]}
    if row.get("parent_step") is not None:
        return int(row["parent_step"]) + 1, None
    return 0, None


def _spawn(registry: Registry, row: dict[str, Any], gpus: list, detected: list) -> dict[str, Any]:
    """Start a queued run's job (called inside reconcile's write transaction, so two readers never start it twice).
    Whatever stops it before the process exists (a file where the run folder goes, a full disk while writing the
    log header, a missing interpreter) marks this run failed with the reason and leaves reconciliation going."""
    try:
        return _start_job(registry, row, gpus, detected)
    except OSError as exc:
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        message = f"could not start the job: {exc.strerror or exc}{where}"
        registry.set_status(row["id"], "failed", message, error=message, ended_at=_now())
        return {"name": row["name"], "from": "queued", "to": "failed", "message": message}


def _start_job(registry: Registry, row: dict[str, Any], gpus: list, detected: list) -> dict[str, Any]:
    workspace = registry.workspace
    run_dir = registry.run_dir(row["name"])
    run_dir.mkdir(parents=True, exist_ok=True)
    command = row.get("command") if isinstance(row.get("command"), dict) else None
    argv = (command or {}).get("argv") or _job_argv(row["id"], workspace, row.get("kind"))
    cwd = (command or {}).get("cwd") or os.getcwd()
    if not os.path.isdir(cwd):
        cwd = str(workspace)
    env = dict(os.environ)
    env.update({
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # so CUDA's numbering matches nvidia-smi's, which detection uses
        "KRL_HOST_GPUS": ",".join(str(g) for g in detected),
        "KRL_WORKSPACE": str(workspace),
        "KRL_RUN_ID": str(row["id"]),
        "PYTHONUNBUFFERED": "1",
    })
    start_step, checkpoint = _start_step(registry, row)
    segments = [dict(s) for s in (row.get("segments") or [])]
    index = len(segments)
    with open(run_dir / "logs.log", "ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"=== krl: segment {index} of run {row['name']} starting at step {start_step} ({stamp}, "
                  f"gpus [{','.join(str(g) for g in gpus)}]) ===\n".encode())
        log.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                env=env, start_new_session=True, close_fds=True)
    _CHILDREN[row["id"]] = proc
    # Reap it the moment it exits, even if nobody reconciles again (the TUI stops once no run is active):
    # no <defunct> entries; Popen keeps the exit code for _child_exit_code.
    threading.Thread(target=proc.wait, name=f"krl-reap-{proc.pid}", daemon=True).start()
    identity = process_identity(proc.pid)
    now = _now()
    segments.append({"index": index, "started_at": now, "ended_at": None, "end_status": None, "pid": proc.pid,
                     "pid_start_time": identity["pid_start_time"], "host": identity["host"], "gpus": gpus,
                     "start_step": start_step, "checkpoint": checkpoint, "stop_requested_at": None,
                     "stop_grace_s": None, "note": ""})
    fields: dict[str, Any] = dict(identity, command={"argv": argv, "cwd": cwd}, gpus=gpus, segments=segments,
                                  heartbeat_at=now, exit_code=None, error=None, ended_at=None)
    if not row.get("started_at"):
        fields["started_at"] = now
    message = f"segment {index}: pid {proc.pid}, gpus [{','.join(str(g) for g in gpus)}], from step {start_step}"
    registry.set_status(row["id"], "running", message, **fields)
    return {"name": row["name"], "from": "queued", "to": "running", "message": message}


# ---------------------------------------------------------------- public operations

def _config_dict(config: Any) -> dict[str, Any]:
    if hasattr(config, "model_dump"):
        return config.model_dump(mode="json")
    if isinstance(config, dict):
        return json.loads(json.dumps(config))
    raise TypeError(f"config must be a RunConfig or a dict, not {type(config).__name__}")


def unique_run_name(registry: Registry, base: str) -> str:
    """A free run name from a base (preset or backend) and the time: `kevin-1122-0412`, then `-2`, `-3` …"""
    base = "".join(c if c.isalnum() or c in "-_." else "-" for c in base).strip("-.") or "run"
    name = f"{base}-{time.strftime('%m%d-%H%M%S')}"
    candidate, n = name, 2
    while registry.find_run(candidate) is not None:
        candidate, n = f"{name}-{n}", n + 1
    return candidate


def _check_gpus(need: int) -> None:
    if need < 0:
        raise KrlError(f"--gpus must be 0 or more, not {need}.")
    detected = detect_gpus()
    if need > len(detected):
        raise KrlError(f"the run needs {need} GPU(s) but this machine offers {len(detected)} "
                       f"({', '.join(map(str, detected)) or 'none'}). Use --gpus {len(detected)} "
                       "(0 runs on CPU), or set KRL_GPUS / CUDA_VISIBLE_DEVICES.")


def _check_backend_ready(backend: Optional[str]) -> None:
    """What a detached job would only find out seconds after starting, checked before its row exists."""
    if backend == "tinker":
        from core.backends.tinker import check_tinker_credentials

        check_tinker_credentials()


def _open(workspace: Any) -> Registry:
    return Registry.for_workspace(workspace)


def start_run(config: Any, name: str | None = None, gpus: int | None = None, preset: str | None = None,
              detach: bool = True, workspace: Any = None, *, registry: Registry | None = None,
              kind: str | None = None, tags: Sequence[str] = (), notes: str = "",
              parent_run_id: int | None = None, parent_step: int | None = None,
              on_line: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Register a run (`queued`) and start its job as soon as its GPUs are free. Returns the run row.
    detach=False waits for the job to end (streaming its log lines to on_line) and returns the final row;
    KeyboardInterrupt while waiting stops the run (checkpoint) before it propagates."""
    reg = registry or _open(workspace)
    try:
        cfg = _config_dict(config)
        name = name or cfg.get("name") or unique_run_name(reg, preset or cfg.get("preset") or cfg.get("backend") or "run")
        if "name" in cfg:
            cfg["name"] = name
        preset = preset or cfg.get("preset")
        need = int(gpus if gpus is not None else cfg.get("gpus") or 0)
        _check_gpus(need)
        _check_backend_ready(cfg.get("backend"))
        if "gpus" in cfg:
            cfg["gpus"] = need
        backend = cfg.get("backend")
        problems = cfg.get("problems")
        check_run_name(name)
        folder = reg.run_dir(name)
        if folder.exists() and not folder.is_dir():
            raise KrlError(f"{folder} is a file, and a run named '{name}' keeps its logs and checkpoints in a folder "
                           "of that name. Move the file away or choose another --name.")
        row = reg.create_run(
            name,
            kind=kind or ("replay" if backend == "replay" else "train"), config=cfg, preset=preset,
            model=cfg.get("model"), backend=backend,
            problem_set=problems if isinstance(problems, str) else json.dumps(problems) if problems else None,
            gpus_requested=need, total_steps=cfg.get("max_steps"), tags=list(tags) + list(cfg.get("tags") or []),
            notes=notes, parent_run_id=parent_run_id, parent_step=parent_step, status="queued")
        reg.run_dir(row["name"]).mkdir(parents=True, exist_ok=True)
        reg.update_run(row["id"], command={"argv": _job_argv(row["id"], reg.workspace, row.get("kind")),
                                           "cwd": os.getcwd()})
        reconcile(reg)
        if not detach:
            return wait_run(reg, row["name"], on_line=on_line, log_offset=0)
        return reg.get_run(row["id"])
    finally:
        if registry is None:
            reg.close()


def wait_run(registry: Registry, name: str, on_line: Callable[[str], None] | None = None,
             timeout_s: float | None = None, poll_s: float = 0.5, log_offset: int | None = None) -> dict[str, Any]:
    """Block until a run is no longer queued/running/stopping (reconciling as it waits); returns the final row.
    Log lines (from byte log_offset, default the current end) go to on_line when given.
    KeyboardInterrupt stops the run, waits for it, then re-raises."""
    row = registry.get_run(name)
    run_id = row["id"]
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        if on_line is not None:
            for line in follow_log(registry, row["name"], from_start=False, poll_s=poll_s, offset=log_offset,
                                   should_stop=lambda: deadline is not None and time.monotonic() > deadline):
                on_line(line)
        while True:
            reconcile(registry)
            row = registry.get_run(run_id)
            if row["status"] not in ACTIVE_STATUSES:
                return row
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {row['name']} still {row['status']} after {timeout_s}s")
            time.sleep(poll_s)
    except KeyboardInterrupt:
        current = registry.get_run(run_id)
        if current["status"] in ACTIVE_STATUSES:
            stop_run(registry, current["name"])
        raise


def stop_run(registry: Registry, name: str, force: bool = False, grace_s: float | None = None,
             wait: bool = True) -> dict[str, Any]:
    """SIGTERM the run's process group (the job checkpoints and writes `stopped`); after grace_s SIGKILL → `stopped`
    with a note. force=True kills at once. A queued run leaves the queue. wait=False returns right after signalling
    (reconcile() escalates to SIGKILL once the grace period has passed). Returns the run row."""
    reconcile(registry)
    row = registry.get_run(name)
    grace = stop_grace_s() if grace_s is None else float(grace_s)
    if row["status"] == "queued":
        registry.compare_and_set_status(row["id"], ("queued",), "stopped", "removed from the queue", ended_at=_now())
        reconcile(registry)
        return registry.get_run(row["id"])
    alive = run_process_alive(row)
    if row["status"] not in ("running", "stopping"):
        if alive and force:  # e.g. marked crashed for a stale heartbeat while the process hangs on
            _signal_run(row, signal.SIGKILL)
            _wait_gone(row, 10.0)
            registry.add_event(row["id"], "status", f"killed hung process {row['pid']} (--force)")
            return registry.get_run(row["id"])
        hint = " (its process is still alive; --force kills it)" if alive else ""
        raise KrlError(f"run '{row['name']}' is {row['status']}, not running; nothing to stop{hint}.")
    if not _run_is_local(row):
        raise KrlError(f"run '{row['name']}' runs on host {row['host']}; stop it there.")
    segments = [dict(s) for s in (row.get("segments") or [])]
    if segments and segments[-1].get("stop_requested_at") is None:
        segments[-1]["stop_requested_at"] = _now()
        segments[-1]["stop_grace_s"] = grace
    with registry.transaction():
        current = registry.get_run(row["id"])
        if current["status"] == "running":
            registry.set_status(row["id"], "stopping", "SIGKILL (--force)" if force else f"SIGTERM, grace {grace:g}s",
                                segments=segments)
        elif current["status"] == "stopping":
            registry.update_run(row["id"], segments=segments)
    if force:
        _signal_run(row, signal.SIGKILL)
        _wait_gone(row, 10.0)
        registry.compare_and_set_status(row["id"], ("stopping", "running"), "stopped",
                                        "killed with SIGKILL (--force, no final checkpoint)", ended_at=_now(),
                                        segments=_finish_segment(registry.get_run(row["id"]), "stopped", "--force"))
        _child_exit_code(row["id"], row.get("pid"))
        reconcile(registry)
        return registry.get_run(row["id"])
    _signal_run(row, signal.SIGTERM)
    if not wait:
        return registry.get_run(row["id"])
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _child_exit_code(row["id"], row.get("pid"))  # reap our own child so it does not linger as a zombie
        if not run_process_alive(row):
            break
        time.sleep(0.1)
    else:
        _signal_run(row, signal.SIGKILL)
        _wait_gone(row, 10.0)
        current = registry.get_run(row["id"])
        registry.compare_and_set_status(
            row["id"], ("stopping", "running"), "stopped",
            f"killed with SIGKILL after a {grace:g}s grace period (no final checkpoint)", ended_at=_now(),
            segments=_finish_segment(current, "stopped", "SIGKILL after grace"))
    reconcile(registry)
    final = registry.get_run(row["id"])
    if final["status"] in TERMINAL_STATUSES:
        _close_segment(registry, final)
        _kill_orphans(registry, final)
    return registry.get_run(row["id"])


def _wait_gone(row: dict[str, Any], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _child_exit_code(row["id"], row.get("pid"))
        if not run_process_alive(row):
            return
        time.sleep(0.05)


def _close_segment(registry: Registry, row: dict[str, Any]) -> None:
    """Record how the current segment ended when the job wrote the final status itself."""
    segment = _last_segment(row)
    if segment and segment.get("ended_at") is None and row["status"] in TERMINAL_STATUSES:
        registry.update_run(row["id"], segments=_finish_segment(row, row["status"]))


def resume_run(registry: Registry, name: str, detach: bool = True, gpus: int | None = None,
               on_line: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Resume a stopped, failed or crashed run from its last checkpoint as a new segment of the same run
    (queued until its GPUs are free). detach=False waits for it like start_run. Returns the run row."""
    reconcile(registry)
    row = registry.get_run(name)
    if row["status"] not in RESUMABLE_STATUSES:
        hint = {"finished": " Fork it to train further: `krl runs fork NAME --name NEW max_steps=…`.",
                "queued": " It is waiting for GPUs.", "running": "", "stopping": ""}.get(row["status"], "")
        raise KrlError(f"run '{row['name']}' is {row['status']}; only stopped, failed or crashed runs can be "
                       f"resumed.{hint}")
    if _other_live_process(row):
        raise KrlError(f"run '{row['name']}' still has a live process (pid {row['pid']}). "
                       f"Kill it first with `krl runs stop --force {row['name']}`.")
    need = int(gpus if gpus is not None else row.get("gpus_requested") or 0)
    _check_gpus(need)
    _check_backend_ready(row.get("backend"))
    _close_segment(registry, row)
    row = registry.get_run(row["id"])
    checkpoint = registry.last_checkpoint(row["id"])
    where = f"from checkpoint {checkpoint['name']} (step {checkpoint['step']})" if checkpoint else \
        "without a checkpoint (starts from the beginning)"
    command = row.get("command") if isinstance(row.get("command"), dict) else {}
    command = dict(command, argv=_job_argv(row["id"], registry.workspace, row.get("kind")), cwd=os.getcwd())
    log = log_path(registry, row["name"])
    log_offset = log.stat().st_size if log.exists() else 0
    if not registry.compare_and_set_status(row["id"], RESUMABLE_STATUSES, "queued", f"resume {where}",
                                           gpus_requested=need, exit_code=None, error=None, ended_at=None,
                                           command=command):
        raise KrlError(f"run '{row['name']}' changed status while resuming; try again.")
    reconcile(registry)
    if not detach:
        return wait_run(registry, row["name"], on_line=on_line, log_offset=log_offset)
    return registry.get_run(row["id"])


def fork_run(registry: Registry, name: str, new_name: str, overrides: Sequence[str] = (),
             step: int | None = None, gpus: int | None = None, detach: bool = True) -> dict[str, Any]:
    """A new run starting from `name`'s checkpoint (the last one, or the last at or before `step`) with the parent's
    config changed by dotted overrides ("optim.lr=1e-5"). Records parent_run_id/parent_step. Returns the new row."""
    reconcile(registry)
    parent = registry.get_run(name)
    checkpoints = [c for c in registry.checkpoints(parent["id"]) if step is None or c["step"] <= step]
    if not checkpoints:
        at = f" at or before step {step}" if step is not None else ""
        raise KrlError(f"run '{parent['name']}' has no checkpoint{at} to fork from. "
                       "Runs checkpoint every `checkpoint_every` steps and when stopped.")
    checkpoint = checkpoints[-1]
    config = _apply_overrides(parent["config"], overrides)
    first_step = int(checkpoint["step"]) + 1  # steps count from 0: the fork goes on after its checkpoint's step
    if parent.get("kind") != "eval" and config.max_steps is not None and config.max_steps <= first_step:
        raise KrlError(f"a fork of '{parent['name']}' from its step-{checkpoint['step']} checkpoint would have "
                       f"nothing left to train: it starts at step {first_step} and max_steps is {config.max_steps}. "
                       f"Add max_steps={first_step + config.max_steps} (or any value above {first_step}).")
    return start_run(config, name=new_name, gpus=gpus, preset=parent.get("preset"), detach=detach,
                     registry=registry, kind=parent.get("kind"), tags=parent.get("tags") or (),
                     notes=f"forked from {parent['name']} at step {checkpoint['step']}",
                     parent_run_id=parent["id"], parent_step=int(checkpoint["step"]))


def _apply_overrides(config: dict[str, Any], overrides: Sequence[str]) -> Any:
    """The parent's config with dotted overrides, validated by core.config (a RunConfig)."""
    from core.config import config_from_dict, with_overrides

    return with_overrides(config_from_dict(config, "the parent run's config"), list(overrides))


EXIT_WAIT_S = 10.0  # how long delete/rename wait for a job that wrote its final status but is still exiting


def _refuse_while_live(row: dict[str, Any], doing: str) -> None:
    """KrlError while the run's job may still write into its folder. A job that already wrote its final status
    but is still closing (evaluator workers) is waited for a little first."""
    if row["status"] in ("running", "stopping"):
        raise KrlError(f"run '{row['name']}' is {row['status']}; stop it first with `krl runs stop {row['name']}` "
                       f"before {doing} it.")
    deadline = time.monotonic() + EXIT_WAIT_S
    while _other_live_process(row) and time.monotonic() < deadline:
        _child_exit_code(row["id"], row.get("pid"))
        time.sleep(0.1)
    if _other_live_process(row):
        raise KrlError(f"run '{row['name']}' is {row['status']} but its process (pid {row['pid']}) is still "
                       f"exiting after {EXIT_WAIT_S:g}s; try again in a moment, or kill it with "
                       f"`krl runs stop --force {row['name']}`.")


def delete_run(registry: Registry, name: str, remove_files: bool = True) -> dict[str, Any]:
    """Delete a run's rows and (by default) its folder; refuses a running or stopping run. Returns the deleted row."""
    reconcile(registry)
    row = registry.get_run(name)
    _refuse_while_live(row, "deleting")
    registry.delete_run(row["id"])
    folder = registry.run_dir(row["name"])
    if remove_files and folder.is_dir() and folder.resolve().parent == registry.workspace.resolve():
        shutil.rmtree(folder, ignore_errors=True)
    return row


def rename_run(registry: Registry, name: str, new_name: str) -> dict[str, Any]:
    """Rename a run and its folder; refuses while a job is writing into the folder."""
    reconcile(registry)
    row = registry.get_run(name)
    _refuse_while_live(row, "renaming")
    if registry.find_run(new_name) is not None:
        raise KrlError(f"a run named '{new_name}' already exists; choose another name.")
    old_dir, new_dir = registry.run_dir(row["name"]), registry.run_dir(new_name)
    if new_dir.exists():
        raise KrlError(f"folder {new_dir} already exists; move it away or choose another name.")
    registry.rename_run(row["id"], new_name)
    if old_dir.is_dir():
        try:
            old_dir.rename(new_dir)
        except OSError:
            registry.rename_run(row["id"], row["name"])
            raise
    return registry.get_run(row["id"])


def tag_run(registry: Registry, name: str, tags: Sequence[str], remove: bool = False) -> list[str]:
    row = registry.get_run(name)
    return registry.remove_tags(row["id"], tags) if remove else registry.add_tags(row["id"], tags)


def note_run(registry: Registry, name: str, text: str) -> None:
    registry.set_notes(registry.get_run(name)["id"], text)


# ---------------------------------------------------------------- the stable JSON view of a run

RUN_JSON_FIELDS = ("name", "id", "status", "kind", "pid", "step", "steps_done", "total_steps", "backend", "model", "preset",
                   "problem_set", "created_at", "started_at", "ended_at", "heartbeat_at", "host", "gpus",
                   "gpus_requested", "exit_code", "error", "tags", "notes", "parent", "parent_step", "segments",
                   "summary", "command", "config")


def run_json(registry: Registry, row: dict[str, Any], detail: bool = False) -> dict[str, Any]:
    """The stable machine view of a run (`krl runs ls --json` items; `runs show --json` adds checkpoints and
    recent events with detail=True). Times are epoch seconds; step is the last step written (0-based, null before
    any); steps_done is the progress every table shows (steps, or finished samples of an evaluation)."""
    segments = [dict(s) for s in (row.get("segments") or [])]
    if segments and segments[-1].get("ended_at") is None and row["status"] in TERMINAL_STATUSES:
        # The job wrote its final status itself; the segment ended with it.
        segments[-1]["ended_at"] = row.get("ended_at")
        segments[-1]["end_status"] = row["status"]
    parent = None
    if row.get("parent_run_id") is not None:
        found = registry.find_run(int(row["parent_run_id"]))
        parent = found["name"] if found else None
    out = {
        "name": row["name"], "id": row["id"], "status": row["status"], "kind": row["kind"], "pid": row.get("pid"),
        "step": row.get("last_step"), "steps_done": steps_done(row), "total_steps": row.get("total_steps"),
        "backend": row.get("backend"),
        "model": row.get("model"), "preset": row.get("preset"), "problem_set": row.get("problem_set"),
        "created_at": row.get("created_at"), "started_at": row.get("started_at"), "ended_at": row.get("ended_at"),
        "heartbeat_at": row.get("heartbeat_at"), "host": row.get("host"), "gpus": row.get("gpus") or [],
        "gpus_requested": row.get("gpus_requested") or 0, "exit_code": row.get("exit_code"),
        "error": row.get("error"), "tags": row.get("tags") or [], "notes": row.get("notes") or "",
        "parent": parent, "parent_step": row.get("parent_step"), "segments": segments,
        "summary": row.get("summary") or {}, "command": row.get("command"), "config": row.get("config") or {},
    }
    if detail:
        out["checkpoints"] = [{"step": c["step"], "name": c["name"], "state_path": c["state_path"],
                               "sampler_path": c["sampler_path"], "created_at": c["created_at"]}
                              for c in registry.checkpoints(row["id"])]
        out["events"] = [{"time": e["time"], "kind": e["kind"], "message": e["message"]}
                         for e in registry.events(row["id"], limit=1_000_000)[-50:]]
        out["log_path"] = str(log_path(registry, row["name"]))
    return out
