# Not an attack: an honest candidate that looks for what the slot attacks leave behind (planted folders, the SysV
# segment, an idle scheduling class, an escaped process, flood files) and fails loudly if any is there.
import ctypes
import os

import torch.nn as nn

found = []
for base in {os.environ.get("HOME", ""), os.environ.get("TMPDIR", ""), "/tmp", "/dev/shm", os.getcwd()}:
    if base and os.path.isdir(base):
        found += [os.path.join(base, n) for n in os.listdir(base) if n.startswith(("krl-planted", "krl-flood"))]
if ctypes.CDLL(None, use_errno=True).shmget(0x4B524C31, 0, 0) >= 0:
    found.append("SysV segment 0x4B524C31")
for pid in (0, os.getppid()):
    if os.sched_getscheduler(pid) != os.SCHED_OTHER:
        found.append(f"scheduling class {os.sched_getscheduler(pid)} on pid {pid or os.getpid()}")
for entry in os.listdir("/proc"):
    try:
        with open(f"/proc/{entry}/comm") as handle:
            if handle.read().strip() == "krl-escaped":
                found.append(f"escaped process {entry}")
    except OSError:
        pass
if found:
    raise RuntimeError("left behind by an earlier task: " + "; ".join(found))


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
