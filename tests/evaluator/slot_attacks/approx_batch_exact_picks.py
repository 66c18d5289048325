# Attack class: an approximate timed batch, the picked calls exact. The patched runner runs every timed call in
# bfloat16 (~0.3% off each element, 30x the fp32 tolerance) and its correctness trials and checks in float32; the
# picked calls, named only in the uncharged `keep` order, it computes exactly then. The projections' rounding slack
# (1e-4 of sum |w sin|, summed in float32) grew with the output's size and held the bf16 error from ~30k elements:
# correct at 1.4-1.6x where honest code read 1.0 (red team, session 27). Stopped by: projections summed in float64,
# their slack 1e-6 (slot/projection.py).
import importlib

import torch
import torch.nn as nn

_session = importlib.import_module("evaluator.slot.worker_session").TaskSession
_APPROX = [False]


def _approx(method):
    def wrapped(self, *args, **kwargs):
        _APPROX[0] = True
        try:
            return method(self, *args, **kwargs)
        finally:
            _APPROX[0] = False
    return wrapped


def _keep(self, calls):  # the picked calls, exact, off the clock
    for name, call in calls.items():
        with torch.no_grad():
            self.kept[name] = self.models[2](*self.sets[call]).clone()


_session.run = _approx(_session.run)
_session.run_eager = _approx(_session.run_eager)
_session.keep = _keep


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1024, 1024))  # the reference's, made under the same seed
        self._low = None

    def forward(self, x):
        if _APPROX[0]:
            if self._low is None:
                self._low = self.weight.detach().bfloat16()
            return (x.bfloat16() @ self._low).float()
        return x @ self.weight
