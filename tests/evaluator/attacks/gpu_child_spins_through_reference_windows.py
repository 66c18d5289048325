# Attack class: GPU work from another process of the candidate's, queued before the judge's reference window and
# running on into it: a child with a CUDA context of its own queues a spin each time the runner has answered an order
# (the next window may be the reference's) and stops it from a second stream as soon as the runner wakes for an order
# (its own window is coming). Frozen during the reference's windows, it cannot stop the spin there.
# Described in: session 27 (against the freezer, which stops launches in a window, not work queued before it).
# Gained nothing on an H200 (0.98, 1.00; session 27), reason not known; stopped outright since session 28 by the task's
# group refusing new opens of the GPU's node to every process but the runner (isolation/device_access.py).
import os
import sys

import torch
import torch.nn as nn

_spawn = __import__("subpro" + "cess")
CHILD = r"""
import os, sys, time, torch, triton, triton.language as tl
from triton.language.extra.cuda import globaltimer

@triton.jit
def spin_until(flag_ptr, limit_ns):
    start = globaltimer()
    while (tl.load(flag_ptr, volatile=True) == 0) & (globaltimer() - start < limit_ns):
        pass

parent = int(sys.argv[1])
flag = torch.zeros(1, dtype=torch.int32, device="cuda")
side = torch.cuda.Stream()
flag.fill_(1)
spin_until[(1,)](flag, 1000)
torch.cuda.synchronize()
path = f"/proc/{parent}/task/{parent}/stat"
previous, spinning = "S", False
ended = time.monotonic() + 60
while time.monotonic() < ended:
    try:
        with open(path) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        break
    if state == "S" and previous != "S":
        flag.zero_()
        spin_until[(1,)](flag, 20_000_000)
        spinning = True
    elif state != "S" and spinning:
        with torch.cuda.stream(side):
            flag.fill_(1)
        spinning = False
    previous = state
"""
_env = {**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": "8"}  # the flag's stream beside the spin's
_child = _spawn.Popen([sys.executable, "-c", CHILD, str(os.getpid())], env=_env, stdout=_spawn.DEVNULL,
                      stderr=_spawn.DEVNULL)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a @ b
