# Attack class: leftovers through SysV shared memory. A segment with a fixed key, left attached to nobody: in a shared
# IPC namespace it outlived the task, was charged to no process, and the next candidate could read it (issue 23).
# Stopped by: a fresh IPC namespace per task, destroyed with its segments when the task's last process dies.
import ctypes

import torch.nn as nn

KEY = 0x4B524C31
IPC_CREAT = 0o1000
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
segment = libc.shmget(KEY, 1 << 20, IPC_CREAT | 0o666)
if segment >= 0:
    address = libc.shmat(segment, None, 0)
    if address not in (None, ctypes.c_void_p(-1).value):
        ctypes.memmove(address, b"planted by an earlier task", 26)
        libc.shmdt(ctypes.c_void_p(address))


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
