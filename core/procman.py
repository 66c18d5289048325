"""The process manager's commands: start training and evaluation jobs as detached processes, queue them for GPUs,
stop, resume, fork, delete, rename and tag runs. Status truth comes from `reconcile()`, which every reader calls."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

from typing import Any, Callable, Iterator, Optional, Sequence

from core.errors import KrlError
from core.checkpoint import checkpoint_expiry
from core.identity import other_live_process, run_is_local, run_process_alive
from core.registry import Registry, check_run_name
from core.run_status import ACTIVE_STATUSES, RESUMABLE_STATUSES, TERMINAL_STATUSES, RunStatus
from core.segments import close_segment, request_segment_stop
from core.gpus import check_gpus
from core.runlogs import log_path
from core.spawn import child_exit_code, job_argv, kill_orphans, signal_run, wait_gone
from core.reconcile import close_ended_segment, reconcile, stop_grace_s
# Re-exported: procman's public API (see below) names these.
from core.gpus import detect_gpus, gpu_usage  # noqa: F401
from core.identity import pid_matches, process_identity, process_start_time, run_process_alive  # noqa: F401
from core.reconcile import heartbeat_limit_s, startup_grace_s  # noqa: F401
from core.runlogs import tail_log  # noqa: F401
from core.progress import steps_done

# Run lifecycle
#     start_run → row `queued` → reconcile() spawns `python -m core.train <run-id> --workspace W` when its GPUs are free
#     (own session and process group, stdout/stderr appended to <ws>/<name>/logs.log, CUDA_VISIBLE_DEVICES = assigned
#     GPUs) → row `running` with pid, pid_start_time, host, command, gpus and a new entry in `segments`.
#     The job writes running/heartbeats/steps and its final status (stopped, finished, failed) itself; reconcile() marks
#     runs whose process vanished without a final status `crashed` (or `failed` when a non-zero exit code is known), runs
#     whose heartbeat is older than the limit `crashed`, and escalates stops past their grace period to SIGKILL.
#
# Process identity (core/identity.py)
#     A pid is only taken for the run when /proc/<pid>/stat shows a live (non-zombie) process whose start time equals
#     `pid_start_time` (epoch seconds, within PID_START_TOLERANCE_S), so a recycled pid is never signalled or trusted.
#
# GPUs (core/gpus.py)
#     detect_gpus(): $KRL_GPUS (a count "2" or a list "0,3") › $KRL_HOST_GPUS (set by procman for jobs) ›
#     $CUDA_VISIBLE_DEVICES › /proc/driver/nvidia/gpus › `nvidia-smi -L`. Free = detected − gpus of running/stopping runs.
#     Queued runs start in creation order (strict FIFO among GPU runs; runs needing 0 GPUs never wait).
#
# Columns written here: `command` = {"argv": [...], "cwd": "..."}; `gpus` = list of GPU ids; `segments` = list of
#     core.segments.Segment records (13 keys).
#
# Environment knobs: KRL_HEARTBEAT_LIMIT_S (default 60), KRL_STARTUP_GRACE_S (default 180: the limit before a job's
# first heartbeat), KRL_STOP_GRACE_S (default 30), KRL_GPUS, KRL_JOB_MODULE (the module spawned for a run, default
# core.train; tests point it at a stand-in). The job gets KRL_RUN_ID, KRL_WORKSPACE, KRL_HOST_GPUS in its environment.
#
# Rooms: core/spawn.py (starting and signalling jobs), core/reconcile.py (status truth), core/runlogs.py (logs),
# core/segments.py, core/gpus.py, core/identity.py. This module holds the commands.
#
# Public API: start_run, reconcile, stop_run, resume_run, fork_run, delete_run, rename_run, tag_run, note_run,
# wait_run, tail_log, follow_log, log_path, run_json, gpu_usage, detect_gpus, process_identity, pid_matches,
# run_process_alive. Functions taking a registry never close it.


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
        check_gpus(need)
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
            notes=notes, parent_run_id=parent_run_id, parent_step=parent_step, status=RunStatus.QUEUED)
        reg.run_dir(row["name"]).mkdir(parents=True, exist_ok=True)
        reg.update_run(row["id"], command={"argv": job_argv(row["id"], reg.workspace, row.get("kind")),
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
    if row["status"] == RunStatus.QUEUED:
        registry.compare_and_set_status(row["id"], (RunStatus.QUEUED,), RunStatus.STOPPED, "removed from the queue",
                                        ended_at=time.time())
        reconcile(registry)
        return registry.get_run(row["id"])
    alive = run_process_alive(row)
    if row["status"] not in (RunStatus.RUNNING, RunStatus.STOPPING):
        if alive and force:  # e.g. marked crashed for a stale heartbeat while the process hangs on
            signal_run(row, signal.SIGKILL)
            wait_gone(row, 10.0)
            registry.add_event(row["id"], "status", f"killed hung process {row['pid']} (--force)")
            return registry.get_run(row["id"])
        hint = " (its process is still alive; --force kills it)" if alive else ""
        raise KrlError(f"run '{row['name']}' is {row['status']}, not running; nothing to stop{hint}.")
    if not run_is_local(row):
        raise KrlError(f"run '{row['name']}' runs on host {row['host']}; stop it there.")
    segments = request_segment_stop(row, grace)
    with registry.transaction():
        current = registry.get_run(row["id"])
        if current["status"] == RunStatus.RUNNING:
            registry.set_status(row["id"], RunStatus.STOPPING,
                                "SIGKILL (--force)" if force else f"SIGTERM, grace {grace:g}s",
                                segments=segments)
        elif current["status"] == RunStatus.STOPPING:
            registry.update_run(row["id"], segments=segments)
    if force:
        signal_run(row, signal.SIGKILL)
        wait_gone(row, 10.0)
        registry.compare_and_set_status(row["id"], (RunStatus.STOPPING, RunStatus.RUNNING), RunStatus.STOPPED,
                                        "killed with SIGKILL (--force, no final checkpoint)", ended_at=time.time(),
                                        segments=close_segment(registry.get_run(row["id"]), RunStatus.STOPPED,
                                                               "--force"))
        child_exit_code(row["id"], row.get("pid"))
        reconcile(registry)
        return registry.get_run(row["id"])
    signal_run(row, signal.SIGTERM)
    if not wait:
        return registry.get_run(row["id"])
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        child_exit_code(row["id"], row.get("pid"))  # reap our own child so it does not linger as a zombie
        if not run_process_alive(row):
            break
        time.sleep(0.1)
    else:
        signal_run(row, signal.SIGKILL)
        wait_gone(row, 10.0)
        current = registry.get_run(row["id"])
        registry.compare_and_set_status(
            row["id"], (RunStatus.STOPPING, RunStatus.RUNNING), RunStatus.STOPPED,
            f"killed with SIGKILL after a {grace:g}s grace period (no final checkpoint)", ended_at=time.time(),
            segments=close_segment(current, RunStatus.STOPPED, "SIGKILL after grace"))
    reconcile(registry)
    final = registry.get_run(row["id"])
    if final["status"] in TERMINAL_STATUSES:
        close_ended_segment(registry, final)
        kill_orphans(registry, final)
    return registry.get_run(row["id"])


def resume_run(registry: Registry, name: str, detach: bool = True, gpus: int | None = None,
               on_line: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Resume a stopped, failed or crashed run from its last checkpoint as a new segment of the same run
    (queued until its GPUs are free). detach=False waits for it like start_run. Returns the run row."""
    reconcile(registry)
    row = registry.get_run(name)
    if row["status"] not in RESUMABLE_STATUSES:
        hint = {RunStatus.FINISHED: " Fork it to train further: `krl runs fork NAME --name NEW max_steps=…`.",
                RunStatus.QUEUED: " It is waiting for GPUs.", RunStatus.RUNNING: "",
                RunStatus.STOPPING: ""}.get(row["status"], "")
        raise KrlError(f"run '{row['name']}' is {row['status']}; only stopped, failed or crashed runs can be "
                       f"resumed.{hint}")
    if other_live_process(row):
        raise KrlError(f"run '{row['name']}' still has a live process (pid {row['pid']}). "
                       f"Kill it first with `krl runs stop --force {row['name']}`.")
    need = int(gpus if gpus is not None else row.get("gpus_requested") or 0)
    check_gpus(need)
    _check_backend_ready(row.get("backend"))
    close_ended_segment(registry, row)
    row = registry.get_run(row["id"])
    checkpoint = registry.last_checkpoint(row["id"])
    expiry = checkpoint_expiry(registry.run_dir(row["name"]), checkpoint["name"]) if checkpoint else None
    if expiry is not None and expiry < time.time():
        raise KrlError(f"run '{row['name']}' would resume from checkpoint {checkpoint['name']} (step "
                       f"{checkpoint['step']}), which expired on the service at "
                       f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(expiry))}. Fork the run from a checkpoint "
                       "marked final in checkpoints.jsonl (`krl runs fork NAME --name NEW --step N`), or start anew.")
    where = f"from checkpoint {checkpoint['name']} (step {checkpoint['step']})" if checkpoint else \
        "without a checkpoint (starts from the beginning)"
    command = row.get("command") if isinstance(row.get("command"), dict) else {}
    command = dict(command, argv=job_argv(row["id"], registry.workspace, row.get("kind")), cwd=os.getcwd())
    log = log_path(registry, row["name"])
    log_offset = log.stat().st_size if log.exists() else 0
    if not registry.compare_and_set_status(row["id"], RESUMABLE_STATUSES, RunStatus.QUEUED, f"resume {where}",
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
    if row["status"] in (RunStatus.RUNNING, RunStatus.STOPPING):
        raise KrlError(f"run '{row['name']}' is {row['status']}; stop it first with `krl runs stop {row['name']}` "
                       f"before {doing} it.")
    deadline = time.monotonic() + EXIT_WAIT_S
    while other_live_process(row) and time.monotonic() < deadline:
        child_exit_code(row["id"], row.get("pid"))
        time.sleep(0.1)
    if other_live_process(row):
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


RUN_JSON_FIELDS = ("name", "id", "status", "kind", "pid", "step", "steps_done", "total_steps", "backend", "model",
                   "preset",
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
