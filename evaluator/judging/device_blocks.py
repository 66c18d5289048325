"""A timed batch's GPU blocks allocated ahead of it and freed into torch's caching allocator, so that the batch reuses
them instead of asking the driver: done while the device is not held (a timing's staging), for rounds that hold it."""

from __future__ import annotations

from typing import Any

# At most this many bytes reserved at once (a staging is bounded by the timing's own budget, 2 GiB a side).
MAX_RESERVE_BYTES = 2 << 30


def tensor_sizes(values: Any) -> list[int]:
    """Bytes of each tensor in a (nested) list, tuple or dict of values, one entry a tensor."""
    import torch

    if isinstance(values, torch.Tensor):
        return [values.numel() * values.element_size()]
    if isinstance(values, dict):
        values = list(values.values())
    if isinstance(values, (list, tuple)):
        return [size for value in values for size in tensor_sizes(value)]
    return []


def reserve(sizes: list[int], count: int, device: Any) -> int:
    """`count` blocks of each of `sizes` bytes allocated together on the GPU `device`, then freed: torch keeps them
    cached, so a batch of `count` calls whose value sets and outputs have these sizes allocates nothing new. Why: a
    size's first round allocated its sets and outputs on both sides (~130 driver allocations a task in the judge, a fresh
    runner all of its own), 0.07-0.11 s a side at 8 slots on an H200, while it held the device shared and every timing
    waited for it to drain (session 24). Fewer calls where the blocks would pass MAX_RESERVE_BYTES. Returns the bytes
    reserved; 0 off the GPU."""
    import torch

    sizes = [size for size in sizes if size > 0]
    each = sum(sizes)
    if not sizes or count <= 0 or not str(device).startswith("cuda"):
        return 0
    count = min(count, MAX_RESERVE_BYTES // each)
    blocks = [torch.empty(size, dtype=torch.uint8, device=device) for _ in range(count) for size in sizes]
    del blocks
    return count * each


def reserve_batch(set_sizes: list[int], output_sizes: list[int], calls: int, device: Any) -> int:
    """reserve() for a batch of `calls` calls, each with a value set and an output of these tensor sizes, and for its
    hand-over's stack of every output (slot/projection.py)."""
    return reserve(set_sizes + output_sizes, calls, device) + reserve([calls * sum(output_sizes)], 1, device)
