# Attack class: output caching keyed on the input objects' id(), handing back a copy (a fresh storage every call):
# the timing buffers are the same objects call after call, holding other values.
# Described in: KernelGuard OUTPUT_REPLAY_CACHE / TIMED_INPUT_REPLAY, issue 12.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, a, b):
        key = (id(a), id(b))
        if key not in self.memo:
            self.memo[key] = a @ b
        return self.memo[key].clone()
