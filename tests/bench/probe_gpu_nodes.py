"""What a bwrap sandbox holding one GPU's node sees (torch's device count, name, a kernel) under each spelling of
CUDA_VISIBLE_DEVICES, and how long N sandboxed processes spread over the GPUs take to start CUDA together with every
node bound or only their own. Prints one JSON line per measurement; no asserts."""

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
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
out = {"nodes": sorted(glob.glob('/dev/nvidia[0-9]*')), "visible": os.environ.get('CUDA_VISIBLE_DEVICES')}
try:
    out["count"] = torch.cuda.device_count()
    torch.cuda.init()
    x = torch.ones(256, 256, device="cuda")
    out["sum"] = float((x @ x).sum())
    torch.cuda.synchronize()
    props = torch.cuda.get_device_properties(0)
    out["name"] = props.name
    out["uuid"] = str(getattr(props, "uuid", ""))
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"[:300]
out["import_s"] = round(t1 - t0, 3)
out["cuda_s"] = round(time.perf_counter() - t1, 3)
print(json.dumps(out))
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
    for own_only, visible in [(True, gpus[last].uuid), (True, str(last)), (True, "0"), (False, str(last))]:
        print(json.dumps({"spelling": run_one(sandbox, gpus[last], own_only, visible)}))
    for own_only in (False, True, False, True):
        jobs = [(gpus[i % len(gpus)], own_only) for i in range(args.together)]
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            rows = list(pool.map(lambda j: run_one(sandbox, j[0], j[1], j[0].uuid), jobs))
        cuda = sorted(r.get("cuda_s", -1) for r in rows)
        print(json.dumps({"together": args.together, "own_only": own_only, "wall_s": round(time.perf_counter() - t0, 2),
                          "errors": [r["error"] for r in rows if "error" in r][:3],
                          "cuda_s_median": cuda[len(cuda) // 2], "cuda_s_max": cuda[-1],
                          "import_s_median": sorted(r.get("import_s", -1) for r in rows)[len(rows) // 2]}))


if __name__ == "__main__":
    main()
