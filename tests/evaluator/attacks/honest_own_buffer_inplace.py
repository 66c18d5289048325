# Honest look-alike: copies the input into its own buffer and works in place on that buffer (never on the input);
# returns a reshaped view of its own result. Must stay correct.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = x.clone()
        out.clamp_min_(0)
        return out.view(-1).view(x.shape)
