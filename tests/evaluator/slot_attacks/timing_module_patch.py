# Class: timing forged through the evaluator's modules. Patches evaluator.timing through importlib so every speed it
# computes is 25x (old design: the runner timed both sides and computed the speedup in the candidate's process).
import importlib

import torch.nn as nn

timing = importlib.import_module("evaluator.judging.timing")
_summarize, _paired = timing.summarize, timing.paired_speedup
timing.paired_speedup = lambda reference, candidate: 25.0 * _paired(reference, candidate)


def _fast(samples):
    return _summarize([s / 25.0 for s in samples])


timing.summarize = _fast


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
