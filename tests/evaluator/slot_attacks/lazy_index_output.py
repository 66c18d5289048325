# Attack class: a skipped timed batch on an output the projection could not see. Projections took floating-point
# tensors only, so for argmax(x @ W) every call's projection was 0 on both sides; the patched runner computed nothing in
# its timed orders and the picked calls exactly when kept: correct at 22x (red team, session 27). Stopped by: integer
# and boolean outputs projected too (slot/projection._projected).
import importlib

import torch
import torch.nn as nn

judge = importlib.import_module("evaluator.judging.judge")
_session = importlib.import_module("evaluator.slot.worker_session").TaskSession


def _skip(self, calls, salt):
    self.salt, self.sets = salt, []
    self.outputs = [torch.zeros(32, dtype=torch.int64)] * calls


def _run_eager(self, calls, salt):
    _skip(self, calls, salt)
    return []


def _keep(self, calls):
    for name, call in calls.items():
        values = judge.nudged_values(self.bases[call % len(self.bases)], self.salt + call)
        with torch.no_grad():
            self.kept[name] = self.models[2](*values).clone()


_session.run = _skip
_session.run_eager = _run_eager
_session.keep = _keep


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(512, 512))

    def forward(self, x):
        return torch.argmax(x @ self.weight, dim=1)
