"""What the slot benchmarks share (bench_slot.py on a GPU, bench_slot_cpu.py on the CPU): the ReLU reference problem,
sized by N, that every benchmarked candidate is judged against."""

from __future__ import annotations

REFERENCE = '''
import torch
import torch.nn as nn

N = {n}


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''
