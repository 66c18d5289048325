# Class: skipped work in a timed batch, its projection guessed. The runner makes the batch's values but computes no
# output, answers every call's projection with 0 (the projection of a zero-mean signal on symmetric weights is zero
# on average) and computes only the picked calls, in full, in the uncharged keep order. While the judge allowed a
# projection the worst case of the tolerance (every element off by all of it, in the direction of its weight), that
# guess passed on any output of a few thousand elements or more; the statistical bound (slot/projection.py) stops it.
import importlib

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
    def forward(self, x):
        return x.clamp_min(0)
