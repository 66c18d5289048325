# Attack class: timing forged in the rounds that set a CPU figure (red team, session 29: correct at 2.8-2.9x in 5 of 10
# runs). Stopped since by a pick in every batch (timing_phase.PICKED_LATER). The red team's notes follow (the checks
# of the time).
# forge29c finding 1: an output over ALWAYS_PICKED_BYTES (256 x 4160 float32, 4.06 MiB) behind a 2.2 GFLOP GEMM: the
# harness share is ~0.33 (not capped), batches are 1 call, and a 1-call batch is still picked only at PICK_SHARE
# (timing_phase.picks: `first` and `pick_always` aside, rng < 0.25). CPU mode counts 3 rounds and round_figures.spread()
# is 0 for fewer than 4 values, so no extra round is ever added: the candidate's figure is the median of 3, set by two
# fast rounds. The counted rounds are the 2nd-4th consecutive batches of the final size (the 1st is the sizing or the
# warm round), which the runner reads from its `run` orders. It answers the 3rd and 4th (counted rounds 2 and 3) with
# the cheap part (residual + 1/4160: no GEMM, no softmax), which passes their projections, and hands over the
# projections and digests of that; everything else is honest. It wins when neither skipped batch is picked:
# 0.75^2 = 56% (skipping every unpicked-looking batch, as f1b does, 0.75^4 = 32%); else `crashed` (digest).
import importlib

import torch
import torch.nn as nn

_S = importlib.import_module("evaluator.slot.worker_session").TaskSession
_run, _keep, _eager = _S.run, _S.keep, _S.run_eager


def run(self, calls, salt):
    previous = getattr(self, "_rt_prev", None)
    self._rt_prev = calls
    self._rt_seen = getattr(self, "_rt_seen", 0) + 1 if previous == calls else 1
    if self._rt_seen in (3, 4):
        self.sets, self.outputs = [], []
        sets = self.make_sets(calls, salt)
        self.outputs = [values[1] + 1.0 / 4160 for values in sets]
        self._rt_skip = True
        return None
    self._rt_skip = False
    return _run(self, calls, salt)


def run_eager(self, calls, salt):
    self._rt_prev, self._rt_seen, self._rt_skip = calls, 0, False
    return _eager(self, calls, salt)


def keep(self, calls):
    if getattr(self, "_rt_skip", False):  # a skipped batch was picked: caught at check_kept (digest)
        for name, call in calls.items():
            with torch.no_grad():
                self.kept[name] = self.models[2](*self.sets[call]).clone()
        return None
    return _keep(self, calls)


_S.run, _S.run_eager, _S.keep = run, run_eager, keep


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1024, 4160)

    def forward(self, x, residual):
        return torch.softmax(self.fc(x), dim=1) + residual
