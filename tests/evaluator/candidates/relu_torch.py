import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = x.clone()
        y.clamp_(min=0)  # in place on our own copy, not on the input
        return y
