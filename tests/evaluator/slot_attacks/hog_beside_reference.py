# Class: work beside the judge's timing of the reference. Passes its correctness trials, then leaves a process that
# copies 64 MiB buffers over and over (the host's caches and memory bandwidth, which the reference's calls need)
# whenever the candidate is not being called, so the work lands between the runner's orders and not in its own
# charged batches: it pauses while a flag in a shared page says a call is running.
import mmap
import os

import torch
import torch.nn as nn

CALLS = [0]
FLAG = mmap.mmap(-1, 1)  # anonymous and shared: the forked process sees the runner's writes


def _hog():
    source, target = bytearray(64 << 20), bytearray(64 << 20)
    while True:
        if FLAG[0] == 0:
            target[:] = source


class ModelNew(nn.Module):
    def forward(self, x):
        CALLS[0] += 1
        FLAG[0] = 1
        if CALLS[0] == 3:  # the request's two correctness trials, then the first timed call
            if getattr(os, "fo" + "rk")() == 0:  # past the static reading of the source
                _hog()
        out = x.clamp_min(0)  # (the test swaps in a heavier problem's body here)
        FLAG[0] = 0
        return out
