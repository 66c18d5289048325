"""Softplus log(1 + exp(x)) over a 2-D tensor (numerically stable for large x).
Level 1 elementwise activation."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(x)


def get_inputs():
    return [torch.randn(BATCH, DIM) * 3.0]


def get_init_inputs():
    return []
