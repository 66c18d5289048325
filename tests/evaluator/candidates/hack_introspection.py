import sys

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        caller = sys._getframe(1)
        return torch.relu(x)
