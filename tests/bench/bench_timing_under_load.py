"""Timing under load through the real evaluator pool (judge host, sandboxed single-use runners): honest candidates of
30-100 µs and some longer, each timed --repeats times on a quiet machine and while compile processes saturate the CPUs,
with the pool's CPU reservation (evaluator/judging/timing.py placement) off and on. Prints the share of kernels whose median
speedup under load is within ±5% of the quiet one, the quiet-vs-quiet noise floor and the worst ratios.

Usage (GPU machine): python tests/bench/bench_timing_under_load.py [--repeats 3] [--load 16] [--load-kind gcc|busy]
[--json FILE]; KRL_WORKER_TIMING_HOLD=0 runs it without the launch hold (timing.LaunchHold), to compare. The load
stands in for the pool's compile workers: real g++ compiles of a torch-extension translation unit (what load_inline
spends its time on) at nice 10, pinned where the pool pins compile workers."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evaluator.judging import timing  # noqa: E402
from evaluator.api import EvalRequest  # noqa: E402
from evaluator.slot.task_driver import TRACE_ENV  # noqa: E402
from tests.bench.slot_bench import PARTS, parts_per_call  # noqa: E402
from tests.evaluator.candidates.harness import builtin, candidate  # noqa: E402

SOFTMAX_TRITON = '''
import torch, torch.nn as nn, triton, triton.language as tl

@triton.jit
def softmax_rows(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_rows[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=8)
        return y
'''

RMSNORM_TRITON = '''
import torch, torch.nn as nn, triton, triton.language as tl

@triton.jit
def rmsnorm_rows(x_ptr, w_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / cols + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * cols + offs, x / rms * w, mask=mask)

class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden) + 0.1 * torch.randn(hidden))  # the problem's initialisation

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.shape[-1]
        rmsnorm_rows[(x.numel() // cols,)](x, self.weight, y, cols, self.eps, BLOCK=triton.next_power_of_2(cols),
                                           num_warps=8)
        return y
'''

GELU_ERF_TORCH = '''
import torch, torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))
'''

LAYERNORM_TORCH = '''
import torch, torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias
'''

LOG_SOFTMAX_TORCH = '''
import torch, torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x - torch.logsumexp(x, dim=self.dim, keepdim=True)
'''

LINEAR_GELU_TORCH = '''
import torch, torch.nn as nn, torch.nn.functional as F

class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return F.gelu(torch.addmm(self.linear.bias, x, self.linear.weight.t())).add_(x)
'''

GEMM = {"BATCH": 512, "IN_FEATURES": 2048, "OUT_FEATURES": 2048}


def kernels() -> list[dict]:
    """(name, problem, candidate, backend, sizes): honest candidates whose host work differs from the reference's."""
    rows = [
        ("relu_triton_50us", "relu", candidate("relu_triton.py"), "triton", {"BATCH": 1024, "DIM": 16384}),
        ("softmax_triton", "softmax", SOFTMAX_TRITON, "triton", {"BATCH": 2048, "DIM": 8192}),
        ("rmsnorm_triton", "rmsnorm", RMSNORM_TRITON, "triton", {"BATCH": 4, "SEQ": 1024, "HIDDEN": 4096}),
        ("gemm_fusion_triton", "gemm_bias_relu_scale", candidate("honest_fusion_triton.py"), "triton", GEMM),
        ("gemm_fusion_cuda", "gemm_bias_relu_scale", candidate("cuda_fusion_epilogue.py"), "cuda", GEMM),
        ("gelu_erf_torch", "gelu", GELU_ERF_TORCH, "torch", {"BATCH": 512, "DIM": 16384}),
        ("layernorm_torch", "layernorm", LAYERNORM_TORCH, "torch", {"BATCH": 4, "SEQ": 1024, "HIDDEN": 2048}),
        ("log_softmax_torch", "log_softmax", LOG_SOFTMAX_TORCH, "torch", {"BATCH": 2048, "DIM": 4096}),
        ("linear_gelu_torch", "linear_gelu_residual", LINEAR_GELU_TORCH, "torch", {"BATCH": 512, "FEATURES": 2048}),
        ("relu_triton_200us", "relu", candidate("relu_triton.py"), "triton", {"BATCH": 4096, "DIM": 16384}),
        ("square_matmul_2ms", "square_matmul", candidate("matmul_torch.py"), "torch", {"N": 4096}),
    ]
    return [dict(name=n, problem=p, source=s, backend=b, sizes=z) for n, p, s, b, z in rows]


