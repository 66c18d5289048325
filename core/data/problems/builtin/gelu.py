"""GELU (exact, erf form) over a 2-D activation tensor.
Level 1, memory-bound elementwise op with a transcendental function."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
