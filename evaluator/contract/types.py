"""The evaluator's vocabulary: EvalRequest in, EvalResult out, the verdicts and the evaluator's own error.
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
KERNELBENCH_CONVENTION = ("kernelbench: eager back-to-back calls, host gaps included, cuda events, L2 flushed, mean "
                          "of the calls within 3x their median, each side's quietest of 3 rounds on a GPU")

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
    # GPU time share in the candidate's own kernels: CANDIDATE-REPORTED (its own process's profiler), never judged
    own_kernel_time_fraction: Optional[float] = None
    sol_time_ms: Optional[float] = None  # speed-of-light time of the problem on this GPU (evaluator/judging/sol.py)
    sol_fraction: Optional[float] = None  # sol_time_ms / kernel median: 1.0 is the hardware's limit
    # The same kernel timed in KernelBench's convention (eager back-to-back calls, host launch gaps included, CUDA
    # events, L2 flushed, mean of trials less spiked calls): the number published fast_p figures use. `speedup` above
    # is device time.
    speedup_kernelbench: Optional[float] = None
    kernel_runtime_kernelbench_ms: Optional[float] = None
    reference_runtime_kernelbench_ms: Optional[float] = None
    kernelbench_clock: str = ""  # how the kernelbench figures were measured (evaluator/slot/kernelbench_phase.CLOCK)
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


def check_request(request: EvalRequest) -> None:
    """The caller's mistakes every evaluator (local, Ray, HTTP) refuses before queueing: EvaluatorError says which."""
    if request.backend not in BACKENDS:
        raise EvaluatorError(f"unknown backend {request.backend!r}; use one of {', '.join(BACKENDS)}.")
    if request.precision not in PRECISIONS:
        raise EvaluatorError(f"unknown precision {request.precision!r}; use one of {', '.join(PRECISIONS)}.")


class EvaluatorBusy(EvaluatorError):
    """The evaluator's queue is full: try again later (HTTP 503 with Retry-After). Carries the queue depth seen."""

    def __init__(self, message: str, queue_depth: int, retry_after_s: float = 1.0):
        super().__init__(message)
        self.queue_depth = queue_depth
        self.retry_after_s = retry_after_s
