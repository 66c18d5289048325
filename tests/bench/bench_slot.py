"""Benchmark: the evaluation slot's throughput on one GPU for small honest Triton and CUDA candidates, at several slots
(judge hosts, each with its runners) per GPU: evaluations/min, mean seconds per phase, and the GPU's idle share.
Usage: python tests/bench/bench_slot.py --n 24 --slots 1,4,8 [--kinds triton,cuda] [--out results.json] [--profile]
[--keep DIR] (--profile: the judges' and the runners' own CPU by function, merged over each run's judges and runners,
printed after its line; --keep: each run's per-task trace and profiles kept in DIR)"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from evaluator.slot.judge_profile import PROFILE_ENV, summary  # noqa: E402
from tests.bench.host_sampler import host_cpu_ticks  # noqa: E402
from tests.bench.slot_bench import PARTS, REFERENCE, counted_rounds  # noqa: E402 - the shared ReLU problem

TRITON = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, {block}),)](x, out, n, BLOCK={block})
        return out
'''

CUDA = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* out, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.f ? x[i] : 0.f;
}}
torch::Tensor relu_cuda(torch::Tensor x) {{
    auto out = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + {block} - 1) / {block}, {block}>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
"""

module = load_inline(name="bench_relu_{block}", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                     cuda_sources=source, functions=["relu_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return module.relu_cuda(x)
'''

SIZES = (1 << 16, 1 << 18, 1 << 20, 1 << 22)  # reference times of ~0.01-0.1 ms on an H100
BLOCKS = (256, 512, 1024)


class GpuSampler:
    """nvidia-smi's utilisation every 100 ms while the batch runs: the idle share is 1 - mean utilisation."""

    def __init__(self):
        self.samples: list[float] = []
        self.process = None

    def __enter__(self):
        try:
            self.process = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu",
                                             "--format=csv,noheader,nounits", "-i", "0", "-lms", "100"],
                                            stdout=subprocess.PIPE, text=True)
        except OSError:
            return self
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self):
        for line in self.process.stdout:
            try:
                self.samples.append(float(line.strip()))
            except ValueError:
                pass

    def __exit__(self, *exc):
        if self.process is not None:
            self.process.terminate()
            self.process.wait(5)

    def idle_share(self):
        return round(1 - statistics.mean(self.samples) / 100, 3) if self.samples else None


def requests(kind: str, n: int):
    """n requests of one kind: "triton" and "cuda" honest ReLU kernels, or "torch": the reference's own code, whose
    speedups are the self-speedup distribution (each should read 1)."""
    from evaluator.contract.types import EvalRequest

    identical = REFERENCE.replace("class Model(", "class ModelNew(").replace("{n}", "{{n}}")
    source = {"triton": TRITON, "cuda": CUDA, "torch": identical}[kind]
    return [EvalRequest(reference_source=REFERENCE.format(n=SIZES[i % len(SIZES)]),
                        candidate_source=source.format(block=BLOCKS[i % len(BLOCKS)]).replace("{n}", str(
                            SIZES[i % len(SIZES)])), backend=kind,
                        problem_id=f"bench/relu-{i % len(SIZES)}", request_id=f"{kind}-{i}", run_timeout_s=120.0)
            for i in range(n)]


def run(kind: str, n: int, slots: int, cache_dir: str, on_row: Any = None) -> dict:
    """One pass; its row goes to `on_row` as soon as the last result is in, before the pool closes (closing 8 slots
    takes seconds, and a run cut off by its limit there used to lose its whole summary)."""
    from evaluator.local.evaluator import Evaluator

    began = time.monotonic()
    with Evaluator(devices=[0], workers_per_device=slots, cache_dir=cache_dir) as ev:
        warm = list(ev.evaluate_many(requests(kind, len(BLOCKS))))  # builds and JIT caches, as in a long run
        print(f"{kind} at {slots} slots: pool and warm-up {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)
        batch = requests(kind, n)
        with GpuSampler() as gpu:
            started, cpu_from = time.monotonic(), host_cpu_ticks()
            results = []
            for result in ev.evaluate_many(batch):  # one line each, so a run cut off by its limit still says how far
                results.append(result)
                print(f"  {len(results)}/{n} at {time.monotonic() - started:.1f} s: {result.request_id} "
                      f"{result.verdict.value} speedup {result.speedup} interfered rounds "
                      f"{result.phase_times_s.get('timing_interfered_rounds', 0)}", file=sys.stderr, flush=True)
            wall_s = time.monotonic() - started
            cpu_to = host_cpu_ticks()
        row = summary_row(kind, n, slots, warm, results, wall_s, gpu, cpu_from, cpu_to)
        if on_row is not None:
            on_row(row)
    return row


def summary_row(kind: str, n: int, slots: int, warm: list, results: list, wall_s: float, gpu: Any, cpu_from: tuple,
                cpu_to: tuple) -> dict:
    from evaluator.contract.types import Verdict

    phases: dict[str, list[float]] = {}
    for result in results:
        for name, value in result.phase_times_s.items():
            phases.setdefault(name, []).append(float(value))
    correct = [r for r in results if r.verdict == Verdict.CORRECT]
    return {"kind": kind, "slots": slots, "n": n, "warm_correct": sum(r.verdict == Verdict.CORRECT for r in warm),
            "correct": len(correct), "verdicts": sorted({r.verdict.value for r in results}),
            "errors": sorted({r.error_message[:200] for r in results if r.verdict != Verdict.CORRECT})[:3],
            "wall_s": round(wall_s, 2), "evals_per_min": round(60 * n / wall_s, 1),
            "phase_mean_s": {k: round(statistics.mean(v), 4) for k, v in sorted(phases.items())},
            # The judge's gap probe (slot/gap_probe.py, opt-in "1"): the tasks with a round timed again for another
            # context on the device, and the largest gap any task saw.
            "gap_probe": os.environ.get("KRL_WORKER_TIMING_GAP_PROBE") or "0",
            "gapped_tasks": len(phases.get("timing_gapped_rounds", [])),
            "gap_largest_ms": max(phases.get("timing_gap_largest_ms", [0.0])),
            # The spares warmed under a shared hold (slot/upkeep_hold.py: "1" before each task, "beside" beside it).
            "spares_warm_shared": os.environ.get("KRL_WORKER_SPARES_WARM_SHARED") or "0",
            "freeze_runner": os.environ.get("KRL_WORKER_FREEZE_RUNNER") or "1",
            # The device lock's shared steps (docs/slot.md: "1" all, "0" none, or a list), and the timings that went
            # on beside shared holders past the drain bound.
            "device_shared_steps": os.environ.get("KRL_WORKER_DEVICE_SHARED_STEPS") or "1",
            "cupti_teardown": os.environ.get("KRL_WORKER_CUPTI_TEARDOWN") or "1",  # timing.release_cupti, "0" off
            "same_cpu": os.environ.get("KRL_WORKER_TIMING_SAME_CPU") or "0",  # isolation/timing_priority.py, opt-in
            "timing_gate": os.environ.get("KRL_WORKER_TIMING_GATE") or "1",  # slot/device_gate.py, on by default
            # isolation/exchange_tmpfs.py: the judge host's exchange folders on its own tmpfs, on by default
            "exchange_tmpfs": os.environ.get("KRL_WORKER_EXCHANGE_TMPFS") or "1",
            "sizes": list(SIZES),
            # slot/round_figures.round_limits: the GPU's counted and extra rounds at most ("" = the defaults, 6 and 0)
            "timing_rounds": os.environ.get("KRL_WORKER_TIMING_ROUNDS", ""),
            "timing_batch_ms": os.environ.get("KRL_WORKER_TIMING_BATCH_MS", ""),
            "timing_extra_rounds": os.environ.get("KRL_WORKER_TIMING_EXTRA_ROUNDS", ""),
            "device_shared_overruns": int(sum(phases.get("device_shared_overrun", []))),
            "speedup_median": round(statistics.median([r.speedup for r in correct if r.speedup]), 3)
            if correct else None,
            # Identical code (--kinds torch): the share within ±5% of 1 is the self-speedup target's figure.
            "speedups": [round(r.speedup, 3) for r in correct if r.speedup],
            "speedups_kernelbench": [round(r.speedup_kernelbench, 3) for r in correct if r.speedup_kernelbench],
            "gpu_idle_share": gpu.idle_share(),
            "host_cpu_busy_share": round((cpu_to[0] - cpu_from[0]) / max(1, cpu_to[1] - cpu_from[1]), 3),
            # Far from what an honest ReLU reads (0.5-2x): their rounds are printed from the trace (trace_summary).
            "outliers": sorted(r.request_id for r in correct if r.speedup and not 0.5 <= r.speedup <= 2.0)}


def trace_summary(path: str, outliers: tuple = (), keep: bool = False) -> dict:
    """Per task, from the judge's trace (KRL_EVAL_TRACE): mean count and seconds of each order type, and the judge's
    own time between orders; the rounds of the first tasks and of the `outliers` (request ids)."""
    if not os.path.exists(path):
        return {}
    tasks = [json.loads(line) for line in open(path)]
    kinds: dict[str, list[float]] = {}
    gaps = []
    for task in tasks:
        orders = task["orders"]
        for kind, _, took in orders:
            kinds.setdefault(kind, []).append(took)
        if orders:
            span = orders[-1][1] + orders[-1][2]
            gaps.append(span - sum(took for _, _, took in orders))
    n = max(1, len(tasks))
    summary = {kind: {"per_task": round(len(v) / n, 1), "s_per_task": round(sum(v) / n, 4),
                      "max_s": round(max(v), 4)} for kind, v in sorted(kinds.items())}
    summary["judge_between_orders_s"] = round(statistics.mean(gaps), 4) if gaps else None
    # The timing's rounds of the first tasks: [calls, reference batch, reference hand-over, candidate batch,
    # candidate hand-over] in ms, sizing rounds first (what makes a timing unsteady, and which side).
    summary["rounds_sample"] = [task.get("rounds", []) for task in tasks[:2]]
    summary["rounds_outliers"] = {task["request_id"]: task.get("rounds", []) for task in tasks
                                  if task.get("request_id") in outliers}
    summary["round_ratios"] = round_ratio_spread([task.get("rounds", []) for task in tasks])
    summary["round_parts"] = part_spreads([task.get("rounds", []) for task in tasks])
    # Every task's rounds at its counted length, to try other estimators on them offline (identical code's spread).
    summary["counted_rounds"] = {task.get("request_id"): counted_rounds(task.get("rounds", [])) for task in tasks}
    if not keep:  # the next run of this kind and slot count appends to the same path
        os.remove(path)
    return summary


def counted_ratios(rounds: list) -> list[float]:
    """Reference over candidate charge of each counted round."""
    return [(r[1] + r[2]) / (r[3] + r[4]) for r in counted_rounds(rounds) if r[3] + r[4] > 0]


def part_spreads(tasks_rounds: list) -> dict:
    """Which part of a round scatters: per part (each side's batch and hand-over), the median over tasks of its spread
    across the task's counted rounds ((p75 - p25) / median), and its median share of its side's charge. Identical
    torch code at 8 slots had batches within a few percent and hand-overs of 2-7 ms (session 16)."""
    spreads: dict[str, list[float]] = {part: [] for part in PARTS}
    shares: dict[str, list[float]] = {part: [] for part in PARTS}
    for rounds in tasks_rounds:
        counted = counted_rounds(rounds)
        if len(counted) < 4:
            continue
        for index, part in enumerate(PARTS, start=1):
            values = [r[index] for r in counted]
            spreads[part].append(relative_iqr(values))
            side = [r[index] + r[index + 1 if index % 2 else index - 1] for r in counted]
            shares[part].append(statistics.median(v / t for v, t in zip(values, side) if t > 0))
    return {part: {"spread": round(statistics.median(spreads[part]), 3),
                   "share": round(statistics.median(shares[part]), 3)} for part in PARTS if spreads[part]}


def round_ratio_spread(tasks_rounds: list) -> dict:
    """Whether identical code's misreadings are per task or per round: the spread of each task's median ratio across
    tasks against the median spread of the ratios within a task (both as (p75 - p25) / median). Rounds that agree
    within a task while tasks disagree point at each runner process's own speed rather than at the rounds."""
    ratios = [counted_ratios(rounds) for rounds in tasks_rounds]
    medians = [statistics.median(r) for r in ratios if r]
    within = [relative_iqr(r) for r in ratios if len(r) >= 4]
    return {"tasks": len(medians), "between_tasks": relative_iqr(medians) if len(medians) >= 4 else None,
            "within_task": round(statistics.median(within), 3) if within else None}


def relative_iqr(values: list[float]) -> float:
    ordered = sorted(values)
    q1, q3 = ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]
    median = statistics.median(ordered)
    return round((q3 - q1) / median, 3) if median > 0 else 0.0


def print_row(row: dict, trace: str, keep: bool = False) -> None:
    """A pass's row, with its orders from the judges' trace, as one JSON line."""
    row["orders"] = trace_summary(trace, tuple(row["outliers"]), keep)
    print(json.dumps({"machine": platform.node(), **row}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=24)
    parser.add_argument("--slots", default="1,4,8")
    parser.add_argument("--kinds", default="triton,cuda")
    parser.add_argument("--out", default="")
    parser.add_argument("--profile", action="store_true", help="profile judges and runners (slot/judge_profile.py)")
    parser.add_argument("--keep", default="", help="a folder to keep each run's trace and profiles in")
    parser.add_argument("--sizes", default="", help="the ReLU's element counts, comma-separated (default: SIZES)")
    args = parser.parse_args()
    if args.sizes:
        global SIZES
        SIZES = tuple(int(size) for size in args.sizes.split(","))
    rows = []
    with tempfile.TemporaryDirectory() as cache_dir:
        for kind in args.kinds.split(","):
            for slots in [int(s) for s in args.slots.split(",")]:
                kept = args.keep or cache_dir
                os.makedirs(kept, exist_ok=True)
                trace = os.path.join(kept, f"trace-{kind}-{slots}.jsonl")
                os.environ["KRL_EVAL_TRACE"] = trace  # read by the judge hosts the evaluator starts
                if args.profile:
                    profiles = tempfile.mkdtemp(prefix=f"profiles-{kind}-{slots}-", dir=kept)
                    os.environ[PROFILE_ENV] = profiles
                row = {"machine": platform.node(),
                       **run(kind, args.n, slots, cache_dir,
                             on_row=lambda found, trace=trace: print_row(found, trace, bool(args.keep)))}
                if args.profile:  # the warm-up's tasks included
                    print(f"judges' profile, {kind} at {slots} slots:\n{summary(profiles)}", flush=True)
                    print(f"by own time:\n{summary(profiles, order='tottime')}", flush=True)
                    print(f"runners' profile, {kind} at {slots} slots:\n{summary(profiles, who='runner')}", flush=True)
                    print(f"by own time:\n{summary(profiles, order='tottime', who='runner')}", flush=True)
                rows.append(row)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
