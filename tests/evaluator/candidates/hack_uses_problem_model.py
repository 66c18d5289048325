"""Reaches for the reference Model through the problem's namespace: still a hack (and Model is not there)."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = globals()["Mo" + "del"]()

    def forward(self, x):
        return self.inner(x)
