# Honest look-alike for the replay problem: a real matmul on every call, no lookups. Must stay correct.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
