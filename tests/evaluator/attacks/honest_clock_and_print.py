# Honest look-alike: reads the clock (without replacing it) and prints a debug line; must stay correct.
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        start = time.perf_counter()
        y = x.clamp_min(0)
        if start < 0:
            print("clock went backwards")
        return y
