"""The tiny Triton kernel the trusted judge host compiles to warm Triton's shared cache level (evaluator/build/triton_cache.py).
Its own module, imported only by the judge host: a module-level kernel sees `tl` as a global, as Triton requires."""

import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)
