"""Runs evaluate_in_process for a batch of requests inside a fresh subprocess (one worker context for the batch),
so candidates that patch torch or kill the process never touch the test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
CANDIDATES = Path(__file__).resolve().parent
BUILTIN = ROOT / "core" / "data" / "problems" / "builtin"

_CHILD = r"""
import json, sys
from evaluator.api import EvalRequest
from evaluator.slot.worker import prepare_worker, evaluate_in_process
spec = json.load(open(sys.argv[1]))
ctx = prepare_worker(spec["device"])
out = []
for item in spec["requests"]:
    if item.pop("_clear_reference_cache", False):
        ctx.reference_timing_cache.clear()
    res = evaluate_in_process(EvalRequest.from_dict(item), ctx).to_dict()
    res["_sticky_cuda_error"] = ctx.sticky_cuda_error
    res["_should_retire"] = ctx.should_retire
    out.append(res)
    with open(sys.argv[2], "w") as fh:  # rewritten after each request: a crash keeps what finished
        json.dump(out, fh)
"""


def candidate(name: str) -> str:
    return (CANDIDATES / name).read_text()


def builtin(stem: str) -> str:
    return (BUILTIN / f"{stem}.py").read_text()


def run_batch(requests: list[dict[str, Any]], device: str = "cpu", timeout_s: float = 240.0,
              env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Evaluate request dicts (EvalRequest fields) in order in one fresh worker process; returns result dicts."""
    with tempfile.TemporaryDirectory(prefix="krl-harness-") as tmp:
        spec_path, out_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "out.json")
        with open(spec_path, "w") as fh:
            json.dump({"device": device, "requests": requests}, fh)
        child_env = dict(os.environ)
        child_env.setdefault("TRITON_INTERPRET", "1" if device == "cpu" else "0")
        if device == "cpu":
            child_env["TRITON_INTERPRET"] = "1"
        child_env["PYTHONPATH"] = str(ROOT) + os.pathsep + child_env.get("PYTHONPATH", "")
        child_env.update(env or {})
        proc = subprocess.run([sys.executable, "-c", _CHILD, spec_path, out_path], cwd=tmp, env=child_env,
                              capture_output=True, text=True, timeout=timeout_s)
        results = json.load(open(out_path)) if os.path.exists(out_path) else []
        if len(results) != len(requests):
            raise RuntimeError(f"worker process ended after {len(results)}/{len(requests)} requests "
                               f"(rc={proc.returncode}):\n{proc.stderr[-3000:]}")
        return results


def request(name: str, reference: str, candidate_source: str, **fields: Any) -> dict[str, Any]:
    base = {"problem_id": name, "reference_source": reference, "candidate_source": candidate_source,
            "request_id": name, "correctness_trials": 3, "timing_trials": 5, "warmup_trials": 1}
    base.update(fields)
    return base


# A reference with init inputs: a Linear layer (weights from the request's seed, so a candidate's own nn.Linear made
# under the same seed has the same weights).
LINEAR_REFERENCE = '''
import torch
import torch.nn as nn
IN, OUT = 16, 8
class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
    def forward(self, x):
        return self.linear(x)
def get_inputs():
    return [torch.randn(4, IN)]
def get_init_inputs():
    return [IN, OUT]
'''


def matmul_reference(n: int) -> str:
    """An fp32 n x n matmul, `a @ b`, of random values."""
    return f"""
import torch
import torch.nn as nn

N = {n}

class Model(nn.Module):
    def forward(self, a, b):
        return a @ b

def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]

def get_init_inputs():
    return []
"""


def int_matmul_reference(n: int) -> str:
    """An fp32 n x n matmul on small integers: exact in TF32 too (until nudged for timing)."""
    return f"""
import torch
import torch.nn as nn
N = {n}
class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
def get_inputs():  # small integers: exact in TF32 (until nudged for timing)
    return [torch.randint(-2, 3, (N, N)).float(), torch.randint(-2, 3, (N, N)).float()]
def get_init_inputs():
    return []
"""
