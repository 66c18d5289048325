"""C = A^T @ B with A stored as (K, M) and irregular, non-power-of-two sizes.
Level 1 matmul variant: tests strided loads and tile edge handling."""

import torch
import torch.nn as nn

M = 257
K = 131
N = 199


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a.T, b)


def get_inputs():
    return [torch.randn(K, M), torch.randn(K, N)]


def get_init_inputs():
    return []
