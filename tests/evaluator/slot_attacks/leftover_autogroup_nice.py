# Attack class: leftovers through scheduling, by a file. The syscall filters refuse setpriority and sched_* on any
# process but the runner, but /proc/self/autogroup is a file, and its nice value weighs the whole session's autogroup.
# Runners used to keep the zygote's session, so nice 19 written here slowed the zygote and every later runner of the
# slot (red team, session 27). The runner is non-dumpable (its /proc files are root's), so it first asks to be
# dumpable again. Stopped by: a session of its own per runner (setsid), and prctl(PR_SET_DUMPABLE, 1) refused.
import ctypes

import torch.nn as nn

ctypes.CDLL(None, use_errno=True).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
try:
    with open("/proc/self/autogroup", "w") as handle:
        handle.write("19")
except OSError:
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
