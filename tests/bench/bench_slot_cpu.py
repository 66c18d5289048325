"""Benchmark: the CPU-mode slot's cost and fidelity for small honest problems: seconds per evaluation through the pool
against the same request evaluated bare in one process, and the self-speedup of code identical to the reference.
Bare twice: as asked (the in-process path times `timing_trials` single calls, its reference timed once and reused),
and doing the slot's work (as many timed calls a side as the slot's counted rounds ran, the reference timed too).
Usage: python tests/bench/bench_slot_cpu.py [--n 8] [--sizes 256,262144] [--timing-trials 3]"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
import time
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.bench.slot_bench import REFERENCE  # noqa: E402 - the shared ReLU problem

REUSE_ENV = "KRL_WORKER_REUSE_REFERENCE_TIMING"

# The reference's own work, so a faithful slot reads a speedup of 1.0.
IDENTICAL = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


def request(size: int, index: int, timing_trials: int):
    from evaluator.api import EvalRequest

    return EvalRequest(reference_source=REFERENCE.format(n=size), candidate_source=IDENTICAL,
                       problem_id=f"bench/relu-{size}", request_id=f"bench-{size}-{index}", correctness_trials=2,
                       timing_trials=timing_trials, warmup_trials=1, run_timeout_s=60.0, kernelbench_timing=False)


def pool_figures(size: int, n: int, timing_trials: int) -> dict:
    from evaluator.api import Evaluator

    with tempfile.TemporaryDirectory() as cache:
        evaluator = Evaluator(cache_dir=cache, devices="cpu", cpu_workers=1, compile_workers=0)
        try:
            evaluator.evaluate(request(size, -1, timing_trials))  # the first one warms the judge's caches
            seconds, speedups, timing_s, calls = [], [], [], []
            for index in range(n):
                start = time.perf_counter()
                result = evaluator.evaluate(request(size, index, timing_trials))
                seconds.append(time.perf_counter() - start)
                assert result.verdict.value == "correct", (result.verdict, result.error_message)
                speedups.append(result.speedup)
                timing_s.append((result.phase_times_s or {}).get("timing", 0.0))
                calls.append(int((result.phase_times_s or {}).get("timing_counted_calls", 0)))
        finally:
            evaluator.close()
    return {"seconds": seconds, "speedups": speedups, "timing_s": timing_s, "calls": calls}


def bare_seconds(size: int, n: int, timing_trials: int, same_calls: int = 0) -> list[float]:
    """Seconds per in-process evaluation; with `same_calls`, timing that many calls of each side (the reference not
    reused: KRL_WORKER_REUSE_REFERENCE_TIMING=0), as the slot did."""
    from evaluator.slot.worker import evaluate_in_process, prepare_worker

    trials = same_calls or timing_trials
    with mock.patch.dict(os.environ, {REUSE_ENV: "0"} if same_calls else {}), \
            tempfile.TemporaryDirectory() as work:
        ctx = prepare_worker("cpu", work_dir=work)
        # The slot's calls all timed, not cut at the in-process path's 1.5 s budget.
        ctx.timing_settings = dataclasses.replace(ctx.timing_settings, budget_s=60.0)
        evaluate_in_process(request(size, -1, trials), ctx)
        seconds = []
        for index in range(n):
            start = time.perf_counter()
            result = evaluate_in_process(request(size, index, trials), ctx)
            seconds.append(time.perf_counter() - start)
            assert result.verdict.value == "correct", (result.verdict, result.error_message)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--sizes", default="256,262144")
    parser.add_argument("--timing-trials", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.node()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    for size in (int(s) for s in args.sizes.split(",")):
        pool = pool_figures(size, args.n, args.timing_trials)
        bare = bare_seconds(size, args.n, args.timing_trials)
        same_calls = int(statistics.median(pool["calls"]))
        same = bare_seconds(size, args.n, args.timing_trials, same_calls) if same_calls else []
        pool_s, bare_s = statistics.median(pool["seconds"]), statistics.median(bare)
        speedups = sorted(pool["speedups"])
        same_text = (f"; bare with the slot's {same_calls} timed calls a side {statistics.median(same):.3f} s/eval, "
                     f"ratio {pool_s / statistics.median(same):.1f}x") if same else ""
        print(f"{size:>8} elements: pool {pool_s:.3f} s/eval (timing {statistics.median(pool['timing_s']):.3f} s), "
              f"bare {bare_s:.3f} s/eval, ratio {pool_s / bare_s:.1f}x{same_text}; self-speedup median "
              f"{statistics.median(speedups):.2f} (min {speedups[0]:.2f}, max {speedups[-1]:.2f})", flush=True)


if __name__ == "__main__":
    main()
