"""A timed batch's GPU blocks reserved ahead of it: the sizes read off real values, nothing done off the GPU, and on a
GPU a batch of the reserved sizes and its hand-over's stack ask the driver for no new memory."""

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
def test_a_batch_and_its_stack_of_the_reserved_sizes_allocate_nothing_new():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.cuda.empty_cache()
    set_sizes, output_sizes, calls = [3 << 20], [256 << 10], 64
    reserved = device_blocks.reserve_batch(set_sizes, output_sizes, calls, "cuda:0")
    assert reserved == 2 * calls * (256 << 10) + calls * (3 << 20)
    before = torch.cuda.memory_stats()["segment.all.allocated"]
    sets = [torch.empty((3 << 20) // 4, device="cuda:0") for _ in range(calls)]
    outputs = [torch.empty((256 << 10) // 4, device="cuda:0") for _ in range(calls)]
    stacked = torch.stack(outputs)
    assert torch.cuda.memory_stats()["segment.all.allocated"] == before
    del sets, outputs, stacked
