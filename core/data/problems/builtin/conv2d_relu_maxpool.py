"""Conv2d with padding, ReLU, then 2x2 max pooling.
Level 2: a convolution followed by an activation and a pooling reduction."""

import torch
import torch.nn as nn

BATCH = 2
IN_CHANNELS = 8
OUT_CHANNELS = 16
KERNEL_SIZE = 3
HEIGHT = 32
WIDTH = 32


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE]
