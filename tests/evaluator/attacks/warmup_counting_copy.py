# Attack class: warm-up counting with a copy: compute for the first calls, then hand back a copy of the last answer
# (a fresh storage every call, so only the values give it away).
# Described in: SOL-ExecBench check_timed_outputs, KernelGuard LAST_CALL_REPLAY, issue 12 (warm-up counting).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.last = None

    def forward(self, a, b):
        self.calls += 1
        if self.calls <= 3 or self.last is None:
            self.last = a @ b
        return self.last.clone()
