"""Probe (GPU): which NVIDIA device nodes a warmed process opens later (a torch.profiler session, a Triton kernel's
first launch), and whether that work still runs once its cgroup refuses new opens. Usage: python probe_device_opens.py"""
# One JSON line per mode: none (no refusal), runner (the default: the GPUs' own nodes, refused to every process but
# this one), gpu (the GPUs' own nodes, this process too: KRL_WORKER_GPU_OPENS_DENIED=1), 195 (nvidiactl too), all
# (every NVIDIA node). A mode named with "+warm" profiles once and detaches CUPTI (timing.release_cupti's way) before
# the refusal, as a spare's warm-up could. Each row also says whether a second context in the same process can be made
# (the driver API's cuCtxCreate: does it open the node again?). Each mode runs in a process of its own: warmed as a spare runner is (CUDA and a kernel, no profiler:
# worker_setup.prepare_runner leaves CUPTI to the task), moved into a fresh task cgroup with the refusal, then profiled
# for the first time, made to launch a first Triton kernel, and asked to start a child with CUDA.
from __future__ import annotations

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

MODES = {"none": (), "runner": ("/dev/nvidia[0-9]*",), "gpu": ("/dev/nvidia[0-9]*",),
         "195": ("/dev/nvidiactl", "/dev/nvidia[0-9]*"),
         "all": ("/dev/nvidia*", "/dev/nvidia-caps/*")}


def device_fds() -> set[str]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/nvidia"):
            found.add(target)
    return found


def profiled_kernels() -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(1 << 20, device="cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        (x * 2).sum()
        torch.cuda.synchronize()
    return sum(1 for event in prof.events() if event.device_type.name == "CUDA")


def warm_profile() -> float:
    """One profiled session, then CUPTI detached as a runner does after its checks: seconds taken."""
    import time

    import torch

    began = time.perf_counter()
    profiled_kernels()
    os.environ["TEARDOWN_CUPTI"] = "1"
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]):
        pass
    torch.cuda.synchronize()
    return round(time.perf_counter() - began, 3)


def second_context() -> str:
    """A second CUDA context of this process through the driver API: "ok" or the driver's error code."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    code = cuda.cuDeviceGet(ctypes.byref(device), 0)
    if code == 0:
        create = getattr(cuda, "cuCtxCreate_v2", None)
        code = (create(ctypes.byref(context), 0, device) if create is not None
                else cuda.cuCtxCreate_v4(ctypes.byref(context), None, 0, device))
    if code == 0:
        cuda.cuCtxDestroy_v2(context)
        return "ok"
    return f"error {code}"


def triton_launch() -> str:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def double(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2, mask=offsets < n)

    x = torch.ones(1000, device="cuda")
    double[(4,)](x, 1000, BLOCK=256)
    torch.cuda.synchronize()
    return "ok" if float(x.sum()) == 2000.0 else "wrong"


def one_mode(mode: str) -> None:
    import torch

    from evaluator.isolation import cgroups, device_access

    torch.cuda.init()
    (torch.ones(8, device="cuda") * 2).sum().item()
    warmed_s = warm_profile() if mode.endswith("+warm") else None
    mode = mode.split("+")[0]
    before = device_fds()
    own = open("/proc/self/cgroup").read()
    group = None
    if MODES[mode]:
        group = cgroups.TaskCgroup.create(f"probe-opens{os.getpid()}")
        group.deny_device_opens(device_access.gpu_nodes(MODES[mode]),
                                except_pid=os.getpid() if mode == "runner" else 0)
        group.add(os.getpid())
    row = {"mode": mode + ("+warm" if warmed_s is not None else ""), "warm_profile_s": warmed_s,
           "nodes": device_access.gpu_nodes(MODES[mode]) if MODES[mode] else []}
    for name, work in (("profiled_kernels", profiled_kernels), ("triton", triton_launch),
                       ("second_context", second_context)):
        try:
            row[name] = work()
        except Exception as exc:  # noqa: BLE001 - the probe reports what failed
            row[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
    row["opened_later"] = sorted(device_fds() - before)
    row["child_cuda"] = subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1, device='cuda'); print('ok')"],
                                       capture_output=True, text=True).stdout.strip() or "failed"
    print(json.dumps(row), flush=True)
    if group is not None:  # back where it came from, so the group can go
        for line in own.splitlines():
            hierarchy, _, path = line.split(":", 2)
            if hierarchy == "0":
                with open(os.path.join("/sys/fs/cgroup", path.lstrip("/"), "cgroup.procs"), "w") as handle:
                    handle.write(str(os.getpid()))
        group.remove()


def main() -> None:
    if len(sys.argv) > 1:
        one_mode(sys.argv[1])
        return
    for mode in MODES:
        subprocess.run([sys.executable, os.path.abspath(__file__), mode], timeout=120)


if __name__ == "__main__":
    main()
