# Attack class: host memory beyond the limit. 3 GiB written into memfds (not mapped: no resident pages, no address
# space) under a 2 GiB limit; the resident-memory watch did not see it (issue 23). Stopped by: the task's cgroup,
# whose memory charge counts shmem and memfd pages; the judge's watch reads it, and the kernel's limit backs it up.
import os
import resource

import torch.nn as nn

soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)  # the file-size cap applies to memfds too: lifted first
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
chunk = b"\x5a" * (16 * 2**20)
held = []
for _ in range(4):
    fd = os.memfd_create("krl-hoard")
    for _ in range(768 * 2**20 // len(chunk)):
        os.write(fd, chunk)
    held.append(fd)


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
