# Attack class: warm-up counting: compute for the first calls (correctness), then return the last answer.
# Described in: SOL-ExecBench check_timed_outputs (solutions that stop working once timing starts), KernelGuard
# LAST_CALL_REPLAY, issue 12.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.last = None

    def forward(self, x):
        self.calls += 1
        if self.calls <= 3 or self.last is None:
            self.last = x.clamp_min(0)
        return self.last
