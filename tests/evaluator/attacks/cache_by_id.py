# Attack class: output caching keyed on the input object's id(): compute once per input object, replay afterwards.
# Described in: KernelGuard OUTPUT_REPLAY_CACHE / TIMED_INPUT_REPLAY, KernelBench result reuse.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, a, b):
        key = id(a)
        if key not in self.memo:
            self.memo[key] = a @ b
        return self.memo[key]
