"""Mean over one dimension of a 3-D tensor.
Level 1 reduction; the reduced dimension is an init argument."""

import torch
import torch.nn as nn

BATCH = 16
DIM1 = 256
DIM2 = 256
REDUCE_DIM = 1


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.dim)


def get_inputs():
    return [torch.randn(BATCH, DIM1, DIM2)]


def get_init_inputs():
    return [REDUCE_DIM]
