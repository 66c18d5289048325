"""The judge's view of GPU memory: whether a candidate's CUDA out-of-memory failure may be the neighbours' doing (the
judge's own readings, never the runner's word), its cached blocks given back, and what its allocator did in a task."""

from __future__ import annotations

import subprocess
from typing import Optional

from evaluator.isolation.proctree import descendants

OOM_MARKERS = ("CUDA out of memory", "CUDA error: out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED",
               "cudaErrorMemoryAllocation")
# Other processes (other slots' judges and runners, this task's judge) holding at least this share of the device may
# have made the difference: with up to 8 slots a GPU (local/pool.py's "auto"), an eighth.
FAIR_SHARE = 1 / 8
SMI_TIMEOUT_S = 5.0


def starved_by_others(message: str, runner_pid: int) -> bool:
    """True when `message` (the runner's admitted runtime error) is a CUDA out-of-memory error and processes other than
    the runner's tree hold at least a fair share of the device as the judge reads it now: the evaluation is then
    retried with the device to itself (local/pool.py `Task.alone`), where the error, if it comes again, is the
    candidate's. Free memory alone cannot decide it: by the time the judge reads, the neighbours that filled the device
    may have freed it (8 slots on an H100 left 11 of 48 real kernels out of memory). Unknown readings: no retry."""
    if not is_out_of_memory(message) or runner_pid <= 0:
        return False
    try:
        import torch

        free, total = torch.cuda.mem_get_info()
    except Exception:  # noqa: BLE001 - no reading: the error stands
        return False
    return others_filled_it(free, total, process_gpu_bytes([runner_pid] + descendants(runner_pid)),
                            requested_bytes(message))


def is_out_of_memory(message: str) -> bool:
    return any(marker in message for marker in OOM_MARKERS)


def others_filled_it(free: int, total: int, held: Optional[int], requested: Optional[int] = None) -> bool:
    """The rule on the judge's readings: what neither the free memory nor the runner's tree (`held` bytes; None:
    unknown, taken as nothing) accounts for is held by others, and they hold at least a fair share; unless the failed
    allocation (`requested` bytes, from the error) could not have fitted even beside nothing but the runner's own, so
    that a candidate asking for more than the device has cannot make its GPU drain for a retry alone."""
    held = held or 0
    if requested is not None and held + requested > total:
        return False
    others = total - free - held
    return total > 0 and others >= FAIR_SHARE * total


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}


def requested_bytes(message: str) -> Optional[int]:
    """The allocation torch's out-of-memory error says failed ("Tried to allocate 2.00 GiB"); None where not said."""
    import re

    found = re.search(r"Tried to allocate ([0-9.]+) (PiB|TiB|GiB|MiB|KiB|B)\b", message)
    if found is None:
        return None
    try:
        return int(float(found.group(1)) * UNITS[found.group(2)])
    except ValueError:
        return None


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


def release_device_cache() -> None:
    """The judge's unused cached GPU blocks back to the device (no-op without CUDA): after its timing's staging and after
    each task, since eight judges that kept theirs left honest candidates out of memory on an H100."""
    try:
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - nothing to release
        pass


def allocator_counts(reset_peak: bool = True) -> dict[str, int]:
    """The judge's caching allocator so far: the device allocations (cudaMalloc) and frees (cudaFree) it has made, and
    its peak reserved bytes since the last reset, which `reset_peak` makes; {} without CUDA. Each allocation and free is
    a driver call under its host-wide lock, where several GPUs' slots queued (docs/known-gaps.md)."""
    try:
        import torch

        if not torch.cuda.is_initialized():
            return {}
        stats = torch.cuda.memory_stats()
        if reset_peak:
            torch.cuda.reset_peak_memory_stats()
    except Exception:  # noqa: BLE001 - a diagnostic: nothing to record
        return {}
    return {"mallocs": int(stats.get("segment.all.allocated", 0)), "frees": int(stats.get("segment.all.freed", 0)),
            "reserved_peak": int(stats.get("reserved_bytes.all.peak", 0))}


def allocator_phases(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    """A task's judge-side allocator figures for its phases (recorded, never charged): its device allocations and
    frees, and the most it held reserved."""
    if not before or not after:
        return {}
    return {"judge_cuda_mallocs": after["mallocs"] - before["mallocs"],
            "judge_cuda_frees": after["frees"] - before["frees"],
            "judge_reserved_peak_mib": round(after["reserved_peak"] / 2**20, 1)}
