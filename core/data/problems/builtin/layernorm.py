"""Layer normalisation over the last dimension, with learned weight and bias.
Level 1 norm: per-row mean and variance, then an affine transform."""

import torch
import torch.nn as nn

BATCH = 8
SEQ = 64
HIDDEN = 512


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN) * 2.0 + 0.5]


def get_init_inputs():
    return [HIDDEN]
