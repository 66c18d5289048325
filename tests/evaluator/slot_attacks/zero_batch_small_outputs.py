# Attack class: timing forged by skipping the batch where a projection cannot tell (red team, session 28: correct at
# 80-106x in CPU mode). Stopped since by each hand-over's digest of every output (projection.digests): the picked
# outputs handed over later must be the bytes its charged hand-over committed to, and this runner has none.
# The judge projects sin(output / scale), scale = mean|reference| / 0.8 (projection.output_scale), and allows each
# element b_i = (atol + rtol|x_i|) / scale. For outputs whose typical magnitude is comparable to atol (softmax over a
# few thousand columns at fp32's 1e-4: mean 2.4e-4 at 4096, 6.1e-5 at 16384), b_i / scale is 0.3-1.3 per element, so
# Hoeffding's bound 6.5 sqrt(sum b_i^2) exceeds what ANY output can move the projection by: an output of zeros passes
# every projection (0 fails of 400 offline), though 65% (dim 4096) / 16% (dim 16384) of its elements are outside
# allclose. The patched runner therefore: computes nothing in its timed batches (not even the value sets), answers
# every projection with 0.0, and computes only the picked calls, exactly, in the uncharged `keep` order (their value
# sets rebuilt from the base sets and the salt, judge.nudged_values(bases[i % n], salt + i)). Trials, checks and the
# recheck go through the honest forward.
import importlib

import torch
import torch.nn as nn

_judge = importlib.import_module("evaluator.judging.judge")
_session = importlib.import_module("evaluator.slot.worker_session").TaskSession


def _run(self, calls, salt):
    self._rt_batch = (calls, salt)  # no values made, no call
    self.sets, self.outputs = [], []


def _run_eager(self, calls, salt):
    _run(self, calls, salt)
    return []


def _projections(self, seed, scale=1.0):
    return [0.0] * self._rt_batch[0]


def _keep(self, calls):
    _, salt = self._rt_batch
    for name, call in calls.items():
        values = _judge.nudged_values(self.bases[call % len(self.bases)], salt + call)
        with torch.no_grad():
            self.kept[name] = self.models[2](*values).clone()


_session.run = _run
_session.run_eager = _run_eager
_session.projections = _projections
_session.keep = _keep


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
