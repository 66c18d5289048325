"""The Evaluator: a pool of isolated worker processes on this machine that turns EvalRequests into EvalResults,
and the device detection it starts from. The pool itself is imported only when an Evaluator is made."""

from __future__ import annotations

import os
from typing import Any, Optional

from evaluator.contract.types import PRECISIONS, EvalRequest, EvalResult, EvaluatorError, check_request


def detect_gpus() -> tuple[int, Optional[str]]:
    """(number of visible GPUs, compute capability of the first like "9.0") without initialising CUDA here."""
    import os
    import shutil
    import subprocess

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return 0, None
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout
            rows = [line.split(",") for line in out.strip().splitlines() if "," in line]
            if visible:
                wanted = {v.strip() for v in visible.split(",")}
                rows = [r for r in rows if r[0].strip() in wanted] or rows[: len(wanted)]
            if rows:
                return len(rows), rows[0][1].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        import torch

        return torch.cuda.device_count(), None
    except Exception:
        return 0, None


AUTO_SLOTS_MAX = 8  # slots per GPU at most when left to "auto"
# ...and on the whole host, shared among the GPUs evaluating there: every task makes and ends a CUDA context and its
# allocations through the driver, which takes one lock for the host, so slots on several GPUs queue there. Triton
# tasks a minute on 4 x H200 (session 21): 4 GPUs x 2 slots 267, x 4 218-222, x 8 137-160, against 192 for one GPU x 8.
AUTO_SLOTS_PER_HOST = 8


