# Attack class: timing forged through the runner's own harness (red team, session 28: correct at a median 2.24x on a
# 256-element ReLU, honest 0.95). Stopped since by capping CPU-mode speedups at 1 where the harness is over a fifth of
# the reference's charge (timing_phase.harness_capped).
# The charged harness done more cheaply than the judge's mirror of it. Every timed call's output is computed
# exactly (bit for bit what the honest runner produces; digests equal), but the runner's own harness work, which the
# judge charges as the candidate's and pays in full for the reference (judge.nudged_batch one set at a time, a Python
# call per set, projection.projections/digests stacking every output), is replaced: one reused Generator re-seeded
# per call (same draws), all factors and products and the ReLU done on one [calls, ...] buffer, and the hand-over
# projecting/digesting that buffer in place (no stack copies, no nan_to_num pass).
import hashlib
import importlib

import torch
import torch.nn as nn

_judge = importlib.import_module("evaluator.judging.judge")
_session = importlib.import_module("evaluator.slot.worker_session").TaskSession
_framing = importlib.import_module("evaluator.contract.framing")
NUDGE = _judge.NUDGE


def _run(self, calls, salt):
    shape = self.bases[0][0].shape
    draws = torch.empty((calls, *shape))
    gen = torch.Generator()
    for i in range(calls):
        gen.manual_seed(salt + i)
        torch.rand(shape, generator=gen, out=draws[i])
    stacked = torch.stack([b[0] for b in self.bases])
    values = stacked.repeat((calls + len(self.bases) - 1) // len(self.bases), *([1] * len(shape)))[:calls]
    draws.mul_(2 * NUDGE).add_(1 - NUDGE)
    out = torch.relu_(values.mul_(draws))
    self._rt_out = out
    self.sets = []
    self.outputs = list(out.unbind(0))


def _run_eager(self, calls, salt):
    _run(self, calls, salt)
    return []


def _projections(self, seed, scale=1.0):
    out = self._rt_out
    flat = out.reshape(out.shape[0], -1)
    gen = torch.Generator()
    gen.manual_seed(seed)
    weights = torch.rand(flat.shape[1:], generator=gen).mul_(2).sub_(1)
    args = flat * (1.0 / scale) if scale != 1.0 else flat.clone()
    return torch.mv(args.sin_(), weights).double().tolist()


def _digests(self, seed=None):
    out = self._rt_out
    calls = out.shape[0]
    header = hashlib.sha256(f"{out.dtype}{tuple(out.shape[1:])}".encode())
    data = memoryview(out.reshape(-1).view(torch.uint8).numpy())
    size = len(data) // calls
    found = []
    for start in range(0, len(data), size):
        digest = header.copy()
        digest.update(data[start:start + size])
        found.append(digest.digest()[:_framing.DIGEST_BYTES])
    return found


_session.run = _run
_session.run_eager = _run_eager
_session.projections = _projections
_session.digests = _digests


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
