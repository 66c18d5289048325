"""An honest masked cumsum in float32 that sums in blocks of 50 (a different order than torch.cumsum): on inputs of
this scale a handful of its 512,000 elements land just outside the fp32 tolerance, on some value sets and not others."""
import torch
import torch.nn as nn

BLOCK = 50


class ModelNew(nn.Module):
    def forward(self, x, mask):
        values = x * mask
        rows, n = values.shape
        blocks = values.view(rows, n // BLOCK, BLOCK)
        inner = torch.cumsum(blocks, dim=2)
        totals = inner[:, :, -1]
        before = torch.cumsum(totals, dim=1) - totals
        return (inner + before.unsqueeze(-1)).view(rows, n)
