"""2-D convolution of a square image batch with a square kernel, stride 1, no padding.
Level 1 conv; channels, kernel size and image size are size constants."""

import torch
import torch.nn as nn

BATCH = 2
IN_CHANNELS = 3
OUT_CHANNELS = 16
KERNEL_SIZE = 3
HEIGHT = 32
WIDTH = 32


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE]
