"""Starting and signalling run jobs: the detached `python -m core.train|core.evaluation` process of a run, its
process group, the jobs this process spawned (reaped, with exact exit codes) and their orphaned workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from pathlib import Path
from typing import Any, Optional

from core.identity import proc_stat, process_identity, run_is_local, run_process_alive
from core.run_status import RunStatus
from core.registry import Registry
from core.segments import open_segment


# Jobs spawned by this process: polling them reaps zombies and yields exact exit codes.
CHILDREN: dict[int, subprocess.Popen] = {}


def signal_run(row: dict[str, Any], sig: int) -> bool:
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


def orphans(row: dict[str, Any], workspace: Path) -> list[int]:
    """Live processes left in a dead job's process group (evaluator workers after a kill -9 of the job). Only those
    whose environment carries this run's KRL_RUN_ID and workspace count, so a recycled group id is never touched."""
    pgid = row.get("pid")
    if not pgid or not run_is_local(row) or not os.path.isdir("/proc"):
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


def kill_orphans(registry: Registry, row: dict[str, Any]) -> int:
    killed = 0
    for pid in orphans(row, registry.workspace):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def child_exit_code(run_id: int, pid: int | None) -> Optional[int]:
    """The exit code of a job this process spawned, once it has exited (None if unknown or still running)."""
    proc = CHILDREN.get(run_id)
    if proc is None or proc.pid != pid:
        return None
    code = proc.poll()  # also reaps it; Popen keeps the code, so repeated calls agree
    if code is None and os.path.exists("/proc/self/stat"):
        stat = proc_stat(proc.pid)
        if stat is None or stat[0] in ("Z", "X"):
            # A killed multi-threaded job shows as a zombie before its last thread is gone and waitpid can reap it.
            try:
                code = proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
    return code


def job_argv(run_id: int, workspace: Path, kind: str | None = None) -> list[str]:
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


def spawn_queued(registry: Registry, row: dict[str, Any], gpus: list, detected: list) -> dict[str, Any]:
    """Start a queued run's job (called inside reconcile's write transaction, so two readers never start it twice).
    Whatever stops it before the process exists (a file where the run folder goes, a full disk while writing the
    log header, a missing interpreter) marks this run failed with the reason and leaves reconciliation going."""
    try:
        return _start_job(registry, row, gpus, detected)
    except OSError as exc:
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        message = f"could not start the job: {exc.strerror or exc}{where}"
        registry.set_status(row["id"], RunStatus.FAILED, message, error=message, ended_at=time.time())
        return {"name": row["name"], "from": RunStatus.QUEUED, "to": RunStatus.FAILED, "message": message}


def _start_job(registry: Registry, row: dict[str, Any], gpus: list, detected: list) -> dict[str, Any]:
    workspace = registry.workspace
    run_dir = registry.run_dir(row["name"])
    run_dir.mkdir(parents=True, exist_ok=True)
    command = row.get("command") if isinstance(row.get("command"), dict) else None
    argv = (command or {}).get("argv") or job_argv(row["id"], workspace, row.get("kind"))
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
    index = len(row.get("segments") or [])
    with open(run_dir / "logs.log", "ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"=== krl: segment {index} of run {row['name']} starting at step {start_step} ({stamp}, "
                  f"gpus [{','.join(str(g) for g in gpus)}]) ===\n".encode())
        log.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                env=env, start_new_session=True, close_fds=True)
    CHILDREN[row["id"]] = proc
    # Reap it the moment it exits, even if nobody reconciles again (the TUI stops once no run is active):
    # no <defunct> entries; Popen keeps the exit code for child_exit_code.
    threading.Thread(target=proc.wait, name=f"krl-reap-{proc.pid}", daemon=True).start()
    identity = process_identity(proc.pid)
    now = time.time()
    segments = open_segment(row, identity, gpus=gpus, start_step=start_step, checkpoint=checkpoint, now=now)
    fields: dict[str, Any] = dict(identity, command={"argv": argv, "cwd": cwd}, gpus=gpus, segments=segments,
                                  heartbeat_at=now, exit_code=None, error=None, ended_at=None)
    if not row.get("started_at"):
        fields["started_at"] = now
    message = f"segment {index}: pid {proc.pid}, gpus [{','.join(str(g) for g in gpus)}], from step {start_step}"
    registry.set_status(row["id"], RunStatus.RUNNING, message, **fields)
    return {"name": row["name"], "from": RunStatus.QUEUED, "to": RunStatus.RUNNING, "message": message}


def wait_gone(row: dict[str, Any], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        child_exit_code(row["id"], row.get("pid"))
        if not run_process_alive(row):
            return
        time.sleep(0.05)
