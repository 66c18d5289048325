# Class: skipped work in a timed batch, its projection guessed, on outputs of large magnitude. As
# guessed_projection.py: the runner computes no output, answers every call's projection with 0 and computes only the
# picked calls, in the uncharged keep order; here on a 512-wide matrix product, whose outputs (magnitude ~20) let each
# element move ~0.2 at 1e-2. While the projection was of sin(output) unscaled, that tolerance was wider than sin's
# reach and the guess passed on every call: correct at 2.2-2.4x on a CPU. The judge's scale (slot/projection.py,
# output_scale) brings the outputs to a few radians, and the guess fails.
import importlib

import torch
import torch.nn as nn

_session = importlib.import_module("evaluator.slot.worker_session").TaskSession


def _run(self, calls, salt):
    self.make_sets(calls, salt)  # the values only, no call
    self.outputs = []


def _keep(self, calls):
    for name, call in calls.items():
        self.kept[name] = self.models[2](*self.sets[call % len(self.sets)])


def _projections(self, seed, scale=1.0):
    return [0.0] * len(self.sets)


_session.run = _run
_session.keep = _keep
_session.projections = _projections


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(512, 512))  # the reference's, made under the same seed

    def forward(self, x):
        return x @ self.weight
