# Attack class: return (a view of) the input itself, no computation.
# Described in: KernelGuard INPUT_PASSTHROUGH_OUTPUT, wafer.ai field guide (input copied to output).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.view(x.shape)
