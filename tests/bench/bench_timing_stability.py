"""Self-speedup spread of identical code on small GPU kernels, per timing protocol; prints a table (no asserts).
Usage: python tests/bench/bench_timing_stability.py [--repeats 30] [--json out.json]   (needs a CUDA GPU)"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from evaluator.judging import timing  # noqa: E402
from evaluator.api import EvalRequest  # noqa: E402
from evaluator.slot.worker import default_timing_settings, evaluate_in_process, prepare_worker  # noqa: E402

RELU_SOURCE = (Path(__file__).resolve().parents[2] / "core/data/problems/builtin/relu.py").read_text()
SELF_CANDIDATE = RELU_SOURCE.replace("class Model(", "class ModelNew(")


class ThreeOps(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x * 2.0 + 1.0) * 0.5


def models(device: str) -> dict:
    return {
        "relu_15us": (torch.nn.ReLU, (1344, 4096)),
        "relu_3us": (torch.nn.ReLU, (64, 4096)),
        "three_ops_15us": (ThreeOps, (448, 4096)),
    }


def protocols(base: timing.TimingSettings) -> dict:
    return {
        "default": base,
        "multi_call_0.1ms": replace(base, sample_min_ms=0.1),
        "more_samples": replace(base, min_measured_ms=30.0, extra_trials_factor=10),
        "no_flush": replace(base, flush_l2=False),
        "sequential": base,  # reference fully, then candidate (the common protocol elsewhere)
    }


def spread(values: list[float]) -> dict:
    values = sorted(values)
    n = len(values)
    return {
        "n": n,
        "within_5pct": sum(0.95 <= v <= 1.05 for v in values) / n,
        "p2.5": values[max(0, int(0.025 * n))],
        "p97.5": values[min(n - 1, int(0.975 * n))],
        "min": values[0],
        "max": values[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    ctx = prepare_worker("cuda:0")
    base = replace(default_timing_settings(True), trials=100, warmup=10)
    rows = []
    for model_name, (cls, shape) in models(ctx.device).items():
        x = torch.randn(*shape, device=ctx.device)
        a, b = cls().to(ctx.device), cls().to(ctx.device)
        for proto_name, settings in protocols(base).items():
            ratios, medians = [], []
            started = time.perf_counter()
            with torch.no_grad():
                for _ in range(args.repeats):
                    if proto_name == "sequential":
                        ref = timing.time_cuda({"ref": lambda: a(x)}, settings, ctx.flusher)["ref"]
                        cand = timing.time_cuda({"cand": lambda: b(x)}, settings, ctx.flusher)["cand"]
                    else:
                        samples = timing.time_cuda({"ref": lambda: a(x), "cand": lambda: b(x)}, settings, ctx.flusher)
                        ref, cand = samples["ref"], samples["cand"]
                    ratios.append(statistics.median(ref) / statistics.median(cand))
                    medians.append(statistics.median(cand) * 1e3)
            row = {"model": model_name, "protocol": proto_name, "median_us": statistics.median(medians),
                   "seconds": time.perf_counter() - started, **spread(ratios)}
            rows.append(row)
            print(json.dumps(row), flush=True)

    # End to end through evaluate_in_process: reference timing cached (usual path) and re-measured each time.
    for mode in ("cached_reference", "interleaved_each_time"):
        speedups = []
        started = time.perf_counter()
        for i in range(args.repeats):
            if mode == "interleaved_each_time":
                ctx.reference_timing_cache.clear()
            req = EvalRequest(problem_id="builtin/relu", reference_source=RELU_SOURCE, candidate_source=SELF_CANDIDATE,
                              size_overrides={"BATCH": 1344, "DIM": 4096}, correctness_trials=1, request_id=f"{mode}{i}")
            res = evaluate_in_process(req, ctx)
            assert res.verdict.value == "correct", res.error_message
            speedups.append(res.speedup)
        row = {"model": "relu_15us", "protocol": f"evaluate_in_process/{mode}",
               "median_us": res.kernel_runtime.median_ms * 1e3, "seconds": time.perf_counter() - started,
               "per_eval_ms": (time.perf_counter() - started) / args.repeats * 1e3, **spread(speedups)}
        rows.append(row)
        print(json.dumps(row), flush=True)

    print(f"\nGPU: {ctx.device_name}, torch {torch.__version__}, repeats {args.repeats}, trials 100, warmup 10")
    print(f"{'model':<16}{'protocol':<42}{'median µs':>10}{'in 0.95-1.05':>14}{'p2.5':>8}{'p97.5':>8}{'min':>7}{'max':>7}")
    for r in rows:
        print(f"{r['model']:<16}{r['protocol']:<42}{r['median_us']:>10.2f}{r['within_5pct']:>14.0%}"
              f"{r['p2.5']:>8.3f}{r['p97.5']:>8.3f}{r['min']:>7.3f}{r['max']:>7.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": ctx.device_name, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
