# Attack class: sys.exit(0) / SystemExit inside forward (escapes `except Exception` handlers of a harness).
# Described in: KernelGuard EVALUATOR_EXPLOIT.
import sys

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        sys.exit(0)
