# Attack class: zero the inputs in place and return zeros, hoping the reference then runs on the zeroed inputs.
# Described in: KernelBench src/unit_tests/test_eval_adversarial.py (test_input_modification, zero_out_kernel.py).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        x.zero_()
        return torch.zeros_like(x)
