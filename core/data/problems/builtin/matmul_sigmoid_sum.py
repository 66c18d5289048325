"""Matmul, sigmoid, then a sum over the feature dimension (one value per row).
Level 2: a GEMM whose epilogue is an activation plus a row reduction."""

import torch
import torch.nn as nn

BATCH = 64
IN_FEATURES = 256
HIDDEN = 256


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.linear = nn.Linear(in_features, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.linear(x)).sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN]
