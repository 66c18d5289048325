"""Triton kernels in sandboxed single-use runners: per-task time of an honest Triton ReLU on a warm pool, with the
judge's trusted Triton cache level (driver utils + launcher warmed by the judge host) and without it (GPU only)."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evaluator.api import EvalRequest, Evaluator  # noqa: E402

REFERENCE = (ROOT / "core/data/problems/builtin/relu.py").read_text()
CANDIDATE = (ROOT / "tests/evaluator/candidates/relu_triton.py").read_text()


def run(trusted: bool, n: int) -> None:
    os.environ["KRL_WORKER_TRITON_TRUSTED_CACHE"] = "1" if trusted else "0"
    cache = tempfile.mkdtemp(prefix="krl-triton-bench-")
    started = time.perf_counter()
    with Evaluator(devices="auto", compile_workers=0, cache_dir=cache) as ev:
        ready_s = time.perf_counter() - started
        totals, loads, correctness = [], [], []
        for k in range(n):
            t0 = time.perf_counter()
            result = ev.evaluate(EvalRequest("builtin/relu", REFERENCE, CANDIDATE, backend="triton",
                                             correctness_trials=1, measure_timing=False, request_id=f"tri{k}"))
            totals.append(time.perf_counter() - t0)
            loads.append(result.phase_times_s.get("load", 0.0))
            correctness.append(result.phase_times_s.get("correctness", 0.0))
            assert result.verdict.value == "correct", result.error_message
    files = sum(len(f) for _, _, f in os.walk(os.path.join(cache, "triton-trusted")))
    print(f"  trusted level {'on ' if trusted else 'off'}: pool start {ready_s:.1f} s; per task round trip median "
          f"{statistics.median(totals):.2f} s, max {max(totals):.2f} s; correctness phase (first call compiles) median "
          f"{statistics.median(correctness):.2f} s; every round trip: {', '.join(f'{t:.2f}' for t in totals)} s; "
          f"files in the trusted level: {files}", flush=True)


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        print("no GPU: Triton compiles nothing in CPU mode (TRITON_INTERPRET=1); nothing to measure")
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(f"machine: {torch.cuda.get_device_name(0)}; {os.cpu_count()} cores; torch {torch.__version__}")
    print(f"command: python {' '.join(sys.argv)}")
    print("== honest Triton ReLU, one correctness trial, no timing; each task in a fresh runner")
    run(False, n)
    run(True, n)


if __name__ == "__main__":
    main()
