"""A timed batch's GPU blocks reserved ahead of it: the sizes read off real values, nothing done off the GPU, and on a
GPU a batch of the reserved sizes asks the driver for no new memory."""

from __future__ import annotations

import pytest
import torch

from evaluator.judging import device_blocks


def test_sizes_are_read_off_every_tensor_of_nested_values():
    values = [torch.zeros(4), (torch.zeros(2, dtype=torch.int64), 3), {"a": torch.zeros(1, dtype=torch.float16)}]
    assert device_blocks.tensor_sizes(values) == [16, 16, 2]
    assert device_blocks.tensor_sizes(7) == []


def test_nothing_is_reserved_off_the_gpu():
    assert device_blocks.reserve([1024, 4096], 8, "cpu") == 0
    assert device_blocks.reserve([], 8, "cuda:0") == 0


@pytest.mark.gpu
def test_a_batch_of_the_reserved_sizes_allocates_nothing_new():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.cuda.empty_cache()
    sizes, calls = [256 << 10, 3 << 20], 64
    assert device_blocks.reserve(sizes, calls, "cuda:0") == calls * sum(sizes)
    before = torch.cuda.memory_stats()["segment.all.allocated"]
    batch = [torch.empty(size // 4, device="cuda:0") for _ in range(calls) for size in sizes]
    assert torch.cuda.memory_stats()["segment.all.allocated"] == before
    del batch