def make_request(kernel: dict, tag: str) -> EvalRequest:
    return EvalRequest(request_id=f"{kernel['name']}-{tag}", problem_id=kernel["name"],
                       reference_source=builtin(kernel["problem"]), candidate_source=kernel["source"],
                       backend=kernel["backend"], size_overrides=kernel["sizes"], correctness_trials=2)


# ---- load: processes standing in for the pool's compile workers

GCC_UNIT = "#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x.relu() * 2; }\n"
BUSY = "import hashlib, os\nbuf = os.urandom(4 << 20)\nwhile True:\n    hashlib.sha256(buf).digest()\n"


def load_command(kind: str, workdir: str) -> list[str]:
    import shutil

    if kind == "busy" or not shutil.which("g++"):
        print(f"load: busy loops{'' if kind == 'busy' else ' (no g++ here)'}", flush=True)
        return [sys.executable, "-c", BUSY]
    from torch.utils import cpp_extension

    unit = os.path.join(workdir, "unit.cpp")
    Path(unit).write_text(GCC_UNIT)
    includes = " ".join(f"-I{p}" for p in cpp_extension.include_paths())
    python_include = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                                    capture_output=True, text=True).stdout.strip()
    compile_once = f"g++ -O2 -std=c++17 -fPIC {includes} -I{python_include} -c {unit} -o /dev/null"
    began = time.monotonic()
    ok = subprocess.run(["bash", "-c", compile_once], capture_output=True).returncode == 0
    print(f"load: g++ of torch/extension.h, {time.monotonic() - began:.1f} s per compile on a quiet core, "
          f"{'ok' if ok else 'FAILED'}", flush=True)
    return ["bash", "-c", f"while true; do {compile_once} 2>/dev/null; done"]


def describe_affinity(root_pids: list[int]) -> str:
    """Cpus_allowed_list of the pool's workers and every process below them (judge host, zygote, runners)."""
    from evaluator.isolation.proctree import children

    seen, todo, lines = set(), list(root_pids), []
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                          if ":\t" in line)
            lines.append(f"{pid} {status.get('Name', '?').strip()} cpus={status.get('Cpus_allowed_list', '?').strip()}")
            todo.extend(children(pid))
        except (OSError, ValueError):
            continue
    return "; ".join(lines)


def start_load(count: int, kind: str, cpus: set[int], workdir: str) -> list[subprocess.Popen]:
    command = load_command(kind, workdir)

    def child_setup() -> None:
        os.setsid()
        os.nice(10)  # as the pool's compile workers
        timing.pin_current_process(cpus)  # where the pool's placement puts compile workers (all cores when off)

    return [subprocess.Popen(command, preexec_fn=child_setup, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(count)]


def stop_load(procs: list[subprocess.Popen]) -> None:
    import signal

    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# ---- passes

def run_pass(label: str, reserve: bool, load: int, kind: str, repeats: int, cache_dir: str, records: list[dict],
             via: str, only: list[str]) -> None:
    """`repeats` rounds over every kernel after one discarded warm round, load on or off, reservation on or off.
    via "pool": the real evaluator pool (placement applied by the pool when its workers spawn); via "harness": one
    evaluate_in_process subprocess per pass, pinned by this script exactly as the pool pins an evaluation slot."""
    os.environ[timing.RESERVE_ENV] = "1" if reserve else "0"
    compile_cores = timing.worker_cpus("compile", "cpu", ["cuda:0"])  # empty when the reservation is off
    eval_cores = timing.worker_cpus("eval", "cuda:0", ["cuda:0"])
    chosen = [k for k in kernels() if not only or k["name"] in only]
    rounds = [(f"warm-{label}", chosen)] + [(f"{label}-{r}", chosen) for r in range(repeats)]
    procs: list[subprocess.Popen] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="krl-load-") as workdir:
        try:
            if load:
                procs = start_load(load, kind, compile_cores, workdir)
                time.sleep(3.0)
            if via == "pool":
                results = _through_pool(rounds, cache_dir, label)
            else:
                results = _through_harness(rounds, eval_cores, cache_dir)
        finally:
            stop_load(procs)
    for (tag, kernel), res in results:
        if tag.startswith("warm-"):
            continue
        records.append({"pass": label, "reserve": reserve, "load": load, "repeat": tag, "kernel": kernel["name"],
                        **res})
        if res["verdict"] != "correct":
            print(f"  {label} {kernel['name']}: {res['verdict']} {res['error'][:600]}", flush=True)
    print(f"pass {label}: {time.monotonic() - began:.0f} s", flush=True)


