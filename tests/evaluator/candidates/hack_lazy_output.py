"""Lazy output: a torch.Tensor subclass returned from forward (a proxy could compute, or compare, later)."""
import torch
import torch.nn as nn


class Later(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x).as_subclass(Later)
