"""What a bwrap sandbox holding one GPU's node sees (torch's device count, name, a kernel) under each spelling of
CUDA_VISIBLE_DEVICES, and how long N sandboxed processes take to start CUDA together (spread over the GPUs or all on one)
with every node bound or only their own. Prints one JSON line per measurement; no asserts."""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import tempfile
import sys
import time

from evaluator.isolation import gpu_nodes
from evaluator.isolation import sandbox as sandboxes

CHILD = r"""
import glob, json, os, time
marks = {"nodes": sorted(glob.glob('/dev/nvidia[0-9]*')), "visible": os.environ.get('CUDA_VISIBLE_DEVICES')}
def step(name, fn):
    t0 = time.perf_counter(); out = fn(); marks[name + "_s"] = round(time.perf_counter() - t0, 3); return out
torch = step("import", lambda: __import__("torch"))
try:
    marks["count"] = torch.cuda.device_count()
    step("cuda", lambda: (torch.cuda.init(), torch.empty(1, device="cuda").add_(1), torch.cuda.synchronize()))
    x = step("alloc", lambda: torch.ones(1 << 27, device="cuda"))  # 512 MiB: the allocator's first segments
    step("cublas", lambda: ((x[: 1 << 16].view(256, 256) @ x[: 1 << 16].view(256, 256)).sum().item()))
    props = torch.cuda.get_device_properties(0)
    marks["name"] = props.name
    marks["uuid"] = str(getattr(props, "uuid", ""))
except Exception as exc:
    marks["error"] = f"{type(exc).__name__}: {exc}"[:300]
print(json.dumps(marks))
"""


def run_one(sandbox, gpu: gpu_nodes.HostGpu, own_only: bool, visible: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="krl-gpu-nodes-") as private_dir:
        os.chmod(private_dir, 0o777)
        spec = sandboxes.worker_spec(private_dir, os.environ, extra_env={"CUDA_VISIBLE_DEVICES": visible}, gpu=True)
        if own_only:
            spec = dataclasses.replace(spec, gpu_minor=gpu.minor)
        t0 = time.perf_counter()
        process = sandbox.popen(spec, [sys.executable, "-c", CHILD], stdout=-1, stderr=-1, text=True)
        out, err = process.communicate(timeout=300)
        wall = round(time.perf_counter() - t0, 3)
    try:
        row = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        row = {"error": (err or out)[-300:]}
    return {**row, "wall_s": wall, "own_only": own_only, "asked": visible, "minor": gpu.minor}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--together", type=int, default=32, help="processes started at once, spread over the GPUs")
    args = parser.parse_args()
    gpus = gpu_nodes.host_gpus()
    print(json.dumps({"host_gpus": [dataclasses.asdict(g) for g in gpus]}))
    if not gpus:
        return
    sandbox = sandboxes.get_sandbox("bwrap")
    last = len(gpus) - 1
    # Session 20 call A: with only its node, "<index>" finds no GPU (CUDA numbers the one left 0), the UUID and "0" do.
    for own_only, visible in [(True, gpus[last].uuid), (False, str(last))]:
        print(json.dumps({"spelling": run_one(sandbox, gpus[last], own_only, visible)}))
    # Spread over every GPU or all on the first; every node bound or only the process's own, alternating.
    for layout, own_only in [("spread", False), ("spread", True), ("one", True), ("one", False), ("spread", False),
                             ("spread", True)]:
        jobs = [(gpus[i % len(gpus)] if layout == "spread" else gpus[0], own_only) for i in range(args.together)]
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            rows = list(pool.map(lambda j: run_one(sandbox, j[0], j[1], j[0].uuid), jobs))
        summary = {"together": args.together, "layout": layout, "own_only": own_only,
                   "wall_s": round(time.perf_counter() - t0, 2), "errors": [r["error"] for r in rows if "error" in r][:3]}
        for step in ("import_s", "cuda_s", "alloc_s", "cublas_s", "wall_s"):
            values = sorted(r.get(step, -1) for r in rows)
            summary[step] = [values[len(values) // 2], values[-1]]  # median, max
        print(json.dumps(summary))

if __name__ == "__main__":
    main()
