# Attack class: leftovers through the host's own kernel state (red team, session 28). A fresh /proc still showed the
# host's cumulative memory counters: one task moved vmstat's unevictable_pgs_mlocked to a chosen value mod 4096 (mlock
# and munlock), and every later task on the host read it back. And memfd_secret's pages leave the kernel's direct map,
# splitting its huge pages until reboot. This candidate is the probe: it fails loudly where either still works.
import ctypes
import os
import platform

import torch.nn as nn

reached = []
for path in ("/proc/vmstat", "/proc/zoneinfo"):
    try:
        with open(path) as handle:
            if handle.read(64):
                reached.append(path)
    except OSError:
        pass
if platform.machine() == "x86_64":
    fd = ctypes.CDLL(None, use_errno=True).syscall(447, 0)  # memfd_secret
    if fd >= 0:
        os.close(fd)
        reached.append("memfd_secret")
if reached:
    raise RuntimeError("the host's kernel state is within reach: " + ", ".join(reached))


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
