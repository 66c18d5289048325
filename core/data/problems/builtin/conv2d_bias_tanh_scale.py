"""Conv2d, an extra learned per-channel bias, tanh, then a constant scale.
Level 2: a convolution followed by three fusable elementwise ops."""

import torch
import torch.nn as nn

BATCH = 2
IN_CHANNELS = 3
OUT_CHANNELS = 16
KERNEL_SIZE = 3
HEIGHT = 32
WIDTH = 32
SCALE = 2.0


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, scale: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.conv(x) + self.bias) * self.scale


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, SCALE]
