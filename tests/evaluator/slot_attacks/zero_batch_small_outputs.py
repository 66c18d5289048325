# Attack class: timing forged by skipping the batch where a projection cannot tell (red team, session 28: correct at
# 80-106x in CPU mode). Stopped since by each hand-over's digest of every output (slot/output_digest.py; on a GPU since
# session 29): the picked outputs handed over later must be the bytes its charged hand-over committed to, zeros here.
# The judge projects sin(output / scale), scale = mean|reference| / 0.8 (projection.output_scale), and allows each
# element b_i = (atol + rtol|x_i|) / scale. For outputs whose typical magnitude is comparable to atol (softmax over a
# few thousand columns at fp32's 1e-4: mean 2.4e-4 at 4096, 6.1e-5 at 16384), b_i / scale is 0.3-1.3 per element, so
# Hoeffding's bound 6.5 sqrt(sum b_i^2) exceeds what ANY output can move the projection by: an output of zeros passes
# every projection (0 fails of 400 offline), though 65% (dim 4096) / 16% (dim 16384) of its elements are outside
# allclose. The patched runner therefore: calls nothing in its timed batches, answers every projection with 0.0 and
# commits to outputs of zeros in its digests, and computes only the picked calls, exactly, in the uncharged `keep`
# order. Its value sets are made as the judge's (behind the device gate on a GPU, where the
# judge queues the batch rather than running it), so nothing but the outputs is missing. Trials, checks, the recheck
# and KernelBench's eager calls go through the honest forward.
import importlib

import torch
import torch.nn as nn

_session = importlib.import_module("evaluator.slot.worker_session").TaskSession
_digest = importlib.import_module("evaluator.slot.output_digest")
_projections_honest, _digests_honest, _keep_honest = _session.projections, _session.digests, _session.keep


def _batch(self, calls, salt, shift=None):
    self.sets, self.outputs = [], []
    self.make_sets(calls, salt, shift)  # the sets, as the judge makes them; no call
    self._rt_calls = calls


def _projections(self, seed, scale=1.0):
    if self.outputs:  # a batch that did run (KernelBench's eager calls)
        return _projections_honest(self, seed, scale)
    return [0.0] * self._rt_calls


def _digests(self, seed=None):
    if self.outputs:
        return _digests_honest(self, seed)
    with torch.no_grad():
        zeros = torch.zeros_like(self.models[2](*self.sets[0]))
    return _digest.digests([zeros] * self._rt_calls, seed)


def _keep(self, calls):
    if self.outputs:
        return _keep_honest(self, calls)
    for name, call in calls.items():
        with torch.no_grad():
            self.kept[name] = self.models[2](*self.sets[call % len(self.sets)]).clone()


_session._batch = _batch
_session.projections = _projections
_session.digests = _digests
_session.keep = _keep


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
