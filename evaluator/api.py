"""The evaluator's public types: EvalRequest in, EvalResult out, and the Evaluator that maps one to the other.
Plain dataclasses that round-trip through JSON, so results can be stored in the registry and sent between processes."""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional


class Verdict(str, enum.Enum):
    """What happened to a candidate. The verdict and the cleaned error are what the model sees."""

    CORRECT = "correct"
    WRONG_OUTPUT = "wrong_output"
    SHAPE_MISMATCH = "shape_mismatch"
    FORMAT_ERROR = "format_error"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    HACK_DETECTED = "hack_detected"


BACKENDS = ("cuda", "triton", "torch")
PRECISIONS = ("fp32", "fp16", "bf16")

# What EvalResult.speedup measures, and what speedup_kernelbench measures (stamped on every timed result).
SPEEDUP_CONVENTION = "device_time: launches held, reference and candidate interleaved, median of per-round ratios"
KERNELBENCH_CONVENTION = "kernelbench: eager back-to-back calls, host gaps included, cuda events, L2 flushed, mean"

# KernelBench's current tolerances: one value used as both atol and rtol.
DEFAULT_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}


@dataclass
class EvalRequest:
    """One candidate kernel to check (and time) against one reference problem."""

    problem_id: str
    reference_source: str
    candidate_source: str
    problem_hash: str = ""
    backend: str = "torch"  # cuda (load_inline) | triton | torch
    precision: str = "fp32"
    correctness_trials: int = 5
    timing_trials: int = 100
    warmup_trials: int = 10
    atol: Optional[float] = None  # None: DEFAULT_TOLERANCE[precision]
    rtol: Optional[float] = None
    compile_timeout_s: float = 180.0
    run_timeout_s: float = 60.0
    measure_timing: bool = True
    seed: int = 42
    # Also time in KernelBench's convention (evaluator/judging/kernelbench_timing.py), reported beside the speedup.
    kernelbench_timing: bool = True
    # Module-level size constants of the problem to override (the problems' size knob).
    size_overrides: dict[str, int] = field(default_factory=dict)
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def tolerances(self) -> tuple[float, float]:
        default = DEFAULT_TOLERANCE[self.precision]
        return (self.atol if self.atol is not None else default, self.rtol if self.rtol is not None else default)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalRequest":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class RuntimeStats:
    """Summary of repeated timings, all in milliseconds."""

    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    n: int


@dataclass
class EvalResult:
    """Everything the evaluator learned about one candidate."""

    request_id: str
    problem_id: str
    verdict: Verdict
    compiled: bool = False
    correctness_trials_passed: int = 0
    correctness_trials_total: int = 0
    max_abs_diff: Optional[float] = None  # on the first failing trial (or the worst if all pass)
    mean_abs_diff: Optional[float] = None
    kernel_runtime: Optional[RuntimeStats] = None
    reference_runtime: Optional[RuntimeStats] = None
    speedup: Optional[float] = None  # reference median / kernel median
    own_kernel_time_fraction: Optional[float] = None  # GPU time in the candidate's own kernels (reported, not judged)
    sol_time_ms: Optional[float] = None  # speed-of-light time of the problem on this GPU (evaluator/sol.py)
    sol_fraction: Optional[float] = None  # sol_time_ms / kernel median: 1.0 is the hardware's limit
    # The same kernel timed in KernelBench's convention (eager back-to-back calls, host launch gaps included, CUDA
    # events, L2 flushed, mean of trials): the number published fast_p figures use. `speedup` above is device time.
    speedup_kernelbench: Optional[float] = None
    kernel_runtime_kernelbench_ms: Optional[float] = None
    reference_runtime_kernelbench_ms: Optional[float] = None
    speedup_convention: str = ""  # what `speedup` measures (SPEEDUP_CONVENTION when timed)
    sol_score: Optional[float] = None  # 1 / (1 + (T - T_sol) / (T_reference - T_sol)): 0.5 at the reference, 1 at SOL
    near_miss: str = ""  # how a near miss on the timing inputs was decided: "float64" | "trial_error" | ""
    hack_rule: Optional[str] = None
    error_message: str = ""  # cleaned and size-capped, line numbers refer to the candidate source
    device_name: str = ""
    gpu_name: str = ""  # the CUDA device's name; empty in CPU mode
    node: str = ""  # host name of the machine that evaluated
    timing_clock: str = ""  # "cuda_events" or "monotonic" (CPU mode)
    phase_times_s: dict[str, float] = field(default_factory=dict)  # compile, load, correctness, timing, total
    cache_hits: list[str] = field(default_factory=list)  # e.g. ["compile", "reference_timing"]
    attempts: int = 1
    worker_id: str = ""

    @property
    def correct(self) -> bool:
        return self.verdict == Verdict.CORRECT

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["verdict"] = self.verdict.value
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalResult":
        data = dict(data)
        data["verdict"] = Verdict(data["verdict"])
        for key in ("kernel_runtime", "reference_runtime"):
            if isinstance(data.get(key), dict):
                data[key] = RuntimeStats(**data[key])
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class EvaluatorError(Exception):
    """The evaluator itself cannot do what was asked (bad arguments, workers that cannot start, closed evaluator).
    Never raised for a bad candidate: those get a verdict. The CLI maps it to a clean error message."""


