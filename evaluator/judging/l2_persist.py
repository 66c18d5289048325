"""Undo a candidate's persisting-L2 set-up before a timed round: a persisting access-policy window keeps its inputs
resident in L2 through the flush, so the reset clears persisting lines and sets their carve-out to zero bytes."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from typing import Any, Optional

# cudaLimitPersistingL2CacheSize in cudaLimit (driver_types.h); stable since CUDA 11.0.
CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
_LIBRARY_NAMES = ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0")


class PersistingL2Reset:
    """Calls cudaCtxResetPersistingL2Cache and cudaDeviceSetLimit(persisting L2 size, 0) through the CUDA runtime.
    Bound once per process, before any candidate runs, so a candidate that rebinds names later changes nothing.
    `available` is False where no runtime library could be bound (CPU mode): reset() is then a no-op."""

    def __init__(self, library: Optional[Any] = None):
        self.library = library if library is not None else _load_cudart()
        self.available = self.library is not None and hasattr(self.library, "cudaCtxResetPersistingL2Cache")
        self.resets = 0
        self.last_error = 0

    def reset(self) -> bool:
        """True when both calls succeeded. Cheap (a driver call, no sync of the device's queue)."""
        if not self.available:
            return False
        limit_error = self.library.cudaDeviceSetLimit(ctypes.c_int(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE),
                                                      ctypes.c_size_t(0))
        reset_error = self.library.cudaCtxResetPersistingL2Cache()
        self.last_error = int(limit_error or reset_error)
        self.resets += 1
        return self.last_error == 0

    def reset_if_set(self) -> bool:
        """reset() only when a persisting carve-out is set (or cannot be read): without one, a persisting window has no
        lines to keep, and an honest candidate's timing then pays one limit query rather than two driver calls that
        may wait for the device (this runs between queued samples). True when a reset was done and succeeded."""
        limit = self.persisting_limit_bytes()
        if limit == 0:
            return False
        return self.reset()

    def persisting_limit_bytes(self) -> Optional[int]:
        """The current persisting-L2 carve-out (what a candidate set through cudaDeviceSetLimit), None if unknown."""
        if not self.available:
            return None
        value = ctypes.c_size_t(0)
        if self.library.cudaDeviceGetLimit(ctypes.byref(value), ctypes.c_int(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE)):
            return None
        return int(value.value)


def _load_cudart() -> Optional[Any]:
    """The CUDA runtime this process already mapped (torch's own copy, so the same context is reset), else the
    pip wheels' or the system's."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
    except Exception:
        return None
    candidates = []
    try:
        with open("/proc/self/maps") as maps:
            candidates += sorted({line.split()[-1] for line in maps if "libcudart" in line and "/" in line})
    except OSError:
        pass
    try:
        import nvidia  # type: ignore  # the CUDA runtime wheels torch was installed with

        for root in getattr(nvidia, "__path__", []):
            candidates += sorted(glob.glob(os.path.join(root, "**", "libcudart.so*"), recursive=True))
    except Exception:
        pass
    found = ctypes.util.find_library("cudart")
    candidates += ([found] if found else []) + list(_LIBRARY_NAMES)
    for name in candidates:
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        if hasattr(library, "cudaCtxResetPersistingL2Cache"):
            return library
    return None
