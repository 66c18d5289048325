# Class: a hang inside its own timing. Passes its correctness trials, then spins forever once the timed batches begin
# (as a loop bound that the nudged values break would), so the timing phase holds the device while it spins.
import torch.nn as nn

CALLS = [0]


class ModelNew(nn.Module):
    def forward(self, x):
        CALLS[0] += 1
        while CALLS[0] > 2:  # the request's two correctness trials, then every call spins
            pass
        return x.clamp_min(0)
