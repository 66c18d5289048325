"""ReLU over a 2-D activation tensor: max(x, 0), elementwise.
Level 1, memory-bound; half of the inputs are negative so an identity kernel fails."""

import torch
import torch.nn as nn

BATCH = 16
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