def _row(verdict: str, speedup, reference_ms, kernel_ms, error: str, phases=None) -> dict:
    # With the evaluation's phases (through the pool): what load moved in it (the round trip taken off, the waits).
    return {"verdict": verdict, "speedup": speedup, "reference_ms": reference_ms, "kernel_ms": kernel_ms, "error": error,
            "phases": phases or {}}


def _through_pool(rounds, cache_dir: str, label: str) -> list:
    from evaluator.local.pool import Pool, PoolConfig

    pool = Pool(PoolConfig(devices=["cuda:0"], compile_workers=1, cache_dir=cache_dir))
    out = []
    try:
        for tag, chosen in rounds:
            for kernel in chosen:
                res = pool.submit(make_request(kernel, tag)).result(timeout=600)
                out.append(((tag, kernel), _row(res.verdict.value, res.speedup,
                                                res.reference_runtime.median_ms if res.reference_runtime else None,
                                                res.kernel_runtime.median_ms if res.kernel_runtime else None,
                                                res.error_message, res.phase_times_s)))
            if tag.startswith("warm-"):
                print(f"pass {label}: {describe_affinity([w.popen.pid for w in pool._workers])}", flush=True)
    finally:
        pool.close()
    return out


def _through_harness(rounds, eval_cores: set[int], cache_dir: str) -> list:
    from tests.evaluator.candidates.harness import run_batch

    dicts, keys = [], []
    for tag, chosen in rounds:
        for kernel in chosen:
            dicts.append(make_request(kernel, tag).to_dict())
            keys.append((tag, kernel))
    everything = os.sched_getaffinity(0)
    if eval_cores:
        timing.pin_current_process(eval_cores)  # the worker subprocess inherits it, as a slot's runners do
    try:
        results = run_batch(dicts, device="cuda:0", timeout_s=900, env={"KRL_CACHE_DIR": cache_dir})
    finally:
        os.sched_setaffinity(0, everything)
    return [(key, _row(r["verdict"], r["speedup"], (r.get("reference_runtime") or {}).get("median_ms"),
                       (r.get("kernel_runtime") or {}).get("median_ms"), r.get("error_message", "")))
            for key, r in zip(keys, results)]


def medians(records: list[dict], label: str) -> dict[str, float]:
    by_kernel: dict[str, list[float]] = {}
    for row in records:
        if row["pass"] == label and row["verdict"] == "correct" and row["speedup"]:
            by_kernel.setdefault(row["kernel"], []).append(row["speedup"])
    return {k: statistics.median(v) for k, v in by_kernel.items()}


def agreement(base: dict[str, float], other: dict[str, float]) -> tuple[float, float, int]:
    ratios = [other[k] / base[k] for k in base if k in other]
    within = sum(0.95 <= r <= 1.05 for r in ratios) / max(1, len(ratios))
    worst = max(ratios, key=lambda r: abs(r - 1)) if ratios else float("nan")
    return within, worst, len(ratios)


def report(records: list[dict]) -> None:
    labels = list(dict.fromkeys(row["pass"] for row in records))
    table = {label: medians(records, label) for label in labels}
    reference_ms: dict[str, list[float]] = {}
    for row in records:
        if row["reference_ms"]:
            reference_ms.setdefault(row["kernel"], []).append(row["reference_ms"])
    ref_ms = {name: statistics.median(values) for name, values in reference_ms.items()}  # over every pass
    print(f"{'kernel':22s} {'ref µs':>8s} " + " ".join(f"{label:>14s}" for label in labels))
    for name in dict.fromkeys(row["kernel"] for row in records):
        cells = " ".join(f"{table[label].get(name, float('nan')):14.3f}" for label in labels)
        print(f"{name:22s} {ref_ms.get(name, float('nan')) * 1e3:8.1f} {cells}")
    pairs = [("quiet_off", "quiet_off_2", "noise floor: quiet vs quiet (off)"),
             ("quiet_off", "quiet_on", "noise floor: quiet (off) vs quiet (on)"),
             ("quiet_on", "quiet_on_2", "noise floor: quiet vs quiet (on)"),
             ("quiet_off", "load_off", "load without reservation vs quiet"),
             ("quiet_off_2", "load_off", "load without reservation vs quiet (2nd)"),
             ("quiet_on", "load_on", "load with reservation vs quiet"),
             ("quiet_on_2", "load_on", "load with reservation vs quiet (2nd)")]
    for label in labels:  # what load moved in the judge's clean round trip (taken off each candidate order)
        trips = [row["phases"].get("round_trip") for row in records
                 if row["pass"] == label and (row.get("phases") or {}).get("round_trip") is not None]
        if trips:
            print(f"{label}: clean round trip median {statistics.median(trips) * 1e6:.0f} us, "
                  f"most {max(trips) * 1e6:.0f} us over {len(trips)}")
    for base, other, text in pairs:
        if base in table and other in table:
            within, worst, n = agreement(table[base], table[other])
            print(f"{text:42s} within ±5%: {within:4.0%} of {n} kernels, worst ratio {worst:.3f}")


