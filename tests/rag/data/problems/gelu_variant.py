"""A light edit of a corpus program (another name, argument and sizes): only embedding similarity catches it."""
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, inputs):
        return torch.nn.functional.gelu(inputs)


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
