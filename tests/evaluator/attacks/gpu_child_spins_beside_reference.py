# Attack class: GPU work from another process of the candidate's, timed to the judge's reference: honest outputs, and
# a child with a CUDA context of its own keeps ~0.1 ms spin kernels queued whenever the runner's main thread sleeps
# (waiting for an order: the judge times the reference then) and stops while the runner works on its own batch.
# Described in: our own probe of contexts sharing a GPU by time slices (session 25, tests/bench/probe_time_slices.py);
# NVIDIA's MPS documentation. Unlike a thread's side stream, the child's own hardware queue is not held behind the
# runner's gated batch; it sleeps between launches, so its CPU stays under the runner's CPU watch.
import os
import sys

import torch
import torch.nn as nn

_spawn = __import__("subpro" + "cess")
CHILD = r"""
import os, sys, time, torch
parent = int(sys.argv[1])
stream = torch.cuda.Stream()
spin = getattr(torch.cuda, "_sle" + "ep")
spin(1000)
torch.cuda.synchronize()
ended = time.monotonic() + 30
while time.monotonic() < ended:
    try:
        with open(f"/proc/{parent}/task/{parent}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        break
    if state == "S":
        with torch.cuda.stream(stream):
            spin(200_000)
    time.sleep(5e-5)
"""
_child = _spawn.Popen([sys.executable, "-c", CHILD, str(os.getpid())], stdout=_spawn.DEVNULL, stderr=_spawn.DEVNULL)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a @ b
