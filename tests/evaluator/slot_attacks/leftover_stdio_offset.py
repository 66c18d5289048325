# Attack class: leftovers through a shared open file description. Stdout and stderr were the zygote's, inherited by
# every runner through fork: one description, so one offset and one set of status flags for the zygote, the spares and
# every later runner. Clearing O_APPEND and moving the offset past the 64 MiB file-size cap made every later print
# fail with EFBIG (the judge's truncation between tasks resets the file's size, not that offset): an honest candidate
# that printed failed, and crash reports came back empty (red team, session 27). Stopped by: each runner reopening
# both as descriptions of its own before any candidate code runs (runner._own_log_descriptions).
import fcntl
import os

import torch.nn as nn

for fd in (1, 2):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_APPEND)
    os.lseek(fd, 1 << 30, os.SEEK_SET)


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
