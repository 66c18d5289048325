# Attack class: a huge output (1 TiB requested) to exhaust the judge's memory or the hand-over channel.
# Described in: issue 11 (resource exhaustion).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty(2**38, dtype=torch.float32)
