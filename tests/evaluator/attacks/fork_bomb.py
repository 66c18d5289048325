# Attack class: fork bomb (bounded here to 64 sleeping children so a failure cannot harm the shared test machine):
# processes that outlive the evaluation.
# Described in: issue 11 (processes outside the candidate), KernelBench static checker (multiprocessing).
import os
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        for _ in range(64):
            if os.fork() == 0:
                time.sleep(120)
                os._exit(0)
        return x.clamp_min(0)
