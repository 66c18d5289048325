"""Square linear layer, GELU, then a residual add of the input: x + gelu(W x + b).
Level 2: GEMM with an activation and a residual epilogue (no dropout)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 64
FEATURES = 256


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
