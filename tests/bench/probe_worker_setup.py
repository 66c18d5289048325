"""Where a GPU runner's warm-up goes: each step of slot/worker_setup.prepare_worker timed in a fresh process, alone
and with N processes starting together. Prints one JSON line per process; no asserts."""

from __future__ import annotations

import json
import subprocess
import sys
import time

CHILD = r"""
import json, os, resource, time
marks = {}
def step(name, fn):
    c0 = time.process_time(); t0 = time.perf_counter(); out = fn()
    marks[name] = [round(time.perf_counter() - t0, 3), round(time.process_time() - c0, 3)]
    return out
torch = step("import_torch", lambda: __import__("torch"))
step("cuda_init", lambda: (torch.cuda.init(), torch.cuda.set_device(0)))
step("first_kernel", lambda: (torch.empty(1, device="cuda").add_(1), torch.cuda.synchronize()))
step("import_triton", lambda: __import__("triton"))
from evaluator.judging import l2_persist, timing
from evaluator.judging.rules import runtime as runtime_rules
step("launch_counter", lambda: runtime_rules.LaunchCounter().install())
step("guard", lambda: runtime_rules.FunctionGuard())
step("flusher", lambda: timing.L2Flusher("cuda:0"))
hold = step("launch_hold", lambda: timing.LaunchHold())
step("l2_reset", lambda: l2_persist.PersistingL2Reset())
step("profiler_first", lambda: timing.profiler_events(lambda: None))
step("profiler_second", lambda: timing.profiler_events(lambda: None))
from evaluator.slot import worker_setup
ctx = worker_setup.WorkerContext(device="cuda:0", device_name="", torch_version="", work_dir="/tmp")
ctx.flusher = timing.L2Flusher("cuda:0"); ctx.launch_hold = hold
step("warm_up_timing", lambda: worker_setup._warm_up_timing(torch, ctx))
print(json.dumps(marks))
"""


# CUPTI's activity API alone through ctypes (no kineto): is the first session's cost CUPTI's or the profiler's?
RAW_CUPTI = r"""
import ctypes, glob, json, os, time, site
marks = {}
t0 = time.perf_counter(); import torch; torch.cuda.init(); torch.empty(1, device="cuda").add_(1); torch.cuda.synchronize()
marks["torch_and_cuda"] = round(time.perf_counter() - t0, 3)
paths = sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "**", "libcupti.so*"), recursive=True))
paths += ["libcupti.so"]
lib = None
for p in paths:
    try:
        lib = ctypes.CDLL(p); marks["lib"] = p; break
    except OSError:
        continue
BUF = 8 << 20
buffers = []
REQ = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
DONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
records = []
@REQ
def requested(buf, size, maxrec):
    b = ctypes.create_string_buffer(BUF + 8); buffers.append(b)
    addr = (ctypes.addressof(b) + 7) & ~7
    buf[0] = addr; size[0] = BUF; maxrec[0] = 0
@DONE
def completed(ctx, stream, buf, size, valid):
    records.append(valid)
t0 = time.perf_counter()
rc1 = lib.cuptiActivityRegisterCallbacks(requested, completed)
rc2 = lib.cuptiActivityEnable(10)  # CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
marks["enable"] = round(time.perf_counter() - t0, 3)
t0 = time.perf_counter()
x = torch.randn(1 << 20, device="cuda"); torch.relu(x); torch.cuda.synchronize()
lib.cuptiActivityFlushAll(1)
marks["first_flush"] = round(time.perf_counter() - t0, 3)
t0 = time.perf_counter()
torch.relu(x); torch.cuda.synchronize(); lib.cuptiActivityFlushAll(1)
marks["second_flush"] = round(time.perf_counter() - t0, 3)
marks["rc"] = [rc1, rc2]; marks["bytes"] = records
print(json.dumps(marks))
"""


def run(together: int, child: str = CHILD) -> list[dict]:
    procs = [subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True) for _ in range(together)]
    out = []
    for p in procs:
        text = p.communicate()[0].strip().splitlines()
        out.append(json.loads(text[-1]) if text else {"failed": p.returncode})
    return out


if __name__ == "__main__":
    for together in (1, 1, 8):
        started = time.perf_counter()
        marks = run(together)
        print(f"== {together} together, {time.perf_counter() - started:.1f} s wall; per step [wall s, cpu s]")
        for m in marks:
            print(json.dumps(m))
    for _ in range(2):
        print("== raw CUPTI (ctypes, kernel activity only):", json.dumps(run(1, RAW_CUPTI)[0]))
