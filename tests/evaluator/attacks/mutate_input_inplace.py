# Attack class: in-place mutation of the input: relu the input buffer in place and return it (no new output).
# Described in: KernelBench adversarial unit tests (zero_out_kernel: inputs modified), KernelGuard.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min_(0)