def _detect_gpus() -> tuple[int, Optional[str]]:
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


def check_request(request: EvalRequest) -> None:
    """The caller's mistakes every evaluator (local, Ray, HTTP) refuses before queueing: EvaluatorError says which."""
    if request.backend not in BACKENDS:
        raise EvaluatorError(f"unknown backend {request.backend!r}; use one of {', '.join(BACKENDS)}.")
    if request.precision not in PRECISIONS:
        raise EvaluatorError(f"unknown precision {request.precision!r}; use one of {', '.join(PRECISIONS)}.")


class Evaluator:
    """A pool of isolated worker processes that turns EvalRequests into EvalResults.

    devices: "auto" (every visible GPU, else CPU mode) | "cpu" | [0, 1] (GPU indices). Each GPU gets
    `workers_per_device` workers plus a warm spare; CPU mode runs `cpu_workers` (+ a spare). CUDA candidates are
    built by `compile_workers` CPU processes (default: one per core, started on the first CUDA request) into
    `cache_dir` (default $KRL_CACHE_DIR or ~/.cache/kernelrl/evaluator). `memory_limit_bytes` is the host memory one
    evaluation may hold (default: a share of RAM per worker process); past it the candidate is stopped."""

    def __init__(self, devices: Any = "auto", workers_per_device: int = 1, cpu_workers: int = 2,
                 compile_workers: Optional[int] = None, cache_dir: Optional[str] = None, *,
                 spare_per_device: int = 1, memory_limit_bytes: Optional[int] = None,
                 output_cap_bytes: int = 64 * 2**20, worker_module: str = "evaluator.worker"):
        import os
        import shutil

        from evaluator.pool import Limits, Pool, PoolConfig

        arch = os.environ.get("TORCH_CUDA_ARCH_LIST") or None
        if devices == "auto":
            count, capability = _detect_gpus()
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
                arch = _detect_gpus()[1]
        if workers_per_device < 1 or cpu_workers < 1:
            raise EvaluatorError("workers_per_device and cpu_workers must be at least 1.")
        cpu_mode = device_list == ["cpu"]
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
        self.cache_dir = cache_dir
        self._baseline_executors: dict[str, Any] = {}  # device -> one-thread executor (one baseline at a time)
        self._baseline_processes: set = set()  # running baseline processes, killed by close()
        from evaluator.cache import CacheJanitor, max_cache_bytes

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
        """A Future of the BaselineResult of an evaluator.baseline.BaselineRequest: the reference timed eagerly and
        under torch.compile in a trusted process on one of this evaluator's devices (one measurement per device at
        a time), compile times cached under cache_dir. Never fails for a problem that cannot compile (unavailable)."""
        import zlib
        from concurrent.futures import ThreadPoolExecutor

        from evaluator.baseline import run_baseline

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
