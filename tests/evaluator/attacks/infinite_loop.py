# Attack class: an infinite loop in forward (the run limit must end it).
# Described in: issue 11 (timeouts).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
