"""How a slot process's CUDA synchronisations wait for the GPU: CUDA's default spins a CPU while a process has fewer
contexts than the host has CPUs; KRL_WORKER_BLOCKING_SYNC=1 makes them sleep until the GPU signals instead."""

from __future__ import annotations

import ctypes
import os

BLOCKING_SYNC_ENV = "KRL_WORKER_BLOCKING_SYNC"
_CTX_SCHED_BLOCKING_SYNC = 0x04  # CU_CTX_SCHED_BLOCKING_SYNC


def wanted() -> bool:
    return os.environ.get(BLOCKING_SYNC_ENV, "0").strip() == "1"


def use_blocking_sync(ordinal: int = 0) -> bool:
    """Called before this process makes its context on GPU `ordinal`: that context's synchronisations block rather
    than spin. True when set; False where not wanted or the driver refused (the default stays)."""
    if not wanted():
        return False
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    device = ctypes.c_int()
    if driver.cuInit(0) != 0 or driver.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
        return False
    set_flags = getattr(driver, "cuDevicePrimaryCtxSetFlags_v2", None) or driver.cuDevicePrimaryCtxSetFlags
    return set_flags(device, _CTX_SCHED_BLOCKING_SYNC) == 0
