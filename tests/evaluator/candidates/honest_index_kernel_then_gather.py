# Honest: a Triton kernel computes each row's argmax (the whole reduction) and torch gathers the row maxima by those
# indices, as top-1 routing does. Its poisoned indices made torch's gather raise, and it read runtime_error (red team,
# session 29).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_argmax_kernel(x_ptr, idx_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
    tl.store(idx_ptr + row, tl.argmax(x, axis=0).to(tl.int64))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        idx = torch.empty(rows, dtype=torch.int64, device=x.device)
        row_argmax_kernel[(rows,)](x, idx, cols, BLOCK=triton.next_power_of_2(cols))
        return x.gather(1, idx[:, None]).squeeze(1)