def trace_parts(path: str) -> dict[str, dict[str, dict[str, float]]]:
    """{pass: {kernel: {part: us a call}}} from the judges' trace: each side's batch and hand-over (slot_bench.PARTS),
    the median over a task's counted rounds, then over the pass's repeats (warm-up tasks left out)."""
    found: dict[str, dict[str, list[dict[str, float]]]] = {}
    with open(path) as handle:
        for line in handle:
            task = json.loads(line)
            kernel, _, tag = str(task.get("request_id", "")).partition("-")
            label = tag.rsplit("-", 1)[0]
            parts = parts_per_call(task.get("rounds", []))
            if parts and not tag.startswith("warm-"):
                found.setdefault(label, {}).setdefault(kernel, []).append(parts)
    return {label: {kernel: {part: 1e3 * statistics.median(p[part] for p in repeats) for part in PARTS}
                    for kernel, repeats in kernels.items()} for label, kernels in found.items()}


def print_parts(by_pass: dict[str, dict[str, dict[str, float]]]) -> None:
    print("us a call (median of counted rounds): " + ", ".join(PARTS))
    for label, kernels in by_pass.items():
        for kernel, parts in kernels.items():
            print(f"{label:16s} {kernel:22s} " + " ".join(f"{parts[part]:9.2f}" for part in PARTS))
    quiet, loaded = by_pass.get("quiet_off", {}), by_pass.get("load_off", {})
    for kernel in quiet.keys() & loaded.keys():  # what load added to each part, us a call
        print(f"load - quiet     {kernel:22s} " + " ".join(f"{loaded[kernel][part] - quiet[kernel][part]:+9.2f}"
                                                          for part in PARTS))


def main() -> int:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help="compile-like processes under load")
    parser.add_argument("--load-kind", choices=("gcc", "busy"), default="gcc")
    parser.add_argument("--passes", default="quiet_off,load_off,quiet_on,load_on,quiet_on_2")
    parser.add_argument("--json", default="", help="append every evaluation as a JSON line here")
    parser.add_argument("--via", choices=("pool", "harness"), default="pool")
    parser.add_argument("--kernels", default="", help="comma-separated subset of the kernel names")
    parser.add_argument("--trace", default="", help="the judges' order trace (KRL_EVAL_TRACE) here, and from it each "
                        "side's batch and hand-over a call by pass: which part load lengthens")
    args = parser.parse_args()
    if args.trace:
        os.environ[TRACE_ENV] = args.trace  # read by the judge hosts each pass's pool starts
    if not torch.cuda.is_available():
        print("no CUDA device: run this on a GPU machine")
        return 1
    cache_dir = os.environ.get("KRL_CACHE_DIR", "/tmp/krl-bench-cache")
    os.environ[timing.RESERVE_ENV] = "1"
    print(f"device: {torch.cuda.get_device_name()}, {os.cpu_count()} logical CPUs, physical cores "
          f"{len(timing.physical_cores())}, reserved for the GPU slot: "
          f"{sorted(timing.worker_cpus('eval', 'cuda:0', ['cuda:0']))}, load {args.load} x {args.load_kind}, "
          f"repeats {args.repeats}", flush=True)
    records: list[dict] = []
    for label in args.passes.split(","):
        run_pass(label, reserve=label.endswith(("_on", "_on_2")), load=args.load if label.startswith("load") else 0,
                 kind=args.load_kind, repeats=args.repeats, cache_dir=cache_dir, records=records, via=args.via,
                 only=[k for k in args.kernels.split(",") if k])
        if args.json:
            with open(args.json, "w") as handle:
                handle.writelines(json.dumps(row) + "\n" for row in records)
        report(records)
    if args.trace:
        print_parts(trace_parts(args.trace))
    return 0


if __name__ == "__main__":
    sys.exit(main())
