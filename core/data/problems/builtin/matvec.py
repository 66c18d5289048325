"""Matrix-vector product: (M, K) @ (K, 1).
Level 1 matmul variant: memory-bound, one pass over the matrix."""

import torch
import torch.nn as nn

M = 1024
K = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, v)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
