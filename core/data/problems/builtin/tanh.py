"""Hyperbolic tangent over a 2-D tensor.
Level 1 elementwise activation; inputs span both signs and saturate at the tails."""

import torch
import torch.nn as nn

BATCH = 16
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(BATCH, DIM) * 2.0]


def get_init_inputs():
    return []
