# Attack class: timing forged in the batches that get no picks (red team, session 29: correct at 33-79x in 6 of 21
# runs, CPU mode). The digests bind only the batches whose picked outputs are compared, and a batch was picked when it
# is the first of its size and otherwise at PICK_SHARE (1/4), told to the runner only after its hand-over (keep). This
# runner is honest in every batch whose size differs from the one before (the always-picked ones) and in KernelBench's
# eager rounds; in every later batch of one size it calls nothing, answers every projection with 0.0 (softmax over
# 4,096 classes sits near fp32's atol, so sin(0) passes the bound) and zeros for every digest. Stopped since by a pick
# in every batch (timing_phase.PICKED_LATER): its first skipped batch is picked, its digest wrong.
import importlib

import torch
import torch.nn as nn

_S = importlib.import_module("evaluator.slot.worker_session").TaskSession
_batch_honest, _proj, _dig, _keep, _eager = _S._batch, _S.projections, _S.digests, _S.keep, _S.run_eager


def _batch(self, calls, salt, shift=None):  # a batch run (CPU) or queued behind the judge's gate (GPU)
    previous = getattr(self, "_rt_prev", None)
    self._rt_prev = calls
    if previous == calls:
        self._rt_skip = calls
        self.sets, self.outputs = [], []
        self.make_sets(calls, salt, shift)  # the sets only (behind the gate on a GPU); no call
        return None
    self._rt_skip = 0
    return _batch_honest(self, calls, salt, shift)


def run_eager(self, calls, salt):
    self._rt_prev, self._rt_skip = calls, 0
    return _eager(self, calls, salt)


def projections(self, *args, **kwargs):
    if getattr(self, "_rt_skip", 0):
        return [0.0] * self._rt_skip
    return _proj(self, *args, **kwargs)


def digests(self, *args, **kwargs):
    if getattr(self, "_rt_skip", 0):
        return [bytes(16)] * self._rt_skip
    return _dig(self, *args, **kwargs)


def keep(self, calls):
    if getattr(self, "_rt_skip", 0):  # caught: a picked call of a skipped batch
        for name in calls:
            self.kept[name] = torch.zeros(8, 4096)
        return None
    return _keep(self, calls)


_S._batch, _S.run_eager, _S.projections, _S.digests, _S.keep = _batch, run_eager, projections, digests, keep


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(256, 4096)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=1)
