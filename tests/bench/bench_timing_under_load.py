"""Timing under load: the same kernels' speedups measured on a quiet machine and while compile-like processes saturate
every core, without and with the CPU reservation of evaluator/timing.py (timing_cpus/compile_cpus). Prints the share
of kernels whose loaded speedup is within ±5% of the quiet one. Usage: python tests/bench/bench_timing_under_load.py
[--repeats N] [--busy N] (needs a GPU; kernels are launch-bound, 10-100 µs)."""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evaluator import timing  # noqa: E402
from tests.evaluator.candidates.harness import builtin, candidate, request, run_batch  # noqa: E402

# Compile-like load: a CPU-bound loop touching a few MiB (a compiler's mix of integer work and cache misses).
BUSY = "import hashlib, os\nbuf = os.urandom(4 << 20)\nwhile True:\n    hashlib.sha256(buf).digest()\n"
SMALL_RELU = {"BATCH": 1344, "DIM": 4096}


def kernels() -> list[dict]:
    """Launch-bound kernels whose candidate does different host work than the reference (the drifters)."""
    out = [
        request("relu_triton", builtin("relu"), candidate("relu_triton.py"), backend="triton", size_overrides=SMALL_RELU),
        request("relu_torch", builtin("relu"), candidate("relu_self.py"), size_overrides=SMALL_RELU),
    ]
    for stem in ("softmax", "gelu", "layernorm", "rmsnorm", "log_softmax", "gemm_bias_relu_scale", "linear_gelu_residual",
                 "conv2d_bias_tanh_scale", "matmul_sigmoid_sum", "sum_reduction", "maxpool2d"):
        source = builtin(stem)
        out.append(request(stem, source, re.sub(r"\bclass Model\(", "class ModelNew(", source)))
    for item in out:
        item.update(correctness_trials=1, timing_trials=100, warmup_trials=10)
    return out


def start_load(count: int, cpus: set[int]) -> list[subprocess.Popen]:
    def child_setup() -> None:
        os.nice(10)  # as the pool's compile workers
        if cpus:
            os.sched_setaffinity(0, cpus)

    return [subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=child_setup) for _ in range(count)]


def measure(mode: str, busy: int, repeats: int, env: dict) -> dict[str, float]:
    everything = set(os.sched_getaffinity(0))
    keep, rest = timing.timing_cpus(1), timing.compile_cpus(1)
    load = []
    if mode != "quiet":
        load = start_load(busy, rest if mode == "reserved" else set())
    if mode == "reserved" and keep:
        os.sched_setaffinity(0, keep)  # the worker subprocess inherits it
    try:
        speedups: dict[str, list[float]] = {}
        for _ in range(repeats):
            for res in run_batch(kernels(), device="cuda:0", timeout_s=400, env=env):
                if res["verdict"] == "correct" and res["speedup"]:
                    speedups.setdefault(res["problem_id"], []).append(res["speedup"])
                else:
                    print(f"  {mode} {res['problem_id']}: {res['verdict']} {res['error_message'][:160]}")
        return {k: statistics.median(v) for k, v in speedups.items()}
    finally:
        os.sched_setaffinity(0, everything)
        for proc in load:
            proc.kill()
            proc.wait()


def agreement(a: dict[str, float], b: dict[str, float]) -> tuple[float, float]:
    ratios = [b[k] / a[k] for k in a if k in b]
    within = sum(0.95 <= r <= 1.05 for r in ratios) / max(1, len(ratios))
    worst = min(ratios, key=lambda r: -abs(r - 1)) if ratios else float("nan")
    return within, worst


def main() -> int:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: run this on a GPU machine")
        return 1
    env = {"KRL_CACHE_DIR": os.environ.get("KRL_CACHE_DIR", "/tmp/krl-bench-cache")}
    print(f"device: {torch.cuda.get_device_name()}, {os.cpu_count()} cores, {args.busy} busy processes, "
          f"timing cores kept: {sorted(timing.timing_cpus(1))}")
    quiet = measure("quiet", args.busy, args.repeats, env)
    quiet_again = measure("quiet", args.busy, args.repeats, env)
    loaded = measure("load", args.busy, args.repeats, env)
    reserved = measure("reserved", args.busy, args.repeats, env)
    print(f"{'kernel':24s} {'quiet':>7s} {'quiet2':>7s} {'load':>7s} {'reserved':>9s}")
    for name in quiet:
        print(f"{name:24s} {quiet[name]:7.3f} {quiet_again.get(name, float('nan')):7.3f} "
              f"{loaded.get(name, float('nan')):7.3f} {reserved.get(name, float('nan')):9.3f}")
    for label, other in (("quiet vs quiet", quiet_again), ("quiet vs load (no reservation)", loaded),
                         ("quiet vs load (reserved timing core)", reserved)):
        within, worst = agreement(quiet, other)
        print(f"{label:40s} within ±5%: {within:.0%} of {len(other)} kernels, worst ratio {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
