# Attack class: ignore every catchable signal (SIGTERM, SIGINT, SIGALRM, SIGHUP...), then loop forever.
# Described in: KernelGuard HARNESS_RUNTIME_PATCHING, issue 11.
import signal

import torch
import torch.nn as nn

for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(_sig, signal.SIG_IGN)


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
