# Attack class: partial computation: compute a reduction (the column mean) from a quarter of the rows.
# Described in: KernelBench src/kernelbench/tests (94_MSELoss_partial_computation_hack, analytical hacks).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x[: max(1, x.shape[0] // 4)].mean(dim=0)