def slots_per_gpu(setting: Any, gpus: int, warn: bool = True, sharing_gpus: Optional[int] = None) -> int:
    """Slots (judge host + runners) per GPU: the setting, or for "auto" one per two cores of this process's share,
    at most AUTO_SLOTS_MAX, and AUTO_SLOTS_PER_HOST shared among `sharing_gpus` (default `gpus`, those this pool
    drives; a Ray actor drives one of the host's several). Several slots keep a GPU busy: other slots load, JIT, make
    inputs and compare while one times (an H100 with 16 cores: 8 slots gave ~2x one slot's rate,
    tests/bench/bench_slot.py)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    per_gpu_cores = cores // (2 * max(1, gpus))
    if setting == "auto":
        sharing = max(1, gpus, sharing_gpus or 0)
        return max(1, min(AUTO_SLOTS_MAX, per_gpu_cores, AUTO_SLOTS_PER_HOST // sharing))
    try:
        slots = int(setting)
    except (TypeError, ValueError):
        raise EvaluatorError(f"workers_per_device must be a number or 'auto', not {setting!r}.") from None
    if warn and slots > max(1, per_gpu_cores):
        import warnings

        # Each slot is a judge and a runner; past one slot per two cores the host's CPUs bound the rate and the
        # timing reads the runners' waits for a core: 16 slots on a 16-core H100 host ran slower than 8 and read
        # honest code at 0.13-0.19x in half its tasks (docs/figures.md, "Session 8").
        warnings.warn(f"workers_per_device={slots} is more than one slot per two CPU cores ({cores} cores for {gpus} "
                      f"GPU(s)): expect a lower rate and speedups misread as the host saturates; 'auto' picks "
                      f"{max(1, min(AUTO_SLOTS_MAX, per_gpu_cores))}.", RuntimeWarning, stacklevel=3)
    return slots


class Evaluator:
    """A pool of isolated worker processes that turns EvalRequests into EvalResults.

    devices: "auto" (every visible GPU, else CPU mode) | "cpu" | [0, 1] (GPU indices). Each GPU gets
    `workers_per_device` workers ("auto": one per two cores, at most 8) plus a warm spare; CPU mode runs `cpu_workers` (+ a spare). CUDA candidates are
    built by `compile_workers` CPU processes (default: one per core, started on the first CUDA request) into
    `cache_dir` (default $KRL_CACHE_DIR or ~/.cache/kernelrl/evaluator). `memory_limit_bytes` is the host memory one
    evaluation may hold (default: a share of RAM per worker process); past it the candidate is stopped."""

    def __init__(self, devices: Any = "auto", workers_per_device: Any = "auto", cpu_workers: int = 2,
                 compile_workers: Optional[int] = None, cache_dir: Optional[str] = None, *,
                 spare_per_device: int = 1, memory_limit_bytes: Optional[int] = None,
                 output_cap_bytes: int = 64 * 2**20, worker_module: str = "evaluator.slot.worker"):
        import os
        import shutil

        from evaluator.isolation.limits import Limits
        from evaluator.local.pool import Pool, PoolConfig

        arch = os.environ.get("TORCH_CUDA_ARCH_LIST") or None
        if devices == "auto":
            count, capability = detect_gpus()
            device_list = [f"cuda:{i}" for i in range(count)] or ["cpu"]
            arch = arch or capability
        elif devices == "cpu" or devices == ["cpu"]:
            device_list = ["cpu"]
        else:
            items = [devices] if isinstance(devices, (int, str)) else list(devices)
            device_list = []
            for item in items:
                text = str(item).strip()
                index = text.removeprefix("cuda:")
                if not index.isdigit():
                    raise EvaluatorError(f"unknown device {item!r}: use 'auto', 'cpu', or GPU indices such as [0, 1].")
                device_list.append(f"cuda:{int(index)}")
            if arch is None:
                arch = detect_gpus()[1]
        cpu_mode = device_list == ["cpu"]
        # CPU mode runs cpu_workers: the slots per GPU are then not warned about.
        workers_per_device = slots_per_gpu(workers_per_device, len(device_list), warn=not cpu_mode)
        if workers_per_device < 1 or cpu_workers < 1:
            raise EvaluatorError("workers_per_device and cpu_workers must be at least 1.")
        if compile_workers is None:
            # One per core, less one per GPU worker so timing keeps a core (compile workers also run at nice 10).
            gpu_workers = 0 if cpu_mode else len(device_list) * workers_per_device
            compile_workers = max(1, (os.cpu_count() or 1) - gpu_workers) \
                if shutil.which("nvcc") or os.environ.get("CUDA_HOME") else 0
        cache_dir = cache_dir or os.environ.get("KRL_CACHE_DIR") or os.path.join(
            os.path.expanduser("~"), ".cache", "kernelrl", "evaluator")
        os.makedirs(cache_dir, exist_ok=True)
        if memory_limit_bytes is None:
            # A share of the host's memory per worker process (spares included). GPU workers hold a CUDA context
            # and torch (a few GiB resident), so their floor is higher.
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            processes = cpu_workers + spare_per_device if cpu_mode else \
                len(device_list) * (workers_per_device + spare_per_device)
            floor, cap = (3 * 2**30, 16 * 2**30) if cpu_mode else (8 * 2**30, 64 * 2**30)
            memory_limit_bytes = int(min(cap, max(floor, 0.7 * total / processes)))
        # CPU mode also caps the address space, so an oversized allocation fails inside the candidate (a clean
        # MemoryError); CUDA reserves huge virtual ranges, so on GPUs only the pool's resident-memory watch applies.
        limits = Limits(address_space_bytes=memory_limit_bytes if cpu_mode else None,
                        resident_bytes=memory_limit_bytes, file_size_bytes=output_cap_bytes)
        self.devices = device_list
        self.cpu_mode = cpu_mode
        self.workers_per_device = workers_per_device
        self.cache_dir = cache_dir
        self._baseline_executors: dict[str, Any] = {}  # device -> one-thread executor (one baseline at a time)
        self._baseline_processes: set = set()  # running baseline processes, killed by close()
        from evaluator.build.cache import CacheJanitor, max_cache_bytes

        budget = max_cache_bytes()
        self._janitor = CacheJanitor(cache_dir, budget) if budget else None
        self._pool = Pool(PoolConfig(
            devices=device_list, workers_per_device=workers_per_device, cpu_workers=cpu_workers,
            compile_workers=max(0, int(compile_workers)), cache_dir=cache_dir, worker_module=worker_module,
            spare_per_device=spare_per_device, limits=limits, cuda_arch_list=arch,
        ))

    def submit(self, request: EvalRequest):
        """A concurrent.futures.Future that resolves to exactly one EvalResult."""
        check_request(request)
        return self._pool.submit(request)

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return self.submit(request).result()

    def evaluate_many(self, requests):
        """Yield results in the order they finish (each request's result exactly once)."""
        from concurrent.futures import as_completed

        futures = [self.submit(r) for r in requests]
        for future in as_completed(futures):
            yield future.result()

    async def evaluate_async(self, request: EvalRequest) -> EvalResult:
        import asyncio

        return await asyncio.wrap_future(self.submit(request))

    def measure_baseline(self, request: Any, device: Optional[str] = None):
        """A Future of the BaselineResult of an evaluator.local.baseline.BaselineRequest: the reference timed eagerly and
        under torch.compile in a trusted process on one of this evaluator's devices (one measurement per device at
        a time), compile times cached under cache_dir. Never fails for a problem that cannot compile (unavailable)."""
        import zlib
        from concurrent.futures import ThreadPoolExecutor

        from evaluator.local.baseline import run_baseline

        if request.precision not in PRECISIONS:
            raise EvaluatorError(f"unknown precision {request.precision!r}; use one of {', '.join(PRECISIONS)}.")
        device = device or self.devices[zlib.crc32(request.problem_id.encode()) % len(self.devices)]
        if device not in self.devices:
            raise EvaluatorError(f"device {device!r} is not one of this evaluator's: {', '.join(self.devices)}.")
        if device not in self._baseline_executors:
            self._baseline_executors[device] = ThreadPoolExecutor(max_workers=1,
                                                                  thread_name_prefix=f"krl-baseline-{device}")
        return self._baseline_executors[device].submit(run_baseline, request, device, self.cache_dir,
                                                       self._baseline_processes)

    def stats(self) -> dict[str, Any]:
        """Worker states and counters (spawned, crashes, timeouts, retries, ...)."""
        return self._pool.snapshot()

    def close(self) -> None:
        if self._janitor is not None:
            self._janitor.stop()
        for executor in self._baseline_executors.values():
            executor.shutdown(wait=False, cancel_futures=True)
        for process in list(self._baseline_processes):
            process.kill()  # its future resolves as unavailable
        self._pool.close()

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
