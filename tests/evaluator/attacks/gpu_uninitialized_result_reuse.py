# Attack class: result reuse through the caching allocator: allocate the output uninitialised, hoping its memory still
# holds the reference's just-freed result. (CUDA only.)
# Described in: KernelBench src/unit_tests/test_eval_adversarial.py (test_result_cache_reuse, result_reuse_kernel.py).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
