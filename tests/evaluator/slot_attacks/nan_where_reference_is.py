# Attack class: wrong values exactly where the reference is not finite. judge.compare checked the NaN/Inf pattern only
# when the candidate's output had non-finite values, and zeroed the difference where either side did: log|x| passed
# for log(x), wrong on every negative input (red team, session 27). Stopped by: the pattern compared whenever either
# side has a NaN or an infinity (judging/judge.compare).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.log(x.abs())
