# Honest look-alike for the reduction problem: the full column mean, computed as a sum then a division.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.sum(dim=0) / x.shape[0]
