# Class: timing forged through input objects. Swaps the class of the input tensors it is given for a subclass whose
# torch functions spin, so a reference called on the same objects later is slow (old design: both sides shared them).
import time

import torch
import torch.nn as nn


class _Slow(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.Tensor.clamp_min(x, 0).as_subclass(torch.Tensor)
        try:
            x.__class__ = _Slow
        except TypeError:
            pass
        return out
