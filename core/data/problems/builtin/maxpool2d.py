"""2-D max pooling with a square window and stride over an image batch.
Level 1 pooling; inputs are mostly negative so a zero-initialised max is wrong."""

import torch
import torch.nn as nn

BATCH = 4
CHANNELS = 16
HEIGHT = 64
WIDTH = 64
KERNEL_SIZE = 2
STRIDE = 2


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH) - 2.0]


def get_init_inputs():
    return [KERNEL_SIZE, STRIDE]
