"""Probe (GPU): where a runner's first launch of a small Triton kernel spends its time, in a fresh process with the
slot's two-level cache (evaluator/build/triton_cache.py), as a task's runner does: nothing cached but the judge host's
warm-up kernel; the launcher cached (a kernel of the same signature warmed the shared level); everything cached.
Usage: python tests/bench/probe_triton_jit.py"""

# Why: a Triton task's correctness trials took ~1 s in the runner at one slot on an H100 (session 15, call A), most of
# a task's time once contexts got cheap, and the first trial carries the JIT.

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.bench_slot import TRITON  # noqa: E402

# The slot benchmark's own ReLU kernel (its module's imports and kernel, no model), and one of the same signature.
KERNELS = TRITON.split("class ModelNew")[0] + '''

@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)
'''

# In the child: CUDA started first (a runner's spare has it), then the first launch profiled.
CHILD = '''
import cProfile, json, pstats, sys, time
import torch
sys.path.insert(0, {kernels_dir!r})
import probe_kernels
x = torch.randn(1 << 20, device="cuda"); out = torch.empty_like(x); torch.cuda.synchronize()
kernel = getattr(probe_kernels, {name!r})
profiler = cProfile.Profile()
started = time.perf_counter()
profiler.enable()
kernel[(x.numel() // 1024,)](x, out, x.numel(), BLOCK=1024)
torch.cuda.synchronize()
profiler.disable()
first = time.perf_counter() - started
started = time.perf_counter()
kernel[(x.numel() // 1024,)](x, out, x.numel(), BLOCK=1024)
torch.cuda.synchronize()
second = time.perf_counter() - started
stats = pstats.Stats(profiler)
parts = {{}}
for (path, line, func), (cc, nc, tt, ct, callers) in stats.stats.items():
    key = func if "triton" in path or func in ("run", "communicate", "_execute_child") else None
    if key in {watched!r}:
        parts[key] = max(parts.get(key, 0.0), round(ct, 4))
top = sorted(((round(ct, 4), round(tt, 4), path.rsplit("/", 2)[-1] + ":" + func)
              for (path, line, func), (cc, nc, tt, ct, callers) in stats.stats.items()), reverse=True)[:{top}]
print(json.dumps({{"first_launch_s": round(first, 4), "second_launch_s": round(second, 5), "cumulative_s": parts,
                  "top_cumulative": top}}))
'''

WATCHED = ["compile_module_from_src", "make_launcher", "compile", "make_ttir", "make_ttgir", "make_llir", "make_ptx",
           "make_cubin", "_execute_child", "communicate", "load_binary", "_init_handles", "get_cache_manager",
           "cache_key", "ast_to_ttir", "run"]


def child(kernels_dir: str, name: str, env: dict, top: int = 0) -> dict:
    code = CHILD.format(kernels_dir=kernels_dir, name=name, watched=WATCHED, top=top)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode:
        return {"error": done.stderr[-800:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    work = tempfile.mkdtemp(prefix="probe-triton-")
    kernels_dir = os.path.join(work, "src")
    os.makedirs(kernels_dir)
    with open(os.path.join(kernels_dir, "probe_kernels.py"), "w") as handle:
        handle.write(KERNELS)
    shared = os.path.join(work, "shared")
    base = dict(os.environ, PYTHONPATH=ROOT)
    warm = subprocess.run([sys.executable, "-c", "import sys; from evaluator.build.triton_cache import "
                           f"warm_shared_cache; print(warm_shared_cache({shared!r}) or 'warmed')"],
                          env=base, capture_output=True, text=True, timeout=300)
    print("shared level:", warm.stdout.strip() or warm.stderr[-400:])
    from evaluator.build.triton_cache import runner_environment

    def runner_env(tag: str) -> dict:
        private = os.path.join(work, "private-" + tag)
        os.makedirs(private)
        return dict(base, TRITON_CACHE_DIR=private, **runner_environment(shared))

    print("nothing cached but the warm-up:", json.dumps(child(kernels_dir, "relu_kernel", runner_env("a"))))
    # The same signature compiled into the shared level (as the judge host's warm-up would): the launcher is a hit.
    print("warming double_kernel into the shared level:",
          json.dumps(child(kernels_dir, "double_kernel", dict(base, TRITON_CACHE_DIR=shared))))
    print("launcher cached, kernel not:", json.dumps(child(kernels_dir, "relu_kernel", runner_env("b"))))
    print("private level warmed by run a, copied:", end=" ")
    subprocess.run(["cp", "-a", os.path.join(work, "private-a", "."), os.path.join(work, "private-c")], check=False)
    env = dict(base, TRITON_CACHE_DIR=os.path.join(work, "private-c"), **runner_environment(shared))
    print(json.dumps(child(kernels_dir, "relu_kernel", env, top=30)))


if __name__ == "__main__":
    main()
