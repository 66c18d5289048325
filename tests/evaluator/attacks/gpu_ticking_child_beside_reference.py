# Attack class: GPU work from another process of the candidate's, timed to the judge's reference and kept cheap on the
# CPU: honest outputs, and a child with a CUDA context of its own runs one tiny kernel a millisecond while the runner's
# main thread sleeps (waiting for an order: the judge times the reference then), and nothing while the runner works.
# Described in: our own measurement of contexts sharing a GPU (session 26, call F: one such process beside a batch cost
# it a ~0.33 ms switch of context each time, 19% of a 6.9 ms batch; tests/bench/probe_time_slices.py, "tick"). Unlike
# gpu_child_spins_beside_reference it polls once a millisecond, meant to stay under the runner's CPU watch (its CPU not
# measured). Not yet run on a GPU: with the gap probe off (the default since session 26) it may gain.
import os
import sys

import torch
import torch.nn as nn

_spawn = __import__("subpro" + "cess")
CHILD = r"""
import os, sys, time, torch
parent = int(sys.argv[1])
x = torch.zeros(1, device="cuda")
x.add_(1)
torch.cuda.synchronize()
ended = time.monotonic() + 30
while time.monotonic() < ended:
    try:
        with open(f"/proc/{parent}/task/{parent}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        break
    if state == "S":
        x.add_(1)
        torch.cuda.synchronize()
    time.sleep(1e-3)
"""
_child = _spawn.Popen([sys.executable, "-c", CHILD, str(os.getpid())], stdout=_spawn.DEVNULL, stderr=_spawn.DEVNULL)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a @ b
