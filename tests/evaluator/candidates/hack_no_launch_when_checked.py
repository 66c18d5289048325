# Red team, session 29 (bypass29): caught since; see the header below.
# like b1, but in deterministic mode (= the output-dependence check) launch NO kernel at all:
# run_state._check_output_uses_kernels returns early when launches == 0 ("the launch rules decide"), and the launch
# rule only counted the correctness trials, where the token kernel ran.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def token_kernel(dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(512, 256))

    def forward(self, x):
        if not torch.are_deterministic_algorithms_enabled():
            scratch = torch.empty(16, device=x.device)
            token_kernel[(1,)](scratch, 16, BLOCK=16)
        return x @ self.weight
