"""Batched matrix product of (B, M, K) and (B, K, N) tensors.
Level 1 matmul variant: many independent small GEMMs."""

import torch
import torch.nn as nn

BATCH = 8
M = 128
K = 64
N = 96


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []
