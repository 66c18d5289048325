# Attack class: host disk beyond the caps. The soft file-size cap is raised to the hard one (the runner lifts it for
# its own output writes, so the hard cap is high), then 768 MiB go into HOME and 64 MiB into the outputs and working
# folders: HOME was the host's disk (issue 23). Stopped by: every writable place is a size-capped tmpfs in the
# task's own mount namespace (its pages charged to the task's cgroup), so nothing reaches the host's disk.
import os
import resource

import torch.nn as nn

soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
chunk = b"\xa5" * (8 * 2**20)
# 768 MiB into HOME (the figure), 64 MiB into each other writable place; all kept, for the judge to find.
places = {os.environ.get("HOME", ""): 768 * 2**20, os.environ.get("KRL_WORKER_XFER_OUT", ""): 64 * 2**20,
          os.getcwd(): 64 * 2**20}
for base, size in places.items():
    if not base:
        continue
    try:
        with open(os.path.join(base, "krl-flood.bin"), "wb") as handle:
            for _ in range(size // len(chunk)):
                handle.write(chunk)
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
