# Attack class: leftovers through permissions. Folders of mode 0000 in every writable place (HOME, TMPDIR, /tmp,
# /dev/shm), each holding a planted file: a wipe run by the sandbox's own user cannot enter them, so they reached the
# next candidate (issue 23). Stopped by: a fresh tmpfs per task over all four, gone with the task's mount namespace.
import os

import torch.nn as nn

PLANT = "krl-planted-0000"
for base in {os.environ.get("HOME", ""), os.environ.get("TMPDIR", ""), "/tmp", "/dev/shm", os.getcwd()}:
    if not base:
        continue
    try:
        inner = os.path.join(base, PLANT, "inner")
        os.makedirs(inner, exist_ok=True)
        with open(os.path.join(inner, "planted.py"), "w") as handle:
            handle.write("PLANTED = True\n")
        os.chmod(inner, 0)
        os.chmod(os.path.join(base, PLANT), 0)
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
