"""Whether a candidate's CUDA out-of-memory failure was the GPU's fault rather than its own: decided from the judge's
own readings (the device's free memory, the runner's own share through nvidia-smi), never from the runner's word."""

from __future__ import annotations

import subprocess
from typing import Optional

from evaluator.isolation.proctree import descendants

OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation")
# The device counts as full when less than this share of it is free as the judge looks.
FULL_SHARE = 0.05
# A runner holding less than this share of the device asked for no more than its part: with up to 8 slots a GPU
# (local/pool.py's "auto"), an eighth. Above it, its own appetite filled the device and the error stands.
FAIR_SHARE = 1 / 8
SMI_TIMEOUT_S = 5.0


def starved_by_others(message: str, runner_pid: int) -> bool:
    """True when `message` (the runner's admitted runtime error) is a CUDA out-of-memory error, the device is full as
    the judge sees it now, and the runner's process tree holds no more than its fair share of the device: the other
    slots' processes filled it (8 slots on an H100 left 5 honest candidates of 48 out of memory). The evaluation is
    then the evaluator's failure, retried on a fresh runner. Unknown readings leave the candidate's error standing."""
    if not is_out_of_memory(message) or runner_pid <= 0:
        return False
    try:
        import torch

        free, total = torch.cuda.mem_get_info()
    except Exception:  # noqa: BLE001 - no reading: the error stands
        return False
    if free > FULL_SHARE * total:  # the device had room: nvidia-smi is not asked
        return False
    return others_filled_it(free, total, process_gpu_bytes([runner_pid] + descendants(runner_pid)))


def is_out_of_memory(message: str) -> bool:
    return any(marker in message for marker in OOM_MARKERS)


def others_filled_it(free: int, total: int, held: Optional[int]) -> bool:
    """The rule on the judge's readings: the device full, and the runner's tree (`held` bytes; None: unknown) within
    its fair share of it."""
    return free <= FULL_SHARE * total and held is not None and held <= FAIR_SHARE * total


def process_gpu_bytes(pids: list[int]) -> Optional[int]:
    """GPU memory held by these processes (host pids) as the driver counts it; None when nvidia-smi cannot say."""
    try:
        listing = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_compute_apps(listing, set(pids))


def parse_compute_apps(listing: str, pids: set[int]) -> Optional[int]:
    """Bytes of `pids` in nvidia-smi's `pid, used_memory [MiB]` lines; None when a line does not read."""
    held = 0
    for line in listing.splitlines():
        if not line.strip():
            continue
        try:
            pid, mib = (int(part.strip()) for part in line.split(","))
        except ValueError:
            return None
        if pid in pids:
            held += mib * 2**20
    return held
