# Honest look-alike: caches work that depends only on the module's own state (a prepared constant), never on the
# inputs; recomputes the output on every call. Must stay correct.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._zero = None

    def forward(self, x):
        if self._zero is None or self._zero.dtype != x.dtype:
            self._zero = torch.zeros((), dtype=x.dtype)
        return torch.maximum(x, self._zero)
