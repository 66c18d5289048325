# Attack class: one call per base set stands for the whole timed batch, the picked calls exact. A timed batch's sets
# are its base sets nudged by up to 2^-5; on positive inputs a linear map's output moves by ~0.1% under the nudge, 7x
# the fp32 tolerance but inside the projections' old rounding slack. The patched runner computes the base sets'
# outputs once a batch, answers each call with its base's, and computes the picked calls exactly when kept: correct
# at 2-4x (red team, session 27). Stopped by: projections summed in float64, their slack 1e-6 (slot/projection.py).
import importlib

import torch
import torch.nn as nn

judge = importlib.import_module("evaluator.judging.judge")
_session = importlib.import_module("evaluator.slot.worker_session").TaskSession


def _replayed(self, calls, salt):
    self.salt = salt  # the values are not even made: only the picked ones, when kept
    self.sets = []
    model = self.models[2]
    with torch.no_grad():
        base_out = [model(*[t for t in b]) for b in self.bases]
    self.outputs = [base_out[i % len(base_out)] for i in range(calls)]


def _run(self, calls, salt):
    _replayed(self, calls, salt)


def _run_eager(self, calls, salt):
    _replayed(self, calls, salt)
    return []


def _keep(self, calls):
    for name, call in calls.items():
        with torch.no_grad():
            values = judge.nudged_values(self.bases[call % len(self.bases)], self.salt + call)  # judge.nudged_batch's set
            self.kept[name] = self.models[2](*values).clone()


_session.run = _run
_session.run_eager = _run_eager
_session.keep = _keep


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(512, 512))

    def forward(self, x):
        return x @ self.weight
