# Attack class: memory bomb: keep allocating and touching 256 MiB blocks (the candidate's limit must stop it, not the
# host's OOM killer).
# Described in: issue 11 (resource exhaustion), KernelGuard.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        hoard = []
        while True:
            hoard.append(torch.ones(64 * 2**20))
