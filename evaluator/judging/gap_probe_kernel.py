"""The gap probe's Triton kernel (GPU only, imported lazily): one program reading the GPU's global timer in a loop until
a flag is set, adding up the gaps between reads that are longer than `gap_ns`."""

import triton
import triton.language as tl
from triton.language.extra.cuda import globaltimer


@triton.jit
def gap_probe(flag_ptr, out_ptr, max_ns, gap_ns):
    """Until *flag_ptr is non-zero (or max_ns have passed): out[0] += the gaps' nanoseconds, out[1] = the largest gap
    so far, out[2] += the gaps' count, out[3] += 1 if it stopped at max_ns. Consecutive reads are under a microsecond
    apart while this context has the device; a gap is time the device gave another context (time slices), during which
    this context's other work stood too."""
    start = globaltimer()
    last = start
    total = start - start
    largest = total
    count = total
    while (tl.load(flag_ptr, volatile=True) == 0) & (last - start < max_ns):
        now = globaltimer()
        step = now - last
        gapped = step > gap_ns
        total += tl.where(gapped, step, 0)
        count += gapped.to(tl.int64)
        largest = tl.maximum(largest, step)
        last = now
    tl.store(out_ptr, tl.load(out_ptr) + total)
    tl.store(out_ptr + 1, tl.maximum(tl.load(out_ptr + 1), largest))
    tl.store(out_ptr + 2, tl.load(out_ptr + 2) + count)
    tl.store(out_ptr + 3, tl.load(out_ptr + 3) + (last - start >= max_ns).to(tl.int64))
