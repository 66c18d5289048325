# Attack class: a wrong float64 output where float32 has no numbers (red team, session 28). Every element of exp(100 x)
# past float32's range (x > 0.9) is answered 1e300, off by up to 1e170x: compared in float32, both sides were
# infinities there and "the same", and the projections made both 0. float64 outputs are compared in float64 since.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.exp(x.double() * 100.0).masked_fill_(x > 0.9, 1e300)
