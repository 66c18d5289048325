# Attack class: host disk beyond the caps, through stdout and stderr. They were the slot's log files on the pool's
# disk, capped by the soft file-size limit (64 MiB), which a candidate may lift to the hard one (8 GiB, kept for its
# outputs): 320 MiB into each went to the host's disk (red team, session 27). Stopped by: the logs on a tmpfs of the
# judge host's own (160 MiB in all; its pages charged to the writing task's cgroup), emptied before each task.
import os
import resource

import torch.nn as nn

soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
chunk = b"krl-flood " * (2**20 // 10) + b"\n"
for fd in (1, 2):
    try:
        for _ in range(320):
            os.write(fd, chunk)
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
