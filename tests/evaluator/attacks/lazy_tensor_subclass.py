# Attack class: lazy tensor: forward returns a torch.Tensor subclass at once and defers the computation to the first
# time the result is looked at (after the timed region); __torch_function__ and __eq__ are overridden.
# Described in: SOL-ExecBench check_lazy_outputs, KernelGuard LAZY_TENSOR / TENSOR_INSTANCE_METHOD_OVERRIDE,
# KernelBench static checker (lazy evaluation, _make_subclass).
import torch
import torch.nn as nn


class Deferred(torch.Tensor):
    _done = True  # until the source is attached
    _source = None

    @staticmethod
    def __new__(cls, source):
        obj = torch.Tensor._make_subclass(cls, torch.empty_like(source))
        obj._source = source
        obj._done = False
        return obj

    def _force(self):
        if not self._done:
            self._done = True
            torch.Tensor.copy_(self, self._source.clamp_min(0))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for arg in args:
            if isinstance(arg, Deferred) and arg._source is not None:
                arg._force()
        return super().__torch_function__(func, types, args, kwargs or {})

    def __eq__(self, other):
        return torch.ones(self.shape, dtype=torch.bool)


class ModelNew(nn.Module):
    def forward(self, x):
        return Deferred(x)
