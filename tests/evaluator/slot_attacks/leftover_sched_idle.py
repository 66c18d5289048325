# Attack class: leftovers through scheduling classes. SCHED_IDLE and nice 19 on the zygote (our parent) and on every
# other process this user can reach (the spare runners): every later runner would inherit the idle class (issue 23).
# Stopped by: the runner's pid-keyed seccomp filter (sched_setscheduler, setpriority... only on itself).
import os

import torch.nn as nn

targets = {os.getppid()}
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != os.getpid():
        targets.add(int(entry))
for pid in targets:
    for attempt in (lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)),
                    lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)):
        try:
            attempt()
        except OSError:
            pass
for which in (os.PRIO_PGRP, os.PRIO_USER):
    try:
        os.setpriority(which, 0, 19)
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
