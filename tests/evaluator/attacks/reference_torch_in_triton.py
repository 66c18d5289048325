# Attack class: a Triton candidate that defines a kernel but returns the reference's own torch op (the kernel is
# never launched): correct values, no custom work.
# Described in: Dr. Kernel / KernelGYM (kernels that are not executed; "lazy" torch fallbacks), KernelBench
# static checker (torch computation ops), KernelGuard SILENT_FALLBACK.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
