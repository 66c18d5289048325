"""ReLU: the corpus pair's program, reformatted with comments and a docstring."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies ReLU."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        # the whole op
        return torch.relu(   x )


def get_inputs():
    return [torch.randn(4096, 1024)]


def get_init_inputs():
    return [ ]
