"""The digests a hand-over commits to (slot/output_digest.py): on a CPU SHA-256 of every byte, on a GPU a keyed tree
made by a Triton kernel, checked here in Triton's interpreter against its NumPy mirror, bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evaluator.slot.output_digest import device_tops, digests, host_tops

ROOT = Path(__file__).resolve().parents[2]


def test_digests_bind_every_byte_dtype_and_shape_alike_on_both_paths():
    """A hand-over's digests (CPU mode) against the judge's digest of one picked output handed over later: the stacked
    path of small outputs and the general one agree; a changed last bit, dtype or shape changes the digest."""
    for shape in ((256,), (3, 5), (70000,)):  # the last one past the stacked path's size
        outputs = [torch.randn(shape) for _ in range(4)]
        assert digests(outputs, 7) == [digests([(o,)], 7)[0] for o in outputs] == [digests([o], 7)[0] for o in outputs]
        assert len(set(digests(outputs, 7))) == 4
        flipped = outputs[0].clone()
        flipped.view(torch.int32).view(-1)[-1] ^= 1
        assert digests([flipped], 7) != digests([outputs[0]], 7)
    values = torch.arange(12, dtype=torch.float32)
    found = {digests([values], 7)[0], digests([values.view(3, 4)], 7)[0], digests([values.view(torch.int32)], 7)[0]}
    assert len(found) == 3
    # A conjugate view (an honest x.conj()) is digested as its values, as the judge's copy of it is
    complex_values = torch.randn(2, 8, dtype=torch.complex64)
    conjugated = [row.conj() for row in complex_values]
    assert digests(conjugated, 7) == [digests([row.conj().resolve_conj()], 7)[0] for row in complex_values]
    assert digests([(row,) for row in conjugated], 7) == digests(conjugated, 7)


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 64 * 64 + 3), (1, 2**17 + 7)])
def test_the_tree_binds_every_word_its_place_and_the_key(shape):
    """The GPU's tree, in its NumPy mirror: a flipped low bit of any element (first, middle, last), two elements
    swapped, another key or another length each give another top; one element's lowest bit is what a near miss within
    the tolerance changes."""
    rows = torch.randn(shape)
    top = host_tops(rows, 11)
    assert len(top) == 8 * shape[0]
    for index in sorted({0, rows.shape[1] // 2, rows.shape[1] - 1}):
        flipped = rows.clone()
        flipped.view(torch.int32)[-1, index] ^= 1
        assert host_tops(flipped, 11)[-8:] != top[-8:], index
    if rows.shape[1] > 1:
        swapped = rows.clone()
        swapped[:, [0, 1]] = swapped[:, [1, 0]]
        assert host_tops(swapped, 11) != top
    assert host_tops(rows, 12) != top
    longer = torch.cat([rows, torch.zeros(shape[0], 2)], 1)  # zero words past the end are not the same output
    assert host_tops(longer, 11) != top


KERNEL_AGAINST_MIRROR = """
import torch
from evaluator.slot.output_digest import device_tops, host_tops
cases = [torch.randn(3, 5), torch.randn(2, 64 * 64 * 3 + 1), torch.randn(1, 70000).half(),
         torch.randint(0, 2, (4, 33), dtype=torch.bool), torch.randint(-9, 9, (2, 100), dtype=torch.int64),
         torch.randn(2, 9, dtype=torch.complex64).conj(), torch.randn(5)]
for seed in (0, 1, 16, 2**30 - 1):
    for rows in cases:
        assert device_tops(rows, seed) == host_tops(rows, seed), (rows.dtype, tuple(rows.shape), seed)
print("agree")
"""


def test_the_triton_kernel_computes_its_mirrors_tree_bit_for_bit():
    """The kernel in Triton's interpreter (the same program the GPU runs, evaluated in NumPy) against host_tops: every
    level, odd byte counts padded, booleans, half precision, integers, a conjugate view, 0-dim rows; keys that are 0, 1
    and divisible by 16 (values Triton would otherwise specialise on)."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", KERNEL_AGAINST_MIRROR], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and "agree" in done.stdout, done.stderr[-3000:]


@pytest.mark.gpu
def test_on_a_gpu_the_kernel_computes_its_mirrors_tree_and_the_stacked_digests_match_each_outputs_own():
    """The compiled kernel on the device against host_tops (up to 16 MiB: four levels), and a batch's stacked digests
    against each output digested alone, as the judge digests a picked output handed over later."""
    for shape, dtype in (((3, 5), torch.float32), ((2, 2**22), torch.float32), ((4, 70001), torch.float16),
                         ((8, 33), torch.bool), ((2, 1000), torch.int64)):
        rows = (torch.randn(shape) * 4).to(dtype)
        assert device_tops(rows.cuda(), 2**29 + 5) == host_tops(rows, 2**29 + 5), (shape, dtype)
    outputs = [torch.randn(16, 4096, device="cuda") for _ in range(6)]
    assert digests(outputs, 3) == [digests([output], 3)[0] for output in outputs]
    assert digests(outputs, 3) != digests(outputs, 4)
