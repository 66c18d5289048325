# Attack class: timing forged by skipping the batch where the hand-over bound nothing (red team, session 28: correct at
# 12-27x in CPU mode). Stopped since: Python numbers are digested by value and projected as 0-dim tensors.
# A reference whose output is a Python number (here a loss read out with .item()). Each CPU-mode hand-over
# commits to every timed output by projection.digests, but a non-tensor value is digested by its type's name only
# ("float"), and the projection sees tensors only (projection._projected), so neither the charged projection nor the
# digest depends on a number's value. The patched runner runs nothing in its timed batches (no value sets, no calls),
# answers projections and digests of placeholder floats (0.0: projection 0 and SHA-256 of b"float", exactly what the
# judge's own reference projects/digests), and computes only the picked calls, exactly, in the uncharged `keep`
# order (values rebuilt from the base sets and the salt). Every batch is picked (a non-tensor output is not
# "projected whole"), and every pick is right, so the verdict is correct at an arbitrary speedup.
import importlib

import torch
import torch.nn as nn

_judge = importlib.import_module("evaluator.judging.judge")
_session = importlib.import_module("evaluator.slot.worker_session").TaskSession


def _run(self, calls, salt):
    self._rt_batch = (calls, salt)  # no values made, no call
    self.sets, self.outputs = [], [0.0] * calls  # placeholders: digested as b"float", projected as 0


def _run_eager(self, calls, salt):
    _run(self, calls, salt)
    return []


def _keep(self, calls):
    _, salt = self._rt_batch
    for name, call in calls.items():
        values = _judge.nudged_values(self.bases[call % len(self.bases)], salt + call)
        with torch.no_grad():
            self.kept[name] = self.models[2](*values)


_session.run = _run
_session.run_eager = _run_eager
_session.keep = _keep


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(256, 256))

    def forward(self, x):
        return torch.logsumexp(x @ self.weight, dim=1).mean().item()
