"""Leaky ReLU with a configurable negative slope: x if x > 0 else slope * x.
Level 1 elementwise activation; the slope is an init argument."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
DIM = 4096
NEGATIVE_SLOPE = 0.01


class Model(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [NEGATIVE_SLOPE]
