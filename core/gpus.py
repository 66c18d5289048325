"""GPU allocation for runs: which GPUs this machine offers (KRL_GPUS › KRL_HOST_GPUS › CUDA_VISIBLE_DEVICES ›
/proc/driver/nvidia › nvidia-smi), which runs hold them, and which ended runs still do while their process exits."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from pathlib import Path
from typing import Any, Optional

from core.errors import KrlError
from core.identity import run_process_alive
from core.registry import Registry
from core.run_status import TERMINAL_STATUSES, RunStatus


_NVIDIA_SMI_CACHE: Optional[list[int]] = None


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
    for row in registry.list_runs(status=(RunStatus.RUNNING, RunStatus.STOPPING)):
        for gpu in row.get("gpus") or []:
            held[gpu] = row["name"]
    lingering = lingering_gpus(registry)
    if lingering:
        for row in registry.list_runs(status=TERMINAL_STATUSES):
            for gpu in row.get("gpus") or []:
                if gpu in lingering and gpu not in held and run_process_alive(row):
                    held[gpu] = row["name"]
    return {"detected": detected, "held": held, "free": [g for g in detected if g not in held]}


LINGER_WINDOW_S = 600.0  # how far back to look for ended runs whose process still holds its GPUs


def lingering_gpus(registry: Registry) -> set:
    """GPUs of runs that wrote a final status but whose process is still exiting (closing evaluator workers that
    hold GPU memory). This process itself is left out: a job reconciling at its exit frees its GPUs by exiting."""
    since = time.time() - LINGER_WINDOW_S
    held = set()
    for row in registry.list_runs(status=TERMINAL_STATUSES):
        if (row.get("ended_at") or row.get("heartbeat_at") or 0) < since:
            continue
        if row.get("gpus") and row.get("pid") != os.getpid() and run_process_alive(row):
            held.update(row["gpus"])
    return held


def check_gpus(need: int) -> None:
    if need < 0:
        raise KrlError(f"--gpus must be 0 or more, not {need}.")
    detected = detect_gpus()
    if need > len(detected):
        raise KrlError(f"the run needs {need} GPU(s) but this machine offers {len(detected)} "
                       f"({', '.join(map(str, detected)) or 'none'}). Use --gpus {len(detected)} "
                       "(0 runs on CPU), or set KRL_GPUS / CUDA_VISIBLE_DEVICES.")
