"""What one profiled call of a candidate costs in a prepared GPU runner process: the direct CUPTI recorder's steps
(enable, body, disable, flush) against torch.profiler's, after a Triton kernel was loaded. Prints JSON lines; no asserts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, time
import torch, triton, triton.language as tl
from evaluator.slot import worker_setup
from evaluator.judging import timing, cupti_activity
marks = {}
t0 = time.perf_counter(); ctx = worker_setup.prepare_worker("cuda"); marks["prepare"] = round(time.perf_counter() - t0, 3)

@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)

x = torch.zeros(1 << 20, device="cuda")
def call():
    add_one[(x.numel() // 1024,)](x, x.numel(), BLOCK=1024)
    return torch.relu(x)
t0 = time.perf_counter(); call(); torch.cuda.synchronize(); marks["jit"] = round(time.perf_counter() - t0, 3)
rec = cupti_activity.recorder()
marks["direct"] = rec is not None
if rec is not None:
    class Timed:
        def __init__(self, lib): self.lib, self.spent = lib, {}
        def __getattr__(self, name):
            fn = getattr(self.lib, name)
            def timed(*a):
                t = time.perf_counter(); out = fn(*a); self.spent[name] = round(self.spent.get(name, 0) + time.perf_counter() - t, 4); return out
            return timed
    timed = Timed(rec.lib); rec.lib = timed
for i in range(3):
    t0 = time.perf_counter(); events = timing.profiler_events(call, cpu=True)
    marks[f"profile_{i}"] = [round(time.perf_counter() - t0, 4), len(events or [])]
for i in range(2):
    t0 = time.perf_counter(); events = timing.profile_behind_hold(call, ctx.launch_hold, 3)
    marks[f"behind_hold_{i}"] = [round(time.perf_counter() - t0, 4), len(events or [])]
if rec is not None:
    marks["cupti_calls_s"] = timed.spent
    marks["buffers_given"] = rec.buffers_given
    marks["names"] = sorted({e.name[:60] for e in events or []})
print(json.dumps(marks))
"""

if __name__ == "__main__":
    for profiler in ("direct", "torch"):
        env = dict(os.environ, KRL_WORKER_PROFILER=profiler)
        started = time.perf_counter()
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:  # Triton reads its source
            script.write(CHILD)
        out = subprocess.run([sys.executable, script.name], env=env, capture_output=True, text=True)
        lines = out.stdout.strip().splitlines()
        print(f"== {profiler}: {time.perf_counter() - started:.1f} s wall, rc {out.returncode}")
        print(lines[-1] if lines else out.stderr[-1500:])
