"""Linear layer (GEMM + bias) followed by ReLU and a constant scale.
Level 2: fuse the epilogue (relu, multiply) into the GEMM."""

import torch
import torch.nn as nn

BATCH = 64
IN_FEATURES = 256
OUT_FEATURES = 256
SCALE = 0.5


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * self.scale


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, SCALE]
