"""Baselines of a problem: its reference Model timed eagerly and under torch.compile, in a trusted process on the
evaluator's device (reference code is trusted; no candidate code ever runs here), with compile times cached on disk.

`python -m evaluator.local.baseline` reads one BaselineRequest as JSON on stdin and writes one BaselineResult on stdout;
`run_baseline` starts it and never raises for a problem that cannot be compiled or timed (the mode is "unavailable").
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from evaluator.contract.types import RuntimeStats
from evaluator.isolation.environment import project_root
from evaluator.judging.reference import load_reference

MODES = ("eager", "compile")
COMPILE_MODE = "default"  # torch.compile(mode=...) of the compile baseline
RECORD_FILE = "compile_times.json"
# A recorded compile failure is believed this long, then tried again (it may have been the machine's: no compiler).
FAILURE_RETRY_S = 24 * 3600.0
# Kept away from stdout's JSON line: torch and inductor print warnings there now and then.
RESULT_MARKER = "KRL_BASELINE_RESULT "


@dataclass
class BaselineRequest:
    """One problem to time as a baseline; same size knob, precision, seed and trial counts as its EvalRequests."""

    problem_id: str
    reference_source: str
    problem_hash: str = ""
    precision: str = "fp32"
    size_overrides: dict[str, int] = field(default_factory=dict)
    modes: tuple[str, ...] = MODES
    timing_trials: int = 100
    warmup_trials: int = 10
    seed: int = 42
    timeout_s: float = 900.0  # the whole measurement, cold compile included

    def source_hash(self) -> str:
        # Hashed here rather than trusting problem_hash: a stale hash must not hand one problem's record to another.
        return hashlib.sha256(self.reference_source.encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["modes"] = list(self.modes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BaselineRequest":
        names = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in names}
        data["modes"] = tuple(data.get("modes") or MODES)
        return cls(**data)


@dataclass
class BaselineResult:
    """Medians of the requested modes (timed interleaved, the candidates' protocol) or why a mode is unavailable.
    compile_s: the cold compile time of this (problem, sizes, precision, device, torch) as first measured;
    compile_s_now: this measurement's time to the first compiled output (small when inductor's cache served it)."""

    problem_id: str
    eager: Optional[RuntimeStats] = None
    compiled: Optional[RuntimeStats] = None
    compile_s: Optional[float] = None
    compile_s_now: Optional[float] = None
    compile_record_hit: bool = False
    unavailable: dict[str, str] = field(default_factory=dict)  # mode -> reason
    device: str = ""
    device_name: str = ""
    torch_version: str = ""
    timing_clock: str = ""
    wall_s: float = 0.0

    @property
    def compile_over_eager(self) -> Optional[float]:
        """compile median / eager median, both from this process: a kernel's speedup against eager times this is
        its speedup against torch.compile, free of drift between processes."""
        if self.eager is None or self.compiled is None or not self.eager.median_ms:
            return None
        return self.compiled.median_ms / self.eager.median_ms

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BaselineResult":
        data = dict(data)
        for key in ("eager", "compiled"):
            if isinstance(data.get(key), dict):
                data[key] = RuntimeStats(**data[key])
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def unavailable(request: BaselineRequest, reason: str, device: str = "") -> BaselineResult:
    return BaselineResult(problem_id=request.problem_id, device=device,
                          unavailable={mode: reason for mode in request.modes})


# ---- the compile-time record ---------------------------------------------------------------------------------------

def record_key(request: BaselineRequest, device_name: str, torch_version: str) -> str:
    sizes = ",".join(f"{k}={v}" for k, v in sorted((request.size_overrides or {}).items()))
    return "|".join([request.source_hash(), sizes, request.precision, device_name, torch_version, COMPILE_MODE])


class CompileTimeRecord:
    """A small JSON file of measured cold compile times (and compile failures), one entry per record_key, shared by
    every baseline process of one cache folder (flock around read-modify-write)."""

    def __init__(self, folder: str):
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, RECORD_FILE)

    def _locked(self):
        handle = open(self.path + ".lock", "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle

    def _read(self) -> dict[str, Any]:
        try:
            with open(self.path) as f:
                data = json.load(f)
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def get(self, key: str) -> Optional[dict[str, Any]]:
        with self._locked():
            return self._read().get(key)

    def put(self, key: str, entry: dict[str, Any]) -> None:
        with self._locked():
            data = self._read()
            data[key] = entry
            tmp = f"{self.path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)


# ---- inside the trusted baseline process ---------------------------------------------------------------------------

def _short(exc: BaseException, limit: int = 600) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = [line for line in text.splitlines() if line.strip()]
    text = " / ".join(lines[:4])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def measure_in_process(request: BaselineRequest, device: str, cache_dir: str) -> BaselineResult:
    """Time the reference eagerly and compiled, interleaved; never raises for a problem that fails (unavailable)."""
    import torch

    from evaluator.judging import judge, timing
    from evaluator.slot.worker import default_timing_settings

    started = time.perf_counter()
    is_cuda = device.startswith("cuda")
    if is_cuda:
        torch.cuda.set_device(torch.device(device))
    result = BaselineResult(problem_id=request.problem_id, device=device, torch_version=torch.__version__,
                            device_name=torch.cuda.get_device_name(torch.device(device)) if is_cuda else "cpu",
                            timing_clock=timing.CLOCK_CUDA if is_cuda else timing.CLOCK_MONOTONIC)
    try:
        reference = load_reference(request.reference_source, request.size_overrides,
                                   name=f"krl_baseline_{request.problem_id}")
        judge.set_seed(request.seed)
        with torch.device(device):
            model = reference.Model(*reference.get_init_inputs())
        model = model.to(device=device, dtype=judge.DTYPES[request.precision]).eval()
        inputs = judge.make_inputs(reference, request.seed, device, request.precision)
        with torch.no_grad():
            eager_output = model(*inputs)
    except Exception as exc:  # the reference itself is broken: no baseline at all
        result.unavailable = {mode: f"the reference failed: {_short(exc)}" for mode in request.modes}
        result.wall_s = time.perf_counter() - started
        return result

    fns = {"eager": lambda: model(*inputs)}
    if "compile" in request.modes:
        compiled = _compile(request, result, model, inputs, eager_output, device, cache_dir)
        if compiled is not None:
            fns["compile"] = lambda: compiled(*inputs)
    settings = default_timing_settings(is_cuda)
    settings = timing.TimingSettings(**{**settings.__dict__, "trials": request.timing_trials,
                                        "warmup": request.warmup_trials})
    try:
        with torch.no_grad():
            if is_cuda:
                samples = timing.time_cuda(fns, settings, timing.L2Flusher(device), hold=timing.LaunchHold())
            else:
                samples = timing.time_cpu(fns, settings)
        result.eager = timing.summarize(samples["eager"])  # always timed: the compile ratio needs it
        if "compile" in fns:
            result.compiled = timing.summarize(samples["compile"])
    except Exception as exc:
        for mode in fns:
            result.unavailable.setdefault(mode, f"timing failed: {_short(exc)}")
        result.eager = result.compiled = None
    result.wall_s = time.perf_counter() - started
    return result


def _compile(request: BaselineRequest, result: BaselineResult, model: Any, inputs: list, eager_output: Any,
             device: str, cache_dir: str) -> Any:
    """torch.compile(model) warmed by its first call (the compile), checked against the eager output; None (with the
    reason in result.unavailable) when it fails. A failure is recorded too, so the next evaluation does not retry."""
    import torch

    from evaluator.judging import judge

    record = CompileTimeRecord(cache_dir)
    key = record_key(request, result.device_name, result.torch_version)
    known = record.get(key)
    if known and known.get("error") and time.time() - float(known.get("at", 0)) < FAILURE_RETRY_S:
        result.unavailable["compile"] = f"{known['error']} (recorded earlier; delete {record.path} to retry)"
        result.compile_record_hit = True
        return None
    t0 = time.perf_counter()
    try:
        compiled = torch.compile(model, mode=COMPILE_MODE)
        with torch.no_grad():
            output = compiled(*inputs)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    except Exception as exc:
        reason = f"torch.compile failed: {_short(exc)}"
        record.put(key, {"error": reason, "problem_id": request.problem_id, "at": time.time()})
        result.unavailable["compile"] = reason
        return None
    result.compile_s_now = time.perf_counter() - t0
    atol, rtol = _tolerance(request.precision)
    comparison = judge.compare(eager_output, output, atol, rtol)
    if not comparison.ok:
        result.unavailable["compile"] = f"torch.compile's output differs from eager: {comparison.message[:300]}"
        return None
    if known and isinstance(known.get("compile_s"), (int, float)):
        result.compile_s, result.compile_record_hit = float(known["compile_s"]), True
    else:
        result.compile_s = result.compile_s_now
        record.put(key, {"compile_s": round(result.compile_s_now, 3), "problem_id": request.problem_id,
                         "at": time.time()})
    return compiled


def _tolerance(precision: str) -> tuple[float, float]:
    from evaluator.contract.types import DEFAULT_TOLERANCE

    return DEFAULT_TOLERANCE[precision], DEFAULT_TOLERANCE[precision]


def cache_folder(cache_dir: str) -> str:
    """The trusted baseline cache: compile-time record and inductor's (and Triton's) on-disk caches. Only baseline
    processes write here; candidate runners never see it."""
    return os.path.join(cache_dir, "baseline")


def main() -> int:
    request = BaselineRequest.from_dict(json.loads(sys.stdin.read()))
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    folder = sys.argv[2] if len(sys.argv) > 2 else cache_folder(os.path.expanduser("~/.cache/kernelrl/evaluator"))
    result = measure_in_process(request, device, folder)
    sys.stdout.write(RESULT_MARKER + json.dumps(result.to_dict()) + "\n")
    sys.stdout.flush()
    return 0


# ---- the caller's side ---------------------------------------------------------------------------------------------

def run_baseline(request: BaselineRequest, device: str, cache_dir: str,
                 running: Optional[set] = None) -> BaselineResult:
    """Measure in a fresh trusted process (python -m evaluator.local.baseline) whose inductor and Triton caches live in
    cache_folder(cache_dir); a crash, a timeout or unreadable output makes every mode unavailable, with the reason.
    `running` (a set) holds the process while it runs, so its owner can kill it on close."""
    folder = cache_folder(cache_dir)
    os.makedirs(folder, exist_ok=True)
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(folder, "inductor")
    env["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
    env.pop("TRITON_CACHE_MANAGER", None)  # the runners' two-level manager is not for this trusted process
    root = project_root()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    running = set() if running is None else running
    try:
        process = subprocess.Popen([sys.executable, "-m", "evaluator.local.baseline", device, folder], env=env,
                                   cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as exc:
        return unavailable(request, f"the baseline process could not start: {exc}", device)
    running.add(process)
    try:
        stdout, stderr = process.communicate(json.dumps(request.to_dict()), timeout=request.timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return unavailable(request, f"the baseline measurement ran past {request.timeout_s:.0f} s", device)
    finally:
        running.discard(process)
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            try:
                return BaselineResult.from_dict(json.loads(line[len(RESULT_MARKER):]))
            except (ValueError, TypeError) as exc:
                return unavailable(request, f"unreadable baseline result: {exc}", device)
    tail = " / ".join(stderr.strip().splitlines()[-3:])[-600:]
    return unavailable(request, f"the baseline process ended with status {process.returncode}: {tail}", device)


if __name__ == "__main__":
    sys.exit(main())
